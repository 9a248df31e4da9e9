"""Index validation: the one rule that decides whether a segment's ``.index``/``.timeindex`` can be trusted.

Every caller asks here: the loader (on every load, also for ``.txnindex``), the maintenance ``index``
job, ``seglog recover --dry-run`` and ``seglog describe --verify`` (through
:func:`segment_index_problems`, which checks the ``.txnindex`` too), ``seglog dump``'s per-entry report
(:func:`offset_entries_agree`, :func:`time_entries_agree`) and the read path (the O(1)
:func:`entry_batch_problem` at the position an index gave). The entry layouts belong to the index
classes; files are read through them (read-only), never parsed here.

Three levels, each a superset of the one before:

1. Kafka's sanity check (the index classes' ``sanity_check``, spec 1.2, 1.3): whole entries, last
   offset not below the base offset, last timestamp not below the first.
2. What an index must also satisfy (beyond Kafka, listed in docs/design.md): entries strictly
   increase (a zero-filled, un-trimmed tail fails), positions lie inside the ``.log``, offsets
   below the next segment's base offset. Reads only the index files.
3. Agreement with the ``.log``, every entry at once against a header walk of the batches
   (``FileRecords.scan`` arrays, no CRC pass): an ``.index`` entry points at a batch start and its
   offset is the last offset of that batch or, as a broker writes for a multi-batch (follower)
   append, of a later batch before the next entry's position; a ``.timeindex`` entry's offset lies
   in a batch whose maximum timestamp is the entry's timestamp (brokers before KAFKA-16310 indexed
   the offset of the record holding it, seglog the batch's last offset). A damaged entry anywhere
   in the file is found, not only at its end.

The ``.txnindex``: level 1 is Kafka's ``TransactionIndex.sanityCheck`` and version check, level 2 a
size that is a whole number of entries, level 3 agreement with the ABORT markers of the ``.log``
(:func:`transaction_index_log_problem`). What a recovery writes instead is
:meth:`indexer.transaction_replay.TransactionReplay.rebuild`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from indexer.errors import CorruptIndexError, StorageError, storage_errors
from indexer.file_names import (
    LOG_FILE_SUFFIX,
    filename_prefix_from_offset,
    log_file,
    offset_from_file_name,
    offset_index_file,
    time_index_file,
    transaction_index_file,
)
from indexer.limits import INT32_MAX
from indexer.offset_index import OffsetIndex
from indexer.records.batch_header import MAGIC_V2, NO_TIMESTAMP
from indexer.records.file_records import BatchScan, FileBatch, FileRecords
from indexer.time_index import TimeIndex
from indexer.transaction_index import ABORTED_TXN_SIZE, AbortedTxn, TransactionIndex
from indexer.transaction_replay import has_markers, open_at_base, segment_aborts

_NO_LIMIT = np.iinfo(np.int64).max
_EMPTY = np.empty(0, np.int64)


@dataclass(frozen=True, slots=True)
class IndexProblem:
    """Why an index file cannot be trusted: the file, what is wrong, the first bad slot if one is, and
    whether the file is missing (a broker creates index files lazily: no damage, the loader rebuilds it)."""

    path: Path
    message: str
    entry: int | None = None
    missing: bool = False  # the file does not exist: rebuilt on the next load, not damage

    def __str__(self) -> str:
        return self.message


class LogChangedError(FileNotFoundError):
    """The ``.log`` went away or changed size while it was checked (retention renamed it, a truncation
    shrank it, an append grew it): the check says nothing; callers skip the segment this round."""


def scan_headers(log_path: Path) -> BatchScan:
    """Every batch header of ``log_path`` (a vectorised walk, CRCs not checked): what level 3 compares.

    Read with ``pread``, never mapped (as every ``FileRecords.scan``): the checks run without
    the partition lock too (a partition another process writes, ``seglog dump`` of a live log), and a
    writer truncating the file under a map would kill the checker with SIGBUS.
    """
    records = FileRecords.open(log_path, mutable=False)
    try:
        return records.scan(verify_crc=False)
    finally:
        records.close_handlers()


def offset_entries_agree(
    scan: BatchScan, offsets: np.ndarray, positions: np.ndarray, max_batch_size: int = INT32_MAX
) -> tuple[np.ndarray, np.ndarray]:
    """Which ``.index`` entries agree with the log, and the last offset of the batch at each position.

    Kafka's rule: a whole batch of at most ``max_batch_size`` bytes starts at the entry's position
    and its last offset is the entry's offset. Also accepted: the entry's offset is the last offset
    of a later batch that still lies before the next entry's position (a multi-batch append's
    largest offset indexed at the append's first byte; lookups through it are correct). The log
    offset is -1 where no batch starts at the position.
    """
    batch_positions = scan.positions
    n = batch_positions.size
    if n == 0:
        return np.zeros(positions.size, dtype=bool), np.full(positions.size, -1, dtype=np.int64)
    at = np.minimum(np.searchsorted(batch_positions, positions), n - 1)
    starts = (batch_positions[at] == positions) & (scan.sizes[at] <= max_batch_size)
    log_offsets = np.where(starts, scan.last_offsets[at], -1).astype(np.int64)
    holder = np.minimum(np.searchsorted(np.maximum.accumulate(scan.last_offsets), offsets), n - 1)
    next_positions = np.concatenate((positions[1:], [_NO_LIMIT]))
    later = (holder >= at) & (scan.last_offsets[holder] == offsets) & (batch_positions[holder] < next_positions)
    return starts & ((log_offsets == offsets) | later), log_offsets


def time_entries_agree(
    scan: BatchScan, offsets: np.ndarray, start_positions: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where each ``.timeindex`` entry's offset lies in the log: (found, batch last offsets, batch max timestamps).

    ``found[i]``: a batch holds ``offsets[i]`` (at or after ``start_positions[i]``, the offset
    index's position for it, when given, as Kafka's dump searches); the entry agrees with the log
    when also its timestamp is that batch's maximum timestamp. Missing batches give -1 and
    ``NO_TIMESTAMP``.
    """
    n = scan.positions.size
    if n == 0:
        missing = np.full(offsets.size, -1, dtype=np.int64)
        return np.zeros(offsets.size, dtype=bool), missing, np.full(offsets.size, NO_TIMESTAMP, dtype=np.int64)
    slots = np.searchsorted(np.maximum.accumulate(scan.last_offsets), offsets)
    if start_positions is not None:
        slots = np.maximum(slots, np.searchsorted(scan.positions, start_positions))
    inside = slots < n
    safe = np.minimum(slots, n - 1)
    log_offsets = np.where(inside, scan.last_offsets[safe], -1).astype(np.int64)
    found = inside & (scan.base_offsets[safe] <= offsets) & (offsets <= log_offsets)
    log_timestamps = np.where(found, scan.max_timestamps[safe], NO_TIMESTAMP).astype(np.int64)
    return found, log_offsets, log_timestamps


