"""``seglog recover``: Kafka's log loading after an unclean shutdown, for a whole log directory.

For every partition directory (each under its writer lock, so a live writer's partitions are
skipped, never touched) :class:`~indexer.log_loader.LogLoader` finishes or undoes interrupted
operations (``.swap``, ``.cleaned``, ``.deleted`` files, ``<base>.index.tmp`` of a killed index
rebuild), recovers the segments - validating every
batch, salvaging every intact batch around damage (or, with ``recovery.strategy=truncate``,
Kafka's cut at the first damage), quarantining every byte removed, rebuilding missing or corrupt
indexes - and the partition is flushed and closed. Then the
checkpoint files are rewritten from the recovered logs (a partition without a high watermark gets
none: recovery commits nothing; a file that could not be read is rewritten whole, its high
watermarks from the sink commit records where they exist, else at the log end, and named in the
report with where each entry came from: :class:`CheckpointRepair`) and, when every partition was recovered,
the directory is marked cleanly shut down (``.kafka_cleanshutdown``), so the next open does not
recover again.

By default every segment is validated (recovery point 0): corruption below the checkpointed
recovery point, which Kafka's startup does not look for (spec 6.3), is found too.
``from_recovery_point=True`` does exactly what a broker does at startup. A dry run makes the same
decisions through :meth:`LogLoader.check` and changes nothing.

Each partition's report names the offset ranges recovery removed, each marked committed or not:
committed means below the largest of the partition's checkpointed recovery point, checkpointed
high watermark and any sink commit record (:mod:`maintenance.committed`). A log that ends below
that offset is missing committed records too, whoever removed them. Such a loss is not forgotten:
the partition's checkpoint entries are left as they were, so the next recovery reports it again and
writers refuse the partition (:meth:`indexer.log.Log.open`). ``accept_data_loss=True`` is
the explicit way forward after such a loss: the loss is appended to the log directory's
accepted-data-loss record (:mod:`indexer.data_loss`) and the partition's end is moved up to the
committed offset (an empty segment there), so the lost offsets stay a gap, the sink starts again,
and the next recovery reports nothing.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from indexer.checkpoint import read_checkpoint
from indexer.clock import Clock, SystemClock
from indexer.config import LogConfig, Settings
from indexer.data_loss import record_accepted_loss
from indexer.errors import CorruptRecordError, LogLockedError, SeglogError, StorageError, raise_if_interrupted
from indexer.file_names import (
    INDEX_FILE_SUFFIX,
    LOG_FILE_SUFFIX,
    LOG_START_OFFSET_CHECKPOINT_FILE,
    PARTITION_LOCK_FILE,
    TIME_INDEX_FILE_SUFFIX,
    TXN_INDEX_FILE_SUFFIX,
    TopicPartition,
    misnamed_partition_dirs,
    partition_dirs,
)
from indexer.lock import RECOVERY_ROLE, FileLock
from indexer.log import Log
from indexer.log_loader import LogLoader, RecoveryReport, StepKind
from indexer.log_manager import check_log_dir_writable, holds_partition_files, write_clean_shutdown_marker
from maintenance.access import (
    CHECKPOINT_FILES,
    partition_name,
    released_values,
    write_checkpoint,
)
from maintenance.committed import lost_offset_ranges, sink_committed_offsets
from maintenance.metadata import index_problems, scan_partition

logger = logging.getLogger(__name__)


# Exit status of `seglog recover` when committed data was lost (1 is any other failure).
EXIT_COMMITTED_DATA_LOST = 3


@dataclass
class PartitionRecovery:
    """The outcome for one partition. ``status``: recovered, checked (dry run), skipped, failed, and
    after a Ctrl-C interrupted (the one in progress) or not started."""

    partition: str
    status: str
    log_bytes: int
    message: str = ""
    log_end_offset: int | None = None
    committed_offset: int | None = None
    segments_recovered: int = 0
    bytes_truncated: int = 0
    batches_dropped: int = 0
    segments_deleted: int = 0
    segment_bytes_deleted: int = 0
    indexes_rebuilt: int = 0
    lost_offsets: list[dict[str, Any]] = field(default_factory=list)
    quarantined: list[str] = field(default_factory=list)
    accepted_data_loss: bool = False
    steps: list[dict[str, Any]] = field(default_factory=list)

    @property
    def committed_offsets_lost(self) -> int:
        """How many committed offsets the recovered log no longer holds (0 when none)."""
        return sum(r["last"] - r["first"] + 1 for r in self.lost_offsets if r["committed"])

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["committed_offsets_lost"] = self.committed_offsets_lost
        return d


@dataclass
class CheckpointRepair:
    """A checkpoint of the log directory that could not be read, and what recovery rewrote it with.

    ``entries``: per partition the offset written (``offset``) and where it comes from (``source``:
    ``sink commit record`` or ``log end``); ``rewritten`` is False in a dry run and when a partition
    was not recovered (``message`` says which: its entry would be lost, so the file is left as it was).
    """

    file: str
    error: str
    rewritten: bool = False
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    message: str = ""


@dataclass
class DirectoryRecovery:
    """The outcome for a log directory."""

    log_dir: str
    dry_run: bool
    from_recovery_point: bool
    partitions: list[PartitionRecovery] = field(default_factory=list)
    checkpoints: list[CheckpointRepair] = field(default_factory=list)
    marked_clean: bool = False
    interrupted: bool = False  # Ctrl-C: the partitions after the one in progress were not started
    duration_s: float = 0.0

    @property
    def bytes_total(self) -> int:
        return sum(p.log_bytes for p in self.partitions)

    @property
    def committed_data_lost(self) -> bool:
        """Committed records are gone and the loss was not accepted (``--accept-data-loss``)."""
        return any(p.committed_offsets_lost > 0 and not p.accepted_data_loss for p in self.partitions)

    @property
    def failed(self) -> list[PartitionRecovery]:
        return [p for p in self.partitions if p.status == "failed"]

    def exit_status(self) -> int:
        """0 when everything is fine, 3 when committed data was lost, else 1 when a partition failed
        or was skipped (a live writer holds it: it was not recovered), or an unreadable checkpoint was
        left as it was."""
        if self.committed_data_lost:
            return EXIT_COMMITTED_DATA_LOST
        left = not self.dry_run and any(not c.rewritten for c in self.checkpoints)
        return 1 if left or self.failed or any(p.status == "skipped" for p in self.partitions) else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "log_dir": self.log_dir,
            "dry_run": self.dry_run,
            "from_recovery_point": self.from_recovery_point,
            "marked_clean": self.marked_clean,
            "interrupted": self.interrupted,
            "duration_s": self.duration_s,
            "bytes_total": self.bytes_total,
            "committed_data_lost": self.committed_data_lost,
            "partitions": [p.to_json() for p in self.partitions],
            "checkpoints": [asdict(c) for c in self.checkpoints],
        }


class RecoveryInterrupted(KeyboardInterrupt):
    """Ctrl-C during :func:`recover_log_dir`, raised once the partitions recovered before it have their
    checkpoint entries: ``outcome`` names them, the one interrupted and those not started."""

    def __init__(self, outcome: DirectoryRecovery) -> None:
        super().__init__(f"recovery of {outcome.log_dir} interrupted")
        self.outcome = outcome


class RecoveredBeforeInterrupt(KeyboardInterrupt):
    """Ctrl-C after a partition's log was closed (recovered, flushed, its lock released): ``result`` and
    ``values`` are what :func:`recover_partition` would have returned, to be reported as recovered."""

    def __init__(self, result: PartitionRecovery, values: dict[str, int | None]) -> None:
        super().__init__(f"interrupted after {result.partition} was recovered")
        self.result = result
        self.values = values


def _log_bytes(path: Path) -> int:
    with os.scandir(path) as entries:
        return sum(e.stat().st_size for e in entries if e.name.endswith(LOG_FILE_SUFFIX) and e.is_file())


def _index_digests(path: Path) -> dict[str, bytes]:
    """Digest of every ``.index``/``.timeindex``/``.txnindex`` file (to count the ones recovery rewrote)."""
    out = {}
    with os.scandir(path) as entries:
        for e in entries:
            if e.is_file() and e.name.endswith((INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX, TXN_INDEX_FILE_SUFFIX)):
                with open(e.path, "rb") as f:
                    out[e.name] = hashlib.blake2b(f.read(), digest_size=16).digest()
    return out


def _segments_with_changed_indexes(before: dict[str, bytes], after: dict[str, bytes]) -> int:
    """Segments whose index files appeared or changed (files that vanished went with their segment)."""
    changed = {name.split(".", 1)[0] for name, digest in after.items() if before.get(name) != digest}
    return len(changed)


def _dry_run_index_problems(path: Path, settings: Settings, topic: str) -> int:
    """Segments whose indexes the engine's validator rejects (every entry checked against the log),
    each logged, and those missing an index file, which recovery creates (counted, not logged: a
    broker creates index files lazily, so a missing one is no damage)."""
    meta = scan_partition(path, settings.log_config(topic), log_start_offset=0, high_watermark=0)
    problems = index_problems(meta, include_last=True)
    for base, problem in sorted(problems.items()):
        if not problem.missing:
            logger.warning("%s: segment %d: %s", path.name, base, problem)
    return len(problems)


def _rebuild_damaged_indexes(log: Log, path: Path, config: LogConfig) -> None:
    """Rebuild the indexes the engine's validator rejects (``Log.rebuild_indexes``); a segment
    whose data is invalid is left to a full recovery (logged)."""
    meta = scan_partition(path, config, log_start_offset=0, high_watermark=0)
    for base, problem in sorted(index_problems(meta, include_last=True).items()):
        segment = log.segments.get(base)
        if segment is None:
            continue
        try:
            log.rebuild_indexes(segment, str(problem))
        except CorruptRecordError as e:
            logger.warning("%s: %s", path.name, e)


def _fill_from_report(result: PartitionRecovery, report: RecoveryReport, committed: int | None) -> None:
    result.log_end_offset = report.next_offset
    result.lost_offsets = lost_offset_ranges(report.lost_offsets, report.next_offset, committed)
    result.quarantined = report.quarantined
    result.segments_recovered = report.segments_recovered
    result.bytes_truncated = report.bytes_truncated
    result.batches_dropped = report.batches_dropped
    deleted = report.segments_deleted
    result.segments_deleted = len(deleted)
    result.segment_bytes_deleted = sum(s.segment_bytes for s in deleted)
    result.steps = [s.to_dict() for s in report.steps]


def recover_partition(
    tp: TopicPartition,
    path: Path,
    settings: Settings,
    *,
    recovery_point: int,
    log_start_offset: int,
    high_watermark: int | None,
    committed_offset: int | None = None,
    accept_data_loss: bool = False,
    rebuild_high_watermark: bool = False,
    dry_run: bool,
    clock: Clock,
) -> tuple[PartitionRecovery, dict[str, int | None]]:
    """Recover (or check) one partition under its writer lock.

    ``rebuild_high_watermark``: ``replication-offset-checkpoint`` could not be read, so the partition's
    high watermark is rebuilt: ``high_watermark`` (a sink commit record) if given, else the recovered
    log's end. ``committed_offset`` is the partition's committed end (see the module docstring); with
    ``accept_data_loss`` a loss of committed records is recorded and the log's end moved up to it.
    Returns the outcome and, after a real recovery, the partition's new checkpoint values
    (``recovery-point``, ``log-start-offset``, ``high-watermark``: :func:`released_values`; empty
    for a dry run, and when committed records were lost and the loss not accepted, so that its
    entries keep the committed offset).

    Raises:
        LogLockedError: a live writer holds the partition.
        RecoveredBeforeInterrupt: Ctrl-C after the log was closed (its rebuilt indexes then counted
            from the loader's steps).
    """
    result = PartitionRecovery(partition_name(tp), "checked" if dry_run else "recovered", _log_bytes(path))
    result.committed_offset = committed_offset
    config = settings.log_config(tp[0])
    lock = FileLock(path / PARTITION_LOCK_FILE, role=RECOVERY_ROLE)
    if dry_run:
        lock.probe()  # a dry run writes nothing, not even a lock file
    else:
        lock.acquire(timeout=0)
    log: Log | None = None
    try:
        loader = LogLoader(
            path,
            config,
            recovery_point=recovery_point,
            log_start_offset=log_start_offset,
            had_clean_shutdown=False,
            clock=clock,
            recovery_reason="validated by seglog recover",
            remove_below_log_start=True,  # named as lost offsets, committed ones need --accept-data-loss
        )
        if dry_run:
            _fill_from_report(result, loader.check(), committed_offset)
            result.indexes_rebuilt = _dry_run_index_problems(path, settings, tp[0])
            result.accepted_data_loss = accept_data_loss and result.committed_offsets_lost > 0
            return result, {}
        if not accept_data_loss and log_start_offset > 0 and loader.may_end_below_log_start():
            _refuse_removal_below_log_start(loader, path, log_start_offset, committed_offset)
        before = _index_digests(path)
        loaded = loader.load()
        if rebuild_high_watermark and high_watermark is None:
            high_watermark = loaded.next_offset
        log = Log.from_loaded(path, config, loaded, clock=clock, file_lock=lock, high_watermark=high_watermark)
        if recovery_point > 0:  # segments below it were loaded, not recovered: check every index entry
            _rebuild_damaged_indexes(log, path, config)
        _fill_from_report(result, loaded.report, committed_offset)
        if accept_data_loss and result.committed_offsets_lost > 0:
            _accept_data_loss(tp, path.parent, log, result)
        log.close()  # flushes everything: the recovery point is now the log end offset
        # Its checkpoint entries stay as they are after an unaccepted loss: the committed offset stays known,
        # so the loss is reported again until accepted and writers do not reuse the lost offsets (Log.open).
        kept = result.committed_offsets_lost and not result.accepted_data_loss
        values = {} if kept else released_values(log, had_high_watermark=high_watermark is not None)
        try:
            result.indexes_rebuilt = _segments_with_changed_indexes(before, _index_digests(path))
        except KeyboardInterrupt as e:  # recovered already: only the count of rebuilt indexes is unknown
            result.indexes_rebuilt = sum(1 for s in loaded.report.steps if s.indexes_rebuilt)
            raise RecoveredBeforeInterrupt(result, values) from e
        return result, values
    except RecoveredBeforeInterrupt:
        raise
    except BaseException:
        # Interrupted (Ctrl-C) or failed half-way: let go as a crash would, the holder line kept, so that
        # the next open recovers the partition instead of trusting it (died_holding_reason).
        if log is not None:
            log.abandon()
        lock.release(clear_holder=False)
        raise
    finally:
        lock.release()


def _foreign_directory(path: Path) -> bool:
    """Whether the ``<name>-<number>`` directory ``path`` holds files, none of them a segment, index
    or partition file: another program's directory named like a partition (``--log-dir`` given by
    mistake), which a recovery would turn into a partition by writing a segment and a lock file into
    it. An empty one is a partition without a segment yet (recovery starts one at 0, as Kafka does);
    one that cannot be listed is left to the recovery, which names the error."""
    try:
        names = os.listdir(path)
    except OSError:
        return False
    return bool(names) and not holds_partition_files(names)


def _refuse_removal_below_log_start(
    loader: LogLoader, path: Path, log_start_offset: int, committed: int | None
) -> None:
    """Without ``--accept-data-loss``, never remove intact committed records only because
    ``log-start-offset-checkpoint`` puts them below the log start (a damaged checkpoint, or segment
    files deleted by hand): a removal nothing but that file asks for must be accepted first, or the
    next recovery, finding a log that starts above the committed offset, would report no loss at all.

    Raises:
        StorageError: loading would remove committed offsets below the log start (nothing was changed).
    """
    report = loader.check(quiet=True)  # a real run: the refusal below is what the user is told
    if not report.of_kind(StepKind.DELETE_BELOW_LOG_START):
        return
    lost = [r for r in lost_offset_ranges(report.lost_offsets, report.next_offset, committed) if r["committed"]]
    if not lost:
        return
    log_dir = path.parent
    ranges = ", ".join(f"{r['first']}..{r['last']}" for r in lost)
    raise StorageError(
        f"partition {path.name} in {log_dir}: refused to remove committed offsets {ranges}, nothing changed: "
        f"its checkpointed log start offset {log_start_offset} ({log_dir / LOG_START_OFFSET_CHECKPOINT_FILE}) "
        f"is above its log end, and recovery would remove every segment below it; restore the checkpoint or the "
        f"segments, or remove them and record the loss with `seglog recover --log-dir {log_dir} --accept-data-loss`",
        path=log_dir / LOG_START_OFFSET_CHECKPOINT_FILE,
    )


def _accept_data_loss(tp: TopicPartition, log_dir: Path, log: Log, result: PartitionRecovery) -> None:
    """Record the loss in the accepted-data-loss file, then make the committed offset the log's end
    (an empty segment based there), so the lost offsets are a gap, never reused."""
    committed = result.committed_offset
    assert committed is not None
    record_accepted_loss(
        log_dir,
        {
            "accepted_at_ms": int(time.time() * 1000),
            "command": "seglog recover --accept-data-loss",
            "topic": tp[0],
            "partition": tp[1],
            "lost": [{"first": r["first"], "last": r["last"]} for r in result.lost_offsets if r["committed"]],
            "committed_offset": committed,
            "log_end_offset": log.log_end_offset,
            "quarantined": result.quarantined,
        },
    )
    if log.log_end_offset < committed:
        log.continue_at(committed)
        result.log_end_offset = committed
    result.accepted_data_loss = True
    logger.warning(
        "%s: accepted the loss of %d committed offsets (recorded in the log directory); the log now ends at %d",
        partition_name(tp),
        result.committed_offsets_lost,
        result.log_end_offset,
    )


def recover_log_dir(
    log_dir: Path,
    settings: Settings,
    *,
    dry_run: bool = False,
    from_recovery_point: bool = False,
    accept_data_loss: bool = False,
    progress: bool | None = None,
    clock: Clock | None = None,
) -> DirectoryRecovery:
    """Recover every partition of ``log_dir`` (see the module docstring).

    ``progress``: show a tqdm bar on stderr (None: only on a terminal). Partition failures are
    recorded in the result, never raised.

    Raises:
        ReadOnlyLogDirectoryError: not ``dry_run`` and ``log_dir`` cannot be written (a read-only
            file system): said once for the directory instead of failing every partition.
        RecoveryInterrupted: Ctrl-C; the partitions recovered before it have their checkpoint entries.
    """
    clock = clock or SystemClock()
    log_dir = Path(log_dir)
    if not dry_run:
        check_log_dir_writable(log_dir, "seglog recover can recover nothing there (--dry-run says what it would do)")
    started = time.perf_counter()
    outcome = DirectoryRecovery(str(log_dir), dry_run, from_recovery_point)
    found, unreadable = _read_checkpoints(log_dir)
    outcome.checkpoints = list(unreadable.values())
    recovery_points, start_offsets, high_watermarks = (
        found["recovery-point"],
        found["log-start-offset"],
        found["high-watermark"],
    )
    sink_commits = sink_committed_offsets(log_dir)
    partitions = partition_dirs(log_dir)
    for path, error in misnamed_partition_dirs(log_dir):  # not recovered: the user must know
        logger.warning("%s: skipped, %s", path.name, error)
        outcome.partitions.append(PartitionRecovery(path.name, "skipped", _log_bytes(path), message=str(error)))
    sizes = {tp: _log_bytes(path) for tp, path in partitions}
    new_values: dict[str, dict[TopicPartition, int | None]] = {kind: {} for kind in CHECKPOINT_FILES}
    disable = None if progress is None else not progress

    def record(tp: TopicPartition, result: PartitionRecovery, values: dict[str, int | None]) -> None:
        """Note a partition's outcome and new checkpoint entries (once, even when a Ctrl-C cut it short)."""
        name = partition_name(tp)
        result.committed_offset = committed_offsets[tp]
        if name in {p.partition for p in outcome.partitions}:
            return
        for kind, value in values.items():
            new_values[kind][tp] = value
        _note_rebuilt_entries(unreadable, tp, result, sink_commits)
        outcome.partitions.append(result)
        if result.committed_offsets_lost and not result.accepted_data_loss:
            lost = ", ".join(f"{r['first']}..{r['last']}" for r in result.lost_offsets if r["committed"])
            logger.error("%s: committed data %s: offsets %s", name, "would be lost" if dry_run else "lost", lost)

    committed_offsets: dict[TopicPartition, int | None] = {}
    in_progress: str | None = None  # the partition being recovered, until its outcome is recorded
    done: tuple[TopicPartition, PartitionRecovery, dict[str, int | None]] | None = None
    with tqdm(total=sum(sizes.values()), unit="B", unit_scale=True, desc="recover", disable=disable) as bar:
        try:
            for tp, path in partitions:
                name = partition_name(tp)
                bar.set_postfix_str(name, refresh=False)
                known = [
                    v for v in (recovery_points.get(tp), high_watermarks.get(tp), sink_commits.get(tp)) if v is not None
                ]
                committed = committed_offsets[tp] = max(known) if known else None
                in_progress, done = name, None
                if not known and tp not in start_offsets and _foreign_directory(path):
                    message = (
                        f"{path} holds other files but no segment or other partition file, and no checkpoint "
                        "names it: not a partition directory; left as it is"
                    )
                    logger.warning("%s: skipped, %s", name, message)
                    record(tp, PartitionRecovery(name, "skipped", sizes[tp], message=message), {})
                    in_progress = None
                    continue
                try:
                    done = (
                        tp,
                        *recover_partition(
                            tp,
                            path,
                            settings,
                            recovery_point=recovery_points.get(tp, 0) if from_recovery_point else 0,
                            log_start_offset=start_offsets.get(tp, 0),
                            high_watermark=sink_commits.get(tp)
                            if "high-watermark" in unreadable
                            else high_watermarks.get(tp),
                            committed_offset=committed,
                            accept_data_loss=accept_data_loss,
                            rebuild_high_watermark="high-watermark" in unreadable,
                            dry_run=dry_run,
                            clock=clock,
                        ),
                    )
                except RecoveredBeforeInterrupt as e:
                    done = (tp, e.result, e.values)
                    raise
                except LogLockedError as e:
                    done = (tp, PartitionRecovery(name, "skipped", sizes[tp], message=str(e)), {})
                    logger.warning("%s: skipped, %s", name, e)
                except Exception as e:
                    raise_if_interrupted(e)  # Ctrl-C inside a compiled kernel
                    message = f"{type(e).__name__}: {e}"
                    done = (tp, PartitionRecovery(name, "failed", sizes[tp], message=message), {})
                    # Expected failures (a read-only file system, damage) get one line; others a traceback.
                    expected = isinstance(e, (SeglogError, OSError))
                    logger.error("%s: recovery failed: %s: %s", name, type(e).__name__, e, exc_info=not expected)
                record(*done)
                in_progress = None
                bar.update(sizes[tp])
        except KeyboardInterrupt:  # Ctrl-C: keep what was done, then raise RecoveryInterrupted naming it
            outcome.interrupted = True
            if done is not None:  # a partition whose outcome was known when the interrupt came
                record(*done)
            reported = {p.partition for p in outcome.partitions}
            for tp, _ in partitions:
                name = partition_name(tp)
                if name in reported:
                    continue
                cut = name == in_progress
                message = "interrupted before its recovery ended; run seglog recover again" if cut else ""
                outcome.partitions.append(
                    PartitionRecovery(name, "interrupted" if cut else "not started", sizes[tp], message=message)
                )
    # Partitions without new entries (after the misnamed directories): the file would drop their old ones.
    left_out = [
        p.partition
        for p in outcome.partitions[len(outcome.partitions) - len(partitions) :]
        if p.status not in ("recovered", "checked") or (p.committed_offsets_lost and not p.accepted_data_loss)
    ]
    for kind, repair in unreadable.items():
        _say_repair(repair, CHECKPOINT_FILES[kind], dry_run=dry_run, left_out=left_out)
    if not dry_run:
        for kind, values_of_kind in new_values.items():
            if kind not in unreadable:
                write_checkpoint(log_dir, kind, values_of_kind)
            elif not left_out:
                write_checkpoint(log_dir, kind, values_of_kind, replace_unreadable=True)
                unreadable[kind].rewritten = True
        if all(p.status == "recovered" for p in outcome.partitions):
            write_clean_shutdown_marker(log_dir)
            outcome.marked_clean = True
    outcome.duration_s = time.perf_counter() - started
    if outcome.interrupted:
        raise RecoveryInterrupted(outcome)
    return outcome


