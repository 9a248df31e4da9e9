"""Loading and recovery of one partition directory (Kafka's ``LogLoader``, spec 6.2 and 6.3).

:meth:`LogLoader.load` runs Kafka's steps in Kafka's order:

1. temp files: ``.deleted`` files are deleted; ``.cleaned`` files are deleted, and so is every
   ``.swap`` file at or above the lowest ``.cleaned`` offset (an unfinished split, KAFKA-6264); new
   index files never renamed into place (``<base>.index.tmp``, a process killed while it replaced an
   index: :meth:`AbstractIndex._replace_file`) are deleted;
2. the remaining ``.swap`` segments are measured (lowest base offset, highest next offset);
3. segment files whose offset lies in that range are deleted (the swap replaces them);
4. ``.swap`` files are renamed to their final names;
5. segments are loaded in offset order: orphaned index files are deleted; a segment without an
   offset index is recovered; a missing time index is created empty; the transaction index is
   checked;
6. unless the shutdown was clean, every segment from the one holding the recovery point on is
   recovered (CRC-checked, indexes rebuilt). A damaged segment is salvaged (``recovery.strategy=
   salvage``, :mod:`indexer.salvage`): its intact batches are kept, before and after the damage,
   rewritten through ``.cleaned``/``.swap`` when bytes in the middle go; or, with ``truncate``
   (Kafka), it is cut after its last valid batch, and the first segment that loses bytes ends the
   recovery and every later segment is deleted. Every removed byte is quarantined first
   (:mod:`indexer.quarantine`). A log whose end lies below the checkpointed log start offset is
   emptied; an empty directory gets an empty segment at the log start offset;
7. the leader-epoch checkpoint is truncated to the recovered range, stray producer snapshots are
   deleted, the active segment's indexes get their full preallocated size back.

A segment whose batch offsets do not fit its base offset (``LogSegmentOffsetOverflowError``, pre-0.11
data) is split into ``.cleaned`` segments, swapped in through ``.swap``, and the step retried.

Decisions and actions are separate, as in diskcache's ``Cache.check(fix=False)``: one code path
walks the steps over a model of the directory (its file names), decides from read-only inspection
(names, sizes, index bytes; for a segment to recover, a CRC-checked scan of its ``.log``), records
each decision as a :class:`RecoveryStep`, and acts only when fixing. :meth:`LogLoader.check` is the
dry run (the ``--dry-run`` of the recovery command) and changes nothing; :meth:`LogLoader.load`
acts and returns the loaded segments with the :class:`RecoveryReport` of what it did. Each segment
to recover is read once: the CRC-checked scan that decides is the one ``LogSegment.recover``
rebuilds the indexes from, and the log end offset of a recovered segment comes from it too; while
one segment is checked the kernel already reads the next one (``POSIX_FADV_WILLNEED``). Both
make the same decisions (tested on fuzzed directories), except that a dry run assumes the
not-yet-written output of a split to be valid.

Beyond Kafka (listed in docs/design.md): an existing offset or time index that fails the engine's
index validation (:mod:`indexer.index_check` levels 1 and 2: Kafka's sanity check, a size that is
a whole number of entries, entries that increase and do not point past the end of the ``.log``) is
rebuilt (Kafka only rebuilds missing offset indexes since KAFKA-7283); damage is salvaged and
removed bytes quarantined (above); with ``truncate``, a segment whose valid batches' last offsets
do not strictly increase loses its data as a whole (Kafka does so only when such a batch lands in
the index); a segment recovered during loading is not recovered again in step 6, and
(``truncate``) bytes it lost count as corruption there. Not done (seglog keeps
no producer state or leader-epoch cache): producer snapshots are never written, and epochs are not
re-assigned from the recovered batches; existing snapshots and epoch checkpoints are trimmed as
Kafka trims them.

Thread-safety: a loader is used once, by one thread, before the log exists; the caller holds the
partition's writer lock. Crash safety: every step is idempotent, so a crash during loading is
repaired by loading again.
"""

from __future__ import annotations

import bisect
import enum
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np

from indexer import file_names
from indexer.checkpoint import EpochEntry, LeaderEpochCheckpointFile, fsync_directory
from indexer.clock import Clock, SystemClock
from indexer.config import LogConfig
from indexer.data_loss import log_start_above, offsets_in_no_segment
from indexer.errors import (
    CorruptIndexError,
    InvalidOffsetError,
    StorageError,
    storage_errors,
)
from indexer.index_check import IndexProblem, offset_index_problem, time_index_problem, transaction_index_problem
from indexer.limits import INT32_MAX, INT64_MAX
from indexer.lock import holder_fields
from indexer.quarantine import quarantine_range, quarantine_whole_file
from indexer.records.file_records import BatchScan, FileRecords
from indexer.salvage import (
    LostRange,
    SalvagePlan,
    first_misplaced_batch,
    merge_lost_ranges,
    plan_salvage,
    write_ranges,
)
from indexer.segment import LogSegment
from indexer.segments import LogSegments
from indexer.transaction_replay import TransactionReplay

logger = logging.getLogger(__name__)
_T = TypeVar("_T")

DELETE_DIR_SUFFIX = "-delete"


class StepKind(enum.StrEnum):
    """What the loader did (or, in a dry run, would do) to a file or segment."""

    DELETE_STRAY_DELETED = "delete-stray-deleted-file"
    DELETE_CLEANED = "delete-cleaned-file"
    DELETE_INDEX_TEMP = "delete-unfinished-index-file"
    DELETE_INVALID_SWAP = "delete-incomplete-split-swap-file"
    QUARANTINE_DAMAGED_SWAP = "quarantine-damaged-swap-file"
    DELETE_SWAPPED_OUT = "delete-file-replaced-by-swap"
    COMPLETE_SWAP = "rename-swap-file"
    DELETE_ORPHANED_INDEX = "delete-orphaned-index"
    DELETE_EMPTY_SEGMENT_INSIDE = "delete-empty-segment-inside-another"
    CREATE_EMPTY_TIME_INDEX = "create-empty-time-index"
    RECOVER_SEGMENT = "recover-segment"
    SALVAGE_SEGMENT = "salvage-segment"
    DROP_SEGMENT_DATA = "drop-segment-data"
    DELETE_AFTER_CORRUPTION = "delete-segment-after-corruption"
    DELETE_BELOW_LOG_START = "delete-segment-below-log-start"
    OFFSETS_IN_NO_SEGMENT = "offsets-in-no-segment"
    CREATE_EMPTY_SEGMENT = "create-empty-segment"
    SPLIT_OVERFLOWED_SEGMENT = "split-overflowed-segment"
    DELETE_STRAY_SNAPSHOT = "delete-stray-producer-snapshot"
    TRUNCATE_LEADER_EPOCHS = "truncate-leader-epoch-checkpoint"


@dataclass(frozen=True, slots=True)
class RecoveryStep:
    """One decision of the loader about one file or segment.

    ``bytes_truncated``/``batches_dropped`` count what a recovery removed from the ``.log``
    (truncation: batches still framed after the first invalid byte, a torn trailing batch counting
    in bytes only; salvage: every byte not in a kept batch, and the CRC-valid batches not kept because
    their offsets do not fit); ``segment_bytes`` is the size of a segment deleted as a whole.
    ``indexes_rebuilt`` is true for a recovery, which rewrites both indexes. ``lost_offsets`` are the
    offset ranges the removed bytes held; ``quarantined`` the files keeping those bytes.
    """

    kind: StepKind
    path: str
    detail: str
    base_offset: int | None = None
    bytes_truncated: int = 0
    batches_dropped: int = 0
    segment_bytes: int = 0
    indexes_rebuilt: bool = False
    lost_offsets: tuple[LostRange, ...] = ()
    quarantined: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["kind"] = self.kind.value
        out["lost_offsets"] = [r.to_dict() for r in self.lost_offsets]
        out["quarantined"] = list(self.quarantined)
        return out


