"""One partition's log: segments, offsets, append, read, roll, truncation, retention and flush.

Kafka splits this between ``UnifiedLog`` (the façade: lock, high watermark, log start offset,
retention) and ``LocalLog`` (segments, log end offset, recovery point); seglog has no tiered storage
or replication, so :class:`Log` is both. A partition directory ``<topic>-<partition>`` holds the
segments' files (see :mod:`indexer.segment`) and ``.seglog.lock``, the writer lock.

Offsets: ``log_start_offset`` (first offset exposed to readers) <= ``high_watermark`` (committed:
readers stop here by default; the writer moves it, e.g. after a Spark micro-batch commits) <=
``log_end_offset`` (next offset to assign). ``recovery_point`` is the first offset not known to be
fsync'ed: after a crash the loader recovers the segments from the one holding it onward.

Thread-safety: a writable :class:`Log` is owned by one process (the partition lock) and, inside it,
every mutation takes one re-entrant lock (``Log.lock``, also for callers such as maintenance jobs that
must act atomically). Reads (``read``, ``read_records``, ``offset_for_timestamp``) take no lock, as in
Kafka: they work on an immutable snapshot of the offsets and on segments that stay readable until
``file.delete.delay.ms`` after they are removed.

Crash behaviour: data is appended without fsync unless ``flush.messages`` says otherwise; ``flush``
fsyncs segments then moves the recovery point, and a new segment also fsyncs the directory. After a
crash, the loader cuts the log after its last valid batch from the recovery point on.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
import time
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from indexer.checkpoint import fsync_directory
from indexer.clock import Clock, SystemClock
from indexer.config import LogConfig
from indexer.data_loss import log_start_above, missing_between_segments, missing_committed_records
from indexer.errors import (
    CorruptRecordError,
    InvalidOffsetError,
    OffsetOutOfRangeError,
    OffsetsInNoSegmentError,
    StorageError,
    storage_errors,
)
from indexer.file_names import (
    DELETED_FILE_SUFFIX,
    PARTITION_LOCK_FILE,
    is_log_file,
    log_file,
    offset_from_file_name,
    offset_index_file,
    time_index_file,
    transaction_index_file,
)
from indexer.limits import integer_argument
from indexer.lock import FileLock
from indexer.log_loader import (
    UNCLEAN_SHUTDOWN,
    LoadedLog,
    LogLoader,
    RecoveryReport,
    empty_segments_inside_others,
)
from indexer.log_values import FetchDataInfo, LogAppendInfo, LogOffsetMetadata, TimestampAndOffset
from indexer.records.append_pipeline import AppendPlan, AppendSummary, Fill, check_stored_as_is, plan_append
from indexer.records.batch_header import LOG_OVERHEAD, SIZE_OFFSET
from indexer.records.batch_limits import BatchLimits
from indexer.records.columns import READ_SCHEMA, AppendInput, to_append_table
from indexer.records.decoder import decode_records
from indexer.records.encoder import EncodedBatches
from indexer.records.file_records import BatchScan, FileSlice
from indexer.records.framing import assign_offsets, misplaced_entry, whole_entries
from indexer.records.isolation import IsolationLevel
from indexer.retention import RetentionDecision, RetentionReason, plan_retention
from indexer.salvage import LostRange, SalvagePlan, first_misplaced_batch, plan_salvage
from indexer.segment import LogSegment
from indexer.segments import LogSegments
from indexer.transaction_index import AbortedTxn
from indexer.transaction_replay import TransactionReplay

logger = logging.getLogger(__name__)

# read_records reads and decodes the log in chunks that start small (a short read stays cheap) and
# double up to the maximum; a batch larger than the chunk is read whole.
_FIRST_READ_CHUNK_BYTES = 64 * 1024
_READ_CHUNK_BYTES = 4 * 1024 * 1024

# A read-only open lists the segments again when the writer removed one meanwhile, for this long at
# most, this long apart: a retention pass renames its segments oldest first, as a reader opens them, so a
# reader may have to wait for the pass to end (thousands of renames take well under a second).
_READ_ONLY_OPEN_PATIENCE_S = 10.0
_READ_ONLY_OPEN_RETRY_S = 0.01

_T = TypeVar("_T")
_P = ParamSpec("_P")


class _PrefixAdapter(logging.LoggerAdapter):  # type: ignore[type-arg]
    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        return f"{self.extra['prefix']} {msg}", kwargs  # type: ignore[index]


def _misplaced(
    table: pa.Table, buf: bytes, whole: int, floor: int, after: int, ordered: bool, ceiling: int | None
) -> tuple[pa.Table, int, int, int, int] | None:
    """When the records decoded from ``buf[:whole]`` (whole batches, in file order, the last ending
    before offset ``after``; ``ordered``: their headers' offsets increase, :func:`whole_entries`) do
    not all come after ``floor`` and each other, or a batch reaches ``ceiling`` (the next segment's
    base offset), the first such batch (written twice, swapped or moved, or its base offset damaged
    in place: a log's offsets never go back, and a segment's stop below the next one's): ``(the
    records before it that are in order and below the first offset it makes unreadable, its position
    in buf, that offset, its first offset, the largest offset before it)``. One vectorised comparison
    when the offsets fit; the batch headers are walked only when they do not. The headers' order
    counts too: a batch whose base offset was damaged to past the read's bound has no records in
    ``table``, and the records around it are in order."""
    offsets = table.column("offset").to_numpy()
    if (
        ordered
        and (not offsets.size or (offsets[0] > floor and (offsets[1:] > offsets[:-1]).all()))
        and (ceiling is None or after <= ceiling)
    ):
        return None
    found = misplaced_entry(buf[:whole], floor, ceiling)
    if found is None:  # out of order only inside a batch: the decoder's records are the batch's
        return None
    at, first, before = found
    unread = min(first, before + 1)  # a batch reaching the next segment holds none of its offsets
    in_order = np.concatenate(([offsets[:1] > floor], offsets[1:] > offsets[:-1]), axis=None)
    fine = in_order & (offsets < unread)
    return table.slice(0, len(fine) if fine.all() else int(np.argmin(fine))), at, unread, first, before


def check_append(
    data: AppendInput, config: LogConfig, *, compression: str | None = None, now_ms: int, where: str
) -> None:
    """Raise the error :meth:`Log.append` would raise for ``data`` in a log of ``config``, with no log:
    a writer that would create the log directory, topic or partition first checks its input here, so
    a refused append leaves nothing behind. ``where`` names the partition in the error.

    Raises:
        SchemaError, InvalidTimestampError, RecordTooLargeError, RecordBatchTooLargeError: as
            :meth:`Log.append` (``RecordTooLargeError.index`` is the record's row).
    """
    table = to_append_table(data, now_ms=now_ms)
    if table.num_rows:
        _plan_append(table, 0, config, compression, now_ms, where=where)


def _plan_append(
    table: pa.Table,
    first_offset: int,
    config: LogConfig,
    compression: str | None,
    now_ms: int,
    *,
    where: str | os.PathLike[str],
) -> AppendPlan:
    """The batches of ``table`` in a log of ``config`` (its limits, codec and timestamp type), every
    record checked: the one planning step of :meth:`Log.append` and :func:`check_append`."""
    return plan_append(
        table,
        first_offset,
        limits=BatchLimits.of(config),
        compression=config.stored_codec(compression),
        log_append_time_ms=now_ms if config.is_log_append_time else None,
        where=where,
    )


def _misplaced_error(segment: LogSegment, position: int, first: int, before: int | None) -> CorruptRecordError:
    """The damage of a CRC-valid batch of ``segment`` at ``position``, first offset ``first``, that
    :func:`~indexer.records.framing.misplaced_entry` found: its first offset is not above ``before``,
    the largest offset of the batches before it (a log's offsets never go back), or (``before`` None)
    it reaches the next segment's base offset (its base offset, which the CRC does not cover, damaged
    in place)."""
    if before is not None:
        why = f"not after offset {before}: offsets go backwards (a batch written twice or out of place)"
    else:
        why = (
            "and reaches the next segment's base offset (its base offset damaged in place: the CRC does "
            "not cover it); recovery removes it"
        )
    return CorruptRecordError(
        f"batch at position {position} starts at offset {first}, {why}", path=segment.log.path, position=position
    )


@dataclass(frozen=True, slots=True)
class UnreadableOffsets:
    """Offsets a read cannot return past damage (:meth:`Log.unreadable_offsets`): ``offsets`` (``end``
    None: up to the log end), and whether ``seglog recover`` names them ``lost`` (else it keeps them:
    the damage is a batch written twice or out of place)."""

    offsets: LostRange
    lost: bool


def create_empty_partition(directory: Path) -> None:
    """Make ``directory`` a new, empty partition as a writer's first open and close leave one: the
    directory and a segment at offset 0 (empty ``.log``, ``.index`` and ``.timeindex``), without
    opening a :class:`Log` (no lock, no load: a topic of thousands of partitions is created in seconds).
    What exists is left as it is (a writer may be creating the same partition). Not durable until
    the caller fsyncs ``directory`` and its parent.

    Raises:
        StorageError: a file cannot be created (a file where the directory goes, no space, ...).
    """
    with storage_errors(directory, "create the partition directory"):
        directory.mkdir(exist_ok=True)
        for path in (log_file(directory, 0), offset_index_file(directory, 0), time_index_file(directory, 0)):
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o644))


class Log:
    """One partition directory, open for writing (exclusive) or read-only.

    Use :meth:`open`. A writable log holds ``<dir>/.seglog.lock`` until :meth:`close`; a read-only log
    takes no lock, recovers nothing, writes nothing and sees the files as they were when opened.
    """

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        segments: LogSegments,
        *,
        log_start_offset: int,
        recovery_point: int,
        end: LogOffsetMetadata,
        clock: Clock,
        read_only: bool,
        file_lock: FileLock | None,
        high_watermark: int | None,
    ) -> None:
        self.directory = directory
        self.config = config
        self.clock = clock
        self.read_only = read_only
        self.lock = threading.RLock()
        self._segments = segments
        self._file_lock = file_lock
        # What the loader did when this (writable) log was opened: its lost offsets are a data loss
        # the opener reports (maintenance, whose jobs open partitions for other reasons).
        self.recovery_report: RecoveryReport | None = None
        self._log = _PrefixAdapter(logger, {"prefix": f"[Log partition={directory.name}]"})
        self._log_start_offset = log_start_offset
        self._recovery_point = recovery_point
        self._last_flush_ms = clock.milliseconds()
        self._closed = False
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        self._next_offset_metadata = end
        hw = log_start_offset if high_watermark is None else high_watermark
        self._high_watermark_metadata = LogOffsetMetadata(log_start_offset)
        self._set_high_watermark(hw)

    # -- opening -------------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: str | os.PathLike[str],
        config: LogConfig,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        had_clean_shutdown: bool = False,
        clock: Clock | None = None,
        read_only: bool = False,
        high_watermark: int | None = None,
        recovery_reason: str = UNCLEAN_SHUTDOWN,
        lock_role: str | None = None,
        create: bool = True,
    ) -> Log:
        """Open the partition ``directory`` (created if missing, unless read-only or ``create`` is false:
        maintenance borrows partitions that exist and must not bring back one deleted meanwhile).

        Writable: takes the partition lock, then loads and recovers the segments (``LogLoader``;
        ``recovery_point``, ``log_start_offset`` and ``had_clean_shutdown`` come from the log
        directory's checkpoints); without a clean shutdown the recovered segments' steps and logs give
        ``recovery_reason`` (a caller that recovers for another reason says so). The high watermark
        starts at ``high_watermark``, else at the log
        start offset, as in Kafka; a log that ends below ``high_watermark`` lost committed records
        (damage, recovery) and is refused until the loss is accepted (``seglog recover
        --accept-data-loss``), so their offsets are never given to other records. ``lock_role`` marks
        a holder that never appends in the lock file (:func:`indexer.lock.left_by_writer`).

        Read-only: opens the ``.log`` files found, with indexes mapped read-only; the high watermark is
        ``high_watermark`` if given, else the log end offset (everything on disk is visible). The log
        ends after the last whole batch: a tail its writer has reserved but not yet filled is not data.

        A ``log_start_offset`` above the log end offset, or above ``high_watermark``, is refused
        (:func:`~indexer.data_loss.log_start_above`), before anything is written: no writer leaves one,
        so the checkpoint is damaged or segments are missing; a read from it would quietly return
        nothing, and a writer would remove the segments below it (``seglog recover`` may).

        Unless it is maintenance itself, it waits up to :data:`indexer.lock.BORROWER_WAIT_S` for a
        partition that maintenance borrows (``seglog maintain`` holds one partition at a time).

        Raises:
            LogLockedError: another writer, in this or another process, holds the partition (or
                maintenance kept it longer than the wait).
            StorageError: the directory or a file cannot be read or created (read-only: the directory
                holds no ``.log`` file); ``log_start_offset`` is above the log end or ``high_watermark``;
                writable: the log ends below ``high_watermark``.
        """
        directory = Path(directory)
        clock = clock if clock is not None else SystemClock()
        if read_only:
            segments, end = cls._load_read_only(directory, config, clock)
            first_base = segments.first_segment_base_offset() or 0
            if log_start_offset > end.message_offset:
                segments.close_handlers()
                raise log_start_above(directory, log_start_offset, end.message_offset, "its log end offset")
            return cls(
                directory,
                config,
                segments,
                log_start_offset=max(log_start_offset, first_base),
                recovery_point=min(recovery_point, end.message_offset),
                end=end,
                clock=clock,
                read_only=True,
                file_lock=None,
                high_watermark=end.message_offset if high_watermark is None else high_watermark,
            )
        if high_watermark is not None and log_start_offset > high_watermark:
            raise log_start_above(directory, log_start_offset, high_watermark, "its checkpointed high watermark")
        with storage_errors(directory, "create the partition directory" if create else "open the partition directory"):
            if create:
                directory.mkdir(parents=True, exist_ok=True)
            elif not directory.is_dir():
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(directory))
        file_lock = FileLock(directory / PARTITION_LOCK_FILE, role=lock_role)
        file_lock.acquire()
        try:
            loaded = LogLoader(
                directory,
                config,
                recovery_point=recovery_point,
                log_start_offset=log_start_offset,
                had_clean_shutdown=had_clean_shutdown,
                clock=clock,
                recovery_reason=recovery_reason,
            ).load()
            if high_watermark is not None and high_watermark > loaded.next_offset:
                loaded.close()  # trimmed, as a closed log leaves them
                raise missing_committed_records(
                    directory, loaded.next_offset, high_watermark, "its checkpointed high watermark"
                )
            log = cls.from_loaded(
                directory, config, loaded, clock=clock, file_lock=file_lock, high_watermark=high_watermark
            )
        except BaseException:
            file_lock.release()
            raise
        log._log.info(
            "opened: log start offset %d, log end offset %d, %d segments, recovery point %d",
            log.log_start_offset,
            log.log_end_offset,
            log.num_segments,
            log.recovery_point,
        )
        return log

    @classmethod
    def from_loaded(
        cls,
        directory: Path,
        config: LogConfig,
        loaded: LoadedLog,
        *,
        clock: Clock,
        file_lock: FileLock,
        high_watermark: int | None,
    ) -> Log:
        """The writable log of what :meth:`LogLoader.load` recovered, under ``file_lock`` (held): it ends
        where its active segment does (recovery cut any partial tail), and deletes the segments recovery
        removed ``file.delete.delay.ms`` later, as its own (releasing their files when it closes)."""
        active = loaded.segments.active_segment()
        log = cls(
            directory,
            config,
            loaded.segments,
            log_start_offset=loaded.log_start_offset,
            recovery_point=loaded.recovery_point,
            end=LogOffsetMetadata(loaded.next_offset, active.base_offset, active.size),
            clock=clock,
            read_only=False,
            file_lock=file_lock,
            high_watermark=high_watermark,
        )
        log.recovery_report = loaded.report
        if loaded.deleted_segments:
            log._delete_segment_files(list(loaded.deleted_segments), "removed by recovery")
        return log

    @staticmethod
    def _load_read_only(directory: Path, config: LogConfig, clock: Clock) -> tuple[LogSegments, LogOffsetMetadata]:
        """Open the segments listed in ``directory``. A ``.log`` its writer renamed or deleted between
        the listing and its opening (retention) makes the listing stale: it is taken again, so the
        segments opened are ones the writer held together, never a set with a hole in it. Since a
        retention pass renames segments in the order a reader opens them, the listing is retaken
        until the pass is over (``_READ_ONLY_OPEN_PATIENCE_S`` at most)."""
        deadline = time.monotonic() + _READ_ONLY_OPEN_PATIENCE_S
        while True:
            segments = LogSegments(directory.name)
            with storage_errors(directory, "list the partition directory"):
                names = sorted(p.name for p in directory.iterdir() if is_log_file(p) and p.is_file())
            try:
                strays = empty_segments_inside_others(directory, config, names, clock=clock)
                for name in names:
                    base = offset_from_file_name(name)
                    if base in strays:  # holds nothing; the segment before it holds its offsets
                        continue
                    segments.add(
                        LogSegment.open(directory, base, config, clock=clock, file_already_exists=True, read_only=True)
                    )
                break
            except StorageError as e:
                segments.close_handlers()
                if e.errno != errno.ENOENT or time.monotonic() >= deadline:
                    raise
                logger.debug("%s: a segment went away while the partition was opened; listing it again", directory)
                time.sleep(_READ_ONLY_OPEN_RETRY_S)
        if segments.is_empty():
            raise StorageError(f"{directory} holds no log segment to read", path=directory, errno=errno.ENOENT)
        return segments, segments.active_segment().read_end()

    # -- offsets -------------------------------------------------------------------------------

    @property
    def segments(self) -> LogSegments:
        return self._segments

    @property
    def num_segments(self) -> int:
        return self._segments.number_of_segments()

    @property
    def active_segment(self) -> LogSegment:
        return self._segments.active_segment()

    @property
    def log_start_offset(self) -> int:
        """The first offset readers may read."""
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record gets."""
        return self._next_offset_metadata.message_offset

    @property
    def high_watermark(self) -> int:
        """The committed offset: reads stop before it unless told otherwise."""
        return self._high_watermark_metadata.message_offset

    @property
    def recovery_point(self) -> int:
        """The first offset not known to be on disk (fsync'ed)."""
        return self._recovery_point

    @property
    def size_in_bytes(self) -> int:
        return self._segments.size_in_bytes()

    @property
    def unflushed_messages(self) -> int:
        return self.log_end_offset - self._recovery_point

    @property
    def last_flush_time_ms(self) -> int:
        return self._last_flush_ms

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_readable(self) -> None:
        """A read of a closed log is the caller's mistake, said as such (not as its files' errors)."""
        if self._closed:
            raise ValueError(f"cannot read: the log {self.directory} is closed")

    def _check_writable(self, action: str) -> None:
        if self.read_only:
            raise ValueError(f"cannot {action}: the log {self.directory} is open read-only")
        if self._closed:
            raise ValueError(f"cannot {action}: the log {self.directory} is closed")

    def _update_log_end_offset(self, end_offset: int) -> None:
        active = self._segments.active_segment()
        self._next_offset_metadata = LogOffsetMetadata(end_offset, active.base_offset, active.size)
        if self._recovery_point > end_offset:
            self._recovery_point = end_offset

    def _offset_metadata(self, offset: int) -> LogOffsetMetadata:
        """Full metadata (segment and batch position) for ``offset``, or message-offset-only if unknown."""
        end = self._next_offset_metadata
        if offset >= end.message_offset:
            return end
        segment = self._segments.floor_segment(offset)
        if segment is not None:
            position = segment.translate_offset(offset)
            if position is not None:
                return LogOffsetMetadata(offset, segment.base_offset, position.position)
        return LogOffsetMetadata(offset)

    def _set_high_watermark(self, offset: int) -> int:
        offset = min(max(offset, self._log_start_offset), self.log_end_offset)
        self._high_watermark_metadata = self._offset_metadata(offset)
        return offset

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark to ``offset`` clamped into ``[log_start_offset, log_end_offset]``.

        May move it backwards (Kafka ``updateHighWatermark``). Returns the new value. Thread-safe.

        Raises:
            InvalidArgumentError: ``offset`` is not an integer of Kafka's int64 range.
        """
        offset = integer_argument("offset", offset)
        with self.lock:
            return self._set_high_watermark(offset)

    def maybe_increment_log_start_offset(self, offset: int) -> bool:
        """Raise the log start offset to ``offset`` (Kafka's DeleteRecords); True if it moved.

        The engine's only way to drop records by offset rather than by segment age or size: segments
        wholly below it are deleted by the next :meth:`delete_old_segments` (the "log start offset
        breach"). Thread-safe.

        Raises:
            OffsetOutOfRangeError: ``offset`` is beyond the high watermark.
            InvalidArgumentError: ``offset`` is not an integer of Kafka's int64 range.
        """
        offset = integer_argument("offset", offset)
        with self.lock:
            self._check_writable("raise the log start offset")
            if offset > self.high_watermark:
                raise OffsetOutOfRangeError(
                    f"Cannot increment the log start offset to {offset} of partition {self.directory.name} "
                    f"since it is larger than the high watermark {self.high_watermark}",
                    offset=offset,
                    path=self.directory,
                )
            if offset <= self._log_start_offset:
                return False
            self._log.info("incrementing log start offset to %d", offset)
            self._log_start_offset = offset
            if self.high_watermark < offset:
                self._set_high_watermark(offset)
            if self._recovery_point < offset:
                self._recovery_point = offset
            return True

    # -- append --------------------------------------------------------------------------------

    def append(self, data: AppendInput, *, compression: str | None = None, now_ms: int | None = None) -> LogAppendInfo:
        """Append records at the log end offset, rolling segments as Kafka does; returns what was written.

        ``data`` is anything :func:`~indexer.records.columns.to_append_table` takes. Records become
        v2 batches packed up to ``batch.size``, each within ``max.message.bytes`` and ``segment.bytes``
        (:class:`~indexer.records.batch_limits.BatchLimits`); timestamps are the records' own
        (CreateTime) or ``now_ms`` (LogAppendTime, per ``message.timestamp.type``). ``compression``
        applies when the topic's ``compression.type`` is ``producer`` (:meth:`LogConfig.stored_codec`).
        Each batch goes to the active segment unless Kafka's roll rule says roll first, so an append
        may span segments, split at batch boundaries. Every input problem is found before a byte is
        written. Flushes when ``flush.messages`` records are unflushed. Thread-safe (takes the log lock).

        Raises:
            SchemaError: ``data`` has unknown columns or wrong types.
            InvalidArgumentError: ``now_ms`` is not an integer in 0..2**63 - 1 (a Kafka timestamp).
            InvalidTimestampError: a negative timestamp (Kafka's producer refuses them).
            RecordTooLargeError: one record alone is larger than ``max.message.bytes``.
            RecordBatchTooLargeError: one record alone does not fit a segment (``segment.bytes``).
            StorageError: an I/O error; the log is then in the state a crash would leave.
        """
        now = self.clock.milliseconds() if now_ms is None else integer_argument("now_ms", now_ms, low=0)
        table = to_append_table(data, now_ms=now)
        log_append_time_ms = now if self.config.is_log_append_time else None
        with self.lock:
            self._check_writable("append")
            first_offset = self.log_end_offset
            if table.num_rows == 0:
                return self._nothing_appended(first_offset)
            plan = _plan_append(table, first_offset, self.config, compression, now, where=self.directory)
            rolled = 0
            summaries: list[AppendSummary] = []
            # closing(): a failed write stops an encoder thread at once
            with contextlib.closing(plan.parts()) as parts:
                for part in parts:
                    rolled += self._append_batches(part.batches, now, fill=part.fill)
                    summaries.append(AppendSummary.of(part.batches))
            return self._appended(first_offset, AppendSummary.combine(summaries), rolled, log_append_time_ms)

    def append_encoded(self, encoded: EncodedBatches, *, now_ms: int | None = None) -> LogAppendInfo:
        """Append v2 batches encoded beforehand, giving them the next offsets, as a broker does with a
        producer's batches; returns what was written.

        ``encoded`` comes from :func:`~indexer.records.encoder.encode_batches` (any base offset), so a
        caller can encode while it does not know the offsets yet (the Spark sink encodes each part of a
        micro-batch as it arrives) and append later. Each batch's ``baseOffset`` field (bytes 0-7; the
        CRC covers bytes 21 on) is rewritten in ``encoded.buffer``, in place: nothing is re-encoded or
        re-checksummed (:func:`~indexer.records.framing.assign_offsets`). The metadata arrays of
        ``encoded`` keep the encoder's offsets; the returned info has the assigned ones. Batches are
        stored as they are, so their codec must be the topic's (:meth:`LogConfig.stored_codec`; or none,
        the encoder's choice for a batch the codec would make larger), their
        timestamp type the topic's ``message.timestamp.type`` (for ``LogAppendTime``, encode with
        ``timestamp_type=LOG_APPEND_TIME`` and the append time; a broker would rewrite maxTimestamp and
        the CRC instead), and each must fit ``max.message.bytes`` and ``segment.bytes`` (Kafka's
        ``RecordTooLargeException``/``RecordBatchTooLargeException``). Rolls, index entries, the
        returned info and ``flush.messages`` are those of :meth:`append`, and everything is checked
        before a byte is written. Thread-safe (takes the log lock).

        Raises:
            ValueError: ``encoded`` is not back-to-back v2 batches with consecutive offsets in a writable
                buffer, or its codec or timestamp type is not the topic's; the log is read-only or closed.
            RecordTooLargeError: a batch is larger than ``max.message.bytes``.
            RecordBatchTooLargeError: a batch is larger than ``segment.bytes``.
            InvalidArgumentError: ``now_ms`` is not an integer in 0..2**63 - 1 (a Kafka timestamp).
            StorageError: an I/O error; the log is then in the state a crash would leave.
        """
        now = self.clock.milliseconds() if now_ms is None else integer_argument("now_ms", now_ms, low=0)
        with self.lock:
            self._check_writable("append")
            first_offset = self.log_end_offset
            if not len(encoded):
                return self._nothing_appended(first_offset)
            check_stored_as_is(encoded, first_offset, self.config, where=self.directory)
            assigned = assign_offsets(encoded, first_offset)
            rolled = self._append_batches(assigned, now)
            summary = AppendSummary.of(assigned)
            append_time = summary.max_timestamp if self.config.is_log_append_time else None
            return self._appended(first_offset, summary, rolled, append_time)

    def _nothing_appended(self, first_offset: int) -> LogAppendInfo:
        return LogAppendInfo(
            first_offset=first_offset,
            last_offset=first_offset - 1,
            max_timestamp=-1,
            offset_of_max_timestamp=-1,
            log_append_time_ms=-1,
            log_start_offset=self._log_start_offset,
            num_records=0,
            num_batches=0,
            valid_bytes=0,
        )

    def _appended(
        self, first_offset: int, summary: AppendSummary, rolled: int, log_append_time_ms: int | None
    ) -> LogAppendInfo:
        """Flush if ``flush.messages`` says so, and describe the append. Caller holds the lock."""
        if self.unflushed_messages >= self.config.flush_messages:
            self._flush_locked(self.log_end_offset, including=False)
        return LogAppendInfo(
            first_offset=first_offset,
            last_offset=summary.last_offset,
            max_timestamp=summary.max_timestamp,
            offset_of_max_timestamp=summary.offset_of_max_timestamp,
            log_append_time_ms=-1 if log_append_time_ms is None else log_append_time_ms,
            log_start_offset=self._log_start_offset,
            num_records=summary.last_offset - first_offset + 1,
            num_batches=summary.num_batches,
            valid_bytes=summary.valid_bytes,
            rolled=rolled,
        )

    def _append_batches(self, encoded: EncodedBatches, now: int, *, fill: Fill | None = None) -> int:
        """Append every batch of ``encoded``, rolling first where Kafka would; returns the rolls made.

        With ``fill``, ``encoded`` is only the batches' metadata and ``fill`` encodes each segment's
        share into its file (:class:`~indexer.records.append_pipeline.AppendPart`).
        """
        rolled = 0
        i, n = 0, len(encoded)
        while i < n:
            segment = self._segments.active_segment()
            count = segment.appendable_batches(encoded, i, self.config.segment_ms, self.config.segment_bytes, now)
            if count == 0:
                segment = self._roll_locked(int(encoded.base_offsets[i]))
                rolled += 1
                # Kafka appends after a roll without asking again (an index of 0 slots stays "full").
                count = max(
                    1,
                    segment.appendable_batches(encoded, i, self.config.segment_ms, self.config.segment_bytes, now),
                )
            segment.append_batches(encoded, i, i + count, fill=fill)
            i += count
            self._update_log_end_offset(int(encoded.last_offsets[i - 1]) + 1)
        return rolled

    # -- roll ----------------------------------------------------------------------------------

    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Start a new active segment at ``max(expected_next_offset, log_end_offset)`` (spec 4.6).

        The old active segment is sealed (final time index entry, trimmed indexes) and flushed,
        which moves the recovery point to the new base offset. Thread-safe (takes the log lock).

        Raises:
            InvalidOffsetError: a non-empty segment already exists at that offset, or it is below
                the active segment's base offset.
            InvalidArgumentError: ``expected_next_offset`` is not an integer of Kafka's int64 range.
        """
        if expected_next_offset is not None:
            expected_next_offset = integer_argument("expected_next_offset", expected_next_offset)
        with self.lock:
            self._check_writable("roll")
            return self._roll_locked(expected_next_offset)

    def continue_at(self, offset: int) -> None:
        """Make ``offset``, above the log end offset, the next offset: an empty active segment based
        there, flushed with its index files, so the offsets in between stay a gap no record is ever
        given (a loss of committed records accepted with ``seglog recover --accept-data-loss``).
        A plain :meth:`roll` keeps the log end offset (Kafka rolls ahead only just before an append
        at that offset). Thread-safe (takes the log lock).

        Raises:
            InvalidOffsetError: ``offset`` is not above the log end offset.
            InvalidArgumentError: ``offset`` is not an integer of Kafka's int64 range.
        """
        offset = integer_argument("offset", offset)
        with self.lock:
            self._check_writable("continue_at")
            if offset <= self.log_end_offset:
                raise InvalidOffsetError(
                    f"cannot continue {self.directory.name} at offset {offset}: its log end offset is "
                    f"{self.log_end_offset}",
                    offset=offset,
                    path=self.directory,
                )
            self._roll_locked(offset)
            self._update_log_end_offset(offset)
            self._flush_locked(offset, including=True)

    def _roll_locked(self, expected_next_offset: int | None) -> LogSegment:
        end = self.log_end_offset
        new_offset = max(expected_next_offset or 0, end)
        active = self._segments.active_segment()
        existing = self._segments.get(new_offset)
        if existing is not None:
            if existing is not active or active.size > 0:
                raise InvalidOffsetError(
                    f"Trying to roll a new log segment for {self.directory.name} "
                    f"with start offset {new_offset} "
                    f"=max(provided offset = {expected_next_offset}, LEO = {end}) while it already exists",
                    offset=new_offset,
                    path=self.directory,
                )
            # KAFKA-6388: an empty active segment that looks full (e.g. a 0-slot index) is replaced.
            self._log.warning("replacing the empty active segment %d on roll", new_offset)
            segment = self._create_and_delete_segment(new_offset, active, "roll of an empty active segment")
        else:
            if new_offset < active.base_offset:
                raise InvalidOffsetError(
                    f"Trying to roll a new log segment for {self.directory.name} "
                    f"with start offset {new_offset} "
                    f"=max(provided offset = {expected_next_offset}, LEO = {end}) lower than start offset of "
                    f"the active segment {active}",
                    offset=new_offset,
                    path=self.directory,
                )
            for path in self._segment_paths(new_offset):
                with storage_errors(path, "delete a stale file before roll"):
                    if path.exists():
                        self._log.warning("newly rolled segment file %s already exists; deleting it first", path)
                        path.unlink()
            active.on_become_inactive_segment()
            segment = LogSegment.open(self.directory, new_offset, self.config, clock=self.clock)
            self._segments.add(segment)
        self._update_log_end_offset(end)
        if self.high_watermark >= end:
            self._high_watermark_metadata = self._next_offset_metadata
        self._log.info("rolled new log segment at offset %d", new_offset)
        self._flush_locked(new_offset, including=False)
        return segment

    def _segment_paths(self, base_offset: int) -> list[Path]:
        return [
            log_file(self.directory, base_offset),
            offset_index_file(self.directory, base_offset),
            time_index_file(self.directory, base_offset),
            transaction_index_file(self.directory, base_offset),
        ]

    # -- read ----------------------------------------------------------------------------------

    def _check_read_offset(self, start_offset: int, end: LogOffsetMetadata) -> LogSegment:
        segment = self._segments.floor_segment(start_offset)
        if start_offset < self._log_start_offset or start_offset > end.message_offset or segment is None:
            raise OffsetOutOfRangeError(
                f"Received request for offset {start_offset} for partition {self.directory.name}, "
                f"but we only "
                f"have log segments in the range {self._log_start_offset} to {end.message_offset}.",
                offset=start_offset,
                path=self.directory,
            )
        return segment

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_message: bool = True,
        as_slice: bool = False,
    ) -> FetchDataInfo:
        """Raw batches from the one holding ``start_offset``, at most ``max_bytes`` (a consumer fetch).

        Stops before the batch holding ``max_offset`` (default: the high watermark). With
        ``min_one_message`` the first batch is returned whole even if larger than ``max_bytes``. With
        ``as_slice`` the records are a slice of the segment file, not read (sent with ``sendfile``).
        Thread-safe without the lock (spec 5.2 ``LocalLog.read``). The bytes may end in a partial
        batch, as a broker's fetch: the consumer drops it and fetches from its offset next, and that
        read raises when the bytes there are damaged. CRCs are the consumer's to check, as in Kafka;
        the batch order is checked (a consumer would drop records below its position in silence): the
        bytes end before a batch whose offsets go backwards.

        Raises:
            OffsetOutOfRangeError: ``start_offset`` is below the log start or above the log end offset.
            CorruptRecordError: the bytes where ``start_offset``'s batch should be are not a whole batch
                (names the file, the position and ``offset=start_offset``), or its batch's offsets go
                backwards; ``OffsetsInNoSegmentError`` when ``start_offset`` is in no segment file.
            InvalidArgumentError: an offset not of Kafka's int64 range, or ``max_bytes`` below 0.
            ValueError: the log is closed (also when :meth:`close` overtakes the read).
        """
        start_offset = integer_argument("start_offset", start_offset)
        max_bytes = integer_argument("max_bytes", max_bytes, low=0)
        if max_offset is not None:
            max_offset = integer_argument("max_offset", max_offset)
        self._check_readable()
        end = self._next_offset_metadata
        bound = self._high_watermark_metadata if max_offset is None else self._offset_metadata(max_offset)
        segment: LogSegment | None = self._check_read_offset(start_offset, end)
        if start_offset == bound.message_offset:
            return FetchDataInfo(bound, b"")
        if start_offset > bound.message_offset:
            return FetchDataInfo(self._offset_metadata(start_offset), b"")
        while segment is not None:
            if segment.base_offset < bound.segment_base_offset:
                max_position: int | None = segment.size
            elif segment.base_offset == bound.segment_base_offset and not bound.message_offset_only:
                max_position = bound.relative_position_in_segment
            else:
                return FetchDataInfo(LogOffsetMetadata(start_offset, segment.base_offset, 0), b"")
            try:
                fetched = self._read_segment(
                    segment, LogSegment.read, start_offset, max_bytes, max_position, min_one_message, as_slice
                )
            except CorruptRecordError as e:
                raise self._unreadable(segment, e, max(start_offset, segment.base_offset)) from e
            if fetched is not None:
                return self._in_offset_order(segment, fetched, segment.size if max_position is None else max_position)
            segment = self._following_segment(segment, start_offset, start_offset, bound.message_offset)
        return FetchDataInfo(end, b"")

    def _in_offset_order(self, segment: LogSegment, fetched: FetchDataInfo, limit: int) -> FetchDataInfo:
        """``fetched`` (raw batches of ``segment``, which ends at position ``limit`` for this read) cut
        before the first batch whose offsets go backwards (written twice, swapped, moved), as
        :meth:`read_records` cuts its records: a Kafka consumer drops the records below its position,
        so it would lose them in silence. The first offset of the batch just after the fetched ones is
        looked at too, so a fetch that ends right before such a batch is not taken for whole. One
        header scan of the fetched bytes (of those read, or of the file slice, hopping from header to
        header over large batches).

        Raises:
            CorruptRecordError: no whole batch comes before the one whose offsets go backwards.
        """
        position = fetched.fetch_offset_metadata.relative_position_in_segment
        records = fetched.records
        if isinstance(records, bytes):
            scan = segment.log.scan_bytes(records, position)
        else:
            scan = segment.log.scan(position, position + len(records), verify_crc=False)
        if not len(scan):
            return fetched
        firsts = np.asarray(scan.base_offsets, dtype=np.int64)
        lasts = np.asarray(scan.last_offsets, dtype=np.int64)
        ceiling = None
        if scan.valid_bytes + LOG_OVERHEAD <= limit:  # the batch after: its base offset, bytes 0-7
            following = int.from_bytes(segment.log.read(scan.valid_bytes, 8), "big", signed=True)
            firsts = np.append(firsts, following)
        elif scan.valid_bytes == segment.size and (ceiling := self._next_base_offset(segment)) is not None:
            firsts = np.append(firsts, ceiling)  # the next segment's first batch starts there
        before = np.maximum.accumulate(lasts)
        backwards = np.flatnonzero(firsts[1:] <= before[: len(firsts) - 1])
        if not backwards.size:
            return fetched
        i = int(backwards[0]) + 1
        first = int(firsts[i])
        at = int(scan.positions[i]) if i < len(scan) else scan.valid_bytes
        reaching = np.flatnonzero(lasts[:i] >= first)  # batches at or past it: not in order below it
        kept = int(reaching[0]) if reaching.size else i
        if kept == 0 and i == len(scan) and ceiling is not None:  # the first batch reaches the next segment
            offset = max(fetched.fetch_offset_metadata.message_offset, segment.base_offset)
            raise self._unreadable(segment, _misplaced_error(segment, position, int(firsts[0]), None), offset)
        if kept == 0:
            raise self._unreadable(segment, _misplaced_error(segment, at, first, int(before[i - 1])), first)
        size = int(scan.positions[kept]) - position if kept < len(scan) else scan.valid_bytes - position
        cut = records[:size] if isinstance(records, bytes) else segment.log.slice(position, size)
        return FetchDataInfo(fetched.fetch_offset_metadata, cut)

    def _read_segment(
        self, segment: LogSegment, read: Callable[Concatenate[LogSegment, _P], _T], *args: _P.args, **kwargs: _P.kwargs
    ) -> _T | None:
        """``read(segment, *args)``, then the index repair it may call for; None when the read failed because
        the segment's files were deleted after it left the log (retention, truncation): the caller
        then asks :meth:`_following_segment`, which says whether the offsets are gone."""
        try:
            result = read(segment, *args, **kwargs)
        except (StorageError, ValueError) as e:  # closed file (StorageError) or index (ValueError)
            if self._closed:  # by close() while it was read
                raise ValueError(f"cannot read: the log {self.directory} is closed") from e
            if self._segments.get(segment.base_offset) is segment:
                raise
            self._log.debug("segment %d was deleted while it was read", segment.base_offset)
            return None
        self._repair_index(segment)
        return result

    def _following_segment(self, segment: LogSegment, start_offset: int, needed: int, bound: int) -> LogSegment | None:
        """The segment to read after ``segment`` gave everything it holds from ``start_offset`` on,
        the read needing offset ``needed`` next (below ``bound``): its successor, or, when ``segment``
        left the log meanwhile, the segment holding ``start_offset`` now.

        A read never skips offsets: if retention removed the segment, the log start offset moved past
        it first, so the fresh lookup raises OffsetOutOfRangeError (as Kafka does for an offset below
        the log start offset) instead of walking on from whatever segment now comes first; offsets
        between the two segments that no segment file holds raise, unless a recovery or an accepted
        loss accounts for them (:func:`~indexer.data_loss.missing_between_segments`).

        Raises:
            OffsetsInNoSegmentError: offsets from ``needed`` on are in no segment file.
        """
        try:
            following = self._segments.next_segment(segment)
        except LookupError:
            return self._check_read_offset(start_offset, self._next_offset_metadata)
        if following is not None and needed < min(following.base_offset, bound):
            missing = missing_between_segments(self.directory, segment.base_offset, needed, following.base_offset)
            if missing is not None:
                raise missing
        return following

    def read_records(
        self,
        start_offset: int,
        max_records: int | None = None,
        *,
        max_offset: int | None = None,
        isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
    ) -> pa.Table:
        """Decoded records with offsets in ``[start_offset, max_offset)`` (default bound: the high
        watermark), at most ``max_records`` of them, as a :data:`~indexer.records.columns.READ_SCHEMA`
        table in offset order. Control records are left out. ``READ_COMMITTED`` reads stop at the last
        stable offset and leave out the batches of aborted transactions (from the ``.txnindex``, see
        :mod:`indexer.records.isolation`). Thread-safe without the lock.

        Damage stops a read as it stops a Kafka consumer: a batch that fails its CRC or does not
        parse, or bytes that are not a whole batch where committed batches must be (anywhere below
        a segment's end but a live writer's torn tail above the bound), a batch whose offsets go
        backwards, or offsets between two segments that no segment file holds. The read returns the
        records of the whole batches before it; a read that has none before it raises, so offsets are
        never skipped quietly.

        Raises:
            OffsetOutOfRangeError: ``start_offset`` is below the log start or above the log end offset.
            CorruptRecordError: damage where the read starts (names the file, the position and the
                first offset that cannot be read, ``offset``); ``OffsetsInNoSegmentError`` for offsets
                in no segment file (names the partition, the offsets and ``seglog recover``).
            InvalidArgumentError: an offset or ``max_records`` not an integer of Kafka's int64 range.
            ValueError: the log is closed (also when :meth:`close` overtakes the read).
        """
        start_offset = integer_argument("start_offset", start_offset)
        if max_records is not None:
            max_records = integer_argument("max_records", max_records)
        if max_offset is not None:
            max_offset = integer_argument("max_offset", max_offset)
        self._check_readable()
        end = self._next_offset_metadata
        segment: LogSegment | None = self._check_read_offset(start_offset, end)
        bound = self.high_watermark if max_offset is None else min(max_offset, end.message_offset)
        aborted: list[AbortedTxn] = []
        if isolation_level is IsolationLevel.READ_COMMITTED:
            bound = min(bound, self.last_stable_offset)
            aborted = self.collect_aborted_transactions(start_offset, bound) if start_offset < bound else []
        limit = None if max_records is None else max(0, max_records)
        tables: list[pa.Table] = []
        found = 0
        while start_offset < bound and limit != 0 and segment is not None and segment.base_offset < bound:
            result = self._read_segment(segment, self._read_segment_records, start_offset, bound, limit, found, aborted)
            needed = start_offset
            if result is not None:
                read, damage, needed = result
                tables += read
                found += sum(t.num_rows for t in read)
                if damage is not None:
                    if not found:
                        raise damage
                    break  # the next read, from the first offset not returned, raises
            if limit is not None and found >= limit:
                break
            if found and self._segments.get(segment.base_offset) is not segment:
                break  # it left the log as it was read: what was read is whole, the next read says what is gone
            try:
                segment = self._following_segment(segment, start_offset, needed, bound)
            except OffsetsInNoSegmentError:
                if not found:
                    raise
                break  # the next read, from the first offset not returned, raises
        if not tables:
            return READ_SCHEMA.empty_table()
        table = pa.concat_tables(tables)
        return table if limit is None else table.slice(0, limit)

    def _read_segment_records(
        self,
        segment: LogSegment,
        start_offset: int,
        bound: int,
        limit: int | None,
        found: int,
        aborted: list[AbortedTxn],
    ) -> tuple[list[pa.Table], CorruptRecordError | None, int]:
        """The records of ``segment`` from ``start_offset``, the damage that stopped the walk (or None),
        and the offset the read needs next (after the segment's last batch when it read to the end).

        Bytes that are not a whole batch before the segment's end are damage unless the batches
        before them already reach ``bound`` (a live writer's torn tail above the high watermark):
        where the walk stopped is compared with where it must reach, from the headers it reads anyway.
        """
        # Positioned reads only (no mmap): a concurrent truncation must never fault a reader.
        out: list[pa.Table] = []
        first = max(start_offset, segment.base_offset)
        try:
            start = segment.translate_offset(first, whole=True)
        except CorruptRecordError as e:
            return out, self._unreadable(segment, e, first), first
        if start is None:
            return out, None, first
        position, end = start.position, segment.size
        ceiling = self._next_base_offset(segment)
        covered = first  # every offset below this one was read (or not asked for)
        floor = segment.base_offset - 1  # the largest offset of the batches walked so far
        read = 0
        chunk = min(_FIRST_READ_CHUNK_BYTES, _READ_CHUNK_BYTES)
        while position < end and covered < bound:
            buf = segment.log.read(position, min(end - position, chunk))
            chunk = min(2 * chunk, _READ_CHUNK_BYTES)
            whole, after, ordered = whole_entries(buf)
            if whole == 0:  # one batch larger than the chunk: read exactly that batch
                size = LOG_OVERHEAD + int.from_bytes(buf[SIZE_OFFSET:LOG_OVERHEAD], "big", signed=True)
                if len(buf) >= LOG_OVERHEAD and position + size <= end:
                    buf = segment.log.read(position, size)
                if len(buf) < LOG_OVERHEAD or len(buf) < size:  # cut, or a size field past the end
                    return out, self._unreadable(segment, segment.log.not_whole_error(position, end), covered), covered
                whole, after, ordered = whole_entries(buf)
            good, damage = whole, None
            while True:  # on damage, decode the whole batches before it (error path only)
                try:
                    table = decode_records(
                        buf[:good],
                        base_position=position,
                        path=segment.log.path,
                        start_offset=start_offset,
                        max_offset=bound,
                        aborted=aborted,
                    )
                    break
                except CorruptRecordError as e:
                    bad = good if e.position is None else e.position - position
                    good, damage = (bad if 0 <= bad < good else 0), e
            if (
                damage is None
                and (misplaced := _misplaced(table, buf, whole, floor, after, ordered, ceiling)) is not None
            ):
                table, at, unread, first_offset, before = misplaced
                unread = max(unread, start_offset)
                going_back = before if first_offset <= before else None
                damage = _misplaced_error(segment, position + at, first_offset, going_back)
                cut = self._salvage_cut(segment, position + at)
                served = int(pc.max(table.column("offset")).as_py()) if table.num_rows else -1
                if cut is not None and (served >= cut[1] or start_offset <= cut[1] < unread):
                    # Records recovery removes would be served, or offsets it removes skipped: an earlier
                    # batch is the damage (a base offset changed in place, which no CRC covers), its
                    # records under wrong offsets.
                    removed_at, unread = cut
                    table = table.filter(pc.less(table.column("offset"), unread))
                    unread = max(unread, start_offset)
                    damage = CorruptRecordError(
                        f"batch at position {removed_at} holds offsets that contradict the batches around it "
                        "(a base offset damaged in place: the CRC does not cover it); recovery removes it",
                        path=segment.log.path,
                        position=removed_at,
                    )
            elif damage is not None:
                unread = max(covered, whole_entries(buf[:good])[1])
            if damage is not None:
                if table.num_rows:
                    out.append(table)
                return out, self._unreadable(segment, damage, unread), unread
            floor = after - 1
            if table.num_rows:
                out.append(table)
                read += table.num_rows
            covered = max(covered, after)
            if limit is not None and found + read >= limit:
                break
            position += whole
        return out, None, covered

    def _unreadable(self, segment: LogSegment, error: CorruptRecordError, offset: int) -> CorruptRecordError:
        """``error`` as the damage a read reports: the first offset it cannot read, file and position."""
        position = error.position
        where = "" if position is None else f" (position {position} of {error.path or segment.log.path})"
        return type(error)(
            f"cannot read offset {offset} of {self.directory.name}{where}: {error}",
            path=error.path or segment.log.path,
            position=position,
            offset=offset,
        )

    def unreadable_offsets(self, error: CorruptRecordError) -> UnreadableOffsets | None:
        """The offsets that the damage a read stopped at (``error``, from :meth:`read` or
        :meth:`read_records`) makes unreadable, and whether ``seglog recover``'s salvage names them
        lost: offsets in no segment file, or the range of the damaged segment between the intact
        batches around the damage (:func:`~indexer.salvage.plan_salvage`; ``end`` None: up to the log
        end). A batch written twice or out of place whose offsets recovery keeps elsewhere (another
        copy, in order) is still unreadable here (two CRC-valid batches claim them and reads serve
        neither): from ``error.offset`` up to the batches in order before it, not lost. None when its
        segment left the log, or no read can start after the damage: a reader cannot go on. For
        readers that accept data loss (the Spark source with ``failOnDataLoss=false``); it reads the
        damaged segment whole, so only on the error path.

        Raises:
            StorageError: the segment cannot be read.
        """
        offset = error.offset
        if offset is not None and isinstance(error, OffsetsInNoSegmentError):
            return UnreadableOffsets(LostRange(offset, error.end), lost=True)
        segment = None if offset is None else self._segments.floor_segment(offset)
        if segment is None or offset is None or error.path != str(segment.log.path):
            return None
        salvage = self._salvage_plan(segment)
        if salvage is None:
            return None
        scan, next_base, plan = salvage
        lost = next((r for r in plan.lost if r.first <= offset and (r.end is None or offset < r.end)), None)
        if lost is not None:
            return UnreadableOffsets(lost, lost=True)
        misplaced = first_misplaced_batch(scan, segment.base_offset, next_base)
        if not misplaced:  # none, or the first batch: no batch in order before it to read past
            return None
        resume = int(np.max(scan.last_offsets[:misplaced])) + 1
        return UnreadableOffsets(LostRange(offset, resume), lost=False) if offset < resume else None

    def _next_base_offset(self, segment: LogSegment) -> int | None:
        """The base offset of the segment after ``segment`` (whose offsets stop below it), or None
        for the last one or one that left the log."""
        try:
            following = self._segments.next_segment(segment)
        except LookupError:
            return None
        return None if following is None else following.base_offset

    def _salvage_plan(self, segment: LogSegment) -> tuple[BatchScan, int | None, SalvagePlan] | None:
        """``segment``'s scan, the next segment's base offset and what recovery's salvage would keep
        (:func:`~indexer.salvage.plan_salvage`), read whole: error paths only. None when the segment
        left the log.

        Raises:
            StorageError: the segment cannot be read.
        """
        try:
            following = self._segments.next_segment(segment)
        except LookupError:
            return None
        next_base = None if following is None else following.base_offset
        scan = segment.log.scan()  # pread, never a map: a reader holds no lock against a writer's cut
        return scan, next_base, plan_salvage(segment.log, segment.base_offset, next_base, scan)

    def _salvage_cut(self, segment: LogSegment, position: int) -> tuple[int, int] | None:
        """Where salvage first removes bytes of ``segment``, when that is before ``position`` (a batch
        whose offsets go backwards there): (that position, the first offset it removes, just after
        the batches it keeps before it), or None.

        Raises:
            StorageError: the segment cannot be read.
        """
        salvage = self._salvage_plan(segment)
        if salvage is None or not salvage[2].removed or salvage[2].removed[0][0] >= position:
            return None
        kept, removed_at = salvage[2].kept, salvage[2].removed[0][0]
        before = np.asarray(kept.last_offsets)[np.asarray(kept.positions) < removed_at]
        return removed_at, int(before.max()) + 1 if before.size else segment.base_offset

    def _repair_index(self, segment: LogSegment) -> None:
        """Rebuild the indexes of ``segment`` after a read found a damaged entry in them (O(1) when
        it did not). Only a writable log rebuilds; a read-only reader has warned."""
        if segment.index_damage is None or self.read_only:
            return
        reason, segment.index_damage = segment.index_damage, None
        try:
            self.rebuild_indexes(segment, reason)
        except CorruptRecordError as e:
            self._log.warning("%s", e)

    def rebuild_indexes(self, segment: LogSegment, reason: str) -> bool:
        """Rebuild ``segment``'s damaged indexes from its ``.log``, which must be valid throughout:
        data is never cut here (cutting a sealed segment would leave a gap of offsets before the
        next one; ``seglog recover`` decides that). Returns False when the segment is no longer
        the log's (deleted or truncated meanwhile). Thread-safe (log lock).

        Raises:
            CorruptRecordError: the ``.log`` has invalid data (names the file and position).
        """
        with self.lock:
            self._check_writable("rebuild indexes")
            if self._segments.get(segment.base_offset) is not segment:
                return False
            scan = segment.scan(verify_crc=True)
            if scan.error is not None or scan.valid_bytes != segment.size:
                raise CorruptRecordError(
                    f"segment {segment.log.path} has invalid data at position {scan.valid_bytes} ({reason}); "
                    f"run `seglog recover`",
                    path=segment.log.path,
                    position=scan.valid_bytes,
                )
            segment.recover(self._transaction_replay(), scan)
            if segment is self.active_segment:  # recovery trims the indexes; the active one keeps appending
                segment.offset_index.resize(self.config.segment_index_bytes)
                segment.time_index.resize(self.config.segment_index_bytes)
            segment.sync_indexes()  # reported repaired: durable, as no recovery would rebuild it again
            self._log.info("rebuilt the indexes of %s (%s)", segment.log.path, reason)
            return True

    def _transaction_replay(self) -> TransactionReplay:
        """The producer-state replay over this log's segments that a ``.txnindex`` rebuild needs."""
        return TransactionReplay(lambda: [(s.base_offset, s.log) for s in self._segments.values()])

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        """The earliest offset (from the log start offset, below the high watermark) whose record has
        a timestamp ``>= timestamp``, or None: :meth:`fetch_offset_by_timestamp`'s offset.

        Raises:
            InvalidArgumentError: ``timestamp`` is not an integer of Kafka's int64 range.
            ValueError: the log is closed (also when :meth:`close` overtakes the search).
        """
        found = self.fetch_offset_by_timestamp(timestamp)
        return None if found is None else found.offset

    def fetch_offset_by_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """The earliest record (from the log start offset, below the high watermark) whose timestamp is
        ``>= timestamp``, a transaction marker included, with its timestamp and its batch's leader
        epoch, or None (Kafka's ``UnifiedLog.fetchOffsetByTimestamp``, what ListOffsets by timestamp
        answers).

        Thread-safe: never an offset below the log start offset, even when retention moves it while
        the segments are searched (the search then starts again from the new one).

        Raises:
            InvalidArgumentError: ``timestamp`` is not an integer of Kafka's int64 range.
            ValueError: the log is closed (also when :meth:`close` overtakes the search).
        """
        timestamp = integer_argument("timestamp", timestamp)
        self._check_readable()
        while True:
            start = self._log_start_offset
            found = self._offset_for_timestamp_from(timestamp, start, self.high_watermark)
            if found is None or found.offset >= self._log_start_offset:
                return found

    def max_timestamp_and_offset(self) -> TimestampAndOffset | None:
        """The record with the largest timestamp, None in a log with none or when that record is not
        committed yet (Kafka's ListOffsets ``MAX_TIMESTAMP``: ``UnifiedLog.fetchOffsetByTimestamp`` since
        3.8, then ``Partition.fetchOffsetForTimestamp``'s high watermark filter). Thread-safe.

        A segment keeps its largest timestamp with the last offset of the batch that carried it (the
        time index's entry); the answer is the first record of that batch with the timestamp (the
        batch's base offset under ``LogAppendTime``). A batch that retention moved below the log start
        offset meanwhile cannot be read: its last offset is the answer then, as Kafka, which does not
        look at the log start offset here either, answers its record.
        """
        self._check_readable()
        best: TimestampAndOffset | None = None
        for segment in self._segments.values():
            timestamp, offset = segment.max_timestamp_so_far, segment.offset_of_max_timestamp_so_far
            if timestamp > (-1 if best is None else best.timestamp):
                best = TimestampAndOffset(timestamp, offset, None)
        if best is None or best.offset >= self.high_watermark:
            return None  # as Kafka's Partition.fetchOffsetForTimestamp: the largest is not committed yet
        try:
            fetched = self.read(best.offset, 1, min_one_message=True, as_slice=True).records  # its batch
            if not isinstance(fetched, FileSlice):
                return best
            batch = next(fetched.records.batches(fetched.position), None)
            if batch is None:
                return best
            records = self.read_records(max(batch.base_offset, self._log_start_offset), max_offset=best.offset + 1)
        except OffsetOutOfRangeError:
            return best
        timestamps = records.column("timestamp").to_numpy(zero_copy_only=False)
        found = np.flatnonzero(timestamps == best.timestamp)
        if not found.size:  # a control record's timestamp, or a legacy wrapper's: the batch's answer
            return best
        epoch = batch.partition_leader_epoch
        offset = int(records.column("offset")[int(found[0])].as_py())
        return TimestampAndOffset(best.timestamp, offset, epoch if epoch >= 0 else None)

    def _offset_for_timestamp_from(self, timestamp: int, start: int, hw: int) -> TimestampAndOffset | None:
        def search(segment: LogSegment) -> TimestampAndOffset | None:
            if segment.largest_timestamp < timestamp:
                return None
            return segment.find_offset_by_timestamp(timestamp, start)

        for segment in self._segments.values():
            if segment.base_offset >= hw:
                break
            # A segment deleted meanwhile gives None: its offsets are below the new log start offset.
            found = self._read_segment(segment, search)
            if found is not None:
                return found if found.offset < hw else None
        return None

    @property
    def last_stable_offset(self) -> int:
        """The end of what a ``read_committed`` consumer may read (Kafka's LSO); here the high watermark.

        Kafka's LSO is the first offset of the oldest transaction still open below the high watermark
        (from its producer state), else the high watermark. seglog writes no transactional batches, so
        a seglog-written log has no open transaction and its LSO is its high watermark. A broker-written
        log is served as it lies on disk: seglog keeps no producer state (snapshots are not read), so
        a transaction whose records lie below the high watermark but whose marker was never written
        (a broker stopped mid-transaction, before its coordinator aborted it) is not held back; every
        transaction that has its COMMIT or ABORT marker is handled exactly as Kafka does. Thread-safe.
        """
        return self.high_watermark

    def collect_aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping ``[start_offset, upper_bound_offset)``, in index order.

        Kafka's ``UnifiedLog/LocalLog.collectAbortedTransactions``: from the segment holding
        ``start_offset`` onward, each segment's ``.txnindex`` (which lists the transactions whose ABORT
        marker it holds) is searched until one answers complete (an entry's last stable offset reaches
        ``upper_bound_offset``: no later marker can concern the range). A ``read_committed`` fetch sends
        these (producer id, first offset) pairs so the consumer drops the aborted records. Thread-safe
        without the lock (segments stay readable after removal, spec 4.10).

        Raises:
            CorruptIndexError: a ``.txnindex`` record has an unknown version.
            OffsetOutOfRangeError: ``start_offset`` is below the first segment, or retention removed the
                segments being searched meanwhile.
        """
        aborted: list[AbortedTxn] = []
        segment = self._segments.floor_segment(start_offset)
        if segment is None:  # below the first segment: gone to retention
            self._check_read_offset(start_offset, self._next_offset_metadata)
        while segment is not None:
            found = segment.txn_index.collect_aborted_txns(start_offset, upper_bound_offset)
            aborted.extend(found.aborted_transactions)
            if found.is_complete:
                break
            try:
                segment = self._segments.next_segment(segment)
            except LookupError:
                # Removed meanwhile: the map's next segment may not be the one that followed it, and a
                # marker skipped would pass aborted records as committed. Retention moved the log start
                # offset first, so this raises OffsetOutOfRangeError; a truncation left nothing after it.
                self._check_read_offset(start_offset, self._next_offset_metadata)
                break
        return aborted

    # -- truncation ----------------------------------------------------------------------------

    def truncate_to(self, target_offset: int) -> bool:
        """Remove every offset ``>= target_offset`` (follower truncation, spec 5.7); True if anything changed.

        The batch holding ``target_offset`` is removed whole; the log end offset becomes
        ``target_offset``. Removed segments are deleted asynchronously. Thread-safe (log lock).

        Raises:
            InvalidArgumentError: ``target_offset`` is not an integer in 0..2**63 - 1.
        """
        target_offset = integer_argument("target_offset", target_offset, low=0)
        with self.lock:
            self._check_writable("truncate")
            if target_offset >= self.log_end_offset:
                return False
            first = self._segments.first_segment()
            if first is not None and first.base_offset > target_offset:
                self._truncate_fully_locked(target_offset)
                return True
            self._log.info("truncating to offset %d", target_offset)
            removed = self._segments.filter(lambda s: s.base_offset > target_offset)
            self._remove_and_delete_segments(removed, "log truncation")
            self._segments.active_segment().truncate_to(target_offset)
            self._update_log_end_offset(target_offset)
            self._log_start_offset = min(target_offset, self._log_start_offset)
            if self.high_watermark >= self.log_end_offset:
                self._high_watermark_metadata = self._next_offset_metadata
            else:
                self._high_watermark_metadata = self._offset_metadata(self.high_watermark)
            return True

    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        """Delete every segment and start an empty log at ``new_offset`` (log start = HW = LEO).

        Thread-safe (log lock).

        Raises:
            InvalidArgumentError: ``new_offset`` is not an integer in 0..2**63 - 1.
        """
        new_offset = integer_argument("new_offset", new_offset, low=0)
        with self.lock:
            self._check_writable("truncate")
            self._truncate_fully_locked(new_offset)

    def _truncate_fully_locked(self, new_offset: int) -> None:
        self._log.info("truncating fully and starting at offset %d", new_offset)
        old = self._segments.values()
        self._remove_and_delete_segments(old[:-1], "log truncation")
        self._create_and_delete_segment(new_offset, old[-1], "log truncation")
        self._update_log_end_offset(new_offset)
        self._log_start_offset = new_offset
        self._high_watermark_metadata = self._next_offset_metadata

    def _create_and_delete_segment(self, new_offset: int, old: LogSegment, reason: str) -> LogSegment:
        if new_offset == old.base_offset:
            old.change_file_suffixes("", DELETED_FILE_SUFFIX)
        segment = LogSegment.open(self.directory, new_offset, self.config, clock=self.clock)
        self._segments.add(segment)
        if new_offset != old.base_offset:
            self._segments.remove(old.base_offset)
        self._delete_segment_files([old], reason)
        return segment

    # -- retention -----------------------------------------------------------------------------

    def delete_old_segments(self) -> int:
        """:meth:`apply_retention`, returning how many segments were deleted. Thread-safe (log lock)."""
        return len(self.apply_retention())

    def apply_retention(self) -> tuple[RetentionDecision, ...]:
        """Delete the oldest segments that breach the log start offset, ``retention.bytes`` or
        ``retention.ms`` (decided by :func:`indexer.retention.plan_retention`, spec 5.6); returns
        each deleted segment with the limit it breached.

        Decided from segment metadata only (sizes, max timestamps from the time index, mtimes), never
        from log data; only segments wholly below the high watermark qualify, and never an empty
        active segment. Files are renamed ``.deleted`` now and removed ``file.delete.delay.ms`` later.
        Thread-safe (log lock).
        """
        with self.lock:
            self._check_writable("delete old segments")
            segments = self._segments.values()
            by_base = {s.base_offset: s for s in segments}
            plan = plan_retention(
                list(by_base),
                size_of=lambda base: by_base[base].size,
                largest_timestamp_of=lambda base: by_base[base].largest_timestamp,
                log_start_offset=self._log_start_offset,
                high_watermark=self.high_watermark,
                log_end_offset=self.log_end_offset,
                retention_bytes=self.config.retention_bytes,
                retention_ms=self.config.retention_ms,
                now_ms=self.clock.milliseconds(),
            )
            decisions = plan.decisions
            if not decisions:
                return ()
            if len(decisions) == len(segments):
                new_segment = self._roll_locked(None)
                if decisions[-1].base_offset == new_segment.base_offset:
                    decisions = decisions[:-1]
            deletable = [by_base[d.base_offset] for d in decisions]
            following = self._segments.higher_segment(deletable[-1].base_offset)
            if following is not None and following.base_offset > self._log_start_offset:
                self._log_start_offset = following.base_offset
                if self._recovery_point < self._log_start_offset:
                    self._recovery_point = self._log_start_offset
            for reason in RetentionReason:
                bases = [d.base_offset for d in decisions if d.reason is reason]
                if bases:
                    self._log.info("deleting %d segments (%s breach): %s", len(bases), reason, bases)
            self._remove_and_delete_segments(deletable, "retention")
            return decisions

    def _remove_and_delete_segments(self, segments: list[LogSegment], reason: str) -> None:
        # At once: a reader walking segment to segment never lands beyond one removed (LogSegments).
        self._segments.remove_all([s.base_offset for s in segments])
        self._delete_segment_files(segments, reason)

    def _delete_segment_files(self, segments: list[LogSegment], reason: str) -> None:
        """Rename to ``.deleted`` now; delete after ``file.delete.delay.ms`` (spec 4.10)."""
        for segment in segments:
            if not segment.has_suffix(DELETED_FILE_SUFFIX):
                segment.change_file_suffixes("", DELETED_FILE_SUFFIX)
        delay = self.config.file_delete_delay_ms
        due = self.clock.milliseconds() + delay
        self._log.info("scheduling %d segments for deletion in %d ms (%s)", len(segments), delay, reason)
        self._pending_deletes.extend((due, s) for s in segments)
        scheduled = {id(s) for s in segments}
        self.clock.schedule(delay, lambda: self._delete_pending(lambda _due, s: id(s) in scheduled), name="delete-file")

    def delete_pending_files(self, now_ms: int | None = None) -> int:
        """Physically delete the ``.deleted`` segments whose delay has passed by the wall clock at
        ``now_ms`` (default: now); returns how many. For callers that decide by the time (maintenance,
        tests): the clock's task of each deletion removes its segments once ``file.delete.delay.ms``
        has passed on its timer, even if the wall clock was set back meanwhile. Every due segment is
        attempted even if one fails. Thread-safe.

        Raises:
            StorageError: a file could not be deleted (the first such error, after trying them all).
            InvalidArgumentError: ``now_ms`` is not an integer in 0..2**63 - 1.
        """
        now = self.clock.milliseconds() if now_ms is None else integer_argument("now_ms", now_ms, low=0)
        return self._delete_pending(lambda due, _segment: due <= now)

    def _delete_pending(self, chosen: Callable[[int, LogSegment], bool]) -> int:
        """Delete the files of the pending segments ``chosen(due_ms, segment)`` picks; returns how many.

        Raises:
            StorageError: the first file that could not be deleted, after trying them all.
        """
        with self.lock:
            due = [s for t, s in self._pending_deletes if chosen(t, s)]
            self._pending_deletes = [(t, s) for t, s in self._pending_deletes if not chosen(t, s)]
        errors: list[StorageError] = []
        for segment in due:
            try:
                segment.delete_if_exists()
            except StorageError as e:
                self._log.error("failed to delete the files of segment %d: %s", segment.base_offset, e)
                errors.append(e)
        if due:
            self._log.info("deleted segment files %s", [s.base_offset for s in due])
        if errors:
            raise errors[0]
        return len(due)

    @property
    def next_pending_deletion_ms(self) -> int | None:
        """When the next ``.deleted`` segment is due for physical deletion, or None."""
        pending = self._pending_deletes
        return min((t for t, _ in pending), default=None)

    # -- flush and close -----------------------------------------------------------------------

    def flush(self, offset: int | None = None) -> None:
        """fsync every segment holding offsets below ``offset`` (default: all, including an empty active
        segment) and move the recovery point to it. Thread-safe (log lock).

        Raises:
            StorageError: an fsync failed, or the partition directory has gone away (``errno``
                ``ENOENT``); the recovery point then stays where it was.
            InvalidArgumentError: ``offset`` is not an integer of Kafka's int64 range.
        """
        if offset is not None:
            offset = integer_argument("offset", offset)
        with self.lock:
            self._check_writable("flush")
            if offset is None:
                self._flush_locked(self.log_end_offset, including=True)
            else:
                self._flush_locked(min(offset, self.log_end_offset), including=False)

    def _flush_locked(self, offset: int, *, including: bool) -> None:
        flush_offset = offset + 1 if including else offset
        old_recovery_point = self._recovery_point
        if flush_offset <= old_recovery_point:
            return
        segments = self._segments.values(old_recovery_point, flush_offset)
        for segment in segments:
            segment.flush()
        # A partition directory that has gone away fails the flush (Kafka's skips it): the fsync'ed
        # files are no longer reachable, so the recovery point must not move (docs/design.md).
        if any(s.base_offset >= old_recovery_point for s in segments):
            self._fsync_directory()
        else:
            with storage_errors(self.directory, "flush the partition directory"):
                os.stat(self.directory)
        if offset > self._recovery_point:
            self._recovery_point = offset
            self._last_flush_ms = self.clock.milliseconds()

    def _fsync_directory(self) -> None:
        with storage_errors(self.directory, "fsync the partition directory"):
            fsync_directory(self.directory)

    def close(self) -> None:
        """Flush everything, seal the active segment's files (final time index entry, trim) and release
        the partition lock. Idempotent. A read-only log just releases its handles. Thread-safe.
        """
        with self.lock:
            if self._closed:
                return
            try:
                if self.read_only:
                    self._segments.close_handlers()
                else:
                    self._flush_locked(self.log_end_offset, including=True)
                    self._segments.close()
            except BaseException:
                # Release what is left open; the files stay as a crash would leave them.
                self._segments.close_handlers()
                raise
            finally:
                self._closed = True
                self._release_pending_deletes()
                if self._file_lock is not None:
                    self._file_lock.release()
        self._log.info("closed at log end offset %d", self.log_end_offset)

    def abandon(self) -> None:
        """Let go of the files and the partition lock without flushing, trimming or sealing anything, as
        a crash would: for a writer that learnt another writer took the partition over, whose files its
        own idea of their sizes must no longer touch. Like a dead writer's, its line stays in the lock
        file, so the next writer does not take the partition for cleanly closed. Idempotent. Thread-safe.
        """
        with self.lock:
            if self._closed:
                return
            self._closed = True
            try:
                self._segments.close_handlers()
                self._release_pending_deletes()
            finally:
                if self._file_lock is not None:
                    self._file_lock.release(clear_holder=False)
        self._log.warning("abandoned at log end offset %d, files left as a crash leaves them", self.log_end_offset)

    def _release_pending_deletes(self) -> None:
        """Let go of the descriptors of the segments awaiting deletion: the delay is for readers in the
        middle of them, and a closed log has none. The deletion task still removes their files when due
        (the next open or maintenance pass does if this process ends first). Caller holds the log lock."""
        for _, segment in self._pending_deletes:
            segment.close_handlers()

    def __enter__(self) -> Log:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"Log({str(self.directory)!r}, log_start_offset={self._log_start_offset}, "
            f"log_end_offset={self.log_end_offset}, high_watermark={self.high_watermark}, "
            f"segments={self.num_segments}{', read_only' if self.read_only else ''})"
        )
