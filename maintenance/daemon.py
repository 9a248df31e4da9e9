"""``seglog maintain``: the maintenance daemon for one log directory.

The daemon runs every job of :data:`maintenance.jobs.JOBS` on its period (see
:mod:`maintenance.scheduler`) until SIGTERM, SIGHUP or SIGINT (Ctrl-C), then lets the running jobs finish,
closes the partitions it borrowed and exits 0. ``--once JOB`` runs one job over the directory and
exits, for cron and tests.

Sharing partitions with writers in other processes (:class:`~maintenance.access.BorrowedLogs`): the
daemon never keeps a partition. For each job pass it takes each partition's writer lock without
waiting, does the job, and closes the partition again, so a writer that starts later finds it free
within one pass. A partition whose lock is held by another live process is skipped by the mutating
jobs (logged once per holder); the ``index`` job still checks it read-only.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from indexer.config import Settings
from indexer.log_manager import check_log_dir_writable, missing_log_dir_note
from indexer.stop_signals import handling_stop_signals
from maintenance.access import READ_ONLY_REFUSED, BorrowedLogs
from maintenance.jobs import JOBS
from maintenance.report import JobReport
from maintenance.scheduler import run_job, start_maintenance
from maintenance.settings import MaintenanceSettings

logger = logging.getLogger(__name__)


def run_once(log_dir: Path, settings: Settings, job: str) -> JobReport | None:
    """Run ``job`` once over every partition of ``log_dir`` that no other process owns.

    Raises:
        ReadOnlyLogDirectoryError: ``log_dir`` cannot be written (nothing is tried, partition by partition).
    """
    if job not in JOBS:
        raise ValueError(f"unknown maintenance job {job!r}; known: {', '.join(JOBS)}")
    check_log_dir_writable(log_dir, READ_ONLY_REFUSED)
    return run_job(job, BorrowedLogs(log_dir, settings))


@contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """Set ``stop`` on SIGTERM/SIGINT/SIGHUP while inside; restore the previous handlers afterwards."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        logger.info("received %s, stopping after the running jobs", signal.Signals(signum).name)
        stop.set()

    with handling_stop_signals(handler):
        yield


def run_daemon(log_dir: Path, settings: Settings, *, stop: threading.Event | None = None) -> int:
    """Schedule every job on ``log_dir`` and block until ``stop`` is set or a signal arrives.

    Must be called from the main thread (signal handlers). Returns the exit status, 0 after a
    graceful stop. A ``log_dir`` that does not exist yet (the daemon started before the writer that
    creates it) has no partitions until it appears; the daemon says so once and keeps running.
    """
    stop = stop or threading.Event()
    MaintenanceSettings.from_settings(settings)  # a bad [maintenance] value fails before anything starts
    missing = missing_log_dir_note(log_dir, "maintaining its partitions")
    with _stop_on_signals(stop):
        handle = start_maintenance(log_dir, settings, paused=True)  # its first line comes before any job's
        logger.info("seglog maintain on %s: %s", log_dir, ", ".join(handle.jobs) or "no jobs")
        if missing:
            logger.warning("%s", missing)
        try:
            handle.resume()
            # Event.wait with a timeout keeps the main thread responsive to signals.
            while not stop.wait(0.5):
                pass
        finally:
            handle.stop()  # lets the running jobs finish; a pass in progress ends after its partition
    logger.info("seglog maintain on %s stopped", log_dir)
    return 0