@dataclass(slots=True)
class RecoveryReport:
    """What loading a partition directory did (``dry_run=False``) or would do (``dry_run=True``).

    The offsets are the loaded log's: ``next_offset`` is the log end offset after recovery, so data
    at or above a high watermark greater than it was lost.
    """

    directory: str
    dry_run: bool
    had_clean_shutdown: bool
    recovery_point_checkpoint: int
    log_start_offset_checkpoint: int
    steps: list[RecoveryStep] = field(default_factory=list)
    log_start_offset: int = 0
    recovery_point: int = 0
    next_offset: int = 0

    def of_kind(self, *kinds: StepKind) -> list[RecoveryStep]:
        return [s for s in self.steps if s.kind in kinds]

    @property
    def segments_recovered(self) -> int:
        return len(self.of_kind(StepKind.RECOVER_SEGMENT, StepKind.SALVAGE_SEGMENT))

    @property
    def bytes_truncated(self) -> int:
        return sum(s.bytes_truncated for s in self.steps)

    @property
    def batches_dropped(self) -> int:
        return sum(s.batches_dropped for s in self.steps)

    @property
    def segments_deleted(self) -> list[RecoveryStep]:
        """Whole segments removed because of corruption before them or the log start offset."""
        return self.of_kind(StepKind.DELETE_AFTER_CORRUPTION, StepKind.DELETE_BELOW_LOG_START)

    @property
    def data_lost(self) -> bool:
        """Whether any record bytes were (or would be) cut or deleted."""
        return bool(self.bytes_truncated or self.segments_deleted or self.of_kind(StepKind.DROP_SEGMENT_DATA))

    @property
    def lost_offsets(self) -> list[LostRange]:
        """Every offset range recovery removed, merged, ascending. A range ending in None runs to the
        old log end, which the files no longer say (the caller bounds it by what was committed)."""
        return merge_lost_ranges([r for s in self.steps for r in s.lost_offsets])

    @property
    def quarantined(self) -> list[str]:
        """The quarantine files holding every byte recovery removed."""
        return [name for s in self.steps for name in s.quarantined]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view, for the recovery command."""
        out = {name: value for name, value in asdict(self).items() if name != "steps"}
        for name in ("segments_recovered", "bytes_truncated", "batches_dropped", "data_lost", "quarantined"):
            out[name] = getattr(self, name)
        out["lost_offsets"] = [r.to_dict() for r in self.lost_offsets]
        out["steps"] = [s.to_dict() for s in self.steps]
        return out


@dataclass(frozen=True, slots=True)
class LoadedLog:
    """The result of :meth:`LogLoader.load` (Kafka's ``LoadedLogOffsets`` plus the segments).

    ``deleted_segments`` are the segments recovery removed, renamed ``.deleted``: the log that takes
    them over deletes them ``file.delete.delay.ms`` later (:meth:`indexer.log.Log.from_loaded`) and
    lets go of their files when it closes.
    """

    segments: LogSegments
    log_start_offset: int
    recovery_point: int
    next_offset: int
    report: RecoveryReport
    deleted_segments: tuple[LogSegment, ...] = ()

    def close(self) -> None:
        """Close every segment, the deleted ones too: for a caller that does not open a log on them."""
        self.segments.close()
        for segment in self.deleted_segments:
            segment.close_handlers()


class _Segment(Protocol):
    """What the loader's control flow needs from a segment, real or planned."""

    @property
    def base_offset(self) -> int: ...

    @property
    def size(self) -> int: ...

    def read_next_offset(self) -> int: ...


@dataclass(slots=True)
class _PlannedSegment:
    """A dry run's stand-in for a segment: its ``.log`` size and what recovery would leave of it.

    ``next_offset`` is computed on first use (a header walk of the file, as ``readNextOffset``).
    ``virtual`` segments are the planned output of a split: their files do not exist.
    """

    base_offset: int
    path: Path
    size: int
    next_offset: int | None = None
    virtual: bool = False

    def read_next_offset(self) -> int:
        if self.next_offset is None:
            with FileRecords.open(self.path, mutable=False) as records:  # a dry run's: no lock, no map
                last_offsets = records.scan(0, verify_crc=False).last_offsets
            self.next_offset = int(last_offsets[-1]) + 1 if len(last_offsets) else self.base_offset
        return self.next_offset


@dataclass(frozen=True, slots=True)
class _Inspection:
    """What a CRC-checked read-only scan says recovery of one ``.log`` would do."""

    scan: BatchScan
    size: int
    overflow_offset: int | None  # first valid batch whose offsets do not fit the segment (to split it)
    offsets_out_of_order: bool  # valid batches whose last offsets do not strictly increase
    misfit: bool  # valid batches whose offsets do not belong to the segment (salvage: damaged)
    batches_dropped: int  # framed entries after the last valid batch

    @property
    def valid_next_offset(self) -> int | None:
        return int(self.scan.last_offsets[-1]) + 1 if len(self.scan) else None

    @property
    def framed_batches(self) -> int:
        """Every framed entry of the file: the valid batches and those after the first invalid byte."""
        return len(self.scan) + self.batches_dropped

    @property
    def damaged(self) -> bool:
        """Whether recovery removes anything: the scan stopped early or the offsets go backwards."""
        return self.scan.valid_bytes < self.size or self.offsets_out_of_order or self.misfit

    @property
    def cause(self) -> str:
        """Why recovery cuts the file (when it does)."""
        if self.scan.error is not None:
            return str(self.scan.error)
        if self.scan.valid_bytes < self.size:
            return "a torn batch at the end"
        return "batches whose offsets collide or do not fit the segment (a damaged base offset)"


class _SplitNeeded(Exception):
    """Internal: a segment overflows; the caller splits it and retries the step."""

    def __init__(self, segment: _Segment, offset: int) -> None:
        super().__init__(f"segment {segment.base_offset} overflows at offset {offset}")
        self.segment = segment
        self.offset = offset


def _truncate_epochs(entries: list[EpochEntry], end_offset: int, start_offset: int) -> list[EpochEntry]:
    """Kafka's ``truncateFromEnd(end)`` then ``truncateFromStart(start)`` on a leader-epoch list."""
    out = list(entries)
    if end_offset >= 0 and out and out[-1].start_offset >= end_offset:
        while out and out[-1].start_offset >= end_offset:
            out.pop()
    removed: list[EpochEntry] = []
    while out and out[0].start_offset <= start_offset:
        removed.append(out.pop(0))
    if removed:
        out.insert(0, EpochEntry(removed[-1].epoch, start_offset))
    return out


UNCLEAN_SHUTDOWN = "unflushed after an unclean shutdown"
"""Why segments from the recovery point on are recovered, unless the caller knows better (the default
``recovery_reason``: Kafka recovers them only after an unclean shutdown)."""


def died_holding_reason(holder: str) -> str:
    """The ``recovery_reason`` of a partition whose free lock file names ``holder``, a process that died
    holding it (or nobody: ""): a writer's records may be unflushed (:data:`UNCLEAN_SHUTDOWN`, also when
    no holder is named); a maintenance or recovery process (its ``role``, :mod:`indexer.lock`) appends
    nothing, so what the open checks is its interrupted work (a roll, a deletion, an index rebuild)."""
    fields = holder_fields(holder)
    if "role" not in fields:
        return UNCLEAN_SHUTDOWN
    return f"a {fields['role']} process (pid {fields.get('pid', 'unknown')}) died holding it"


class LogLoader:
    """Loads (and recovers) the partition directory ``directory``; use once.

    ``recovery_point`` and ``log_start_offset`` are the checkpointed values (0 when unknown);
    ``had_clean_shutdown`` comes from the log directory's clean-shutdown marker; without one, every
    segment from the recovery point on is recovered, for ``recovery_reason`` (what the steps and logs
    say: a caller that recovers whatever the shutdown was says so). Segments removed during
    recovery are renamed ``.deleted`` and handed over in :attr:`LoadedLog.deleted_segments`, for the
    log to delete ``file.delete.delay.ms`` later. A log that ends below ``log_start_offset`` loses every
    segment (quarantined, named as lost offsets) only with ``remove_below_log_start`` (``seglog
    recover``); otherwise loading raises and removes nothing: no writer leaves such a log, so the
    checkpoint is damaged or segment files are missing, and a writer's open must not delete committed
    records on its word alone. Not thread-safe; the caller holds the partition's writer lock.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        config: LogConfig,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        had_clean_shutdown: bool = False,
        clock: Clock | None = None,
        recovery_reason: str = UNCLEAN_SHUTDOWN,
        remove_below_log_start: bool = False,
    ) -> None:
        self.directory = Path(directory)
        self.remove_below_log_start = remove_below_log_start
        self.config = config
        self.recovery_point_checkpoint = recovery_point
        self.log_start_offset_checkpoint = log_start_offset
        self.had_clean_shutdown = had_clean_shutdown
        self.recovery_reason = recovery_reason
        self.clock: Clock = clock if clock is not None else SystemClock()
        self._salvage = config.recovery_strategy == "salvage"
        self._prefix = f"[LogLoader partition={self.directory.name}, dir={self.directory.parent}] "
        self._fix = True
        self._quiet = False  # check(quiet=True): the steps and the summary are not logged
        self._report = self._new_report(dry_run=False)
        self._names: set[str] = set()
        self._segments: dict[int, _Segment] = {}
        self._recovered: dict[int, int] = {}  # base offset -> bytes truncated while loading
        self._transactions = TransactionReplay(self._loaded_logs)  # rebuilds the .txnindex of recovered segments
        self._next_offsets: dict[int, int] = {}  # base offset -> next offset of a segment recovered here
        self._virtual: dict[int, _PlannedSegment] = {}  # dry run: planned output of splits
        self._bases: list[int] = []  # base offsets of the segments, for each segment's successor
        self._renamed: dict[str, str] = {}  # dry run: final name -> swap file holding it
        self._deleted_logs: dict[int, str] = {}  # base offset -> stray <base>.log.deleted, decided after recovery
        self._deleted: list[LogSegment] = []  # segments recovery renamed .deleted, for LoadedLog.deleted_segments

    # -- entry points ---------------------------------------------------------------------------

    def load(self) -> LoadedLog:
        """Recover the directory and open its segments (spec 6.2).

        Raises:
            StorageError: an I/O error; the directory is left in a state a later load completes. The
                log ends below ``log_start_offset`` without ``remove_below_log_start``.
        """
        try:
            report = self._run(fix=True)
        except BaseException:
            for segment in [*self._segments.values(), *self._deleted]:  # nothing is returned: release them
                if isinstance(segment, LogSegment):
                    segment.close_handlers()
            raise
        segments = LogSegments(self.directory.name)
        for base in sorted(self._segments):
            segment = self._segments[base]
            assert isinstance(segment, LogSegment)
            segments.add(segment)
        return LoadedLog(
            segments, report.log_start_offset, report.recovery_point, report.next_offset, report, tuple(self._deleted)
        )

    def may_end_below_log_start(self) -> bool:
        """Whether :meth:`load` may find the log ending below its checkpointed start (and then, with
        ``remove_below_log_start``, remove every segment), told from the file names alone, so that a
        caller that must refuse that removal runs :meth:`check` only then: with salvage, a ``.log``
        based at or above the start keeps the log end there (a segment's file is emptied, never
        deleted); the truncate strategy may delete segments after corruption.

        Raises:
            StorageError: the partition directory cannot be listed.
        """
        if not self._salvage:
            return True
        start = self.log_start_offset_checkpoint
        with storage_errors(self.directory, "list partition directory"):
            names = [entry.name for entry in os.scandir(self.directory)]
        return not any(base >= start for base in _log_bases(names))

    def check(self, *, quiet: bool = False) -> RecoveryReport:
        """Make every decision :meth:`load` would make, changing nothing (a dry run).

        ``quiet``: log nothing, for a real run that only asks what loading would do before it goes
        on or refuses (and says so itself): the steps are not its user's dry run.

        Raises:
            StorageError: a file cannot be read.
        """
        self._quiet = quiet
        try:
            return self._run(fix=False)
        finally:
            self._quiet = False

    # -- the steps ------------------------------------------------------------------------------

    def _new_report(self, *, dry_run: bool) -> RecoveryReport:
        return RecoveryReport(
            directory=str(self.directory),
            dry_run=dry_run,
            had_clean_shutdown=self.had_clean_shutdown,
            recovery_point_checkpoint=self.recovery_point_checkpoint,
            log_start_offset_checkpoint=self.log_start_offset_checkpoint,
        )

    def check_leftovers(self) -> list[RecoveryStep]:
        """What loading would do with the files an interrupted operation left (steps 1 to 4: ``.deleted``,
        ``.cleaned`` and ``.swap`` files, unfinished index files, and the segment files a swap
        replaces) and with a stray empty segment inside another, changing nothing and logging
        nothing: for ``seglog describe``, which must not read the directory as settled while loading
        would change it. A stray ``<base>.log.deleted`` is deleted, unless a recovery finds its
        offsets in no segment file (it then quarantines it).

        Raises:
            StorageError: a file cannot be read.
        """
        self._quiet = True
        try:
            self._begin(fix=False)
            self._complete_swaps(self._remove_temp_files_and_collect_swap_files())
            self._delete_empty_segments_inside_others()
            for name in self._deleted_logs.values():
                why = (
                    "stray temporary file; quarantined instead by a recovery that finds its offsets in no segment file"
                )
                self._record(StepKind.DELETE_STRAY_DELETED, self._path(name), why, _offset_or_none(name))
            return list(self._report.steps)
        finally:
            self._quiet = False

    def _begin(self, *, fix: bool) -> None:
        """Start a run: an empty report and model, the directory's file names listed."""
        self._fix = fix
        self._report = self._new_report(dry_run=not fix)
        self._segments = {}
        self._recovered = {}
        self._transactions = TransactionReplay(self._loaded_logs)
        self._next_offsets = {}
        self._virtual = {}
        self._renamed = {}
        self._deleted_logs = {}
        self._bases = []
        with storage_errors(self.directory, "list the partition directory"):
            self._names = {e.name for e in os.scandir(self.directory) if e.is_file(follow_symlinks=False)}

    def _run(self, *, fix: bool) -> RecoveryReport:
        self._begin(fix=fix)
        swap_files = self._remove_temp_files_and_collect_swap_files()
        self._complete_swaps(swap_files)
        self._retry_on_overflow(self._load_segment_files)
        if self.directory.name.endswith(DELETE_DIR_SUFFIX):
            if not self._segments:
                self._create_empty_segment(0)
            recovery_point, next_offset = 0, 0
        else:
            recovery_point, next_offset = self._retry_on_overflow(self._recover_log)
            if fix:
                active = self._segments[max(self._segments)]
                assert isinstance(active, LogSegment)
                active.offset_index.resize(self.config.segment_index_bytes)
                active.time_index.resize(self.config.segment_index_bytes)
        for name in self._deleted_logs.values():
            self._names.add(name)
            self._delete_file(name, StepKind.DELETE_STRAY_DELETED, "stray temporary file")
        first_base = min(self._segments)
        report = self._report
        report.log_start_offset = max(self.log_start_offset_checkpoint, first_base)
        report.recovery_point = recovery_point
        report.next_offset = next_offset
        self._truncate_leader_epochs(next_offset)
        self._remove_stray_snapshots(next_offset)
        if fix and report.steps:
            self._fsync_directory()
        if self._quiet:
            return report
        logger.info(
            "%s%d segments, log start %d, recovery point %d, next offset %d, %d recovery steps%s",
            *(self._prefix, len(self._segments), report.log_start_offset, recovery_point, next_offset),
            *(len(report.steps), "" if fix else " (dry run: nothing changed)"),
        )
        return report

    def _record(
        self, kind: StepKind, path: str | Path, detail: str, base_offset: int | None = None, **counts: Any
    ) -> None:
        step = RecoveryStep(kind, str(path), detail, base_offset, **counts)
        self._report.steps.append(step)
        if self._quiet:
            return
        log = logger.warning if step.kind in _LOSSY_KINDS or step.quarantined else logger.info
        log("%s%s%s: %s", self._prefix, "" if self._fix else "[dry run] ", step.kind.value, step.detail)

    def _open_segment(self, base_offset: int, **kwargs: Any) -> LogSegment:
        return LogSegment.open(self.directory, base_offset, self.config, clock=self.clock, **kwargs)

    def _path(self, name: str) -> Path:
        return self.directory / name

    def _source(self, name: str) -> Path:
        """Where the file now called ``name`` is to be read (a dry run renames swap files only on paper)."""
        return self.directory / self._renamed.get(name, name)

    def _delete_file(self, name: str, kind: StepKind, detail: str) -> None:
        self._record(kind, self._path(name), detail, _offset_or_none(name))
        self._names.discard(name)
        if self._fix:
            with storage_errors(self._path(name), "delete"):
                self._path(name).unlink(missing_ok=True)

    def _remove_temp_files_and_collect_swap_files(self) -> list[str]:
        """Step 1: delete ``.deleted`` and ``.cleaned`` files, swap files of unfinished splits and new
        index files never renamed into place."""
        swap_files: list[str] = []
        cleaned_files: list[str] = []
        min_cleaned_offset = INT64_MAX
        for name in sorted(self._names):
            path = self._path(name)
            if not os.access(path, os.R_OK):
                if name.endswith(file_names.DELETED_FILE_SUFFIX) and not os.path.lexists(path):
                    # Removed since the listing by the delayed deletion of whoever renamed it (that
                    # process's earlier hold of the partition, closed since; another daemon): gone, as
                    # this step would have made it.
                    self._names.discard(name)
                    continue
                raise StorageError(f"Could not read file {path}", path=path)
            if name.endswith(file_names.LOG_FILE_SUFFIX + file_names.DELETED_FILE_SUFFIX) and (
                (offset := _offset_or_none(name)) is not None
            ):
                self._deleted_logs[offset] = name  # deleted once recovery knows it holds no lost offsets
                self._names.discard(name)
            elif file_names.is_stray_deleted_file(name):
                self._delete_file(name, StepKind.DELETE_STRAY_DELETED, "stray temporary file")
            elif file_names.is_index_temp_file(name):
                why = "new index file of an interrupted rebuild, never renamed over the index: not an index"
                self._delete_file(name, StepKind.DELETE_INDEX_TEMP, why)
            elif name.endswith(file_names.CLEANED_FILE_SUFFIX):
                offset = _offset_or_none(name)
                if offset is not None:
                    min_cleaned_offset = min(min_cleaned_offset, offset)
                cleaned_files.append(name)
            elif name.endswith(file_names.SWAP_FILE_SUFFIX):
                swap_files.append(name)
        valid_swaps = []
        for name in swap_files:
            offset = _offset_or_none(name)
            if offset is not None and offset >= min_cleaned_offset:
                why = f"swap file of an unfinished split (cleaned files from {min_cleaned_offset}, KAFKA-6264)"
                self._delete_file(name, StepKind.DELETE_INVALID_SWAP, why)
            else:
                valid_swaps.append(name)
        for name in cleaned_files:
            self._delete_file(name, StepKind.DELETE_CLEANED, "stray .cleaned file")
        return valid_swaps

    def _complete_swaps(self, swap_files: list[str]) -> None:
        """Steps 2-4: delete what the valid swap segments replace, then rename them into place.

        Unlike Kafka, a ``.log`` swap file that is not whole CRC-valid batches (no writer renames one
        into a swap: it is damaged) never replaces the segment files beside it: every swap file is
        then set aside (the ``.log`` ones quarantined whole, the index ones deleted) and the segments
        recovered as they are, which redoes the interrupted salvage or split. Only when no segment
        file is there to replace is such a swap renamed into place (the only copy: recovery salvages it).
        Nor does a swap that lacks a CRC-valid batch of a segment file it replaces (or is renamed over):
        completing it would destroy records no other file holds (:meth:`_batches_not_swapped_in`).
        """
        min_swap_offset, max_swap_offset = INT64_MAX, -INT64_MAX - 1
        damaged = False
        swapped_in: set[tuple[int, int]] = set()  # (first, last offset) of the swap files' batches
        targets = set()
        for name in swap_files:
            unswapped = name[: -len(file_names.SWAP_FILE_SUFFIX)]
            offset = _offset_or_none(name)
            if offset is None or not unswapped.endswith(file_names.LOG_FILE_SUFFIX):
                continue
            inspection = self._inspect(self._path(name), offset)
            damaged = damaged or inspection.scan.valid_bytes < inspection.size
            swapped_in.update(_batch_ranges(inspection.scan))
            targets.add(unswapped)
            next_offset = inspection.valid_next_offset
            min_swap_offset = min(min_swap_offset, offset)
            max_swap_offset = max(max_swap_offset, offset if next_offset is None else next_offset)
            if not self._quiet:
                logger.info("%sfound %s from an interrupted swap, recoverable by renaming", self._prefix, name)
        replaced = [
            name
            for name in sorted(self._names)
            if name.endswith(file_names.LOG_FILE_SUFFIX)
            and (offset := _offset_or_none(name)) is not None
            and (min_swap_offset <= offset < max_swap_offset or name in targets)  # renamed over: replaced too
        ]
        if damaged and replaced:
            self._set_swaps_aside(
                swap_files,
                f"a swap file is not whole CRC-valid batches (damaged): {', '.join(replaced)} kept, not replaced",
            )
            return
        if lost := self._batches_not_swapped_in(replaced, swapped_in):
            self._set_swaps_aside(
                swap_files,
                f"the swap files do not hold every valid batch of {', '.join(replaced)} (offsets {lost} would be "
                "lost): kept, not replaced",
            )
            return
        for name in sorted(self._names):
            if name.endswith(file_names.SWAP_FILE_SUFFIX) or file_names.is_quarantine_file(Path(name)):
                continue
            offset = _offset_or_none(name)
            if offset is not None and min_swap_offset <= offset < max_swap_offset:
                why = f"replaced by the swap files of offsets [{min_swap_offset}, {max_swap_offset})"
                self._delete_file(name, StepKind.DELETE_SWAPPED_OUT, why)
        for name in sorted(self._names):
            if not name.endswith(file_names.SWAP_FILE_SUFFIX):
                continue
            target = name[: -len(file_names.SWAP_FILE_SUFFIX)]
            self._record(StepKind.COMPLETE_SWAP, self._path(name), f"renamed to {target}", _offset_or_none(name))
            self._names.discard(name)
            self._names.add(target)
            if self._fix:
                with storage_errors(self._path(name), "rename", target=self._path(target)):
                    os.replace(self._path(name), self._path(target))
            else:
                self._renamed[target] = name

    def _batches_not_swapped_in(self, replaced: list[str], swapped_in: set[tuple[int, int]]) -> str | None:
        """The offsets of the CRC-valid batches of the ``replaced`` segment files that no swap file holds
        (``swapped_in``: their batches' first and last offsets), as ``"a..b, c..d"``; None when every
        one is there. A swap written by a split or a salvage holds every valid batch of what it replaces
        (a salvage quarantines only damaged bytes); one that does not (an empty or cut swap file, an
        interrupted compaction of a broker) would destroy records no other file holds."""
        missing = [
            (first, last)
            for name in replaced
            for first, last in _batch_ranges(self._inspect(self._path(name), int(_offset_or_none(name) or 0)).scan)
            if (first, last) not in swapped_in
        ]
        return (
            ", ".join(f"{first}..{last}" for first, last in missing[:3]) + (" ..." if len(missing) > 3 else "") or None
        )

    def _set_swaps_aside(self, swap_files: list[str], why: str) -> None:
        """Quarantine the ``.log`` swap files whole and delete the index ones: they may not replace the
        segment files beside them (``why``), which stay and are recovered as they are."""
        for name in sorted(swap_files):
            offset = _offset_or_none(name)
            if offset is None or not name.endswith(file_names.LOG_FILE_SUFFIX + file_names.SWAP_FILE_SUFFIX):
                self._delete_file(name, StepKind.DELETE_INVALID_SWAP, why)
                continue
            path = self._path(name)
            if self._fix:
                quarantined = quarantine_whole_file(path, offset).name
            else:
                quarantined = file_names.quarantine_file(self.directory, offset, 0).name
            self._names.discard(name)
            self._record(StepKind.QUARANTINE_DAMAGED_SWAP, path, why, offset, quarantined=(quarantined,))

    def _load_segment_files(self) -> None:
        """Step 5: delete orphaned indexes, open every segment, recover those with missing or bad indexes."""
        for segment in self._segments.values():
            if isinstance(segment, LogSegment):
                segment.close_handlers()
        self._segments = {}
        self._delete_empty_segments_inside_others()
        self._bases = sorted(_log_bases(self._names))
        for name in sorted(self._names):
            path = self._path(name)
            if file_names.is_index_file(path):
                offset = _offset_or_none(name)
                if offset is not None and file_names.log_file(self.directory, offset).name not in self._names:
                    self._delete_file(name, StepKind.DELETE_ORPHANED_INDEX, "orphaned index: no log file")
            elif file_names.is_log_file(path):
                offset = _offset_or_none(name)
                if offset is None:
                    logger.warning("%signoring %s: its name is not an offset", self._prefix, path)
                    continue
                self._load_segment(offset)

    def _delete_empty_segments_inside_others(self) -> None:
        """Delete each stray empty ``.log`` named inside the offsets the segment before it holds
        (:func:`empty_segments_inside_others`), and so, as orphans, its index files."""
        names = [n for n in self._names if _offset_or_none(n) not in self._virtual]  # a dry run's split: on paper
        strays = empty_segments_inside_others(self.directory, self.config, names, clock=self.clock, source=self._source)
        for base, (previous, last) in strays.items():
            why = (
                f"empty segment named inside segment {previous}, whose intact batches hold offsets "
                f"{previous}..{last} without a gap: a stray file (writers roll at the log end), holding nothing"
            )
            self._delete_file(file_names.log_file(self.directory, base).name, StepKind.DELETE_EMPTY_SEGMENT_INSIDE, why)

    def _load_segment(self, base_offset: int) -> None:
        log_path = file_names.log_file(self.directory, base_offset)
        index_name = file_names.offset_index_file(self.directory, base_offset).name
        time_index_name = file_names.time_index_file(self.directory, base_offset).name
        txn_name = file_names.transaction_index_file(self.directory, base_offset).name
        time_index_newly_created = time_index_name not in self._names
        if base_offset in self._virtual:  # dry run: a planned split segment, indexes to be written
            self._segments[base_offset] = self._virtual[base_offset]
            return
        with storage_errors(log_path, "inspect the segment"):
            log_size = self._source(log_path.name).stat().st_size
            problem: str | IndexProblem | None = None
            if index_name not in self._names:
                problem = f"Could not find offset index file corresponding to log file {log_path}"
            else:
                problem = offset_index_problem(self._source(index_name), base_offset, log_size=log_size)
                if problem is None and not time_index_newly_created:
                    problem = time_index_problem(self._source(time_index_name), base_offset)
                if problem is None and txn_name in self._names:
                    problem = transaction_index_problem(self._source(txn_name), base_offset)
        segment: _Segment
        if self._fix:
            segment = self._open_segment(base_offset, file_already_exists=True)
        else:
            segment = _PlannedSegment(base_offset, self._source(log_path.name), log_size)
        self._segments[base_offset] = segment
        if problem is None and time_index_newly_created:
            why = "missing time index: created empty, not rebuilt (as Kafka)"
            self._record(StepKind.CREATE_EMPTY_TIME_INDEX, self._path(time_index_name), why, base_offset)
            self._names.add(time_index_name)
        if problem is None and isinstance(segment, LogSegment):
            try:
                segment.sanity_check(time_index_newly_created)
            except (StorageError, CorruptIndexError) as e:
                problem = str(e)
        if problem is None:
            return
        below_recovery_point = self.had_clean_shutdown or base_offset < self._first_unflushed_base()
        if below_recovery_point:
            # Kafka's error: an index that should be whole is not. Segments from the one holding the
            # recovery point on are re-read after a crash anyway, and a crash always leaves the active
            # segment's pre-allocated index untrimmed (zero-filled slots): no error, the step says it.
            logger.error("%s%s, recovering segment and rebuilding index files...", self._prefix, problem)
        self._recovered[base_offset] = self._recover_segment(segment, reason=str(problem))
        recovered = self._segments.get(base_offset)  # salvage may have replaced the segment
        if below_recovery_point and isinstance(recovered, LogSegment):
            recovered.sync_indexes()  # no recovery after a power loss would rebuild it again
        self._names.update({index_name, time_index_name})

    def _loaded_logs(self) -> list[tuple[int, FileRecords]]:
        """``(base offset, .log)`` of the segments opened so far, in offset order (a recovery's
        producer-state replay reads those before the segment it recovers)."""
        return [(base, s.log) for base, s in sorted(self._segments.items()) if isinstance(s, LogSegment)]

    def _first_unflushed_base(self) -> int:
        """Base offset of the first segment an unclean shutdown's recovery re-reads: the one holding the
        recovery point (Kafka's ``logSegments(recoveryPoint, ...)``), else the first segment."""
        floor = [b for b in self._bases if b <= self.recovery_point_checkpoint]
        return floor[-1] if floor else (self._bases[0] if self._bases else 0)

    def _recover_log(self) -> tuple[int, int]:
        """Step 6 (Kafka ``recoverLog``): returns (recovery point, next offset)."""
        self._bases = sorted(self._segments)
        if not self.had_clean_shutdown:
            start = self._first_unflushed_base()
            unflushed = [self._segments[b] for b in self._bases if b >= start]
            for i, segment in enumerate(unflushed):
                following = unflushed[i + 1].base_offset if i + 1 < len(unflushed) else None
                if following is not None and following not in self._recovered:
                    _read_ahead(self._source(file_names.log_file(self.directory, following).name))
                if segment.base_offset in self._recovered:
                    truncated = self._recovered[segment.base_offset]
                else:
                    truncated = self._recover_segment(segment, reason=self.recovery_reason)
                if truncated > 0 and not self._salvage:
                    why = f"segment {segment.base_offset} before it lost {truncated} bytes to corruption"
                    self._delete_segments(unflushed[i + 1 :], StepKind.DELETE_AFTER_CORRUPTION, why)
                    break
            self._report_offsets_in_no_segment([s.base_offset for s in unflushed])
        log_end_offset: int | None = None
        if self._segments:
            log_end_offset = self._read_next_offset(self._segments[max(self._segments)])
            if log_end_offset < self.log_start_offset_checkpoint:  # e.g. segment files deleted by hand
                if not self.remove_below_log_start:
                    raise log_start_above(
                        self.directory, self.log_start_offset_checkpoint, log_end_offset, "its log end offset"
                    )
                why = f"the log ends at {log_end_offset}, below its start {self.log_start_offset_checkpoint}"
                segments = [self._segments[b] for b in sorted(self._segments)]
                self._delete_segments(segments, StepKind.DELETE_BELOW_LOG_START, why, log_end_offset=log_end_offset)
                log_end_offset = None
        if not self._segments:
            self._create_empty_segment(self.log_start_offset_checkpoint)
        if self.had_clean_shutdown and log_end_offset is not None:
            return log_end_offset, log_end_offset
        if log_end_offset is None:
            log_end_offset = self._read_next_offset(self._segments[max(self._segments)])
        return min(self.recovery_point_checkpoint, log_end_offset), log_end_offset

    def _report_offsets_in_no_segment(self, recovered: list[int]) -> None:
        """Offsets between a segment recovered here and the next segment that no segment holds and
        no step of this load names are lost unless an earlier recovery or a user accounts for them
        (:func:`~indexer.data_loss.offsets_in_no_segment`)."""
        named = self._report.lost_offsets
        gaps = []
        for base in recovered:
            following = self._next_base(base)
            if base in self._segments and following is not None:
                end = self._read_next_offset(self._segments[base])
                if not any(r.first <= end and (r.end is None or r.end >= following) for r in named):
                    gaps.append((base, end, following))
        for lost in offsets_in_no_segment(self.directory, gaps):
            assert lost.end is not None
            why = f"offsets {lost.first}..{lost.end - 1} are in no segment file: a segment is missing or was cut short"
            # A .log.deleted there is the missing segment's data, not a leftover (retention deletes
            # from the front, truncation the tail): its bytes are quarantined, not deleted.
            quarantined = tuple(
                self._quarantine_deleted_log(base)
                for base in sorted(self._deleted_logs)
                if lost.first <= base < lost.end
            )
            if quarantined:
                why += f"; the {file_names.DELETED_FILE_SUFFIX} file of its data is quarantined"
            path = file_names.log_file(self.directory, lost.end)
            self._record(
                StepKind.OFFSETS_IN_NO_SEGMENT, path, why, lost.end, lost_offsets=(lost,), quarantined=quarantined
            )

    def _quarantine_deleted_log(self, base: int) -> str:
        """Move the stray ``<base>.log.deleted`` into quarantine (a dry run only names it)."""
        path = self._path(self._deleted_logs.pop(base))
        if self._fix:
            return quarantine_whole_file(path, base).name
        return file_names.quarantine_file(self.directory, base, 0).name

    # -- one segment ----------------------------------------------------------------------------

    def _read_next_offset(self, segment: _Segment) -> int:
        """The segment's next offset: known without reading if this load recovered the segment."""
        known = self._next_offsets.get(segment.base_offset)
        return segment.read_next_offset() if known is None else known

    def _inspect(self, path: Path, base_offset: int, *, verify_crc: bool = True) -> _Inspection:
        """Read-only scan of a ``.log``: what recovering it would keep and drop."""
        with FileRecords.open(path, mutable=False) as records:
            next_base = self._next_base(base_offset)
            return _inspect_records(records, base_offset, next_base, verify_crc=verify_crc, salvage=self._salvage)

    def _recover_segment(self, segment: _Segment, *, reason: str) -> int:
        """Recover one segment (spec 4.7): salvage its intact batches, or (``recovery.strategy=truncate``)
        cut it after its last valid batch and, when its offsets go backwards, drop its data; returns
        the bytes it lost. Raises :class:`_SplitNeeded` for a segment whose offsets overflow."""
        log_path = file_names.log_file(self.directory, segment.base_offset)
        if isinstance(segment, LogSegment):
            return self._recover_open_segment(segment, log_path, reason)
        assert isinstance(segment, _PlannedSegment)
        if segment.virtual:  # the planned output of a split is not written yet: assume it is valid
            why = f"{reason}: planned split segment"
            self._record(StepKind.RECOVER_SEGMENT, log_path, why, segment.base_offset, indexes_rebuilt=True)
            return 0
        source = self._source(log_path.name)
        inspection = self._inspect(source, segment.base_offset)
        if inspection.overflow_offset is not None:
            raise _SplitNeeded(segment, inspection.overflow_offset)
        if self._salvage and inspection.damaged:
            with FileRecords.open(source, mutable=False) as records:
                next_base = self._next_base(segment.base_offset)
                plan = plan_salvage(records, segment.base_offset, next_base, inspection.scan)
            segment.size = plan.kept_bytes
            segment.next_offset = plan.next_offset or segment.base_offset
            names = [
                file_names.quarantine_file(self.directory, segment.base_offset, position, 0).name
                for position, _ in plan.removed
            ]
            return self._record_salvage(segment, log_path, reason, plan, inspection, names)
        if inspection.offsets_out_of_order:
            return self._drop_segment_data(segment, log_path, inspection.size, inspection.framed_batches, _OUT_OF_ORDER)
        valid_bytes = inspection.scan.valid_bytes
        segment.size = valid_bytes
        segment.next_offset = inspection.valid_next_offset or segment.base_offset
        truncated = inspection.size - valid_bytes
        names = [file_names.quarantine_file(self.directory, segment.base_offset, valid_bytes).name] if truncated else []
        return self._record_recovery(
            segment, log_path, reason, truncated, inspection.batches_dropped, inspection.cause, names
        )

    def _recover_open_segment(self, segment: LogSegment, log_path: Path, reason: str) -> int:
        """The real recovery, reading the ``.log`` once: the CRC-checked scan a dry run makes decides
        (overflow, offsets out of order, what is cut) and ``LogSegment.recover`` rebuilds the
        indexes from that same scan. Every byte cut is quarantined first."""
        base = segment.base_offset
        inspection = _inspect_records(segment.log, base, self._next_base(base), salvage=self._salvage)
        if inspection.overflow_offset is not None:
            raise _SplitNeeded(segment, inspection.overflow_offset)
        size, everything = inspection.size, inspection.framed_batches
        if self._salvage and inspection.damaged:
            return self._salvage_open_segment(segment, log_path, reason, inspection)
        if inspection.offsets_out_of_order:
            return self._drop_segment_data(segment, log_path, size, everything, _OUT_OF_ORDER)
        valid_bytes = inspection.scan.valid_bytes
        names = []
        if valid_bytes < size:
            names.append(quarantine_range(segment.log, segment.base_offset, valid_bytes, size - valid_bytes).name)
        try:
            truncated = segment.recover(self._transactions, inspection.scan)
        except (InvalidOffsetError, StorageError) as e:
            return self._drop_segment_data(segment, log_path, size, everything, str(e))
        self._next_offsets[segment.base_offset] = inspection.valid_next_offset or segment.base_offset
        return self._record_recovery(
            segment, log_path, reason, truncated, inspection.batches_dropped, inspection.cause, names
        )

    def _salvage_open_segment(self, segment: LogSegment, log_path: Path, reason: str, inspection: _Inspection) -> int:
        """Keep every intact batch of a damaged segment (:mod:`indexer.salvage`), crash-safely.

        The removed byte ranges are quarantined first. When only a tail goes the file is cut in
        place; otherwise the kept batches are copied to ``<base>.log.cleaned`` (fsynced), renamed
        ``.swap``, the old files renamed ``.deleted``, and the swap renamed into place (Kafka's
        protocol, which loading completes or undoes after a crash), then the indexes are rebuilt."""
        base = segment.base_offset
        plan = plan_salvage(segment.log, base, self._next_base(base), inspection.scan)
        names = [quarantine_range(segment.log, base, position, length).name for position, length in plan.removed]
        if plan.tail_only:
            segment.recover(self._transactions, plan.kept)
        else:
            cleaned = file_names.log_file(self.directory, base, file_names.CLEANED_FILE_SUFFIX)
            swap = file_names.log_file(self.directory, base, file_names.SWAP_FILE_SUFFIX)
            write_ranges(segment.log, _kept_runs(plan), cleaned)
            with storage_errors(cleaned, "rename", target=swap):
                os.replace(cleaned, swap)
            self._fsync_directory()
            modified = segment.last_modified
            segment.change_file_suffixes("", file_names.DELETED_FILE_SUFFIX)
            self._deleted.append(segment)
            with storage_errors(swap, "rename", target=log_path):
                os.replace(swap, log_path)
            self._fsync_directory()
            segment = self._open_segment(base, file_already_exists=True)
            self._segments[base] = segment
            segment.recover(self._transactions)
            segment.set_last_modified(modified)
        self._next_offsets[base] = plan.next_offset or base
        return self._record_salvage(segment, log_path, reason, plan, inspection, names)

    def _record_salvage(
        self,
        segment: _Segment,
        log_path: Path,
        reason: str,
        plan: SalvagePlan,
        inspection: _Inspection,
        quarantined: list[str],
    ) -> int:
        removed = plan.removed_bytes
        dropped = len(inspection.scan) - len(plan.kept) if plan.tail_only else 0
        detail = f"{reason}: rebuilt indexes"
        if removed:
            ranges = ", ".join(f"{n} bytes at {p}" for p, n in plan.removed)
            lost = ", ".join(_range_text(r) for r in plan.lost) or "none"
            detail += (
                f"; kept {len(plan.kept)} intact batches, removed {ranges} ({inspection.cause}) into quarantine"
                f" {', '.join(quarantined)}; offsets lost: {lost}"
            )
        kind = StepKind.RECOVER_SEGMENT if plan.tail_only else StepKind.SALVAGE_SEGMENT
        self._record(
            kind,
            log_path,
            detail,
            segment.base_offset,
            indexes_rebuilt=True,
            bytes_truncated=removed,
            batches_dropped=max(dropped, 0),
            lost_offsets=tuple(plan.lost),
            quarantined=tuple(quarantined),
        )
        return removed

    def _record_recovery(
        self,
        segment: _Segment,
        log_path: Path,
        reason: str,
        truncated: int,
        dropped: int,
        cause: str,
        quarantined: list[str],
    ) -> int:
        detail = f"{reason}: rebuilt indexes"
        if truncated:
            detail += f", truncated {truncated} bytes at position {segment.size} ({cause}) into quarantine"
        lost = (LostRange(self._read_next_offset(segment), self._next_base(segment.base_offset)),)
        counts = {
            "bytes_truncated": truncated,
            "batches_dropped": dropped if truncated else 0,
            "lost_offsets": lost if truncated else (),
            "quarantined": tuple(quarantined),
        }
        self._record(StepKind.RECOVER_SEGMENT, log_path, detail, segment.base_offset, indexes_rebuilt=True, **counts)
        return truncated

    def _drop_segment_data(self, segment: _Segment, log_path: Path, size: int, batches: int, why: str) -> int:
        """Kafka's answer to ``InvalidOffsetException`` during recovery: truncate to the base offset
        (the bytes are quarantined first)."""
        name = file_names.quarantine_file(self.directory, segment.base_offset, 0).name
        if isinstance(segment, LogSegment):
            if size:
                name = quarantine_range(segment.log, segment.base_offset, 0, size).name
            segment.offset_index.reset()  # so truncate_to finds position 0 whatever the old index said
            segment.time_index.reset()
            segment.txn_index.reset()
            segment.truncate_to(segment.base_offset)
            self._next_offsets[segment.base_offset] = segment.base_offset
            segment.time_index.trim_to_valid_size()
            segment.offset_index.trim_to_valid_size()
        else:
            assert isinstance(segment, _PlannedSegment)
            segment.size, segment.next_offset = 0, segment.base_offset
        counts = {
            "bytes_truncated": size,
            "batches_dropped": batches,
            "indexes_rebuilt": True,
            "lost_offsets": (LostRange(segment.base_offset, self._next_base(segment.base_offset)),) if size else (),
            "quarantined": (name,) if size else (),
        }
        detail = f"invalid offsets during recovery ({why}): the segment's data is quarantined, the segment kept"
        self._record(StepKind.DROP_SEGMENT_DATA, log_path, detail, segment.base_offset, **counts)
        return size

    def _next_base(self, base_offset: int) -> int | None:
        """The base offset of the segment after ``base_offset`` (None for the last one), from the
        segments the current step started with (a step restarts after a split)."""
        i = bisect.bisect_right(self._bases, base_offset)
        return self._bases[i] if i < len(self._bases) else None

    def _delete_segments(
        self, segments: Iterable[_Segment], kind: StepKind, why: str, *, log_end_offset: int | None = None
    ) -> None:
        """Remove segments from the map: their ``.log`` goes to quarantine, their other files are
        deleted asynchronously (spec 4.10). The records of each segment with data are lost offsets
        (up to the next segment's base, for the last one ``log_end_offset`` if known), also below a
        checkpointed log start above the log end: that checkpoint cannot be trusted over the files."""
        for segment in list(segments):
            base = segment.base_offset
            next_base = self._next_base(base)
            log_path = file_names.log_file(self.directory, base)
            del self._segments[base]
            self._next_offsets.pop(base, None)
            quarantined = [file_names.quarantine_file(self.directory, base, 0).name] if segment.size else []
            for name in _segment_file_names(self.directory, base):
                self._names.discard(name)
            if isinstance(segment, LogSegment):
                segment.change_file_suffixes("", file_names.DELETED_FILE_SUFFIX)
                if segment.size:
                    quarantined = [quarantine_whole_file(segment.log.path, base).name]
                self._deleted.append(segment)
            lost = (LostRange(base, log_end_offset if next_base is None else next_base),) if segment.size else ()
            detail = f"{segment.size} bytes, deleted{' (the .log quarantined)' if segment.size else ''}: {why}"
            self._record(
                kind,
                log_path,
                detail,
                base,
                segment_bytes=segment.size,
                lost_offsets=lost,
                quarantined=tuple(quarantined),
            )
            snapshot = file_names.producer_snapshot_file(self.directory, base).name
            if snapshot in self._names:
                self._delete_file(snapshot, StepKind.DELETE_STRAY_SNAPSHOT, "snapshot of a deleted segment")

    def _create_empty_segment(self, base_offset: int) -> None:
        log_path = file_names.log_file(self.directory, base_offset)
        self._record(StepKind.CREATE_EMPTY_SEGMENT, log_path, "no segment left: a new empty one", base_offset)
        segment: _Segment
        if self._fix:
            segment = self._open_segment(base_offset)
        else:
            segment = _PlannedSegment(base_offset, log_path, 0, base_offset)
        self._segments[base_offset] = segment
        self._names.add(log_path.name)

    # -- offset overflow ------------------------------------------------------------------------

    def _retry_on_overflow(self, step: Callable[[], _T]) -> _T:
        while True:
            try:
                return step()
            except _SplitNeeded as e:
                self._split_overflowed_segment(e.segment, e.offset)

    def _split_overflowed_segment(self, segment: _Segment, offset: int) -> None:
        """Kafka's ``LocalLog.splitOverflowedSegment``: copy the batches into new segments, each based
        at the first batch that no longer fits the previous one, and swap them in (``.cleaned`` ->
        ``.swap`` -> final names, the old segment -> ``.deleted``)."""
        log_path = file_names.log_file(self.directory, segment.base_offset)
        with FileRecords.open(self._source(log_path.name), mutable=False) as records:
            framed = records.scan(0, verify_crc=False)
        groups = _split_groups(np.asarray(framed.base_offsets), np.asarray(framed.last_offsets))
        new_bases = [int(framed.base_offsets[g[0]]) for g in groups]
        why = f"offset {offset} overflows the segment (KAFKA-6264): split into segments at offsets {new_bases}"
        self._record(StepKind.SPLIT_OVERFLOWED_SEGMENT, log_path, why, segment.base_offset)
        del self._segments[segment.base_offset]
        self._next_offsets.pop(segment.base_offset, None)
        for name in _segment_file_names(self.directory, segment.base_offset):
            self._names.discard(name)
        if not self._fix:
            for group, base in zip(groups, new_bases, strict=True):
                size, next_offset = int(framed.sizes[group].sum()), int(framed.last_offsets[group[-1]]) + 1
                planned = _PlannedSegment(base, file_names.log_file(self.directory, base), size, next_offset, True)
                self._segments[base] = self._virtual[base] = planned
                self._names.add(planned.path.name)
            return
        assert isinstance(segment, LogSegment)
        new_segments = []
        for group, base in zip(groups, new_bases, strict=True):
            for path in _segment_paths(self.directory, base, file_names.CLEANED_FILE_SUFFIX):
                path.unlink(missing_ok=True)
            new = self._open_segment(base, file_suffix=file_names.CLEANED_FILE_SUFFIX)
            new_segments.append(new)
            for i in group.tolist():
                raw = segment.log.read(int(framed.positions[i]), int(framed.sizes[i]))
                last = int(framed.last_offsets[i])
                new.append(last, int(framed.max_timestamps[i]), last, raw)
            new.on_become_inactive_segment()
            new.flush()
            new.set_last_modified(segment.last_modified)
        copied = sum(s.size for s in new_segments)
        if copied != segment.size:
            kept = quarantine_range(segment.log, segment.base_offset, copied, segment.size - copied)
            logger.warning(
                "%s%s: split copied %d of %d bytes; the torn tail is quarantined in %s",
                self._prefix,
                log_path,
                copied,
                segment.size,
                kept.name,
            )
        for new in reversed(new_segments):
            new.change_file_suffixes(file_names.CLEANED_FILE_SUFFIX, file_names.SWAP_FILE_SUFFIX)
        segment.change_file_suffixes("", file_names.DELETED_FILE_SUFFIX)
        self._deleted.append(segment)
        for new in new_segments:
            new.change_file_suffixes(file_names.SWAP_FILE_SUFFIX, "")
            self._segments[new.base_offset] = new
            self._names.update(p.name for p in _segment_paths(self.directory, new.base_offset, "") if p.exists())
        self._fsync_directory()

    # -- leader epochs, producer snapshots ------------------------------------------------------

    def _truncate_leader_epochs(self, next_offset: int) -> None:
        path = self._path(file_names.LEADER_EPOCH_CHECKPOINT_FILE)
        if path.name not in self._names:
            return
        checkpoint = LeaderEpochCheckpointFile(path)
        try:
            entries = checkpoint.read()
        except StorageError as e:
            logger.warning("%scannot read %s, leaving it alone: %s", self._prefix, path, e)
            return
        truncated = _truncate_epochs(entries, next_offset, self.log_start_offset_checkpoint)
        if truncated == entries:
            return
        why = f"epochs {[tuple(e) for e in entries]} -> {[tuple(e) for e in truncated]} (outside the log)"
        self._record(StepKind.TRUNCATE_LEADER_EPOCHS, path, why)
        if self._fix:
            checkpoint.write(truncated)

    def _remove_stray_snapshots(self, next_offset: int) -> None:
        """Kafka's ``removeStraySnapshots`` plus the removal of snapshots above the log end offset."""
        bases = set(self._segments)
        snapshots = sorted(
            (offset, name)
            for name in self._names
            if name.endswith(file_names.PRODUCER_SNAPSHOT_FILE_SUFFIX) and (offset := _offset_or_none(name)) is not None
        )
        strays = [(offset, name) for offset, name in snapshots if offset not in bases]
        keep = strays[-1] if strays and bases and strays[-1][0] >= max(bases) else None
        for offset, name in strays:
            if (offset, name) != keep:
                self._delete_file(name, StepKind.DELETE_STRAY_SNAPSHOT, "stray: not at a segment base offset")
        for offset, name in snapshots:
            if offset > next_offset and name in self._names:
                self._delete_file(name, StepKind.DELETE_STRAY_SNAPSHOT, f"beyond the log end offset {next_offset}")

    def _fsync_directory(self) -> None:
        with storage_errors(self.directory, "fsync the partition directory"):
            fsync_directory(self.directory)


_OUT_OF_ORDER = "the batches' last offsets do not increase"
_LOSSY_KINDS = frozenset(
    {
        StepKind.DROP_SEGMENT_DATA,
        StepKind.DELETE_AFTER_CORRUPTION,
        StepKind.DELETE_BELOW_LOG_START,
        StepKind.OFFSETS_IN_NO_SEGMENT,
    }
)


def empty_segments_inside_others(
    directory: Path,
    config: LogConfig,
    names: Iterable[str],
    *,
    clock: Clock,
    source: Callable[[str], Path] | None = None,
) -> dict[int, tuple[int, int]]:
    """The empty ``.log`` files among the file ``names`` of partition ``directory`` named inside the
    offsets the segment before them holds: ``{base: (that segment's base, the last offset of its batch
    holding base)}``.

    Writers roll only at the log end, so such a file is a stray (copied in, made by hand): it holds no
    byte, while the segment before it holds its offsets in CRC-valid batches without a gap from that
    segment's base. Left in the segment list it would cut those batches off: recovery would remove
    intact committed records as "not fitting" and readers would stop there. The loader deletes it and
    read-only opens leave it out. Nothing shows the offsets are the other segment's when its batches
    up to there are damaged or not consecutive (a compacted log): such a file is kept. The usual empty
    file, the newest segment rolled at the log end, costs one read of the end of the segment before
    it (from its last index entry). ``source`` maps a file name to the path to read (a dry run's
    renames).
    """
    where = source if source is not None else (lambda name: directory / name)
    out: dict[int, tuple[int, int]] = {}
    previous: int | None = None
    for base in sorted(_log_bases(names)):
        name = file_names.log_file(directory, base).name
        with storage_errors(where(name), "inspect the segment"):
            empty = where(name).stat().st_size == 0
        if empty and previous is not None:
            last = _batch_holding(directory, config, clock, where, previous, base)
            if last is not None:
                out[base] = (previous, last)
        elif not empty:
            previous = base
    return out


def _batch_holding(
    directory: Path, config: LogConfig, clock: Clock, where: Callable[[str], Path], previous: int, offset: int
) -> int | None:
    """The last offset of the batch of segment ``previous`` holding ``offset``, when its batches hold
    every offset from ``previous`` to there in CRC-valid, consecutive batches; else None."""
    name = file_names.log_file(directory, previous).name
    if where(name) == directory / name:  # its end first (cheap): the usual empty newest segment
        segment = LogSegment.open(directory, previous, config, clock=clock, file_already_exists=True, read_only=True)
        try:
            if offset >= segment.read_end().message_offset:
                return None
        finally:
            segment.close_handlers()
    with FileRecords.open(where(name), mutable=False) as records:
        scan = records.scan(verify_crc=True)
    firsts, lasts = np.asarray(scan.base_offsets, np.int64), np.asarray(scan.last_offsets, np.int64)
    reach = np.flatnonzero(lasts >= offset)
    if not reach.size:
        return None
    n = int(reach[0]) + 1
    expected = np.concatenate(([previous], lasts[: n - 1] + 1))
    return int(lasts[n - 1]) if np.array_equal(firsts[:n], expected) else None


def _batch_ranges(scan: BatchScan) -> list[tuple[int, int]]:
    """(first offset, last offset) of each batch of ``scan``."""
    return list(zip(scan.base_offsets.tolist(), scan.last_offsets.tolist(), strict=True))


def _inspect_records(
    records: FileRecords,
    base_offset: int,
    next_base: int | None = None,
    *,
    verify_crc: bool = True,
    salvage: bool = False,
) -> _Inspection:
    """One scan of an unchanged ``.log`` (plus a header walk of what follows its first invalid byte):
    what recovering it would keep and drop.

    An overflow (offsets that do not fit relative to the base offset, KAFKA-6264) asks for a split.
    When salvaging, a v2 batch that does not fit the segment (or reaches the next segment's base)
    and whose offsets continue neither neighbour's is no overflow but a damaged base offset (a field
    outside the CRC): salvage removes it."""
    scan = records.scan(0, verify_crc=verify_crc)
    size = records.size_in_bytes()
    dropped = 0
    if scan.valid_bytes < size:
        dropped = len(records.scan(scan.valid_bytes, verify_crc=False))
    last = np.asarray(scan.last_offsets, dtype=np.int64)
    relative = last - base_offset
    outside = (relative < 0) | (relative > INT32_MAX)
    base = np.asarray(scan.base_offsets, dtype=np.int64)
    misfit = bool(np.any(outside)) or first_misplaced_batch(scan, base_offset, next_base) is not None
    if salvage and outside.any():
        # A run of batches with consecutive offsets is data written that way (KAFKA-6264); a lone
        # v2 batch whose offsets continue neither neighbour's has a damaged base offset.
        chained = np.zeros(len(last), dtype=bool)
        chained[1:] |= base[1:] == last[:-1] + 1
        chained[:-1] |= last[:-1] + 1 == base[1:]
        outside &= (np.asarray(scan.magics) < 2) | chained
    bad = np.flatnonzero(outside)
    overflow = int(last[bad[0]]) if bad.size else None
    out_of_order = bool(last.size > 1 and np.any(np.diff(last) <= 0))
    return _Inspection(scan, size, overflow, out_of_order, misfit, dropped)


def _kept_runs(plan: SalvagePlan) -> list[tuple[int, int]]:
    """The byte ranges ``(position, length)`` of the original file between the removed ones."""
    runs = []
    position = 0
    for start, length in plan.removed:
        if start > position:
            runs.append((position, start - position))
        position = start + length
    if position < plan.size:
        runs.append((position, plan.size - position))
    return runs


def _range_text(r: LostRange) -> str:
    return f"{r.first}.." + ("(old end)" if r.end is None else str(r.end - 1))


def _read_ahead(path: Path) -> None:
    """Ask the kernel to start reading ``path`` into the page cache (``POSIX_FADV_WILLNEED``) and return
    at once, so that the disk reads the next segment while the CPU checks this one. Only advice:
    errors are ignored (the file is read, and any error met, when it is recovered)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
    except OSError:
        pass
    finally:
        os.close(fd)


def _log_bases(names: Iterable[str]) -> Iterator[int]:
    """The base offsets of the ``.log`` files among the file ``names`` of a partition directory."""
    for name in names:
        if name.endswith(file_names.LOG_FILE_SUFFIX) and (offset := _offset_or_none(name)) is not None:
            yield offset


def _offset_or_none(name: str) -> int | None:
    try:
        return file_names.offset_from_file_name(name)
    except ValueError:
        return None


def _segment_paths(directory: Path, base_offset: int, suffix: str) -> list[Path]:
    return [
        file_names.log_file(directory, base_offset, suffix),
        file_names.offset_index_file(directory, base_offset, suffix),
        file_names.time_index_file(directory, base_offset, suffix),
        file_names.transaction_index_file(directory, base_offset, suffix),
    ]


def _segment_file_names(directory: Path, base_offset: int) -> list[str]:
    return [p.name for p in _segment_paths(directory, base_offset, "")]


def _split_groups(base_offsets: np.ndarray, last_offsets: np.ndarray) -> list[np.ndarray]:
    """Batch indices of each split segment: a new segment starts at the first batch whose last offset
    does not fit relative to the current segment's base (the first batch's base offset)."""
    groups: list[np.ndarray] = []
    start = 0
    n = len(base_offsets)
    while start < n:
        base = int(base_offsets[start])
        relative = last_offsets[start:] - base
        misfits = np.flatnonzero((relative < 0) | (relative > INT32_MAX))
        stop = start + (int(misfits[0]) if misfits.size else n - start)
        stop = max(stop, start + 1)
        groups.append(np.arange(start, stop))
        start = stop
    return groups
