"""``seglog maintain`` as a real process, and sharing partitions with a writer in another process."""

from __future__ import annotations

import json
import logging
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from indexer.clock import MockClock
from indexer.config import LogConfig
from indexer.log import Log
from maintenance.access import BorrowedLogs
from maintenance.jobs import JOBS
from tests.filesystems import read_only_view
from tests.maintenance.conftest import (
    REPO,
    SEGLOG,
    append_batches,
    maintain_daemon,
    numbered_partition,
    settings_for,
    small_config,
    wait_for,
    write_conf,
)


def expired_partition(log_dir: Path, appends: int = 12) -> Path:
    clock = MockClock(1_600_000_000_000)  # long ago: every segment is past retention.ms
    log = Log.open(log_dir / "t-0", small_config(), clock=clock)
    append_batches(log, clock, appends)
    log.update_high_watermark(log.log_end_offset)
    directory = log.directory
    log.close()
    (log_dir / "replication-offset-checkpoint").write_text(f"0\n1\nt 0 {log.high_watermark}\n")
    return directory


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_daemon_stops_gracefully_on_signals(tmp_path: Path, log_dir: Path, sig: signal.Signals) -> None:
    """SIGHUP (the terminal or ssh session that started it closed) killed the daemon mid-pass; a Kafka
    broker's JVM stops cleanly on it, as on SIGTERM."""
    directory = expired_partition(log_dir)
    conf = write_conf(
        tmp_path / "seglog.toml",
        {"retention.ms": 60_000, "segment.bytes": 600},
        {
            "log.initial.task.delay.ms": 0,
            "log.retention.check.interval.ms": 100,
            "seglog.roll.check.interval.ms": 100,
            "seglog.index.check.interval.ms": 100,
        },
    )
    with maintain_daemon(log_dir, conf) as (proc, err):
        wait_for(err, "retention: 1 partitions")  # the first retention pass deleted the expired segments
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == 0
        wait_for(err, "stopped", timeout=5)
    assert len(list(directory.glob("*.log"))) == 1
    Log.open(directory, small_config()).close()  # the daemon left the partition free


def test_a_daemon_started_under_nohup_keeps_running_on_sighup(tmp_path: Path, log_dir: Path) -> None:
    """SIGHUP ignored when it starts (``nohup``) stays ignored, as the JVM leaves it."""
    conf = write_conf(tmp_path / "seglog.toml", {}, {"log.initial.task.delay.ms": 0})
    with maintain_daemon(log_dir, conf, ignore_hangup=True) as (proc, err):
        proc.send_signal(signal.SIGHUP)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert (
            wait_for(err, "received", timeout=5)[-1]
            .rstrip()
            .endswith("received SIGTERM, stopping after the running jobs")
        )


def test_a_daemon_started_before_its_log_directory_exists_waits_for_it(tmp_path: Path) -> None:
    """A daemon started before the writer that creates the log directory (service start order) runs
    and maintains the partitions once they appear, instead of exiting 1 (Kafka creates missing log
    directories at startup); it says once that the directory does not exist yet."""
    log_dir = tmp_path / "not-yet"
    conf = write_conf(
        tmp_path / "seglog.toml",
        {"retention.ms": 60_000, "segment.bytes": 600},
        {"log.initial.task.delay.ms": 0, "log.retention.check.interval.ms": 100},
    )
    with maintain_daemon(log_dir, conf, verbose=False) as (proc, err):
        assert proc.poll() is None
        log_dir.mkdir()
        expired_partition(log_dir)
        seen = wait_for(err, "t-0: deleted segment")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    assert sum(f"log directory {log_dir} does not exist yet" in line for line in seen) == 1, seen


