"""Crash tests: SIGKILL a writer and a maintenance daemon at random moments; committed data survives."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from indexer.config import LogConfig, Settings
from indexer.lock import MAINTENANCE_ROLE
from indexer.log import Log
from maintenance.recovery import recover_log_dir
from seglog.cli import main
from tests.budget import scaled
from tests.indexer.helpers import start_lock_holder
from tests.maintenance.conftest import (
    REPO,
    SEGLOG,
    lines_of,
    maintain_daemon,
    numbered_partition,
    wait_for,
    write_conf,
)
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
                # From its first commit on: on a loaded machine a writer killed at a random moment after
                # READY had often committed nothing yet, in every trial, and the test checked nothing.
                seen = wait_for(out, "COMMITTED")
                for proc in rng.sample([writer, daemon], 2):  # both die, in random order, at random moments
                    time.sleep(rng.uniform(0.05, 1.0))
                    proc.send_signal(signal.SIGKILL)
                    proc.wait(timeout=30)
            committed[0] = max(committed[0], last_committed(seen + drain(out)))
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
    batch or a sink decides about it).

    The borrower is a process holding the partition's lock as the daemon's jobs do (role maintenance),
    killed while it holds it. A real ``seglog maintain --once`` killed as soon as its line appeared
    could finish its one partition and give it back first on a loaded machine (an empty lock file)."""
    log_dir = tmp_path / "logs"
    config = LogConfig.from_mapping({"segment.bytes": 600, "index.interval.bytes": 100, "retention.ms": -1})
    _committed, end = numbered_partition(log_dir, config, 300, uncommitted=100)  # 300 records above the watermark
    lock_file = log_dir / "t-0" / ".seglog.lock"
    conf = write_conf(tmp_path / "seglog.toml", {"segment.bytes": 600, "retention.ms": -1}, {})
    borrower = start_lock_holder(lock_file, MAINTENANCE_ROLE)
    borrower.send_signal(signal.SIGKILL)
    borrower.wait(timeout=30)
    assert f"pid={borrower.pid} " in lock_file.read_text() and "role=maintenance" in lock_file.read_text()

    assert main(["maintain", "--log-dir", str(log_dir), "--conf", str(conf), "--once", "index"]) == 0
    after = Log.open(log_dir / "t-0", config, read_only=True)
    try:
        assert after.log_end_offset == end
    finally:
        after.close()


def _kill_a_writer_with_an_uncommitted_tail(log_dir: Path) -> int:
    """SIGKILL a writer of ``t-0`` holding it with 25 records committed and 7 more flushed above its
    high watermark (log end 32); its pid."""
    writer = subprocess.Popen(
        [*WRITER, "--log-dir", str(log_dir), "--appends", "5", "--tail", "7", "--hold"],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lines_of(writer.stdout), "TAIL 32")  # type: ignore[arg-type]
    finally:
        writer.kill()
        writer.wait()
    return writer.pid


