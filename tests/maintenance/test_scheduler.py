"""The APScheduler setup: job options, error containment, the in-process handle."""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from indexer.clock import MockClock
from indexer.errors import ConfigError
from indexer.log_manager import LogManager
from maintenance import jobs as jobs_module
from maintenance.access import BorrowedLogs, OwnedLogs
from maintenance.jobs import JOBS, Job
from maintenance.report import JobReport
from maintenance.scheduler import add_jobs, new_scheduler, run_job, start_maintenance
from maintenance.settings import MaintenanceSettings
from tests.maintenance.conftest import append_batches, settings_for, small_config


def test_every_job_is_scheduled_without_overlap_and_coalesced(log_dir: Path) -> None:
    settings = MaintenanceSettings(initial_task_delay_ms=30_000, misfire_grace_ms=7_000)
    scheduler = new_scheduler()
    start = datetime(2026, 1, 1, tzinfo=UTC)
    access = OwnedLogs(log_dir, settings_for(small_config()), {})
    added = add_jobs(scheduler, access, settings, start=start)
    assert "flush" not in added  # log.flush.scheduler.interval.ms = Long.MAX: never
    assert set(added) == set(JOBS) - {"flush"}
    for job in scheduler.get_jobs():
        assert job.max_instances == 1 and job.coalesce is True and job.misfire_grace_time == 7
        assert job.next_run_time == start + timedelta(seconds=30)
        period_ms = getattr(settings, JOBS[job.id].period_attr)
        assert job.trigger.interval == timedelta(milliseconds=period_ms)


def test_long_max_delays_mean_never_and_unlimited_not_a_crash(log_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Kafka's Long.MAX (or any delay past NEVER_MS) as log.initial.task.delay.ms crashed the daemon at
    start (OverflowError, "looks like a bug"); as seglog.misfire.grace.ms it failed every run of every
    job with APScheduler's traceback. Now the jobs never start, or their lateness is unlimited; a value
    beyond a long is a ConfigError."""
    access = OwnedLogs(log_dir, settings_for(small_config()), {})
    caplog.set_level(logging.INFO)
    never = MaintenanceSettings(initial_task_delay_ms=2**63 - 1)
    assert add_jobs(new_scheduler(), access, never) == []
    assert any("log.initial.task.delay.ms" in r.getMessage() and "never" in r.getMessage() for r in caplog.records)
    unlimited = MaintenanceSettings(initial_task_delay_ms=0, misfire_grace_ms=2**63 - 1, roll_check_interval_ms=20)
    scheduler = new_scheduler()
    assert "roll" in add_jobs(scheduler, access, unlimited)
    assert all(job.misfire_grace_time is None for job in scheduler.get_jobs())
    scheduler.start()
    time.sleep(0.3)  # runs of every job
    scheduler.shutdown()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    with pytest.raises(ConfigError, match="seglog.misfire.grace.ms must be <= 9223372036854775807"):
        MaintenanceSettings.from_mapping({"seglog.misfire.grace.ms": 10**23})


def test_the_daemon_schedules_only_its_jobs(log_dir: Path) -> None:
    scheduler = new_scheduler()
    added = add_jobs(scheduler, BorrowedLogs(log_dir, settings_for(small_config())), MaintenanceSettings())
    assert added == ["retention", "roll", "index"]


def test_unknown_job_names_are_rejected(log_dir: Path) -> None:
    with pytest.raises(ValueError, match="unknown maintenance job"):
        add_jobs(
            new_scheduler(),
            OwnedLogs(log_dir, settings_for(small_config()), {}),
            MaintenanceSettings(),
            jobs=["vacuum"],
        )


def test_a_crashing_job_is_logged_and_contained(
    log_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def explode(_access: object) -> JobReport:
        raise RuntimeError("boom")

    monkeypatch.setitem(JOBS, "retention", Job("retention", explode, "retention_check_interval_ms", True))
    with caplog.at_level(logging.ERROR, logger="maintenance.scheduler"):
        assert run_job("retention", OwnedLogs(log_dir, settings_for(small_config()), {})) is None
    assert "maintenance job retention failed" in caplog.text and "boom" in caplog.text


def test_runs_of_one_job_never_overlap(log_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    running, overlaps, runs = [0], [0], [0]
    guard = threading.Lock()

    def slow(_access: object) -> JobReport:
        with guard:
            running[0] += 1
            overlaps[0] = max(overlaps[0], running[0])
        time.sleep(0.15)
        with guard:
            running[0] -= 1
            runs[0] += 1
        return JobReport("roll")

    monkeypatch.setitem(JOBS, "roll", Job("roll", slow, "roll_check_interval_ms", True))
    scheduler = new_scheduler()
    settings = MaintenanceSettings(initial_task_delay_ms=0, roll_check_interval_ms=20)
    add_jobs(scheduler, OwnedLogs(log_dir, settings_for(small_config()), {}), settings, jobs=["roll"])
    scheduler.start()
    try:
        deadline = time.monotonic() + 60  # not a fixed 0.8 s: a loaded machine may fit fewer runs in it
        while runs[0] < 3:
            assert time.monotonic() < deadline, runs
            time.sleep(0.02)
    finally:
        scheduler.shutdown(wait=True)
    assert overlaps[0] == 1


@pytest.mark.parametrize("paused", [False, True])
def test_start_maintenance_runs_jobs_on_the_managers_logs(log_dir: Path, paused: bool) -> None:
    """Jobs run on the manager's logs. Started ``paused`` (the daemon, whose first line
    'seglog maintain on ...: jobs' came after a job's lines with log.initial.task.delay.ms=0), none
    runs until :meth:`MaintenanceHandle.resume`."""
    clock = MockClock()
    settings = settings_for(
        small_config(retention_ms=5_000),
        {"log.initial.task.delay.ms": 0, "log.retention.check.interval.ms": 50},
    )
    manager = LogManager(log_dir, settings, clock=clock)
    try:
        log = manager.get_or_create_log("t", 0)
        append_batches(log, clock, 12)
        log.update_high_watermark(log.log_end_offset)
        segments = log.num_segments
        handle = start_maintenance(manager, settings, jobs=["retention"], paused=paused)
        try:
            if paused:
                time.sleep(0.5)  # ten intervals: none ran
                assert log.num_segments == segments
                handle.resume()
            deadline = time.monotonic() + 10
            while log.num_segments == segments and time.monotonic() < deadline:
                time.sleep(0.02)
            assert log.num_segments < segments
            assert handle.jobs == ["retention"]
        finally:
            handle.stop()
            handle.stop()
        assert handle.stopped and not handle.scheduler.running
    finally:
        manager.close()


def test_job_registry_has_one_function_per_job() -> None:
    for name, job in JOBS.items():
        assert job.name == name and callable(job.fn)
        assert hasattr(MaintenanceSettings(), job.period_attr)
    assert jobs_module.retention is JOBS["retention"].fn