def _first(bad: np.ndarray) -> int | None:
    hits = np.flatnonzero(bad)
    return int(hits[0]) if hits.size else None


def _out_of_order(message: str, path: Path, *bad_steps: np.ndarray) -> IndexProblem | None:
    """The first entry that breaks the order (``bad_steps``: per-entry flags, checked in turn), or None."""
    for bad in bad_steps:
        slot = _first(bad)
        if slot is not None:
            return IndexProblem(path, f"{message} (e.g. zero-filled slots), from entry {slot}", slot)
    return None


def _sane_entries(
    index_class: type[OffsetIndex] | type[TimeIndex], path: Path, base_offset: int
) -> tuple[IndexProblem | None, np.ndarray, np.ndarray]:
    """Level 1: Kafka's sanity check of the whole index file at ``path`` and, when it passes, its entries
    (:meth:`AbstractIndex.to_arrays`); the problem found, with empty arrays, when it does not."""
    with index_class(path, base_offset, -1, writable=False, whole_file=True) as index:
        try:
            index.sanity_check()
        except CorruptIndexError as e:
            return IndexProblem(path, str(e)), _EMPTY, _EMPTY
        keys, values = index.to_arrays()
    return None, keys, values


def offset_index_problem(
    path: Path,
    base_offset: int,
    *,
    log_size: int,
    next_base_offset: int | None = None,
    scan: BatchScan | None = None,
) -> IndexProblem | None:
    """Why the ``.index`` at ``path`` cannot be trusted (levels 1, 2, and 3 when ``scan`` is given), or None.

    Raises:
        StorageError: the file cannot be read (a missing file: ``FileNotFoundError`` as its cause).
    """
    problem, offsets, positions = _sane_entries(OffsetIndex, path, base_offset)
    if problem is not None or not offsets.size:
        return problem
    limit = _NO_LIMIT if next_base_offset is None else next_base_offset
    problem = _out_of_order(
        f"index file {path} has entries that do not strictly increase",
        path,
        np.concatenate(([offsets[0] < base_offset], np.diff(offsets) <= 0)),
        np.concatenate(([positions[0] < 0], np.diff(positions) <= 0)),
    )
    if problem is not None:
        return problem
    slot = _first((positions >= log_size) | (offsets >= limit))
    if slot is not None:
        entry = f"entry {slot}: offset {int(offsets[slot])}, position {int(positions[slot])}"
        return IndexProblem(path, f"index file {path} points past its segment ({entry})", slot)
    if scan is not None:
        agree, log_offsets = offset_entries_agree(scan, offsets, positions)
        slot = _first(~agree)
        if slot is not None:
            ends = int(log_offsets[slot])
            found = f"the batch there ends at {ends}" if ends >= 0 else "no batch starts there"
            return IndexProblem(
                path,
                f"index file {path} disagrees with the log at entry {slot} (offset {int(offsets[slot])}, "
                f"position {int(positions[slot])}): {found}",
                slot,
            )
    return None