def test_a_daemon_whose_log_directory_is_deleted_says_so_once_and_resumes_when_it_is_back(
    tmp_path: Path, log_dir: Path
) -> None:
    """A log directory deleted under a running daemon (rm -rf, an unmounted volume) left it silent:
    every pass found no partition and said nothing, as if all were well. It says once that the
    directory does not exist any more and that its passes are skipped, and once that it is back."""
    expired_partition(log_dir)
    conf = write_conf(
        tmp_path / "seglog.toml",
        {"retention.ms": 60_000, "segment.bytes": 600},
        {"log.initial.task.delay.ms": 0, "log.retention.check.interval.ms": 50},
    )
    with maintain_daemon(log_dir, conf, verbose=False) as (proc, err):
        seen = wait_for(err, "retention: 1 partitions checked, 1 worked on")  # given back
        shutil.rmtree(log_dir)
        seen += wait_for(err, "does not exist any more")
        log_dir.mkdir()
        expired_partition(log_dir)
        seen += wait_for(err, "t-0: deleted segment")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        seen += wait_for(err, "stopped", timeout=5)
    assert sum("does not exist any more" in line for line in seen) == 1, seen
    assert sum(f"log directory {log_dir} exists again" in line for line in seen) == 1, seen
    assert [line for line in seen if " ERROR " in line or "Traceback" in line] == [], seen


def test_a_daemon_on_a_read_only_log_directory_says_so_once(tmp_path: Path, log_dir: Path) -> None:
    """On a read-only file system every pass would fail on every partition: the daemon says once that
    the directory is read-only and what it will not do, instead of an error per partition per pass;
    remounted read-write, it says so once and maintains the partitions again."""
    expired_partition(log_dir)
    conf = write_conf(
        tmp_path / "seglog.toml",
        {"retention.ms": 60_000, "segment.bytes": 600},
        {
            "log.initial.task.delay.ms": 300,  # after the start line, which maintain_daemon waits for
            "log.retention.check.interval.ms": 50,
            "seglog.roll.check.interval.ms": 50,
            "seglog.index.check.interval.ms": 50,
        },
    )
    with (
        read_only_view(log_dir, tmp_path / "ro") as read_only,
        maintain_daemon(read_only, conf, verbose=False) as (
            proc,
            err,
        ),
    ):
        seen = wait_for(err, "read-only")
        time.sleep(1.5)  # some thirty passes
        subprocess.run(["mount", "-o", "remount,bind,rw", str(read_only)], check=True)
        seen += wait_for(err, "t-0: deleted segment")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        seen += wait_for(err, "stopped", timeout=5)
    assert sum("read-only" in line for line in seen) == 1, seen
    assert sum("is writable again: maintenance resumes" in line for line in seen) == 1, seen
    assert [line for line in seen if " ERROR " in line or "Traceback" in line] == [], seen


def test_the_daemon_says_what_it_does_without_verbose(tmp_path: Path, log_dir: Path) -> None:
    """An operator running ``seglog maintain`` sees, without ``-v``, that it started, each segment it
    deleted and that it stopped (Kafka logs deletions at INFO), not the scheduler's own chatter."""
    expired_partition(log_dir)
    conf = write_conf(
        tmp_path / "seglog.toml",
        {"retention.ms": 60_000, "segment.bytes": 600},
        {"log.initial.task.delay.ms": 0, "log.retention.check.interval.ms": 100},
    )
    with maintain_daemon(log_dir, conf, verbose=False) as (proc, err):
        wait_for(err, "t-0: deleted segment")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        rest = wait_for(err, "stopped", timeout=5)
    assert "apscheduler" not in rest, rest


def test_runs_skipped_or_coalesced_by_design_are_not_warnings(tmp_path: Path, log_dir: Path) -> None:
    """A pass that outlasts its period (jobs wait for each other's pass in the daemon) makes APScheduler
    skip or coalesce runs, which ``max_instances=1``/``coalesce=True`` ask for: no WARNING on stderr
    for that, with or without ``-v`` (they are logged at DEBUG)."""
    expired_partition(log_dir, appends=60)
    conf = write_conf(
        tmp_path / "seglog.toml",
        {"retention.ms": 60_000, "segment.bytes": 600},
        {
            "log.initial.task.delay.ms": 0,
            "log.retention.check.interval.ms": 10,
            "seglog.roll.check.interval.ms": 10,
            "seglog.index.check.interval.ms": 10,
            "seglog.misfire.grace.ms": 1,
        },
    )
    with maintain_daemon(log_dir, conf) as (proc, err):
        seen = wait_for(err, "t-0: deleted segment")
        time.sleep(1.5)  # passes of 10 ms jobs that wait for each other
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        seen += wait_for(err, "stopped", timeout=5)
    assert [line for line in seen if " WARNING " in line or " ERROR " in line] == []