def _read_checkpoints(log_dir: Path) -> tuple[dict[str, dict[TopicPartition, int]], dict[str, CheckpointRepair]]:
    """The three checkpoints of ``log_dir`` (:func:`indexer.checkpoint.read_checkpoint`), and those that
    cannot be read, each named (with its error) for repair: recovery rewrites them from the logs."""
    found: dict[str, dict[TopicPartition, int]] = {}
    unreadable: dict[str, CheckpointRepair] = {}
    for kind, name in CHECKPOINT_FILES.items():
        try:
            found[kind] = read_checkpoint(log_dir, name)
        except StorageError as e:
            found[kind] = {}
            unreadable[kind] = CheckpointRepair(str(log_dir / name), str(e.__cause__ or e))
            logger.warning("%s cannot be read: %s", log_dir / name, e.__cause__ or e)
    return found, unreadable


def _note_rebuilt_entries(
    unreadable: dict[str, CheckpointRepair],
    tp: TopicPartition,
    result: PartitionRecovery,
    sinks: dict[TopicPartition, int],
) -> None:
    """Record the entry of ``tp`` each unreadable checkpoint gets (would get, in a dry run) and its
    source: a recovered log's recovery point is its end (everything was flushed), its high watermark
    a sink's commit record if one names it, else its end; raised log start offsets are not known."""
    if result.log_end_offset is None or result.status not in ("recovered", "checked"):
        return
    name = partition_name(tp)
    if "recovery-point" in unreadable:
        unreadable["recovery-point"].entries[name] = {"offset": result.log_end_offset, "source": "log end"}
    if "high-watermark" in unreadable:
        source = "sink commit record" if tp in sinks else "log end"
        offset = min(sinks[tp], result.log_end_offset) if tp in sinks else result.log_end_offset
        unreadable["high-watermark"].entries[name] = {"offset": offset, "source": source}


def _say_repair(repair: CheckpointRepair, name: str, *, dry_run: bool, left_out: list[str]) -> None:
    """Log what recovery does with an unreadable checkpoint and fill ``repair.message``."""
    if left_out:
        repair.message = (
            f"left as it was: partitions {', '.join(left_out)} were not recovered or lost committed data, and "
            "rewriting it would drop their entries; recover them (or accept the loss), then run seglog recover again"
        )
        logger.error("%s: %s", repair.file, repair.message)
        return
    entries = ", ".join(f"{p} {e['offset']} ({e['source']})" for p, e in sorted(repair.entries.items()))
    verb = "would be rewritten" if dry_run else "rewritten"
    repair.message = f"{verb} from the logs: {entries or 'no entries'}"
    if name == CHECKPOINT_FILES["log-start-offset"]:
        repair.message += (
            "; its raised log start offsets are not known: records below them are readable again until retention "
            "deletes them"
        )
    logger.warning("%s: %s", repair.file, repair.message)
