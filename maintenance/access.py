"""Which partitions a maintenance job may change, and how it gets hold of them.

Two ways to run the jobs, one interface (:class:`LogAccess`):

* :class:`OwnedLogs` - inside the writer's process (the streaming main job): the jobs act on the
  logs that process has open. Every engine mutation (roll, segment deletion, flush, truncation)
  runs under the ``Log``'s own lock, so jobs and appends interleave safely and a reader never sees
  a half-done roll or deletion.
* :class:`BorrowedLogs` - the ``seglog maintain`` daemon, in a process of its own. A job first
  looks at each partition's files (:mod:`maintenance.metadata`: names, sizes, index tails) and
  opens only the partitions it has something to do on, one at a time, taking the partition's
  writer lock without waiting; after the job it flushes, checkpoints and closes the partition, so a
  writer that starts later finds it free after at most one partition's work. A partition whose lock
  another live process holds is skipped by the mutating jobs and logged once per holder; the
  ``index`` job still checks its files read-only.

A partition the daemon closed cleanly and that nobody touched since is reopened as cleanly shut
down (nothing is rescanned); otherwise the open recovers from the recovery point, as after a crash,
and the loader's steps say why (:meth:`BorrowedLogs._recovery_reason`): the daemon's first open of
the partition, a process that died holding it (its line left in the lock file: an unclean shutdown
for a writer, the interrupted work of a maintenance or recovery process for those roles:
:func:`~indexer.log_loader.died_holding_reason`) or a change of its newest segment since the daemon
released it. Opening a partition runs the loader, which removes leftover ``.deleted`` files at once
(spec 6.2 step 1): harmless, since the daemon has no readers of its own and readers elsewhere hold
their own file handles.
"""

from __future__ import annotations

import logging
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from indexer.checkpoint import read_checkpoint, update_checkpoint
from indexer.clock import Clock, SystemClock
from indexer.config import Settings
from indexer.errors import LogLockedError, ReadOnlyLogDirectoryError, StorageError
from indexer.file_names import (
    LOG_DIR_LOCK_FILE,
    LOG_FILE_SUFFIX,
    LOG_START_OFFSET_CHECKPOINT_FILE,
    PARTITION_LOCK_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
    TopicPartition,
    log_file,
    partition_dir_name,
    partition_dirs,
)
from indexer.lock import MAINTENANCE_ROLE, FileLock, left_by_writer
from indexer.log import Log
from indexer.log_loader import UNCLEAN_SHUTDOWN, died_holding_reason
from indexer.log_manager import check_log_dir_writable
from maintenance.committed import cut_dead_writers_tail, lost_offset_ranges
from maintenance.metadata import PartitionMetadata, scan_partition
from maintenance.report import JobReport

logger = logging.getLogger(__name__)

_CHANGED = "changed since this process's maintenance released it"

#: What maintenance does not do in a log directory it cannot write in (:func:`check_log_dir_writable`).
READ_ONLY_REFUSED = "maintenance cannot roll, delete, flush, checkpoint or repair anything there"

Wanted = Callable[[TopicPartition, PartitionMetadata], bool]

CHECKPOINT_FILES = {
    "recovery-point": RECOVERY_POINT_CHECKPOINT_FILE,
    "log-start-offset": LOG_START_OFFSET_CHECKPOINT_FILE,
    "high-watermark": REPLICATION_OFFSET_CHECKPOINT_FILE,
}


def partition_name(tp: TopicPartition) -> str:
    """The directory name of ``tp`` (:func:`indexer.file_names.partition_dir_name`)."""
    return partition_dir_name(*tp)


def checkpoint_value(log: Log, kind: str) -> int | None:
    """The offset ``log`` contributes to checkpoint ``kind``; None means "no entry".

    ``log-start-offset`` has an entry only when the log start offset is above the first segment's
    base offset, as in Kafka (spec 6.4).
    """
    if kind == "recovery-point":
        return int(log.recovery_point)
    if kind == "high-watermark":
        return int(log.high_watermark)
    first = log.segments.first_segment()
    if first is not None and log.log_start_offset > first.base_offset:
        return int(log.log_start_offset)
    return None


