"""One log segment: a ``.log`` file of record batches plus its sparse indexes (Kafka's ``LogSegment``).

A segment with base offset ``B`` is the files ``<B:020d>.log`` (batches, :class:`FileRecords`),
``.index`` (offset -> position, every ~``index.interval.bytes`` of log), ``.timeindex`` (running max
timestamp -> offset) and ``.txnindex`` (aborted transactions). The indexes are mapped lazily
(KAFKA-7283): a freshly opened segment has only its ``.log`` until an index is first used.

Index rule (spec 4.2), kept exactly so files match a broker's byte for byte: before each append,
if more than ``index.interval.bytes`` were appended since the last index entry (strictly greater,
counted *before* adding this append), the append's largest offset and first byte position go to the
offset index and the segment's running max timestamp with its offset to the time index. An append
of several batches (:meth:`LogSegment.append_batches`) counts as one append per batch, as when a
broker appends them one by one, so entries always land at batch starts.

Thread-safety: not thread-safe; every mutating method expects the caller to hold the log lock.
Reads (``read``, ``translate_offset``, ``find_offset_by_timestamp``) may run concurrently with an
append, as in Kafka: they see a prefix of the data.

Crash behaviour: appends write the ``.log`` first and the index entries after, without fsync; after
a crash the ``.log`` may end in a torn batch and the indexes may lag, hold zero-filled preallocated
slots or be missing. :meth:`LogSegment.recover` (run by the loader) cuts the ``.log`` after its last
valid batch and rebuilds both indexes from it.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
from numba import njit

from indexer.clock import Clock
from indexer.config import LogConfig
from indexer.errors import (
    CorruptRecordError,
    LogSegmentOffsetOverflowError,
    SeglogError,
    StorageError,
    storage_errors,
)
from indexer.file_names import log_file, offset_index_file, time_index_file, transaction_index_file
from indexer.index_check import entry_batch_problem, time_entry_batch_problem
from indexer.lazy_index import IndexT, LazyIndex
from indexer.limits import INT32_MAX
from indexer.log_values import FetchDataInfo, LogOffsetMetadata, RollParams, TimestampAndOffset
from indexer.offset_index import OffsetIndex, OffsetPosition
from indexer.records.append_pipeline import Fill
from indexer.records.batch_header import LOG_OVERHEAD, MAGIC_V2
from indexer.records.decoder import decode_records
from indexer.records.encoder import EncodedBatches
from indexer.records.file_records import BatchScan, FileBatch, FileRecords, LogOffsetPosition
from indexer.time_index import TimeIndex, TimestampOffset
from indexer.transaction_index import TransactionIndex
from indexer.transaction_replay import TransactionReplay

logger = logging.getLogger(__name__)

_UNKNOWN = TimestampOffset(-1, -1)
IntOrArray = int | np.ndarray


@njit(cache=True)
def _index_plan(
    sizes: np.ndarray,
    max_timestamps: np.ndarray,
    offsets_of_max_timestamp: np.ndarray,
    counter: int,
    interval: int,
    max_ts: int,
    max_ts_offset: int,
    time_index_last_ts: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """Kafka's per-append index rule over consecutive batches, each one an append of its own.

    Returns, per batch: whether it gets an offset-index entry, whether that entry also writes a
    time-index entry (only a strictly larger timestamp is written), and the segment's running max
    timestamp and its offset after the batch; plus the byte counter after the last batch.
    """
    n = sizes.shape[0]
    index_flags = np.zeros(n, np.bool_)
    time_flags = np.zeros(n, np.bool_)
    run_ts = np.empty(n, np.int64)
    run_offset = np.empty(n, np.int64)
    for i in range(n):
        if max_timestamps[i] > max_ts:
            max_ts = max_timestamps[i]
            max_ts_offset = offsets_of_max_timestamp[i]
        run_ts[i] = max_ts
        run_offset[i] = max_ts_offset
        if counter > interval:
            index_flags[i] = True
            if max_ts > time_index_last_ts:
                time_flags[i] = True
                time_index_last_ts = max_ts
            counter = 0
        counter += sizes[i]
    return index_flags, time_flags, run_ts, run_offset, counter


def roll_time_reached(size: IntOrArray, waited_ms: IntOrArray, segment_ms: int, jitter_ms: int) -> bool | np.ndarray:
    """Kafka's segment-age roll rule (spec 4.5), the one every caller uses: a non-empty segment
    rolls once it has waited more than ``segment.ms`` minus its jitter. Scalars or arrays (one
    element per batch of an append)."""
    return np.logical_and(np.greater(size, 0), np.greater(waited_ms, segment_ms - jitter_ms))


def first_batch_max_timestamp(log_path: Path) -> int:
    """The max timestamp of the first batch of a ``.log`` (Kafka's rolling-based timestamp), -1 if
    none or a legacy entry: one header read, for deciding a roll from files. Zeros where the first
    entry's offset and size belong are none yet: a live writer reserves an append's bytes before it
    fills them (:meth:`FileRecords.append_positioned`), and a crash leaves them for recovery to cut.

    Raises:
        StorageError: the file cannot be read.
        CorruptRecordError: the first entry is damaged.
    """
    with FileRecords.open(log_path, mutable=False) as records:
        if not any(records.read(0, LOG_OVERHEAD)):
            return -1
        first = next(iter(records.batches()), None)
        return first.max_timestamp if first is not None and first.magic >= MAGIC_V2 else -1


class LogSegment:
    """A ``.log`` file with its offset, time and transaction indexes, starting at ``base_offset``.

    Not thread-safe: the caller holds the log lock for every mutation. A segment opened with
    ``read_only=True`` never creates, writes or trims a file; an index file it does not find is
    treated as empty (every lookup scans from the start of the ``.log``).
    """

    def __init__(
        self,
        log: FileRecords,
        lazy_offset_index: LazyIndex[OffsetIndex] | None,
        lazy_time_index: LazyIndex[TimeIndex] | None,
        txn_index: TransactionIndex,
        base_offset: int,
        index_interval_bytes: int,
        roll_jitter_ms: int,
        clock: Clock,
        *,
        max_index_size: int,
        read_only: bool = False,
    ) -> None:
        self.log = log
        self._lazy_offset_index = lazy_offset_index
        self._lazy_time_index = lazy_time_index
        self.txn_index = txn_index
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.roll_jitter_ms = roll_jitter_ms
        self._clock = clock
        self._max_index_size = max_index_size
        self.read_only = read_only
        self._created = clock.milliseconds()
        self._bytes_since_last_index_entry: int | None = None  # None until the first append needs it
        self._rolling_based_timestamp: int | None = None
        self._max_ts_and_offset: TimestampOffset | None = None  # None until first needed
        self.index_damage: str | None = None
        """What a read found wrong with an index entry (None: nothing); the writer rebuilds the indexes."""

    @classmethod
    def open(
        cls,
        directory: str | os.PathLike[str],
        base_offset: int,
        config: LogConfig,
        *,
        clock: Clock,
        file_already_exists: bool = False,
        file_suffix: str = "",
        read_only: bool = False,
    ) -> LogSegment:
        """Open (or create) the segment ``base_offset`` in ``directory`` (Kafka ``LogSegment.open``).

        Only the ``.log`` is opened now; the indexes are mapped on first use. A new writable
        ``.log`` is preallocated to ``segment.bytes`` when ``preallocate`` is set.

        Raises:
            StorageError: the ``.log`` cannot be opened or created.
        """
        directory = Path(directory)
        max_index_size = config.segment_index_bytes
        log = FileRecords.open(
            log_file(directory, base_offset, file_suffix),
            mutable=not read_only,
            file_already_exists=file_already_exists,
            init_file_size=config.init_file_size,
            preallocate=config.preallocate,
        )
        offset_path = offset_index_file(directory, base_offset, file_suffix)
        time_path = time_index_file(directory, base_offset, file_suffix)
        lazy_offset: LazyIndex[OffsetIndex] | None = None
        lazy_time: LazyIndex[TimeIndex] | None = None
        if not read_only or offset_path.exists():
            lazy_offset = LazyIndex.for_offset(offset_path, base_offset, max_index_size, writable=not read_only)
        if not read_only or time_path.exists():
            lazy_time = LazyIndex.for_time(time_path, base_offset, max_index_size, writable=not read_only)
        txn_index = TransactionIndex(
            transaction_index_file(directory, base_offset, file_suffix), base_offset, writable=not read_only
        )
        return cls(
            log,
            lazy_offset,
            lazy_time,
            txn_index,
            base_offset,
            config.index_interval_bytes,
            config.random_segment_jitter(),
            clock,
            max_index_size=max_index_size,
            read_only=read_only,
        )

    # -- indexes -------------------------------------------------------------------------------

    @property
    def offset_index(self) -> OffsetIndex:
        """The offset index, mapped (and created, for a writable segment) on first use."""
        return self._mapped(self._lazy_offset_index, "offset", offset_index_file)

    @property
    def time_index(self) -> TimeIndex:
        """The time index, mapped (and created, for a writable segment) on first use."""
        return self._mapped(self._lazy_time_index, "time", time_index_file)

    def _mapped(self, lazy: LazyIndex[IndexT] | None, kind: str, file_name: Callable[[Path, int], Path]) -> IndexT:
        """``lazy``'s index; a read-only segment opened without that index file has none."""
        if lazy is None:
            raise StorageError(
                f"read-only segment {self.log.path} has no {kind} index file",
                path=file_name(self.log.path.parent, self.base_offset),
                errno=errno.ENOENT,
            )
        return lazy.get()

    @property
    def offset_index_path(self) -> Path:
        return offset_index_file(self.log.path.parent, self.base_offset, self._suffix())

    @property
    def time_index_path(self) -> Path:
        return time_index_file(self.log.path.parent, self.base_offset, self._suffix())

    def _suffix(self) -> str:
        name = self.log.path.name
        return name[name.index(".log") + len(".log") :]

    def _lookup_position(self, offset: int) -> OffsetPosition:
        """The offset index's floor entry for ``offset``, checked against the log before it is used
        (see :meth:`_indexed_batches`); the segment start when the entry is damaged."""
        entry, _batches = self._indexed_batches(offset)
        return entry

    def _indexed_batches(
        self, offset: int, starting_file_position: int = 0, *, whole: bool = False
    ) -> tuple[OffsetPosition, Iterator[FileBatch]]:
        """The offset index's floor entry for ``offset`` and the batches from its position on
        (``whole``: see :meth:`FileRecords.batches`).

        The entry is checked on the first batch at its position, which the caller reads anyway
        (:func:`entry_batch_problem`: one header, O(1)): a damaged entry would otherwise make reads
        silently skip records. When it fails, the walk starts at ``starting_file_position`` (the
        segment start by default), a warning names the file and entry, and the segment is marked
        (:attr:`index_damage`).
        """
        index = self._index_for_read(self._lazy_offset_index)
        entry = OffsetPosition(self.base_offset, 0) if index is None else index.lookup(offset)
        if entry.position == 0 or entry.position < starting_file_position:
            return entry, self.log.batches(max(entry.position, starting_file_position), whole=whole)
        batches = self.log.batches(entry.position, whole=whole)
        try:
            first = next(batches, None)
            problem = entry_batch_problem(first, self.base_offset, entry.offset)
        except CorruptRecordError as e:  # the walk from the segment start then meets the damage, if in the .log
            first, problem = None, f"the bytes there are not a batch ({e}): a wrong position, or damage in the .log"
        if problem is None:
            assert first is not None
            return entry, itertools.chain((first,), batches)
        self._index_damaged(
            f"index file {self.offset_index_path} has a damaged entry (offset {entry.offset}, position "
            f"{entry.position}): {problem}"
        )
        return OffsetPosition(self.base_offset, 0), self.log.batches(starting_file_position, whole=whole)

    def _index_damaged(self, what: str) -> None:
        """Note a damaged index entry found by a read: warn (once per segment) and mark the segment
        so that its writer rebuilds the indexes (a read-only segment only warns)."""
        if self.index_damage is None:
            action = "" if self.read_only else "; the indexes will be rebuilt"
            logger.warning("%s; reading from the segment start instead%s", what, action)
        self.index_damage = what

    def _time_lookup(self, timestamp: int) -> TimestampOffset:
        index = self._index_for_read(self._lazy_time_index)
        return TimestampOffset(-1, self.base_offset) if index is None else index.lookup(timestamp)

    def _index_for_read(self, lazy: LazyIndex[IndexT] | None) -> IndexT | None:
        """``lazy``'s index for a lookup, or None (the lookup then starts at the segment start) when a
        read-only segment has none: the file was missing when the segment was opened, or its writer
        (another process) deleted or renamed it since; the ``.log`` stays readable through its open
        descriptor, so the reader still returns the records it holds."""
        if lazy is None:
            return None
        try:
            return lazy.get()
        except StorageError as e:
            if not self.read_only or e.errno != errno.ENOENT:
                raise
            logger.info("%s is gone (deleted by its writer?): reading %s from its start", lazy.path, self.log.path)
            return None

    # -- sizes and timestamps ------------------------------------------------------------------

    @property
    def size(self) -> int:
        """Bytes of batches in the ``.log`` (its logical size)."""
        return self.log.size_in_bytes()

    def _max_timestamp_and_offset(self) -> TimestampOffset:
        if self._max_ts_and_offset is None:
            if self.read_only:
                # A live writer's active segment has a preallocated time index whose zero-filled tail
                # reads as entries; a reader cannot tell, so it takes the max from the batch headers.
                self._max_ts_and_offset = self._largest_timestamp_after(0, _UNKNOWN)
            else:
                self._max_ts_and_offset = self.time_index.last_entry
        return self._max_ts_and_offset

    @property
    def max_timestamp_so_far(self) -> int:
        """Largest record timestamp appended so far (from the time index's last entry after a reopen)."""
        return self._max_timestamp_and_offset().timestamp

    @property
    def offset_of_max_timestamp_so_far(self) -> int:
        return self._max_timestamp_and_offset().offset

    @property
    def largest_timestamp(self) -> int:
        """The max record timestamp, or the ``.log`` mtime when no record has one (retention uses it)."""
        max_ts = self.max_timestamp_so_far
        return max_ts if max_ts >= 0 else self.last_modified

    @property
    def largest_record_timestamp(self) -> int | None:
        max_ts = self.max_timestamp_so_far
        return max_ts if max_ts >= 0 else None

    @property
    def last_modified(self) -> int:
        """Last-modified time of the ``.log`` in ms."""
        return self.log.last_modified_ms

    def set_last_modified(self, ms: int) -> None:
        """Set the mtime of the ``.log`` and of the index files that exist. Caller holds the log lock."""
        self.log.set_last_modified(ms)
        for path in (self.offset_index_path, self.time_index_path):
            with storage_errors(path, "set the modification time of"):
                if path.exists():
                    os.utime(path, ns=(ms * 1_000_000, ms * 1_000_000))

    # -- append --------------------------------------------------------------------------------

    def _ensure_offset_in_range(self, offset: int) -> None:
        # Through the offset index, as Kafka: the first append materialises (creates) the .index.
        if not self.offset_index.can_append_offset(offset):
            raise LogSegmentOffsetOverflowError(
                f"Detected offset overflow at offset {offset} in segment {self}", segment=self, offset=offset
            )

    def append(
        self,
        largest_offset: int,
        largest_timestamp: int,
        shallow_offset_of_max_timestamp: int,
        records: bytes | bytearray | memoryview | np.ndarray,
    ) -> None:
        """Append whole batches ``records`` whose last offset is ``largest_offset`` (Kafka ``append``).

        Applies the index rule of the module docstring to this append as a whole. The scalar
        reference of :meth:`append_batches` (which the log uses): a test checks that one
        ``append`` per batch writes the same files as ``append_batches``.
        Not thread-safe: the caller holds the log lock.

        Raises:
            LogSegmentOffsetOverflowError: ``largest_offset`` is not within ``base_offset + [0, 2**31-1]``.
            StorageError: the write failed.
        """
        size = len(records) if not isinstance(records, np.ndarray) else int(records.nbytes)
        if size == 0:
            return
        counter = self._index_byte_counter()
        physical_position = self.size
        self._ensure_offset_in_range(largest_offset)
        current = self._max_timestamp_and_offset()
        # the batch's offsets are at least its offset of the max timestamp, every earlier one below
        with self._undone_on_failure(shallow_offset_of_max_timestamp):
            if physical_position == 0:
                self._rolling_based_timestamp = largest_timestamp
            self.log.append(records)
            if largest_timestamp > current.timestamp:
                self._max_ts_and_offset = TimestampOffset(largest_timestamp, shallow_offset_of_max_timestamp)
            if counter > self.index_interval_bytes:
                self.offset_index.append(largest_offset, physical_position)
                latest = self._max_timestamp_and_offset()
                self.time_index.maybe_append(latest.timestamp, latest.offset)
                counter = 0
        self._bytes_since_last_index_entry = counter + size

    @contextlib.contextmanager
    def _undone_on_failure(self, first_new_offset: int) -> Iterator[None]:
        """Undo an append that fails part way: cut the `.log` back to its size before, drop the index
        entries from ``first_new_offset`` on and restore the cached max timestamp, so the segment is
        as before and the next append writes the same offsets in the same place.

        Without it a batch whose `.log` bytes were written while an index entry found no space (the
        index files are pre-allocated sparse: a full disk refuses their next page) stayed in the
        `.log` at offsets the log end offset did not count, and the next append wrote those offsets
        a second time. If the undo fails too, the original error is raised and the undo's is logged:
        the segment is then as a crash would leave it, which loading recovers.
        """
        position = self.size
        max_ts_and_offset, rolling_based_timestamp = self._max_ts_and_offset, self._rolling_based_timestamp
        try:
            yield
        except BaseException:
            try:
                self.offset_index.truncate_to(first_new_offset)
                self.time_index.truncate_to(first_new_offset)
                if self.size > position:
                    self.log.truncate_to(position)
            except (SeglogError, ValueError) as e:
                logger.error("could not undo a failed append to %s: %s", self.log.path, e)
            self._max_ts_and_offset, self._rolling_based_timestamp = max_ts_and_offset, rolling_based_timestamp
            raise

    def _index_byte_counter(self) -> int:
        """Bytes appended since the last offset-index entry (Kafka's ``bytesSinceLastIndexEntry``).

        A segment opened on existing files counts from its last entry's position (from its start when it
        has none), so its index is as dense as if its writer had never closed it; Kafka counts from 0
        after a restart (docs/design.md, Deliberate differences). A new segment starts at 0 either way.
        """
        if self._bytes_since_last_index_entry is None:
            index = self.offset_index
            last_position = index.entry(index.entries - 1).position if index.entries else 0
            self._bytes_since_last_index_entry = max(0, self.size - last_position)
        return self._bytes_since_last_index_entry

    def _plan(
        self, encoded: EncodedBatches, start: int, stop: int, counter: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
        """The index rule applied to batches ``start..stop-1`` from the segment's current state."""
        current = self._max_timestamp_and_offset()
        index_flags, time_flags, run_ts, run_offset, end_counter = _index_plan(
            np.ascontiguousarray(encoded.sizes[start:stop], dtype=np.int64),
            np.ascontiguousarray(encoded.max_timestamps[start:stop], dtype=np.int64),
            np.ascontiguousarray(encoded.offsets_of_max_timestamp[start:stop], dtype=np.int64),
            counter,
            self.index_interval_bytes,
            current.timestamp,
            current.offset,
            self.time_index.last_entry.timestamp,
        )
        return index_flags, time_flags, run_ts, run_offset, int(end_counter)

    def _check_offset_range(self, last_offsets: np.ndarray) -> None:
        """Kafka's ``ensureOffsetInRange`` over many batches: every last offset must be
        representable relative to the base offset (0..2**31-1), else
        :class:`LogSegmentOffsetOverflowError` naming the first one that is not."""
        relative = last_offsets - self.base_offset
        bad = np.flatnonzero((relative < 0) | (relative > INT32_MAX))
        if bad.size:
            offset = int(last_offsets[bad[0]])
            raise LogSegmentOffsetOverflowError(
                f"Detected offset overflow at offset {offset} in segment {self}", segment=self, offset=offset
            )

    def append_batches(
        self,
        encoded: EncodedBatches,
        start: int = 0,
        stop: int | None = None,
        *,
        fill: Fill | None = None,
    ) -> int:
        """Append batches ``start..stop-1`` of ``encoded`` with one write, as one append per batch.

        The index entries are exactly those a broker writes appending the batches one at a time, so
        the files are identical; they are computed for all batches at once (a compiled loop over the
        per-batch arrays). Every batch is checked against the segment's offset range before anything
        is written. With ``fill``, ``encoded`` carries only the batches' metadata and
        ``fill(write, start, stop)`` encodes them and writes them with ``write(data, position)``
        (:meth:`FileRecords.append_positioned`). Returns the bytes written. Not thread-safe: the
        caller holds the log lock.

        Raises:
            LogSegmentOffsetOverflowError: a batch's last offset is outside the segment's range.
            StorageError: the write failed.
        """
        stop = len(encoded) if stop is None else stop
        if stop <= start:
            return 0
        last_offsets = encoded.last_offsets[start:stop]
        offset_index = self.offset_index  # materialised by the range check, as in append()
        self._check_offset_range(last_offsets)
        physical_position = self.size
        first_position = int(encoded.positions[start])
        end_position = int(encoded.positions[stop - 1] + encoded.sizes[stop - 1])
        index_flags, _time_flags, run_ts, run_offset, end_counter = self._plan(
            encoded, start, stop, self._index_byte_counter()
        )
        with self._undone_on_failure(int(encoded.base_offsets[start])):
            if physical_position == 0:
                self._rolling_based_timestamp = int(encoded.max_timestamps[start])
            if fill is None:
                self.log.append(encoded.buffer[first_position:end_position])
            else:
                self.log.append_positioned(end_position - first_position, lambda write: fill(write, start, stop))
            self._max_ts_and_offset = TimestampOffset(int(run_ts[-1]), int(run_offset[-1]))
            entries = np.flatnonzero(index_flags)
            if entries.size:
                positions = encoded.positions[start:stop][entries] - first_position + physical_position
                offset_index.append_many(last_offsets[entries], positions)
                self.time_index.append_many(run_ts[entries], run_offset[entries])
        self._bytes_since_last_index_entry = end_counter
        return end_position - first_position

    def appendable_batches(
        self, encoded: EncodedBatches, start: int, max_segment_ms: int, max_segment_bytes: int, now: int
    ) -> int:
        """How many batches from ``start`` can be appended before :meth:`should_roll` would say roll.

        Evaluates Kafka's roll conditions (spec 4.5) for each batch as its own append, in order, with
        the segment's state as it would be after the earlier batches: size, time (record time of
        the segment's first batch, else wall clock, never for an empty segment), full offset or
        time index, offset overflow. Returns 0 when the first batch already needs a roll.
        """
        stop = len(encoded)
        sizes = encoded.sizes[start:stop].astype(np.int64)
        n = sizes.size
        if n == 0:
            return 0
        size0 = self.size
        before = size0 + np.concatenate(([0], np.cumsum(sizes)[:-1]))
        roll = before > max_segment_bytes - sizes
        # time: the rolling timestamp is the segment's first batch's max timestamp; an empty segment
        # takes it from the first batch appended now.
        max_ts = encoded.max_timestamps[start:stop].astype(np.int64)
        if size0 == 0:
            rolling = int(max_ts[0])
        else:
            self._load_first_batch_timestamp()
            rolling = -1 if self._rolling_based_timestamp is None else self._rolling_based_timestamp
        if rolling >= 0:
            waited = max_ts - rolling
        else:
            waited = np.full(n, now - self._created, dtype=np.int64)
        roll |= roll_time_reached(before, waited, max_segment_ms, self.roll_jitter_ms)
        index_flags, time_flags, _run_ts, _run_offset, _counter = self._plan(
            encoded, start, stop, self._index_byte_counter()
        )
        offset_index, time_index = self.offset_index, self.time_index
        offset_entries = offset_index.entries + np.concatenate(([0], np.cumsum(index_flags)[:-1]))
        time_entries = time_index.entries + np.concatenate(([0], np.cumsum(time_flags)[:-1]))
        roll |= offset_entries >= offset_index.max_entries
        roll |= time_entries >= time_index.max_entries - 1
        relative = encoded.last_offsets[start:stop] - self.base_offset
        roll |= (relative < 0) | (relative > INT32_MAX)
        hits = np.flatnonzero(roll)
        return int(hits[0]) if hits.size else n

    # -- roll ----------------------------------------------------------------------------------

    def _load_first_batch_timestamp(self) -> None:
        if self._rolling_based_timestamp is None:
            first = next(iter(self.log.batches()), None)
            if first is not None:
                self._rolling_based_timestamp = first.max_timestamp

    def time_waited_for_roll(self, now: int, message_timestamp: int) -> int:
        """ms the segment has been open: by record time if its first batch has one, else by wall clock."""
        self._load_first_batch_timestamp()
        ts = self._rolling_based_timestamp
        if ts is not None and ts >= 0:
            return message_timestamp - ts
        return now - self._created

    def roll_due(self, now: int, segment_ms: int) -> bool:
        """Whether the segment is older than ``segment_ms`` minus its jitter, as if a record stamped
        ``now`` arrived: the time rule alone, for the maintenance ``roll`` job (no append to trigger it)."""
        return bool(roll_time_reached(self.size, self.time_waited_for_roll(now, now), segment_ms, self.roll_jitter_ms))

    def should_roll(self, params: RollParams) -> bool:
        """Whether an append described by ``params`` must go to a new segment (spec 4.5).

        The scalar reference, Kafka's ``shouldRoll`` line for line: the append path uses the
        vectorised :meth:`appendable_batches`, which tests check against this, batch by batch.
        """
        reached_roll_ms = roll_time_reached(
            self.size,
            self.time_waited_for_roll(params.now, params.max_timestamp_in_messages),
            params.max_segment_ms,
            self.roll_jitter_ms,
        )
        size = self.size
        return (
            size > params.max_segment_bytes - params.messages_size
            or bool(reached_roll_ms)
            or self.offset_index.is_full()
            or self.time_index.is_full()
            or not self.offset_index.can_append_offset(params.max_offset_in_messages)
        )

    def on_become_inactive_segment(self) -> None:
        """Seal the segment at roll: final time index entry, trim both indexes and the ``.log``.

        Not thread-safe: the caller holds the log lock.
        """
        latest = self._max_timestamp_and_offset()
        self.time_index.maybe_append(latest.timestamp, latest.offset, skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        self.log.trim()

    # -- read ----------------------------------------------------------------------------------

    def translate_offset(
        self, offset: int, starting_file_position: int = 0, *, whole: bool = False
    ) -> LogOffsetPosition | None:
        """The batch holding ``offset`` (or the first after it): its last offset, position and size.

        ``whole`` (readers of committed offsets): bytes before the segment's end that are not a whole
        batch raise rather than end the search, so damage is never taken for the end of the data.

        Raises:
            CorruptRecordError: a size field below 14, or (``whole``) bytes that are not a whole batch.
        """
        entry, batches = self._indexed_batches(offset, starting_file_position, whole=whole)
        if whole:
            batches = self._offsets_checked(batches, offset)
        return self.log.search_for_offset_with_size(offset, max(entry.position, starting_file_position), batches)

    def _offsets_checked(self, batches: Iterator[FileBatch], offset: int) -> Iterator[FileBatch]:
        """``batches`` as the walk to ``offset`` steps through them, raising at a v2 batch from at or
        below ``offset`` whose last offset lies below its base offset, when the batch after it starts
        past ``offset`` (or none follows): its lastOffsetDelta (CRC-covered, but the walk reads
        headers without CRCs, as Kafka's does) is damaged, and it may hold ``offset``, which the walk
        would step over in silence. A batch after it from at or below ``offset`` shows it does not.

        Raises:
            CorruptRecordError: such a batch (names the file and its position).
        """
        suspect: FileBatch | None = None
        for batch in batches:
            if suspect is not None and batch.base_offset > offset:
                break
            damaged = batch.magic >= MAGIC_V2 and batch.base_offset <= offset and batch.last_offset < batch.base_offset
            suspect = batch if damaged else None
            if suspect is None:
                yield batch
        if suspect is not None:
            raise CorruptRecordError(
                f"batch at position {suspect.position} of {self.log.path} has last offset {suspect.last_offset} "
                f"below its base offset {suspect.base_offset} (its lastOffsetDelta damaged)",
                path=self.log.path,
                position=suspect.position,
            )

    def read(
        self,
        start_offset: int,
        max_size: int,
        max_position: int | None = None,
        min_one_message: bool = False,
        as_slice: bool = False,
    ) -> FetchDataInfo | None:
        """Bytes of whole batches from the batch holding ``start_offset``, at most ``max_size`` of them.

        ``max_position`` (default: the segment size) bounds the bytes read; with ``min_one_message``
        the first batch is returned whole even if larger than ``max_size``. Returns None when
        ``start_offset`` is beyond the segment's data. The result may end in a partial batch. With
        ``as_slice`` the records are a :class:`~indexer.records.file_records.FileSlice`, not read.
        CRCs are not checked here: consumers check them (Kafka's ``check.crcs``).

        Raises:
            CorruptRecordError: the walk to ``start_offset``'s batch met bytes that are not a whole batch.
        """
        if max_size < 0:
            raise ValueError(f"Invalid max size {max_size} for log read from segment {self.log.path}")
        start = self.translate_offset(start_offset, whole=True)
        if start is None:
            return None
        metadata = LogOffsetMetadata(start_offset, self.base_offset, start.position)
        adjusted_max_size = max(max_size, start.size) if min_one_message else max_size
        if adjusted_max_size == 0:
            return FetchDataInfo(metadata, b"")
        limit = self.size if max_position is None else max_position
        fetch_size = max(0, min(limit - start.position, adjusted_max_size))
        return FetchDataInfo(
            metadata,
            self.log.slice(start.position, fetch_size) if as_slice else self.log.read(start.position, fetch_size),
            first_entry_incomplete=adjusted_max_size < start.size,
        )

    def fetch_upper_bound_offset(self, start_offset_position: OffsetPosition, fetch_size: int) -> int | None:
        """An offset past ``fetch_size`` bytes from ``start_offset_position``, if the index knows one."""
        entry = self.offset_index.fetch_upper_bound_offset(start_offset_position, fetch_size)
        return None if entry is None else entry.offset

    def read_next_offset(self) -> int:
        """The offset after the segment's last complete batch (reads from the last index entry on)."""
        return self.read_end().message_offset

    def read_end(self) -> LogOffsetMetadata:
        """The offset after the segment's last complete batch, and that batch's end position.

        For a segment another process writes, the position is where readable data ends: the file
        may be longer, its tail reserved (``posix_fallocate``) and still zeros while the writer fills it.
        """
        index = self._index_for_read(self._lazy_offset_index)
        last_indexed = self.base_offset if index is None else index.last_offset
        # From the (verified) position of the last entry: its offset may be damaged, its batch is not.
        position = self._lookup_position(last_indexed).position
        while True:
            scan = self.scan(position)
            # Headers are not CRC-checked here: a damaged lastOffsetDelta or base offset shows as an offset
            # below the segment's base or below an earlier batch's. The end is that of the batches before it
            # (the damage is the CRC pass's to report), never an offset no batch could have.
            last = np.asarray(scan.last_offsets, dtype=np.int64)
            ordered = (
                (last >= np.maximum.accumulate(np.concatenate(([self.base_offset], last[:-1])))) if last.size else last
            )
            whole = int(np.argmin(ordered)) if last.size and not ordered.all() else last.size
            if whole == 0 and position > 0 and last.size:
                position = 0  # the batch the last entry points at is damaged: the batches before it hold the end
                continue
            if whole == 0:
                end = int(scan.positions[0]) if last.size else scan.valid_bytes
                return LogOffsetMetadata(self.base_offset, self.base_offset, end)
            end = scan.valid_bytes if whole == last.size else int(scan.positions[whole])
            return LogOffsetMetadata(int(last[whole - 1]) + 1, self.base_offset, end)

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int | None = None) -> TimestampAndOffset | None:
        """The first record at or after ``starting_offset`` whose timestamp is ``>= timestamp``.

        Starts from the time index's floor entry, then scans batches, decoding only batches whose max
        timestamp reaches ``timestamp`` (Kafka ``findOffsetByTimestamp``).
        """
        starting_offset = self.base_offset if starting_offset is None else starting_offset
        floor = self._time_lookup(timestamp)
        position = self._lookup_position(max(floor.offset, starting_offset)).position
        if floor.offset > starting_offset and floor.timestamp >= 0:
            # The entry says no record before its offset reaches its timestamp: check it on its batch.
            holder = next((b for b in self.log.batches(position) if b.last_offset >= floor.offset), None)
            problem = time_entry_batch_problem(holder, floor.timestamp, floor.offset)
            if problem is not None:
                self._index_damaged(
                    f"time index file {self.time_index_path} has a damaged entry (timestamp {floor.timestamp}, "
                    f"offset {floor.offset}): {problem}"
                )
                position = self._lookup_position(starting_offset).position
        for batch in self.log.batches(position):
            if batch.max_timestamp < timestamp or batch.last_offset < starting_offset:
                continue
            records = decode_records(
                batch.raw(), base_position=batch.position, path=self.log.path, include_control=True
            )
            offsets = records.column("offset").to_numpy()
            stamps = records.column("timestamp").to_numpy()
            hits = np.flatnonzero((stamps >= timestamp) & (offsets >= starting_offset))
            if hits.size:
                epoch = getattr(batch, "partition_leader_epoch", -1)
                return TimestampAndOffset(
                    int(stamps[hits[0]]),
                    int(offsets[hits[0]]),
                    epoch if epoch is not None and epoch >= 0 else None,
                )
        return None

    # -- recovery and truncation ----------------------------------------------------------------

    def recover(self, transactions: TransactionReplay, scan: BatchScan | None = None) -> int:
        """Rebuild the indexes from the ``.log`` and cut it after its last valid batch (spec 4.7).

        Walks every batch (CRC-checked) with the vectorised scan, re-derives the index entries with
        the append rule (the batch at position 0 is never indexed), rewrites the ``.txnindex`` from
        the batches kept (``transactions``: the log's producer-state replay,
        :meth:`TransactionReplay.rebuild`), truncates invalid trailing bytes and writes the final
        time index entry. Returns the number of bytes truncated.
        ``scan``: the caller's own ``self.scan(verify_crc=True)`` of the unchanged ``.log``
        (the loader inspects the batches before recovering), so that the file is read only once.
        Not thread-safe: the caller (the loader) holds the log lock.

        Raises:
            LogSegmentOffsetOverflowError: a batch's offsets do not fit this segment (the loader splits
                the segment and retries).
            StorageError: an I/O error.
        """
        offset_index, time_index = self.offset_index, self.time_index
        offset_index.reset()
        time_index.reset()
        self._max_ts_and_offset = _UNKNOWN
        if scan is None:
            scan = self.scan(verify_crc=True)
        last_offsets = np.asarray(scan.last_offsets, dtype=np.int64)
        self._check_offset_range(last_offsets)
        transactions.rebuild(self.txn_index, self.log, scan, self.base_offset)
        if last_offsets.size:
            index_flags, _time_flags, run_ts, run_offset, _counter = _index_plan(
                np.ascontiguousarray(scan.sizes, dtype=np.int64),
                np.ascontiguousarray(scan.max_timestamps, dtype=np.int64),
                last_offsets,
                0,
                self.index_interval_bytes,
                -1,
                -1,
                -1,
            )
            entries = np.flatnonzero(index_flags)
            offset_index.append_many(last_offsets[entries], np.asarray(scan.positions, dtype=np.int64)[entries])
            time_index.append_many(run_ts[entries], run_offset[entries])
            self._max_ts_and_offset = TimestampOffset(int(run_ts[-1]), int(run_offset[-1]))
        if scan.error is not None:
            logger.warning(
                "Found invalid messages in log segment %s at byte offset %d: %s",
                self.log.path,
                scan.valid_bytes,
                scan.error,
            )
        truncated = self.size - scan.valid_bytes
        if truncated > 0:
            logger.debug("truncating %d invalid bytes at the end of %s", truncated, self.log.path)
        self.log.truncate_to(scan.valid_bytes)
        offset_index.trim_to_valid_size()
        latest = self._max_timestamp_and_offset()
        time_index.maybe_append(latest.timestamp, latest.offset, skip_full_check=True)
        time_index.trim_to_valid_size()
        return truncated

    def truncate_to(self, offset: int) -> int:
        """Remove every batch that holds an offset ``>= offset``, and their index entries (spec 4.8).

        The whole batch containing ``offset`` goes, including its offsets below ``offset``. Both
        indexes are resized back to ``segment.index.bytes`` so the segment can be active again.
        Returns the bytes removed. Not thread-safe: the caller holds the log lock.
        """
        mapping = self.translate_offset(offset)
        # Read before the time index is cut: after a reopen the cached maximum is still unknown and
        # would be initialised from the truncated index, losing the maximum of the batches that stay.
        had_timestamps = self.max_timestamp_so_far >= 0
        offset_index, time_index = self.offset_index, self.time_index
        offset_index.truncate_to(offset)
        time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        offset_index.resize(self._max_index_size)
        time_index.resize(self._max_index_size)
        truncated = 0 if mapping is None else self.log.truncate_to(mapping.position)
        if self.size == 0:
            self._created = self._clock.milliseconds()
            self._rolling_based_timestamp = None
        self._bytes_since_last_index_entry = 0
        if had_timestamps:
            self._max_ts_and_offset = self._read_largest_timestamp()
        return truncated

    def scan(self, position: int = 0, *, verify_crc: bool = False) -> BatchScan:
        """The batch headers of the ``.log`` from ``position`` on, every CRC checked with ``verify_crc``
        (:meth:`FileRecords.scan`)."""
        return self.log.scan(position, verify_crc=verify_crc)

    def _read_largest_timestamp(self) -> TimestampOffset:
        last_entry = self.time_index.last_entry
        return self._largest_timestamp_after(self._lookup_position(last_entry.offset).position, last_entry)

    def _largest_timestamp_after(self, position: int, floor: TimestampOffset) -> TimestampOffset:
        """The first batch from ``position`` with the largest max timestamp, if above ``floor``'s."""
        scan = self.scan(position)
        if len(scan.max_timestamps):
            stamps = np.asarray(scan.max_timestamps)
            best = int(np.argmax(stamps))
            if int(stamps[best]) > floor.timestamp:
                return TimestampOffset(int(stamps[best]), int(scan.last_offsets[best]))
        return floor

    def sanity_check(self, time_index_file_newly_created: bool) -> None:
        """The load-time check (spec 6.2 step 5): the offset index must exist; a missing time index is
        created empty; the transaction index is checked. Not thread-safe: called by the loader.

        Raises:
            StorageError: the offset index file is missing (``errno`` ENOENT): the loader recovers.
            CorruptIndexError: the transaction index is corrupt.
        """
        path = self.offset_index_path
        if not path.exists():
            raise StorageError(f"Offset index file {path} does not exist", path=path, errno=errno.ENOENT)
        if time_index_file_newly_created:
            self.time_index.resize(0)
        self.txn_index.sanity_check()

    # -- flush, close, files -------------------------------------------------------------------

    def flush(self) -> None:
        """fsync the ``.log`` and flush the indexes (materialising them). Caller holds the log lock."""
        self.log.flush()
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def sync_indexes(self) -> None:
        """Make rebuilt indexes durable (:meth:`AbstractIndex.sync`): for a rebuild below the recovery
        point, which no recovery after a power loss would redo. Caller holds the log lock.

        Raises:
            StorageError: an fsync failed.
        """
        self.offset_index.sync()
        self.time_index.sync()

    def close(self) -> None:
        """Write the final time index entry, trim and close every file (a read-only segment just
        releases its handles). Caller holds the log lock."""
        if self.read_only:
            self.close_handlers()
            return
        if self._max_ts_and_offset is not None:
            try:
                self.time_index.maybe_append(
                    self._max_ts_and_offset.timestamp, self._max_ts_and_offset.offset, skip_full_check=True
                )
            except SeglogError as e:  # Kafka swallows this too: the segment still closes
                logger.error("failed to append the final time index entry of %s: %s", self.log.path, e)
        for lazy in (self._lazy_offset_index, self._lazy_time_index):
            if lazy is not None:
                lazy.close()
        self.log.close()
        self.txn_index.close()

    def close_handlers(self) -> None:
        """Release file handles and mappings without writing anything. Caller holds the log lock."""
        for lazy in (self._lazy_offset_index, self._lazy_time_index):
            if lazy is not None:
                lazy.close_handler()
        self.log.close_handlers()
        self.txn_index.close()

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        """Rename the segment's files from ``old_suffix`` to ``new_suffix`` (e.g. ``""`` -> ``.deleted``).

        Missing index files are tolerated. Not thread-safe: the caller holds the log lock.
        """

        def renamed(path: Path) -> Path:
            name = path.name
            if old_suffix and not name.endswith(old_suffix):
                raise ValueError(f"{path} does not end with the suffix {old_suffix!r}")
            stem = name[: len(name) - len(old_suffix)] if old_suffix else name
            return path.with_name(stem + new_suffix)

        self.log.rename_to(renamed(self.log.path))
        for lazy in (self._lazy_offset_index, self._lazy_time_index):
            if lazy is not None:
                lazy.rename_to(renamed(lazy.path))
        self.txn_index.rename_to(renamed(self.txn_index.path))

    def has_suffix(self, suffix: str) -> bool:
        paths = [self.log.path, self.offset_index_path, self.time_index_path, self.txn_index.path]
        return all(p.name.endswith(suffix) for p in paths)

    def delete_if_exists(self) -> None:
        """Delete all four files, attempting each even if another fails (first error re-raised).

        Not thread-safe: the caller holds the log lock (or owns the segment, as the deletion task does).

        Raises:
            StorageError: a file existed but could not be deleted.
        """
        errors: list[StorageError] = []
        deleters = [("log", self.log.delete_if_exists)]
        for name, lazy in (("offset index", self._lazy_offset_index), ("time index", self._lazy_time_index)):
            if lazy is not None:
                deleters.append((name, lazy.delete_if_exists))
        for name, delete in deleters:
            try:
                if not delete():
                    logger.info(
                        "Failed to delete %s of segment %d in %s because it does not exist",
                        name,
                        self.base_offset,
                        self.log.path.parent,
                    )
            except StorageError as e:
                errors.append(e)
        try:
            self.txn_index.delete_if_exists()
        except StorageError as e:
            errors.append(e)
        if errors:
            raise errors[0]

    def deleted(self) -> bool:
        """True when none of the segment's files exists any more."""
        paths = [self.log.path, self.offset_index_path, self.time_index_path, self.txn_index.path]
        return not any(p.exists() for p in paths)

    def __repr__(self) -> str:
        # No I/O here: repr() appears in error messages about files that may be gone.
        return f"LogSegment(baseOffset={self.base_offset}, size={self.size}, file={self.log.path})"