def test_once_runs_one_job_and_exits(tmp_path: Path, log_dir: Path) -> None:
    directory = expired_partition(log_dir)
    segments = len(list(directory.glob("*.log")))
    conf = write_conf(tmp_path / "seglog.toml", {"retention.ms": 60_000, "segment.bytes": 600}, {})
    done = subprocess.run(
        [*SEGLOG, "maintain", "--log-dir", str(log_dir), "--conf", str(conf), "--once", "retention", "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    # Everything was committed and expired: the active segment goes too, after a roll (Kafka's rule).
    assert report["job"] == "retention" and report["details"] == {"segments_deleted": segments}
    assert report["errors"] == [] and report["partitions"] == 1
    assert [p.stat().st_size for p in directory.glob("*.log")] == [0]


def test_partitions_of_a_live_writer_are_only_checked_read_only(
    log_dir: Path, live_writer: subprocess.Popen[str], caplog: pytest.LogCaptureFixture
) -> None:
    directory = log_dir / "t-0"
    sealed = sorted(directory.glob("*.timeindex"))[0]
    with open(sealed, "ab") as f:
        f.write(b"\x00\x01")  # a torn entry the index job must notice but not touch
    files_before = {p.name: p.stat().st_size for p in directory.iterdir()}
    access = BorrowedLogs(log_dir, settings_for(small_config(retention_ms=1)), clock=MockClock(2_000_000_000_000))
    with caplog.at_level(logging.INFO, logger="maintenance.access"):
        for _ in range(2):
            report = JOBS["retention"].fn(access)
            assert report.skipped == ["t-0"] and report.actions == 0 and report.errors == []
        index_report = JOBS["index"].fn(access)
    assert index_report.details == {"foreign_index_problems": 1} and index_report.actions == 0
    assert {p.name: p.stat().st_size for p in directory.iterdir()} == files_before
    assert caplog.text.count("skipped by mutating maintenance jobs") == 1
    assert f"pid {live_writer.pid}" in caplog.text
    # Once the writer is gone the partition is maintained again.
    live_writer.stdin.close()  # type: ignore[union-attr]
    assert live_writer.wait(timeout=30) == 0
    report = JOBS["retention"].fn(access)
    assert report.skipped == [] and report.details["segments_deleted"] > 0


def test_a_reader_opening_the_partition_during_retention_sees_no_error(tmp_path: Path, log_dir: Path) -> None:
    """A reader in another process (``seglog read``, serve, the Spark reader open the partition
    read-only) that opens it while retention renames hundreds of segments ``.deleted`` must get the
    log before or after the deletion, not ``StorageError: Failed to open ...log: No such file``.

    No recovery point is checkpointed, so the daemon's first open also recovers every segment, with its
    default ``index.interval.bytes`` (4096: sparser indexes than the writer's): the reader must survive
    the rebuild of the index files it has mapped too (docs/recovery.md, "Readers beside a recovery")."""
    config = LogConfig.from_mapping({"segment.bytes": 400, "index.interval.bytes": 100, "retention.ms": -1})
    committed, _end = numbered_partition(log_dir, config, 600)
    conf = write_conf(
        tmp_path / "seglog.toml", {"segment.bytes": 400, "retention.bytes": 20_000, "retention.ms": -1}, {}
    )
    pristine = tmp_path / "pristine"
    shutil.copytree(log_dir, pristine)
    opens = 0
    for _trial in range(3):
        shutil.rmtree(log_dir)
        shutil.copytree(pristine, log_dir)
        daemon = subprocess.Popen(
            [*SEGLOG, "maintain", "--log-dir", str(log_dir), "--conf", str(conf), "--once", "retention"],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        while daemon.poll() is None:
            log = Log.open(log_dir / "t-0", config, read_only=True)
            try:
                start = log.log_start_offset
                assert log.read_records(start, max_offset=committed).column("offset").to_pylist() == list(
                    range(start, committed)
                )
            finally:
                log.close()
            opens += 1
        assert daemon.wait() == 0, daemon.stderr.read() if daemon.stderr else ""
    assert opens > 3