def released_values(log: Log, *, had_high_watermark: bool) -> dict[str, int | None]:
    """The checkpoint entries a maintenance process or recovery writes back for a partition it opened
    and closed: the log's own (:func:`checkpoint_value`), except that a partition that had no
    high-watermark entry gets none. Only writers commit; the one a log opened without an entry
    starts with (its log start offset) would hide every record from readers."""
    values = {kind: checkpoint_value(log, kind) for kind in CHECKPOINT_FILES}
    if not had_high_watermark:
        values["high-watermark"] = None
    return values


def write_checkpoint(
    log_dir: Path,
    kind: str,
    values: dict[TopicPartition, int | None],
    *,
    expected: dict[TopicPartition, int | None] | None = None,
    replace_unreadable: bool = False,
) -> int:
    """Merge ``values`` (None: drop the entry) into checkpoint ``kind`` of ``log_dir``.

    Entries of partitions other processes own are kept: a read-merge-write under the log
    directory's ``.lock``. With ``expected`` (the entries the values were computed from), a
    partition whose entry another process changed meanwhile is left as it is (see
    :func:`indexer.checkpoint.update_checkpoint`). A file that cannot be read is refused, unless
    ``replace_unreadable`` (``seglog recover``, which rebuilt every entry). Returns the number of entries
    in ``values``.

    Raises:
        StorageError: the write failed, or the file cannot be read.
    """
    updates = {tp: v for tp, v in values.items() if v is not None}
    remove = [tp for tp, v in values.items() if v is None]
    if updates or remove:
        lock_path = log_dir / LOG_DIR_LOCK_FILE
        update_checkpoint(
            log_dir / CHECKPOINT_FILES[kind],
            updates,
            lock_path=lock_path,
            remove=remove,
            expected=expected,
            replace_unreadable=replace_unreadable,
        )
    return len(updates)


class LogAccess(ABC):
    """The partitions of one log directory as the maintenance jobs see them. Thread-safe."""

    #: True when the jobs borrow partitions no live writer holds (the daemon), False in-process.
    borrowed: bool = False

    def __init__(self, log_dir: Path, settings: Settings, clock: Clock) -> None:
        self.log_dir = Path(log_dir)
        self.settings = settings
        self.clock = clock
        self._read_only = False  # the last writable() found the directory read-only
        self._missing = not self.log_dir.exists()  # ... or missing (at the start: said by the daemon's note)
        self._read_only_lock = threading.Lock()
        self._unreadable: str | None = None  # the checkpoint error last logged (once, until it changes)
        self._unreadable_lock = threading.Lock()  # the jobs run in several threads

    def writable(self) -> bool:
        """Whether the jobs may run now: not while the log directory cannot be written
        (:func:`~indexer.log_manager.check_log_dir_writable`), where every partition of every pass
        would fail, nor while it does not exist (deleted, unmounted: a pass would find no partition
        and say nothing). Each is logged once when it starts and once when it ends, not per pass.

        Raises:
            StorageError: the directory's file system cannot be asked.
        """
        missing = not self.log_dir.exists()
        with self._read_only_lock:
            if missing and not self._missing:
                logger.warning(
                    "log directory %s does not exist any more: every maintenance pass is skipped until it exists again",
                    self.log_dir,
                )
            elif self._missing and not missing:
                logger.info("log directory %s exists again: maintaining its partitions", self.log_dir)
            self._missing = missing
        if missing:
            return False
        try:
            check_log_dir_writable(self.log_dir, READ_ONLY_REFUSED)
        except ReadOnlyLogDirectoryError as e:
            with self._read_only_lock:
                if not self._read_only:
                    logger.warning("%s; every maintenance pass is skipped until it is writable again", e)
                self._read_only = True
            return False
        with self._read_only_lock:
            if self._read_only:
                logger.warning("log directory %s is writable again: maintenance resumes", self.log_dir)
            self._read_only = False
        return True

    def checkpoints(self, report: JobReport) -> dict[str, dict[TopicPartition, int]] | None:
        """The three checkpoints of the log directory, read as a writer must (the daemon's opens are a
        writer's, and it writes the entries back: :func:`indexer.checkpoint.read_checkpoint`); None when
        one cannot be read. Then no job touches a partition of this directory, in the daemon or in the
        writer's process (every :meth:`each_log` asks first): the daemon would start them from made-up
        offsets, and neither could write anything back, since a checkpoint that cannot be read is
        never replaced (``seglog recover`` rewrites it). The error is logged once, as an ERROR, until
        it changes, and recorded in every report (``--once`` exits 1)."""
        try:
            read = {kind: read_checkpoint(self.log_dir, name) for kind, name in CHECKPOINT_FILES.items()}
        except StorageError as e:
            error = StorageError(
                f"{e}; maintenance leaves every partition of {self.log_dir} alone until then", path=e.path
            )
            with self._unreadable_lock:
                report.fail(str(self.log_dir), error, log=str(error) != self._unreadable)
                self._unreadable = str(error)
            return None
        with self._unreadable_lock:
            if self._unreadable is not None:
                logger.info("the checkpoints of %s can be read again; maintaining its partitions", self.log_dir)
                self._unreadable = None
        return read

    @abstractmethod
    def each_log(self, report: JobReport, wanted: Wanted | None = None) -> Iterator[tuple[TopicPartition, Log]]:
        """Yield the writable logs this process may change now, one at a time.

        ``wanted`` lets a borrowing access skip partitions whose files show nothing to do; an
        access that has its logs open anyway may ignore it. Partitions held by another process go
        to ``report.skipped``; failures to open one go to ``report.errors``.
        """

    @abstractmethod
    def foreign_partitions(self) -> list[tuple[TopicPartition, Path]]:
        """Partitions this process may not change (another live process holds them)."""

    def leftover_deleted_files(self, tp: TopicPartition, meta: PartitionMetadata) -> tuple[str, ...]:
        """The ``.deleted`` files of ``meta`` that no deletion pending in this process will remove: left
        by a run that ended before ``file.delete.delay.ms`` (``--once``, a stopped or killed daemon).
        Opening the partition removes them (the loader, spec 6.2 step 1), as a broker's restart does.
        In-process: none (each log's loader removed them when this process opened it)."""
        return ()

    def metadata(self, tp: TopicPartition, path: Path) -> PartitionMetadata:
        """The files of partition ``tp`` with its checkpointed log start offset and high watermark (a
        look, no write: an unreadable log-start checkpoint counts as empty).

        Raises:
            StorageError: ``replication-offset-checkpoint`` cannot be read.
        """
        return scan_partition(
            path,
            self.settings.log_config(tp[0]),
            log_start_offset=read_checkpoint(self.log_dir, LOG_START_OFFSET_CHECKPOINT_FILE, reader=True).get(tp, 0),
            high_watermark=read_checkpoint(self.log_dir, REPLICATION_OFFSET_CHECKPOINT_FILE).get(tp, 0),
        )


