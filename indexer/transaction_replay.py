"""Rebuilding a segment's ``.txnindex`` from the ``.log``, as Kafka's ``LogSegment.recover`` does with its
``ProducerStateManager``: the one function every layer that repairs a ``.txnindex`` calls.

Kafka's rule (``ProducerAppendInfo``, ``ProducerStateManager.lastStableOffset``): a producer's
transaction begins at its first transactional data batch after its previous end marker; a
transactional control batch (COMMIT or ABORT) ends it; an end marker of a producer with no open
transaction (an empty transaction) changes nothing. An ABORT that ends a transaction gives the entry
``AbortedTxn(producer, first offset, marker offset, last stable offset)``, the last stable offset being
the first offset of the earliest transaction of another producer still open at the marker, else the
marker's offset + 1.

seglog reads no producer snapshots: the open transactions at a segment's base offset are replayed
from the batch headers of the segments before it (a vectorised header walk, then the producer ids of
the transactional batches in one compiled loop of 8-byte reads, :meth:`FileRecords.int64_fields`), and
only for a segment that holds transaction markers (a seglog-written log has none: nothing is read).
:class:`TransactionReplay` keeps the state it reached, so that recovering the segments of a log in
order replays each one once. Whether a marker is an ABORT is read the same way (:func:`_aborts`).

The replay begins at the log's first segment. A transaction begun in a segment retention deleted is
known from its first batch still in the log: its entry's first offset is that batch's offset, which
hides every record of it that can still be read (Kafka, replaying from the log start without a
snapshot, does the same). An ABORT marker whose producer has no record at all since that first
segment gets no entry, as in Kafka; when the first segment does not start at offset 0 the transaction
may have begun before it, and one WARNING per file says so, naming the file and the markers.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from indexer.errors import CorruptRecordError
from indexer.limits import INT64_MAX
from indexer.records.batch_header import (
    CONTROL_FLAG_MASK,
    MAGIC_V2,
    PRODUCER_ID_OFFSET,
    RECORD_BATCH_OVERHEAD,
    TRANSACTIONAL_FLAG_MASK,
)
from indexer.records.control import ControlRecordType, parse_control_record_key
from indexer.records.decoder import decode_records
from indexer.records.file_records import BatchScan, FileRecords
from indexer.transaction_index import AbortedTxn, TransactionIndex

logger = logging.getLogger(__name__)

_EMPTY = np.empty(0, np.int64)
_MARKER_KEY_LENGTH_VARINT = 8  # a 4-byte key: length 4, zigzag-encoded


@dataclass(frozen=True, slots=True)
class OpenTransactions:
    """The producer state a ``.txnindex`` needs at ``offset``: producer id -> first offset of its open
    transaction, replayed from ``since`` (the base offset of the log's first segment), and the producers
    that wrote a transactional batch since then (``seen``)."""

    offset: int
    since: int
    first_offsets: dict[int, int] = field(default_factory=dict)
    seen: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class _Replayed:
    """One segment replayed: the state after it, its aborted transactions, and ``(producer, offset)``
    of the ABORT markers whose producer had no record since the replay began."""

    after: OpenTransactions
    aborted: list[AbortedTxn]
    unmatched_aborts: list[tuple[int, int]]


@dataclass(frozen=True, slots=True)
class SegmentAborts:
    """What a segment's ``.log`` alone says its ``.txnindex`` must hold (no earlier segment read).

    ``ended``: the aborted transactions that have records in the segment before their ABORT marker;
    each must have an entry with that producer and marker offset, whose first offset is at most the
    one given here (the transaction may have begun in an earlier segment). ``unmatched``: ``(producer,
    marker offset)`` of the ABORT markers whose producer has no record in the segment before them: an
    entry for one may exist (its transaction began in an earlier segment), with a first offset below
    the segment's base offset. The last stable offsets depend on earlier segments: not known here.
    """

    ended: list[AbortedTxn]
    unmatched: list[tuple[int, int]]


def segment_aborts(records: FileRecords, scan: BatchScan, base_offset: int) -> SegmentAborts:
    """:class:`SegmentAborts` of the segment at ``base_offset`` whose ``.log`` is ``records`` (``scan``:
    its batches): what the index check (:mod:`indexer.index_check`) compares a ``.txnindex`` with.

    Raises:
        StorageError: the ``.log`` cannot be read.
    """
    if not has_markers(scan):
        return SegmentAborts([], [])
    replayed = _replay(records, scan, OpenTransactions(base_offset, base_offset), types=True)
    return SegmentAborts(replayed.aborted, replayed.unmatched_aborts)


def open_at_base(earlier: Iterable[FileRecords], producers: set[int]) -> dict[int, bool]:
    """For each of ``producers``: whether its transaction was open at the end of the ``earlier`` logs
    (walked newest first, only until every producer is found): its last transactional batch there is
    a data batch (True) or a marker (False). Producers with no transactional batch there are left out.

    Raises:
        StorageError: a ``.log`` cannot be read.
    """
    found: dict[int, bool] = {}
    for records in earlier:
        if len(found) == len(producers):
            break
        scan = records.scan(verify_crc=False)
        chosen = _transactional(scan)
        pids = records.int64_fields(np.asarray(scan.positions)[chosen], PRODUCER_ID_OFFSET)
        markers = (np.asarray(scan.attributes)[chosen] & CONTROL_FLAG_MASK) != 0
        wanted = np.flatnonzero(np.isin(pids, list(producers.difference(found))))[::-1]
        last_pids, first_seen = np.unique(pids[wanted], return_index=True)  # newest batch of each
        found.update(zip(last_pids.tolist(), (~markers[wanted[first_seen]]).tolist(), strict=True))
    return found


def _transactional(scan: BatchScan) -> np.ndarray:
    return np.flatnonzero((scan.magics == MAGIC_V2) & ((scan.attributes & TRANSACTIONAL_FLAG_MASK) != 0))


def has_markers(scan: BatchScan) -> bool:
    """Whether any batch of ``scan`` is a transaction marker (a transactional control batch)."""
    both = TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK
    return bool(np.any((scan.magics == MAGIC_V2) & ((scan.attributes & both) == both)))


def _aborts(records: FileRecords, positions: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Which of the control batches at ``positions`` are ABORT markers.

    A marker as Kafka writes it (``MemoryRecords.withEndTransactionMarker``: one record, timestamp
    and offset deltas 0, a 4-byte key) has its key's type at a fixed place: those are read in one
    compiled loop (the 8 bytes after the record's 1-byte length: attributes, the two deltas, the key
    length 4 as a zigzag varint, the key's version 0 and type). Any other layout is decoded.
    """
    words = records.int64_fields(positions, RECORD_BATCH_OVERHEAD + 1)
    regular = ((words >> 16) & 0xFFFFFFFFFFFF) == (_MARKER_KEY_LENGTH_VARINT << 16)
    aborts: np.ndarray = regular & ((words & 0xFFFF) == ControlRecordType.ABORT.value)
    for i in np.flatnonzero(~regular).tolist():
        aborts[i] = _is_abort(records, int(positions[i]), int(sizes[i]))
    return aborts


def _is_abort(records: FileRecords, position: int, size: int) -> bool:
    """Whether the control batch at ``position`` is an ABORT marker (its first record's key, decoded).
    One that does not decode is not taken for one, said at WARNING (Kafka's recovery stops there)."""
    try:
        table = decode_records(
            records.read(position, size), base_position=position, path=records.path, include_control=True
        )
    except CorruptRecordError as e:
        logger.warning("%s: not taken for an ABORT marker: %s", records.path, e)
        return False
    if table.num_rows == 0:
        return False
    key = table.column("key")[0].as_py()
    return key is not None and parse_control_record_key(key)[1] is ControlRecordType.ABORT


def _replay(records: FileRecords, scan: BatchScan, state: OpenTransactions, *, types: bool) -> _Replayed:
    """Kafka's producer-state update over the batches of ``scan`` (from ``state``); with ``types`` also
    the aborted transactions (control batches decoded to tell ABORT from COMMIT)."""
    end = int(scan.last_offsets[-1]) + 1 if len(scan) else state.offset
    chosen = _transactional(scan)
    carried = len(state.first_offsets)
    producers = np.concatenate(
        (
            np.fromiter(state.first_offsets, np.int64, carried),
            records.int64_fields(scan.positions[chosen], PRODUCER_ID_OFFSET),
        )
    )
    offsets = np.concatenate(
        (np.fromiter(state.first_offsets.values(), np.int64, carried), np.asarray(scan.base_offsets)[chosen])
    )
    markers = np.concatenate((np.zeros(carried, bool), (np.asarray(scan.attributes)[chosen] & CONTROL_FLAG_MASK) != 0))
    batch = np.concatenate((np.full(carried, -1, np.int64), chosen))
    order = np.lexsort((offsets, producers))  # each producer's items in offset order
    producers, offsets, markers, batch = producers[order], offsets[order], markers[order], batch[order]
    n = producers.size
    same = np.zeros(n, bool)
    same[1:] = producers[1:] == producers[:-1]
    after_marker = np.ones(n, bool)
    after_marker[1:] = markers[:-1]
    begins = ~markers & (~same | after_marker)
    ends = markers & same & ~after_marker
    began_at = np.maximum.accumulate(np.where(begins, np.arange(n), -1)) if n else _EMPTY
    last_of_producer = np.ones(n, bool)
    last_of_producer[:-1] = producers[1:] != producers[:-1]
    still_open = last_of_producer & ~markers
    after = OpenTransactions(
        end,
        state.since,
        dict(zip(producers[still_open].tolist(), offsets[began_at[still_open]].tolist(), strict=True)),
        state.seen.union(producers.tolist()),
    )
    if not types:
        return _Replayed(after, [], [])
    # Every transaction of this replay as (first offset, end marker offset or never).
    firsts = np.concatenate((offsets[began_at[ends]], offsets[began_at[still_open]]))
    lasts = np.concatenate((offsets[ends], np.full(int(still_open.sum()), INT64_MAX, np.int64)))
    positions, sizes = np.asarray(scan.positions), np.asarray(scan.sizes)
    candidates = np.flatnonzero(ends | (markers & ~same))
    is_abort = np.zeros(n, bool)
    is_abort[candidates] = _aborts(records, positions[batch[candidates]], sizes[batch[candidates]])
    ended_aborts = np.flatnonzero(ends & is_abort)
    ended_aborts = ended_aborts[np.argsort(offsets[ended_aborts], kind="stable")]
    lsos = _last_stable_offsets(firsts, lasts, offsets[ended_aborts])
    aborted = [
        AbortedTxn(int(producers[i]), int(offsets[began_at[i]]), int(offsets[i]), lso)
        for i, lso in zip(ended_aborts.tolist(), lsos, strict=True)
    ]
    unmatched = [
        (int(producers[i]), int(offsets[i]))
        for i in np.flatnonzero(markers & ~same & is_abort).tolist()
        if int(producers[i]) not in state.seen
    ]
    return _Replayed(after, aborted, sorted(unmatched, key=lambda marker: marker[1]))


def _last_stable_offsets(firsts: np.ndarray, lasts: np.ndarray, markers: np.ndarray) -> list[int]:
    """Kafka's last stable offset at each of ``markers`` (ascending): the first offset of the earliest
    transaction (``firsts``/``lasts``: first offset, end marker offset) open across it, else the
    marker + 1. One sweep: transactions enter a heap by first offset as the markers pass their first
    offset and leave it once ended (the marker's own transaction ends at it: not counted)."""
    order = np.argsort(firsts, kind="stable")
    pending = list(zip(firsts[order].tolist(), lasts[order].tolist(), strict=True))
    heap: list[tuple[int, int]] = []
    entered = 0
    result = []
    for marker in markers.tolist():
        while entered < len(pending) and pending[entered][0] < marker:
            heapq.heappush(heap, pending[entered])
            entered += 1
        while heap and heap[0][1] <= marker:
            heapq.heappop(heap)
        result.append(heap[0][0] if heap else marker + 1)
    return result


class TransactionReplay:
    """The open transactions of one log at its segments' base offsets, replayed forward once (what
    Kafka's producer snapshots are for), and the ``.txnindex`` rebuild that needs them.

    ``segments`` gives the log's segments as ``(base offset, .log)`` in offset order when asked (the
    segments before the one rebuilt must be there). Not thread-safe: used under the log's lock or by
    the loader.
    """

    def __init__(self, segments: Callable[[], Sequence[tuple[int, FileRecords]]]) -> None:
        self._segments = segments
        self._known: OpenTransactions | None = None

    def before(self, base_offset: int) -> OpenTransactions:
        """The open transactions at ``base_offset``: every segment below it replayed (from the state
        reached so far when it is still on the way there)."""
        earlier = [(base, records) for base, records in self._segments() if base < base_offset]
        since = earlier[0][0] if earlier else base_offset
        known = self._known
        state = (
            known
            if known is not None and known.since == since and known.offset <= base_offset
            else OpenTransactions(since, since)
        )
        for base, records in earlier:
            if base >= state.offset:
                state = _replay(records, records.scan(verify_crc=False), state, types=False).after
        self._known = state
        return state

    def rebuild(self, index: TransactionIndex, records: FileRecords, scan: BatchScan, base_offset: int) -> None:
        """Rewrite ``index`` (the ``.txnindex`` of the segment at ``base_offset``) from ``scan``, the
        batches of its ``.log`` that stay: the entries Kafka's segment recovery writes.

        Raises:
            StorageError: a file cannot be read or written.
        """
        index.reset()
        if not has_markers(scan):
            return
        replayed = _replay(records, scan, self.before(base_offset), types=True)
        for txn in replayed.aborted:
            index.append(txn)
        self._known = replayed.after
        if replayed.unmatched_aborts and replayed.after.since > 0:
            logger.warning(
                "%s: ABORT marker at offset %s of a producer with no record since the log's first segment "
                "(offset %d): its transaction began before it (retention deleted those records) or was "
                "empty; no entry, as Kafka, and no record of it is left to hide",
                index.path.absolute(),
                ", ".join(str(offset) for _producer, offset in replayed.unmatched_aborts),
                replayed.after.since,
            )
