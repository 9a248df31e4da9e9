"""Crash tests: SIGKILL a writer and a maintenance daemon at random moments; committed data survives."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from indexer.config import LogConfig, Settings
from indexer.log import Log
from maintenance.recovery import recover_log_dir
from seglog.cli import main
from tests.maintenance.conftest import REPO, SEGLOG, lines_of, maintain_daemon, wait_for, write_conf
from tests.maintenance.writer_proc import values_for

WRITER = [sys.executable, "-m", "tests.maintenance.writer_proc"]
TOPIC = {
    "segment.bytes": 2000,
    "index.interval.bytes": 200,
    "segment.index.bytes": 4096,
    "retention.bytes": 4000,
    "retention.ms": -1,
    "segment.ms": 300,
    "file.delete.delay.ms": 50,
}


def settings() -> Settings:
    return Settings(topic_defaults=TOPIC, source="test")


def check_partition(log_dir: Path, partition: int, committed: int) -> None:
    """Offsets from the log start offset to ``committed`` hold exactly the records the writer wrote."""
    log = Log.open(log_dir / f"t-{partition}", LogConfig.from_mapping(TOPIC), read_only=True)
    try:
        assert log.log_end_offset >= committed
        start = log.log_start_offset
        assert start <= committed
        table = log.read_records(start, max_offset=committed)
        assert table.column("offset").to_pylist() == list(range(start, committed))
        assert table.column("value").to_pylist() == values_for(start, committed - start)
    finally:
        log.close()


def last_committed(lines: list[str]) -> int:
    return max((int(line.split()[1]) for line in lines if line.startswith("COMMITTED")), default=0)


def drain(q: object) -> list[str]:
    out = []
    while True:
        try:
            out.append(q.get_nowait())  # type: ignore[attr-defined]
        except Exception:
            return out


@pytest.mark.slow
def test_sigkill_writer_and_daemon_at_random_moments(tmp_path: Path) -> None:
    rng = random.Random(4242)
    log_dir = tmp_path / "logs"
    conf = write_conf(
        tmp_path / "seglog.toml",
        TOPIC,
        {
            "log.initial.task.delay.ms": 0,
            "log.retention.check.interval.ms": 20,
            "seglog.roll.check.interval.ms": 20,
            "seglog.index.check.interval.ms": 50,
        },
    )
    # Partition 1: written once, then left to the daemon (which rolls, deletes and truncates it).
    idle = subprocess.run(
        [*WRITER, "--log-dir", str(log_dir), "--partition", "1", "--appends", "60"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert idle.returncode == 0, idle.stderr
    committed = {0: 0, 1: last_committed(idle.stdout.splitlines())}
    for _trial in range(3):
        writer = subprocess.Popen(
            [*WRITER, "--log-dir", str(log_dir), "--partition", "0"], cwd=REPO, stdout=subprocess.PIPE, text=True
        )
        try:
            out = lines_of(writer.stdout)  # type: ignore[arg-type]
            with maintain_daemon(log_dir, conf) as (daemon, _err):
                wait_for(out, "READY")
                for proc in rng.sample([writer, daemon], 2):  # both die, in random order, at random moments
                    time.sleep(rng.uniform(0.05, 1.0))
                    proc.send_signal(signal.SIGKILL)
                    proc.wait(timeout=30)
            committed[0] = max(committed[0], last_committed(drain(out)))
        finally:
            if writer.poll() is None:
                writer.kill()
                writer.wait()
        outcome = recover_log_dir(log_dir, settings(), progress=False)
        assert outcome.exit_status() == 0, [p.to_json() for p in outcome.partitions]
        assert outcome.marked_clean
        for partition, end in committed.items():
            check_partition(log_dir, partition, end)
    assert committed[0] > 0
    # The daemon does its work on the idle partition: segments rolled and deleted by retention.bytes
    # (one more pass of its own, since the random kills may all have come before its first one).
    assert main(["maintain", "--log-dir", str(log_dir), "--conf", str(conf), "--once", "retention"]) == 0
    idle_log = Log.open(log_dir / "t-1", LogConfig.from_mapping(TOPIC), read_only=True)
    try:
        assert idle_log.log_start_offset > 0
    finally:
        idle_log.close()


def test_a_killed_daemon_is_not_taken_for_a_dead_writer(tmp_path: Path) -> None:
    """A daemon SIGKILLed while it borrows a partition leaves its holder line in the lock file; the next
    ``index`` pass must not take it for a writer that died mid-batch and truncate the tail a writer that
    closed cleanly left above the high watermark (that tail is trusted; only the writer's own next
    batch or a sink decides about it)."""
    log_dir = tmp_path / "logs"
    config = LogConfig.from_mapping({"segment.bytes": 600, "index.interval.bytes": 100, "retention.ms": -1})
    log = Log.open(log_dir / "t-0", config)
    for i in range(300):
        log.append({"value": [b"%06d" % (3 * i + j) for j in range(3)]})
    log.update_high_watermark(600)
    end = log.log_end_offset
    log.close()  # a clean close: records 600..899 stay above the high watermark, trusted
    (log_dir / "replication-offset-checkpoint").write_text("0\n1\nt 0 600\n")
    lock_file = log_dir / "t-0" / ".seglog.lock"
    conf = write_conf(tmp_path / "seglog.toml", {"segment.bytes": 600, "retention.bytes": 2000, "retention.ms": -1}, {})
    daemon = subprocess.Popen(
        [*SEGLOG, "maintain", "--log-dir", str(log_dir), "--conf", str(conf), "--once", "retention"],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while not lock_file.read_bytes().strip() and time.monotonic() < deadline:
        time.sleep(0.001)
    daemon.send_signal(signal.SIGKILL)
    daemon.wait(timeout=30)
    assert lock_file.read_bytes().strip(), "the daemon was killed before it borrowed the partition"

    assert main(["maintain", "--log-dir", str(log_dir), "--conf", str(conf), "--once", "index"]) == 0
    after = Log.open(log_dir / "t-0", config, read_only=True)
    try:
        assert after.log_end_offset == end
    finally:
        after.close()