class OwnedLogs(LogAccess):
    """The logs this process opened and owns (in-process use, e.g. by the streaming main job).

    ``logs`` is a mapping ``(topic, partition) -> Log`` that the owner keeps up to date (a
    ``LogManager``'s table of open logs), or a callable returning one.
    """

    def __init__(
        self,
        log_dir: Path,
        settings: Settings,
        logs: dict[TopicPartition, Log] | Callable[[], dict[TopicPartition, Log]],
        clock: Clock | None = None,
    ) -> None:
        super().__init__(log_dir, settings, clock or SystemClock())
        self._logs = logs

    def _snapshot(self) -> list[tuple[TopicPartition, Log]]:
        logs = self._logs() if callable(self._logs) else self._logs
        return sorted(((tp, log) for tp, log in dict(logs).items() if not log.closed), key=lambda item: item[0])

    def each_log(self, report: JobReport, wanted: Wanted | None = None) -> Iterator[tuple[TopicPartition, Log]]:
        if self.checkpoints(report) is None:  # the daemon's rule: said once, the partitions left alone
            return
        logs = self._snapshot()
        report.checked += len(logs)
        yield from logs

    def foreign_partitions(self) -> list[tuple[TopicPartition, Path]]:
        owned = {tp for tp, _ in self._snapshot()}
        return [(tp, path) for tp, path in partition_dirs(self.log_dir) if tp not in owned]


@dataclass(frozen=True, slots=True)
class _ReleaseState:
    """The active segment of a partition when the daemon closed it cleanly."""

    active_base_offset: int
    active_size: int
    active_mtime_ns: int