def time_index_problem(
    path: Path, base_offset: int, *, next_base_offset: int | None = None, scan: BatchScan | None = None
) -> IndexProblem | None:
    """Why the ``.timeindex`` at ``path`` cannot be trusted (levels 1, 2, and 3 when ``scan`` is given), or None.

    Raises:
        StorageError: the file cannot be read (a missing file: ``FileNotFoundError`` as its cause).
    """
    problem, timestamps, offsets = _sane_entries(TimeIndex, path, base_offset)
    if problem is not None or not offsets.size:
        return problem
    limit = _NO_LIMIT if next_base_offset is None else next_base_offset
    problem = _out_of_order(
        f"time index file {path} has entries that do not increase",
        path,
        np.concatenate(([offsets[0] < base_offset], np.diff(timestamps) <= 0)),
        np.concatenate(([False], np.diff(offsets) < 0)),
    )
    if problem is not None:
        return problem
    slot = _first(offsets >= limit)
    if slot is not None:
        return IndexProblem(
            path, f"time index file {path} points past its segment (entry {slot}: offset {int(offsets[slot])})", slot
        )
    if scan is not None:
        found, _log_offsets, log_timestamps = time_entries_agree(scan, offsets)
        slot = _first(~found | (log_timestamps != timestamps))
        if slot is not None:
            found_there = (
                f"its batch's max timestamp is {int(log_timestamps[slot])}" if found[slot] else "no batch holds it"
            )
            return IndexProblem(
                path,
                f"time index file {path} disagrees with the log at entry {slot} (timestamp "
                f"{int(timestamps[slot])}, offset {int(offsets[slot])}): {found_there}",
                slot,
            )
    return None


def transaction_index_problem(path: Path, base_offset: int) -> IndexProblem | None:
    """Why the ``.txnindex`` at ``path`` cannot be trusted, or None: Kafka's ``TransactionIndex.sanityCheck``
    (and its version check) and, beyond Kafka, a size that is a whole number of entries (Kafka reads
    past a torn last entry, which loses an aborted transaction).

    Raises:
        StorageError: the file cannot be read.
    """
    index = TransactionIndex(path, base_offset, writable=False)
    try:
        index.sanity_check()
    except CorruptIndexError as e:
        return IndexProblem(path, str(e))
    finally:
        index.close()
    with storage_errors(path, "inspect transaction index"):
        size = path.stat().st_size
    if size % ABORTED_TXN_SIZE:
        return IndexProblem(
            path,
            f"transaction index file {path} has a torn last entry ({size} bytes is not a whole number of "
            f"{ABORTED_TXN_SIZE}-byte entries)",
            size // ABORTED_TXN_SIZE,
        )
    return None