@pytest.mark.parametrize("jobs", [("index", "roll"), ("roll", "index"), ("retention", "index")])
def test_a_dead_writers_uncommitted_tail_is_cut_whichever_job_borrows_the_partition_first(
    tmp_path: Path, jobs: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A writer SIGKILLed with 7 records flushed above its committed high watermark leaves its line in
    the lock file. The daemon's roll or retention job borrowing the partition before the index job
    overwrote that line with its own and emptied it on release, so the index job no longer saw a dead
    writer and the tail stayed (log end 32, high watermark 25); run first, the index job cut it (25).
    One rule now, whichever job borrows the partition first: the tail goes, the committed records stay."""
    log_dir = tmp_path / "logs"
    pid = _kill_a_writer_with_an_uncommitted_tail(log_dir)
    assert f"pid={pid} " in (log_dir / "t-0" / ".seglog.lock").read_text()
    (log_dir / "t-0" / "00000000000000000000.log.deleted").write_bytes(b"")  # something for retention to do
    conf = write_conf(tmp_path / "seglog.toml", {"segment.ms": 1, "retention.ms": -1}, {})
    for job in jobs:
        assert main(["maintain", "--log-dir", str(log_dir), "--conf", str(conf), "--once", job]) == 0
    assert "truncated 7 uncommitted offsets" in "".join(capsys.readouterr())
    log = Log.open(log_dir / "t-0", LogConfig.from_mapping({"segment.bytes": 2000}), read_only=True)
    try:
        assert log.log_end_offset == 25
        assert log.read_records(0, max_offset=25).column("value").to_pylist() == values_for(0, 25)
    finally:
        log.close()


def test_an_append_after_a_dead_writer_never_commits_the_tail_it_left(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A writer SIGKILLed with 7 records flushed above its committed high watermark (25): the next
    ``seglog append`` to the partition appended after them and moved the high watermark over them,
    so records never committed became visible (offsets 25..31, its own record at 32). It now cuts the
    dead writer's tail by the daemon's rule first: its record lands at 25, after the committed ones."""
    log_dir = tmp_path / "logs"
    _kill_a_writer_with_an_uncommitted_tail(log_dir)
    records = tmp_path / "in.jsonl"
    records.write_text('{"value": "after"}\n')
    conf = write_conf(tmp_path / "seglog.toml", {"segment.bytes": 2000}, {})
    assert (
        main(
            ["append", "--log-dir", str(log_dir), "--conf", str(conf), "--topic", "t", "--partition", "0", str(records)]
        )
        == 0
    )
    out = "".join(capsys.readouterr())
    assert "truncated 7 uncommitted offsets above 25 left by a dead writer" in out
    assert "t-0 25..25" in out
    log = Log.open(log_dir / "t-0", LogConfig.from_mapping({"segment.bytes": 2000}), read_only=True)
    try:
        assert (log.log_end_offset, log.high_watermark) == (26, 26)
        assert log.read_records(0).column("value").to_pylist() == [*values_for(0, 25), b"after"]
    finally:
        log.close()


def _partition_state(log_dir: Path, config: LogConfig) -> tuple[int, int, list[str]]:
    """The log start offset and end of ``t-0`` as a reader sees them, after checking that every record
    from the start to the end is there with its value, and the names of files no segment owns."""
    directory = log_dir / "t-0"
    names = sorted(p.name for p in directory.iterdir() if not p.name.startswith("."))
    live = {n[:20] for n in names if n.endswith(".log")}
    orphans = [n for n in names if not n.endswith(".deleted") and n[:20] not in live]
    log = Log.open(directory, config, read_only=True)
    try:
        start, end = log.log_start_offset, log.high_watermark
        assert start == min(int(n) for n in live), (start, sorted(live)[:3])
        table = log.read_records(start, max_offset=end)
        assert table.column("offset").to_pylist() == list(range(start, end))
        assert table.column("value").to_pylist() == [b"%06d" % o for o in range(start, end)]
    finally:
        log.close()
    return start, end, orphans


@pytest.mark.slow
def test_sigkill_the_daemon_mid_pass_then_restart_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """SIGKILL ``seglog maintain`` at random moments of its retention, roll and index passes (some
    segments renamed ``.deleted`` before the log start offset checkpoint, an index half rebuilt), then
    run it again: no record retention did not mean to delete is lost, the log start offset is the first
    remaining record's, the files of the killed run neither block nor stay, and the killed daemon is not
    taken for a dead writer whose tail the index job would cut."""
    rng = random.Random(9)
    topic = {"segment.bytes": 300, "index.interval.bytes": 100, "retention.ms": -1, "retention.bytes": 3000}
    config = LogConfig.from_mapping(topic)
    base = tmp_path / "base"
    _committed, end = numbered_partition(base, config, 610, uncommitted=10)  # a clean writer's trusted tail
    for index in sorted((base / "t-0").glob("*.index"))[:-1:3]:  # damaged first entries: the index job rebuilds
        data = bytearray(index.read_bytes())
        data[4:8] = (int.from_bytes(data[4:8], "big") + 7).to_bytes(4, "big")
        index.write_bytes(bytes(data))
    conf = write_conf(
        tmp_path / "seglog.toml",
        {**topic, "file.delete.delay.ms": 60_000},
        {
            "log.initial.task.delay.ms": 0,
            "log.retention.check.interval.ms": 50,
            "seglog.roll.check.interval.ms": 50,
            "seglog.index.check.interval.ms": 50,
        },
    )
    once = ["maintain", "--conf", str(conf), "--once"]
    planned = tmp_path / "planned"
    shutil.copytree(base, planned)
    assert main([*once, "retention", "--log-dir", str(planned)]) == 0
    final_start = _partition_state(planned, config)[0]
    assert 0 < final_start < end
    for trial in range(scaled(8, ci=4, soak=100)):
        log_dir = tmp_path / f"trial{trial}"
        shutil.copytree(base, log_dir)
        with maintain_daemon(log_dir, conf, verbose=False) as (daemon, _err):
            if trial % 2:  # at any moment of its first passes
                time.sleep(rng.uniform(0.0, 0.8))
            else:  # while retention renames segments: some are .deleted, the checkpoint is not written yet
                while daemon.poll() is None and not any(
                    p.name.endswith(".deleted") for p in os.scandir(log_dir / "t-0")
                ):
                    time.sleep(0.001)
                time.sleep(rng.uniform(0.0, 0.03))
            daemon.send_signal(signal.SIGKILL)
            daemon.wait(timeout=30)
        start, visible_end, _ = _partition_state(log_dir, config)  # a reader right after the kill
        assert start <= final_start and visible_end == end
        for job in ("index", "retention", "retention"):  # the second retention removes the first's renames
            assert main([*once, job, "--log-dir", str(log_dir)]) == 0
        assert _partition_state(log_dir, config) == (final_start, end, [])
        assert not list((log_dir / "t-0").glob("*.deleted"))
        capsys.readouterr()
        assert main([*once, "index", "--log-dir", str(log_dir), "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["findings"] == []  # the indexes agree with the log


def test_a_writer_restarted_after_a_crash_logs_no_error_for_the_index_it_left(tmp_path: Path) -> None:
    """A writer killed with records flushed below its checkpointed recovery point leaves its active
    segment's pre-allocated index untrimmed (zero-filled slots), as every crash does. The next opener
    recovers that segment anyway (it holds the recovery point), yet logged `ERROR ... index file ...
    has entries that do not strictly increase ..., recovering segment and rebuilding index files`,
    an error nobody can act on (and so did `seglog recover --dry-run`); it is the recovery step only."""
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    writer = subprocess.Popen(
        [*WRITER, "--log-dir", str(log_dir), "--segment-bytes", "100000"], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    try:
        wait_for(lines_of(writer.stdout), "COMMITTED 100")  # type: ignore[arg-type]
    finally:
        writer.kill()
        writer.wait()
    assert (log_dir / "t-0" / "00000000000000000000.index").stat().st_size == 4096  # left untrimmed
    dry_run = subprocess.run(
        [*SEGLOG, "recover", "--log-dir", str(log_dir), "--dry-run"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    restarted = subprocess.run(
        [*SEGLOG, "append", "--log-dir", str(log_dir), "--topic", "t", "--partition", "0"],
        input='{"value": "after the crash"}\n',
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert restarted.returncode == 0, restarted.stderr
    assert "ERROR" not in dry_run.stderr + restarted.stderr


def test_recover_beside_the_daemon_waits_for_a_partition_it_borrows(tmp_path: Path) -> None:
    """`seglog recover` (and its dry run) after a writer crash, with `seglog maintain` running, exited 1
    ("events-0: skipped, partition ... is locked by pid N (..., maintenance)") whenever the daemon
    was recovering that partition just then; it waits for the daemon to give it back, as a writer does."""
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    numbered_partition(log_dir, LogConfig.from_mapping(TOPIC), 20)
    for extra in (["--dry-run"], []):
        borrower = start_lock_holder(log_dir / "t-0" / ".seglog.lock", MAINTENANCE_ROLE, 1.0)
        try:
            result = subprocess.run(
                [*SEGLOG, "recover", "--log-dir", str(log_dir), *extra],
                cwd=REPO,
                capture_output=True,
                text=True,
                timeout=60,
            )
        finally:
            borrower.kill()
            borrower.wait()
        assert result.returncode == 0, result.stderr
        assert "skipped" not in result.stdout + result.stderr