class BorrowedLogs(LogAccess):
    """Partitions of ``log_dir`` opened one at a time for a job and closed right after (the daemon).

    Passes of different jobs are serialised by an internal lock, so this process never opens a
    partition twice.
    """

    borrowed = True

    def __init__(self, log_dir: Path, settings: Settings, clock: Clock | None = None) -> None:
        super().__init__(log_dir, settings, clock or SystemClock())
        self._stopping = threading.Event()
        self._pass_lock = threading.Lock()
        self._released: dict[TopicPartition, _ReleaseState] = {}
        self._foreign: dict[TopicPartition, str] = {}
        # When this process's own deletion of a partition's .deleted files is due, on the monotonic
        # clock its task counts the delay on (the clock's task of the log it released runs it, closed
        # log or not): a wall clock set back must not make other runs' leftovers look like its own.
        self._deletion_due_ns: dict[TopicPartition, int] = {}

    def stop(self) -> None:
        """Make running and later passes stop before their next partition (the daemon is shutting down)."""
        self._stopping.set()

    def foreign_partitions(self) -> list[tuple[TopicPartition, Path]]:
        dirs = dict(partition_dirs(self.log_dir))
        return [(tp, dirs[tp]) for tp in sorted(self._foreign) if tp in dirs]

    def leftover_deleted_files(self, tp: TopicPartition, meta: PartitionMetadata) -> tuple[str, ...]:
        due = self._deletion_due_ns.get(tp)
        return () if due is not None and due > self.clock.monotonic_ns() else meta.deleted_files

    def each_log(self, report: JobReport, wanted: Wanted | None = None) -> Iterator[tuple[TopicPartition, Log]]:
        with self._pass_lock:
            kinds = list(CHECKPOINT_FILES)
            checkpoints = self.checkpoints(report)
            if checkpoints is None:
                return
            released: dict[str, dict[TopicPartition, int | None]] = {kind: {} for kind in kinds}
            try:
                for tp, path in partition_dirs(self.log_dir):
                    if self._stopping.is_set():
                        break
                    report.checked += 1
                    if wanted is not None:
                        try:
                            meta = scan_partition(
                                path,
                                self.settings.log_config(tp[0]),
                                log_start_offset=checkpoints["log-start-offset"].get(tp, 0),
                                high_watermark=checkpoints["high-watermark"].get(tp, 0),
                            )
                            if not wanted(tp, meta):
                                continue
                        except Exception as e:  # one partition's files (damage): the pass goes on
                            report.fail(partition_name(tp), e, directory=path)
                            continue
                    log = self._borrow(tp, path, checkpoints, report)
                    if log is None:
                        continue
                    try:
                        yield tp, log
                    finally:
                        self._release(tp, log, released, report, had_high_watermark=tp in checkpoints["high-watermark"])
            finally:
                for kind in kinds:
                    # Only where nobody wrote since this pass read the file: a writer (executor writes
                    # publish high watermarks without the partition lock) may have moved on meanwhile.
                    read = {tp: checkpoints[kind].get(tp) for tp in released[kind]}
                    try:
                        write_checkpoint(self.log_dir, kind, released[kind], expected=read)
                    except Exception as e:  # one line naming the file (a full disk), counted: --once exits 1
                        names = ", ".join(partition_name(tp) for tp in sorted(released[kind]))
                        report.fail(names, e, directory=self.log_dir)

    def _borrow(
        self, tp: TopicPartition, path: Path, checkpoints: dict[str, dict[TopicPartition, int]], report: JobReport
    ) -> Log | None:
        name = partition_name(tp)
        holder = FileLock(path / PARTITION_LOCK_FILE).holder()  # read before the open writes this process's
        reason = self._recovery_reason(tp, path, holder)
        try:
            log = Log.open(
                path,
                self.settings.log_config(tp[0]),
                recovery_point=checkpoints["recovery-point"].get(tp, 0),
                log_start_offset=checkpoints["log-start-offset"].get(tp, 0),
                had_clean_shutdown=reason is None,
                clock=self.clock,
                high_watermark=checkpoints["high-watermark"].get(tp, 0),
                recovery_reason=reason or UNCLEAN_SHUTDOWN,  # (unused when clean)
                lock_role=MAINTENANCE_ROLE,  # killed while borrowing, it is no dead writer (left_by_writer)
                create=False,  # deleted since the pass listed it: not brought back
            )
        except LogLockedError as e:
            holder = str(e)
            if self._foreign.get(tp) != holder:
                logger.info("%s: skipped by mutating maintenance jobs: %s", name, holder)
            self._foreign[tp] = holder
            self._released.pop(tp, None)
            report.skipped.append(name)
            return None
        except Exception as e:
            self._released.pop(tp, None)
            report.fail(name, e, directory=path)
            return None
        if self._foreign.pop(tp, None) is not None:
            logger.info("%s is free again; maintaining it", name)
        committed = checkpoints["high-watermark"].get(tp, 0)
        if (loss := recovery_loss(name, log, committed)) is not None:
            report.fail(name, loss, directory=path)  # the job goes on with the log: what is left is sound
        if left_by_writer(holder):
            try:
                # This borrow replaced the dead writer's line in the lock file, and its release empties
                # it: no later pass could tell, so the first borrow cuts, whichever job borrows.
                if dropped := cut_dead_writers_tail(self.log_dir, tp, log):
                    report.count("offsets_truncated", dropped)
            except Exception as e:
                report.fail(name, e, directory=path)
                log.abandon()  # let go as a crash would: the next open recovers it
                return None
        return log

    def _recovery_reason(self, tp: TopicPartition, path: Path, holder: str) -> str | None:
        """None when the partition is as this daemon left it (no process died holding it: ``holder``,
        the line in its lock file, is empty; its newest segment is the one released, with the same size
        and mtime), so it opens as cleanly shut down; else why its open recovers from the recovery
        point, which the loader's steps and logs say (``recovery_reason``)."""
        if holder:
            return died_holding_reason(holder)
        state = self._released.get(tp)
        if state is None:
            return "first opened by this process's maintenance"
        try:
            st = log_file(path, state.active_base_offset).stat()
            newest = max(int(name[:-4]) for name in os.listdir(path) if name.endswith(LOG_FILE_SUFFIX))
        except (OSError, ValueError):
            return _CHANGED
        untouched = (
            newest == state.active_base_offset
            and st.st_size == state.active_size
            and st.st_mtime_ns == state.active_mtime_ns
        )
        return None if untouched else _CHANGED

    def _release(
        self,
        tp: TopicPartition,
        log: Log,
        released: dict[str, dict[TopicPartition, int | None]],
        report: JobReport,
        *,
        had_high_watermark: bool,
    ) -> None:
        """Flush, note the checkpoint values of (:func:`released_values`) and close a borrowed log;
        an error is the partition's error in ``report`` (one line for an expected one), not raised.
        The log is closed either way (``Log.close`` lets the files go even when its flush fails)."""
        self._released.pop(tp, None)
        if log.next_pending_deletion_ms is None:
            self._deletion_due_ns.pop(tp, None)
        else:  # scheduled during this borrow: due within the delay from now
            self._deletion_due_ns[tp] = self.clock.monotonic_ns() + log.config.file_delete_delay_ms * 1_000_000
        try:
            base = log.active_segment.base_offset
            log.close()  # flushes everything: the recovery point is now the log end offset
            for kind, value in released_values(log, had_high_watermark=had_high_watermark).items():
                released[kind][tp] = value
            st = log_file(log.directory, base).stat()
            self._released[tp] = _ReleaseState(base, st.st_size, st.st_mtime_ns)
        except Exception as e:
            report.fail(partition_name(tp), e, directory=log.directory)


def recovery_loss(name: str, log: Log, committed: int) -> StorageError | None:
    """The error saying which committed offsets (below ``committed``) the recovery that opened
    ``log`` removed, and where their bytes are; None when it removed none.

    A borrow opens a partition for a job's own reason, and its loader may salvage damage on the way
    (first open by this process, or after a crash). That recovery is the only one that reports the
    loss (a gap inside the log that a quarantine file accounts for is not reported again by
    ``seglog recover``, ``describe`` or readers), so the job fails the partition with it: one line,
    and ``--once`` exits 1, rather than a log line under a report of `0 errors`.
    """
    report = log.recovery_report
    if report is None:
        return None
    lost = [r for r in lost_offset_ranges(report.lost_offsets, report.next_offset, committed) if r["committed"]]
    if not lost:
        return None
    ranges = ", ".join(f"{r['first']}..{r['last']}" for r in lost)
    quarantined = ", ".join(report.quarantined) or "none"
    return StorageError(
        f"{name}: recovery on opening it for maintenance removed damaged bytes: committed offsets "
        f"{ranges} are lost (their bytes are in quarantine: {quarantined}; `seglog quarantine list`)",
        path=log.directory,
    )