def transaction_index_log_problem(path: Path, base_offset: int, log_path: Path, scan: BatchScan) -> IndexProblem | None:
    """Level 3 of the ``.txnindex`` at ``path`` (missing: no entry), a file that passes levels 1 and 2:
    does it agree with the ABORT markers of its segment's ``.log`` (``scan``: its batches)?
    (:func:`~indexer.transaction_replay.segment_aborts`: every aborted transaction with records in the
    segment has its entry; every entry names an ABORT marker of its producer there.) A file emptied,
    deleted or cut at an entry boundary is found when a lost transaction has records in the segment;
    one whose records all lie in earlier segments is not (the check reads no other segment).

    Raises:
        StorageError: a file cannot be read.
    """
    if not has_markers(scan):
        return None
    with FileRecords.open(log_path, mutable=False) as records:
        expected = segment_aborts(records, scan, base_offset)
    entries: dict[tuple[int, int], AbortedTxn] = {}
    if path.exists():
        index = TransactionIndex(path, base_offset, writable=False)
        try:
            entries = {(t.producer_id, t.last_offset): t for t in index.all_aborted_txns()}
        finally:
            index.close()
    for txn in expected.ended:
        entry = entries.get((txn.producer_id, txn.last_offset))
        if entry is None or entry.first_offset > txn.first_offset:
            found = "has no entry for it" if entry is None else f"says it began at {entry.first_offset}"
            return IndexProblem(
                path,
                f"transaction index file {path} disagrees with the log: the transaction of producer "
                f"{txn.producer_id} aborted at offset {txn.last_offset} has records from offset "
                f"{txn.first_offset} on, and the index {found}",
            )
    lost = [key for key in expected.unmatched if key not in entries]
    if lost:  # no record of it here: was its producer's transaction open at the base offset?
        open_before = open_at_base(_earlier_logs(log_path.parent, base_offset), {pid for pid, _ in lost})
        for pid, marker in lost:
            if open_before.get(pid, False):
                return IndexProblem(
                    path,
                    f"transaction index file {path} disagrees with the log: it has no entry for the "
                    f"transaction of producer {pid} aborted at offset {marker}, which began in an earlier segment",
                )
    possible = {*expected.unmatched, *((t.producer_id, t.last_offset) for t in expected.ended)}
    for slot, (key, entry) in enumerate(entries.items()):
        began_before = key in expected.unmatched and entry.first_offset < base_offset
        if key not in possible or (key in expected.unmatched and not began_before):
            return IndexProblem(
                path,
                f"transaction index file {path} disagrees with the log at entry {slot} ({entry}): no ABORT "
                f"marker of producer {entry.producer_id} ends a transaction there",
                slot,
            )
    return None


def _earlier_logs(directory: Path, base_offset: int) -> Iterator[FileRecords]:
    """The ``.log`` files of ``directory`` below ``base_offset``, newest first, each open while used
    (one removed meanwhile, by retention, ends the walk: what lies before it is gone)."""
    bases = sorted(
        (offset_from_file_name(p.name) for p in directory.glob("*" + LOG_FILE_SUFFIX) if p.name[:1].isdigit()),
        reverse=True,
    )
    for base in bases:
        if base >= base_offset:
            continue
        try:
            records = FileRecords.open(log_file(directory, base), mutable=False)
        except StorageError:
            return
        try:
            yield records
        finally:
            records.close_handlers()


