"""The APScheduler setup shared by the daemon and the streaming job (Kafka's ``LogManager.startup``).

Every job of :data:`maintenance.jobs.JOBS` becomes one interval job whose period comes from
:class:`~maintenance.settings.MaintenanceSettings` (Kafka's key names). Each job runs with
``max_instances=1`` (a slow pass is never overlapped by the next one), ``coalesce=True`` (runs
missed while the process was busy or suspended collapse into one) and ``misfire_grace_time`` from
``seglog.misfire.grace.ms``. A job never raises into the scheduler: per-partition errors are caught
and logged inside the job (with the partition and file), and anything else is caught by
:func:`run_job` and logged, so a broken partition cannot stop the daemon.

The first run of every job is ``log.initial.task.delay.ms`` after start, as in Kafka.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.schedulers.base import BaseScheduler

from indexer.config import Settings
from indexer.file_names import parse_topic_partition_name
from indexer.log import Log
from indexer.log_manager import LogManager
from maintenance.access import BorrowedLogs, LogAccess, OwnedLogs
from maintenance.jobs import JOBS
from maintenance.report import JobReport
from maintenance.settings import MaintenanceSettings, is_never

logger = logging.getLogger(__name__)

# Jobs of different kinds may run at the same time (each takes the Log's lock per partition);
# two threads are enough on the 2-core machines seglog targets.
_WORKERS = 2


def run_job(name: str, access: LogAccess) -> JobReport | None:
    """Run job ``name`` once over the partitions of ``access``; log and swallow any failure.

    Returns the job's report, or None when the job itself failed (the error is logged) or did not run
    because the log directory cannot be written (:meth:`LogAccess.writable`: said once, not per run).
    Thread-safe.
    """
    try:
        if not access.writable():
            return None
        report = JOBS[name].fn(access)
    except Exception:
        logger.exception("maintenance job %s failed", name)
        return None
    log = logger.info if report.actions or report.errors else logger.debug
    log("%s", report.summary())
    return report


def add_jobs(
    scheduler: BaseScheduler,
    access: LogAccess,
    settings: MaintenanceSettings,
    *,
    jobs: Iterable[str] | None = None,
    start: datetime | None = None,
) -> list[str]:
    """Add periodic jobs to ``scheduler``: those named in ``jobs``, by default every job of
    :data:`JOBS` (only the ``in_daemon`` ones when ``access`` borrows partitions, i.e. the daemon).

    Jobs whose period means "never" (see :func:`~maintenance.settings.is_never`) are left out, and so
    is every job when ``log.initial.task.delay.ms`` does; a ``seglog.misfire.grace.ms`` that means
    never lets a late run start however late (Kafka's Long.MAX). Returns the names of the jobs added.
    """
    if jobs is None:
        names = [name for name, job in JOBS.items() if job.in_daemon or not access.borrowed]
    else:
        names = list(jobs)
    unknown = [n for n in names if n not in JOBS]
    if unknown:
        raise ValueError(f"unknown maintenance job(s) {unknown}; known: {', '.join(JOBS)}")
    if is_never(settings.initial_task_delay_ms):
        logger.info("maintenance jobs never start (log.initial.task.delay.ms %d)", settings.initial_task_delay_ms)
        return []
    first = (start or datetime.now(UTC)) + timedelta(milliseconds=settings.initial_task_delay_ms)
    grace_s = None if is_never(settings.misfire_grace_ms) else max(1, settings.misfire_grace_ms // 1000)
    added = []
    for name in names:
        period_ms = getattr(settings, JOBS[name].period_attr)
        if is_never(period_ms):
            logger.info("maintenance job %s is disabled (period %d ms)", name, period_ms)
            continue
        scheduler.add_job(
            run_job,
            "interval",
            args=(name, access),
            id=name,
            name=f"seglog-{name}",
            seconds=period_ms / 1000.0,
            next_run_time=first,
            max_instances=1,
            coalesce=True,
            misfire_grace_time=grace_s,
            replace_existing=True,
        )
        added.append(name)
    return added


class _SkippedRunsAtDebug(logging.Filter):
    """Log APScheduler's "skipped: maximum number of running instances" and "was missed by" warnings
    at DEBUG on this module's logger instead: a run skipped while the previous one is still going,
    or coalesced after a late start, is what ``max_instances=1`` and ``coalesce=True`` ask for (Kafka's
    scheduler says nothing either), not something an operator must act on."""

    _EXPECTED = ("maximum number of running instances reached", "was missed by")

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if record.levelno == logging.WARNING and any(text in message for text in self._EXPECTED):
            logger.debug("%s", message)
            return False
        return True


_SKIPPED_RUNS_AT_DEBUG = _SkippedRunsAtDebug()


def new_scheduler() -> BackgroundScheduler:
    """A UTC background scheduler with a small thread pool (UTC: no dependence on the host's time zone),
    whose skipped and coalesced runs are logged at DEBUG (:class:`_SkippedRunsAtDebug`)."""
    # The scheduler's logger says a run was skipped, the default executor's that one was missed
    # (addFilter adds a filter once).
    for name in ("apscheduler.scheduler", "apscheduler.executors.default"):
        logging.getLogger(name).addFilter(_SKIPPED_RUNS_AT_DEBUG)
    return BackgroundScheduler(executors={"default": ThreadPoolExecutor(_WORKERS)}, timezone=UTC)


class MaintenanceHandle:
    """A running :class:`BackgroundScheduler` of maintenance jobs; :meth:`stop` ends it.

    Thread-safe: :meth:`stop` may be called from any thread, more than once.
    """

    def __init__(self, scheduler: BaseScheduler, access: LogAccess, jobs: list[str]) -> None:
        self.scheduler = scheduler
        self.access = access
        self.jobs = jobs
        self._stopped = threading.Event()

    def stop(self, wait: bool = True) -> None:
        """Stop scheduling; with ``wait`` also wait for running jobs to finish. Idempotent."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        if isinstance(self.access, BorrowedLogs):
            self.access.stop()  # a pass in progress ends after its current partition
        if self.scheduler.running:
            self.scheduler.shutdown(wait=wait)
        logger.info("maintenance stopped")

    def resume(self) -> None:
        """Let the jobs of a scheduler started paused (``start_maintenance(..., paused=True)``) run."""
        self.scheduler.resume()

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()


def owned_logs(log_manager: LogManager) -> OwnedLogs:
    """The writable logs ``log_manager`` has open, as a :class:`OwnedLogs` that follows new ones."""

    def current() -> dict[tuple[str, int], Log]:
        return {
            parse_topic_partition_name(log.directory.name): log for log in log_manager.all_logs() if not log.read_only
        }

    return OwnedLogs(log_manager.log_dir, log_manager.settings, current, clock=log_manager.clock)


def start_maintenance(
    target: LogManager | Path,
    settings: MaintenanceSettings | Settings | None = None,
    *,
    jobs: Iterable[str] | None = None,
    paused: bool = False,
) -> MaintenanceHandle:
    """Run the maintenance jobs in the background of this process (the streaming main job's use).

    Given a :class:`LogManager`, jobs act on the partitions it has open in this process, under each
    Log's own lock, so they interleave safely with the writer's appends. Given a log directory, they
    borrow each partition in turn as ``seglog maintain`` does (:class:`BorrowedLogs`): for writers
    that hold no partition in this process (the sink's executor writes, whose tasks wait for a
    borrowed partition). ``settings`` may be loaded ``conf/seglog.toml`` settings or a
    :class:`MaintenanceSettings` (default: the manager's settings' ``[maintenance]`` section); with a
    directory it must be the loaded :class:`Settings`, which also give the partitions' topic configs.
    ``paused``: no job runs until :meth:`MaintenanceHandle.resume` (the daemon says it is on first).

    Raises:
        ValueError: a directory without its :class:`Settings`.
    """
    if isinstance(target, LogManager):
        settings = target.settings if settings is None else settings
        access: LogAccess = owned_logs(target)
    elif isinstance(settings, Settings):
        access = BorrowedLogs(target, settings)
    else:
        raise ValueError("start_maintenance on a log directory needs its Settings")
    if isinstance(settings, Settings):
        settings = MaintenanceSettings.from_settings(settings)
    scheduler = new_scheduler()
    added = add_jobs(scheduler, access, settings, jobs=jobs)
    scheduler.start(paused=paused)
    logger.info("maintenance of %s started: %s", access.log_dir, ", ".join(added) or "no jobs")
    return MaintenanceHandle(scheduler, access, added)
