"""The maintenance jobs, one function each, and the registry :data:`JOBS` the scheduler reads.

Each job takes a :class:`~maintenance.access.LogAccess` (which partitions it may change and how it
gets them) and returns a :class:`~maintenance.report.JobReport`. Per-partition failures are
recorded in the report and logged with the partition and file; they never stop the job.

===============================  ================================================  ===============================
job                              period key                                        Kafka counterpart
===============================  ================================================  ===============================
``retention``                    ``log.retention.check.interval.ms``               ``kafka-log-retention``
``roll``                         ``seglog.roll.check.interval.ms``                 none (rolls only on append)
``flush``                        ``log.flush.scheduler.interval.ms``               ``kafka-log-flusher``
``checkpoint-recovery-point``    ``log.flush.offset.checkpoint.interval.ms``       ``kafka-recovery-point-checkpoint``
``checkpoint-log-start-offset``  ``log.flush.start.offset.checkpoint.interval.ms``  ``kafka-log-start-offset-ckpt``
``checkpoint-high-watermark``    ``replica.high.watermark.checkpoint.interval.ms``  ``highwatermark-checkpoint``
``index``                        ``seglog.index.check.interval.ms``                none (indexes checked on load)
===============================  ================================================  ===============================

The daemon schedules only the jobs marked ``in_daemon``: it flushes and checkpoints every
partition it borrows when it gives it back, so periodic flush and checkpoint passes would only
reopen idle partitions for nothing (they can still be run with ``--once``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from indexer.data_loss import purge_quarantine
from indexer.errors import CorruptRecordError, SeglogError
from indexer.file_names import TopicPartition, partition_dirs
from indexer.index_check import IndexProblem, segment_index_problem
from indexer.lock import left_by_writer
from indexer.segment import first_batch_max_timestamp, roll_time_reached
from maintenance.access import CHECKPOINT_FILES, LogAccess, checkpoint_value, partition_name
from maintenance.access import write_checkpoint as merge_checkpoint
from maintenance.committed import committed_offsets
from maintenance.metadata import PartitionMetadata, index_problems, retention_plan
from maintenance.report import JobReport

logger = logging.getLogger(__name__)


def retention(access: LogAccess) -> JobReport:
    """Delete segments past ``retention.ms``/``retention.bytes`` or below the log start offset, and
    quarantine files (bytes recovery removed) older than ``quarantine.retention.ms`` (-1: never).

    The engine decides (:func:`indexer.retention.plan_retention`): ``Log.apply_retention`` renames
    deleted segments ``.deleted`` (removed ``file.delete.delay.ms`` later) and says which limit each
    one breached; the report counts them per limit and the log names each segment. The daemon
    opens only the partitions whose files show a breach (the same plan, from file metadata), or
    ``.deleted`` files that no deletion pending in this process will remove (left by a run that
    ended within ``file.delete.delay.ms``): opening removes them, as a broker's restart does.
    """
    report = JobReport("retention")
    with report.timed():
        now = access.clock.milliseconds()
        leftovers: dict[TopicPartition, tuple[str, ...]] = {}

        def wanted(tp: TopicPartition, meta: PartitionMetadata) -> bool:
            leftovers[tp] = access.leftover_deleted_files(tp, meta)
            return bool(leftovers[tp]) or retention_plan(meta, now).needs_log

        for tp, log in access.each_log(report, wanted):
            name = partition_name(tp)
            with report.partition(name, log.directory):
                # Opening the partition removed them (the loader); say so, or why not (an error above).
                removed = [f for f in leftovers.get(tp, ()) if not (log.directory / f).exists()]
                if removed:
                    report.note(name, f"removed {len(removed)} .deleted files an earlier run left")
                    report.count("deleted_files_removed", len(removed))
                decisions = log.apply_retention()
                for decision in decisions:
                    report.note(name, f"deleted segment {decision.base_offset} ({decision.reason} breached)")
                if decisions:
                    report.count("segments_deleted", len(decisions))
        for tp, path in partition_dirs(access.log_dir):
            keep_ms = access.settings.log_config(tp[0]).quarantine_retention_ms
            if keep_ms >= 0:
                name = partition_name(tp)
                with report.partition(name, path):
                    command = f"seglog maintain: retention job (quarantine.retention.ms={keep_ms})"
                    purged = purge_quarantine(path, command=command, older_than_ms=keep_ms, now_ms=now)
                    for q in purged.files:
                        report.note(name, f"deleted quarantine file {q.path.name} (quarantine.retention.ms breached)")
                    if purged.lost:
                        lost = ", ".join(f"{r.first}..{r.end - 1}" for r in purged.lost if r.end is not None)
                        report.note(name, f"offsets {lost} lost for good with them (recorded as an accepted loss)")
                    if purged.files:
                        report.count("quarantine_files_deleted", len(purged.files))
    return report


def roll(access: LogAccess) -> JobReport:
    """Roll active segments past ``segment.ms`` even when no append comes to trigger it.

    The roll seals the old segment (final time-index entry, trimmed index files) and flushes it.
    The check and the roll happen under the log's lock, so they never race an append.
    """
    report = JobReport("roll")
    with report.timed():
        now = access.clock.milliseconds()

        def wanted(_tp: TopicPartition, meta: PartitionMetadata) -> bool:
            if not meta.base_offsets or meta.log_size(meta.base_offsets[-1]) == 0:
                return False
            first = first_batch_max_timestamp(meta.log_path(meta.base_offsets[-1]))
            # Jitter is drawn per open segment; the largest possible jitter keeps this a superset.
            config = meta.config
            return first >= 0 and bool(roll_time_reached(1, now - first, config.segment_ms, config.segment_jitter_ms))

        for tp, log in access.each_log(report, wanted):
            with report.partition(partition_name(tp), log.directory), log.lock:
                if log.active_segment.roll_due(now, log.config.segment_ms):
                    log.roll()
                    report.count("segments_rolled")
    return report


def flush(access: LogAccess) -> JobReport:
    """fsync logs whose last flush is older than ``flush.ms`` and advance their recovery point
    (Kafka's ``flushDirtyLogs``; ``flush.messages`` is enforced by the engine on append)."""
    report = JobReport("flush")
    with report.timed():
        now = access.clock.milliseconds()
        for tp, log in access.each_log(report):
            with report.partition(partition_name(tp), log.directory):
                if now - log.last_flush_time_ms >= log.config.flush_ms:
                    before = log.recovery_point
                    log.flush(log.log_end_offset)
                    if log.recovery_point > before:
                        report.count("logs_flushed")
    return report


def _checkpoint_job(kind: str) -> Callable[[LogAccess], JobReport]:
    def job(access: LogAccess) -> JobReport:
        report = JobReport(f"checkpoint-{kind}")
        with report.timed():
            values: dict[TopicPartition, int | None] = {}
            for tp, log in access.each_log(report):
                with report.partition(partition_name(tp), log.directory):  # opened, flushed and given back: worked on
                    if not access.borrowed:  # a borrowed partition's entries are written as it is given back
                        values[tp] = checkpoint_value(log, kind)
            try:
                written = merge_checkpoint(access.log_dir, kind, values)
            except Exception as e:  # one line naming the file (a full disk), counted: --once exits 1
                if access.checkpoints(report) is not None:  # else made unreadable meanwhile: said once there
                    report.fail(", ".join(partition_name(tp) for tp in sorted(values)), e)
            else:
                if written:
                    report.count("entries_written", written)
        return report

    job.__name__ = f"checkpoint_{kind.replace('-', '_')}"
    job.__doc__ = f"Write ``{CHECKPOINT_FILES[kind]}`` for the partitions this process maintains (atomically, merged)."
    return job


def index(access: LogAccess) -> JobReport:
    """Index care: check the indexes of every sealed segment and rebuild missing or corrupt ones; in
    the daemon, also borrow the partitions whose last writer died holding them (its pid is still in
    the partition's lock file, yet the lock is free) and that have a committed offset, so that
    borrowing cuts the dead writer's uncommitted tail (:class:`~maintenance.access.BorrowedLogs`, the
    same for every job's borrow). A writer that closed cleanly is trusted with its tail. Partitions
    another process holds get a read-only check whose findings are logged.
    """
    report = JobReport("index")
    with report.timed():
        # Partitions with a committed offset at all: which to borrow. What stays is decided under the lock.
        if access.borrowed and access.checkpoints(report) is None:
            return report  # the daemon leaves the directory alone until its checkpoints can be read (said once)
        committed = committed_offsets(access.log_dir) if access.borrowed else {}
        found: dict[TopicPartition, dict[int, IndexProblem]] = {}

        def wanted(tp: TopicPartition, meta: PartitionMetadata) -> bool:
            found[tp] = index_problems(meta)
            # A dead writer (or a live one: then the partition cannot be borrowed) whose tail the borrow
            # cuts (BorrowedLogs), as any job's borrow does.
            return bool(found[tp]) or (tp in committed and left_by_writer(meta.lock_holder()))

        for tp, log in access.each_log(report, wanted):
            name = partition_name(tp)
            with report.partition(name, log.directory):
                segments = log.segments.values()
                still_wrong = set()
                for segment, following in zip(segments, segments[1:], strict=False):
                    try:
                        problem = segment_index_problem(
                            log.directory,
                            segment.base_offset,
                            next_base_offset=following.base_offset,
                            against_log=True,
                        )
                    except FileNotFoundError:
                        continue
                    if problem is not None:
                        report.note(name, f"segment {segment.base_offset}: {problem}")
                        still_wrong.add(segment.base_offset)
                        try:
                            if log.rebuild_indexes(segment, str(problem)):
                                report.count("indexes_rebuilt")
                        except CorruptRecordError as e:
                            report.fail(name, e)
                # Opening a borrowed partition already rebuilt what the loader found wrong.
                fixed_on_open = [b for b in found.get(tp, {}) if b in log.segments and b not in still_wrong]
                for base in fixed_on_open:
                    report.note(name, f"segment {base}: {found[tp][base]} (rebuilt when the partition was opened)")
                if fixed_on_open:
                    report.count("indexes_rebuilt", len(fixed_on_open))
        for tp, path in access.foreign_partitions():
            if not access.borrowed:
                report.checked += 1  # a borrowing access counted it when it found it held
            try:
                problems = index_problems(access.metadata(tp, path))
            except (OSError, SeglogError) as e:
                report.fail(partition_name(tp), e)
                continue
            for base, problem in sorted(problems.items()):
                logger.warning("%s (held by another process): segment %d: %s", partition_name(tp), base, problem)
                report.findings.append(f"{partition_name(tp)} (held by another process): segment {base}: {problem}")
            if problems:  # found, not acted on: a detail, not an action
                found_so_far = report.details.get("foreign_index_problems", 0)
                report.details["foreign_index_problems"] = found_so_far + len(problems)
    return report


@dataclass(frozen=True, slots=True)
class Job:
    """A registered job: its function, the :class:`MaintenanceSettings` attribute of its period,
    and whether the daemon schedules it."""

    name: str
    fn: Callable[[LogAccess], JobReport]
    period_attr: str
    in_daemon: bool


JOBS: dict[str, Job] = {
    job.name: job
    for job in (
        Job("retention", retention, "retention_check_interval_ms", True),
        Job("roll", roll, "roll_check_interval_ms", True),
        Job("flush", flush, "flush_scheduler_interval_ms", False),
        Job(
            "checkpoint-recovery-point", _checkpoint_job("recovery-point"), "flush_offset_checkpoint_interval_ms", False
        ),
        Job(
            "checkpoint-log-start-offset",
            _checkpoint_job("log-start-offset"),
            "flush_start_offset_checkpoint_interval_ms",
            False,
        ),
        Job(
            "checkpoint-high-watermark",
            _checkpoint_job("high-watermark"),
            "high_watermark_checkpoint_interval_ms",
            False,
        ),
        Job("index", index, "index_check_interval_ms", True),
    )
}