def segment_index_problems(
    directory: Path, base_offset: int, *, next_base_offset: int | None, against_log: bool
) -> list[IndexProblem]:
    """Every index file of the segment at ``base_offset`` that cannot be trusted, one problem per file:
    the ``.index`` and ``.timeindex`` (a missing one too, :attr:`IndexProblem.missing`), and the
    ``.txnindex`` when there is one (it is created by its first entry), as the loader checks them.

    ``next_base_offset``: the following segment's (None for the last one); ``against_log``: also
    compare every entry with a header walk of the ``.log`` (level 3).

    The ``.log`` is read with ``pread`` (:func:`scan_headers`), so the caller need not hold the
    partition's lock; the index files are mapped, which is safe for sealed segments (a writer trims
    a segment's indexes before it seals it). A ``.log`` that changes meanwhile voids the check.

    Raises:
        LogChangedError: the ``.log`` went away or changed size meanwhile; callers skip the segment
            (a ``FileNotFoundError``).
        StorageError: a file cannot be read.
    """
    log_path = directory / (filename_prefix_from_offset(base_offset) + LOG_FILE_SUFFIX)
    before = _log_identity(log_path)
    log_size = before[1]
    offset_path = offset_index_file(directory, base_offset)
    time_path = time_index_file(directory, base_offset)
    txn_path = transaction_index_file(directory, base_offset)
    problems: list[IndexProblem | None] = [
        IndexProblem(path, f"index file {path} is missing", missing=True)
        for path in (offset_path, time_path)
        if not path.exists()
    ]
    try:
        scan = scan_headers(log_path) if against_log and len(problems) < 2 else None
        if offset_path.exists():
            problems.append(
                offset_index_problem(
                    offset_path, base_offset, log_size=log_size, next_base_offset=next_base_offset, scan=scan
                )
            )
        if time_path.exists():
            problems.append(time_index_problem(time_path, base_offset, next_base_offset=next_base_offset, scan=scan))
        problem = transaction_index_problem(txn_path, base_offset) if txn_path.exists() else None
        if problem is None and scan is not None:
            problem = transaction_index_log_problem(txn_path, base_offset, log_path, scan)
        problems.append(problem)
    except StorageError as e:
        if isinstance(e.__cause__, FileNotFoundError):
            _check_unchanged(log_path, before)
        raise
    _check_unchanged(log_path, before)
    return [problem for problem in problems if problem is not None]


def segment_index_problem(
    directory: Path, base_offset: int, *, next_base_offset: int | None, against_log: bool
) -> IndexProblem | None:
    """Why the indexes of the segment at ``base_offset`` cannot be trusted (the first of
    :func:`segment_index_problems`, for callers that rebuild them all), or None.

    Raises:
        LogChangedError: the ``.log`` went away or changed size meanwhile.
        StorageError: a file cannot be read.
    """
    problems = segment_index_problems(
        directory, base_offset, next_base_offset=next_base_offset, against_log=against_log
    )
    return problems[0] if problems else None


def _log_identity(log_path: Path) -> tuple[int, int]:
    """(inode, size) of ``log_path``; LogChangedError when it is gone."""
    try:
        st = os.stat(log_path)
    except FileNotFoundError as e:
        raise LogChangedError(f"{log_path} went away while it was checked") from e
    return st.st_ino, st.st_size


def _check_unchanged(log_path: Path, before: tuple[int, int]) -> None:
    if _log_identity(log_path) != before:
        raise LogChangedError(f"{log_path} changed while it was checked")


def entry_batch_problem(batch: FileBatch | None, segment_base_offset: int, entry_offset: int) -> str | None:
    """Level 3 for one ``.index`` entry at read time, O(1): the batch the entry's position gave.

    A whole batch (``FileRecords.batches`` yields only those) must start there whose offsets begin
    at or below the entry's offset (that batch, or a later one of the same append, ends at it), so
    a scan from there finds every offset from the entry's on. ``batch``: the entry read at that
    position (None when none fits there).
    """
    if batch is None or not 0 <= batch.magic <= MAGIC_V2:
        return "no batch starts there"
    base = batch.base_offset  # v2: the header's first field, no parse
    if not segment_base_offset <= base <= entry_offset:
        return f"the batch there starts at offset {base}"
    return None


def time_entry_batch_problem(batch: FileBatch | None, entry_timestamp: int, entry_offset: int) -> str | None:
    """Level 3 for one ``.timeindex`` entry at read time: ``batch`` is the first one whose offsets
    reach the entry's offset (None when none does); it must hold that offset and have the entry's
    timestamp as its maximum timestamp."""
    if batch is None:
        return "no batch holds its offset"
    if not batch.base_offset <= entry_offset <= batch.last_offset:
        return f"no batch holds its offset (the next one holds {batch.base_offset}..{batch.last_offset})"
    if batch.max_timestamp != entry_timestamp:
        return f"its batch's max timestamp is {batch.max_timestamp}"
    return None
