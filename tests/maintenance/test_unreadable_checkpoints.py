"""A log directory checkpoint that cannot be read (a malformed line) never makes a process forget,
hide or show the wrong records: readers refuse it instead of showing uncommitted records, the
maintenance daemon never replaces it (one ERROR line, then it leaves the directory alone), and
``seglog recover`` rewrites it, saying from what (``seglog describe`` names it)."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from indexer.checkpoint import OffsetCheckpointFile
from indexer.config import Settings
from indexer.data_loss import read_accepted_losses
from indexer.errors import StorageError
from indexer.file_names import (
    CLEAN_SHUTDOWN_FILE,
    LOG_START_OFFSET_CHECKPOINT_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
)
from indexer.lock import FileLock
from indexer.log import Log
from indexer.log_manager import LogManager
from maintenance.recovery import EXIT_COMMITTED_DATA_LOST
from maintenance.scheduler import start_maintenance
from seglog.cli import main
from tests.cli import read_records
from tests.maintenance.conftest import (
    REPO,
    SEGLOG,
    maintain_daemon,
    numbered_partition,
    small_config,
    wait_for,
    write_conf,
)

DAMAGED = "0\n2\nt 0 12x\nt 1 9\n"  # t-0's offset is not a number


def damaged_dir(log_dir: Path) -> Path:
    """``t-0``: offsets 0..11 committed, 12..17 an uncommitted tail; ``t-1``: 0..8 committed; and a
    ``replication-offset-checkpoint`` with a malformed line. Returns that file."""
    committed, end = numbered_partition(log_dir, small_config(), 6, uncommitted=2)
    assert (committed, end) == (12, 18)
    log = Log.open(log_dir / "t-1", small_config())
    log.append({"value": [b"v"] * 9})
    log.close()
    path = log_dir / REPLICATION_OFFSET_CHECKPOINT_FILE
    path.write_text(DAMAGED)
    return path


def seglog(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SEGLOG, *args], cwd=REPO, capture_output=True, text=True, timeout=60, check=False)


def wait_until(done: Callable[[], bool], timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def one_error_line(stderr: str, path: Path) -> str:
    [line] = stderr.strip().splitlines()
    assert line.startswith("seglog: StorageError: ") and str(path) in line, line
    assert f"seglog recover --log-dir {path.parent}" in line, line
    return line


def test_readers_refuse_an_unreadable_high_watermark_checkpoint_instead_of_showing_uncommitted_records(
    log_dir: Path,
) -> None:
    """Read-only readers took the malformed file for "no entry" and showed everything up to the log
    end: ``seglog read`` printed t-0's 6 uncommitted records (and ``seglog serve`` served them). They
    now stop with one line naming the file and ``seglog recover``, and change nothing."""
    path = damaged_dir(log_dir)
    read = seglog("read", "--log-dir", str(log_dir), "--topic", "t", "--partition", "0", "--from-beginning")
    assert read.returncode == 1 and read.stdout == ""
    one_error_line(read.stderr, path)
    serve = seglog("serve", "--log-dir", str(log_dir), "--bind", "127.0.0.1:0")
    assert serve.returncode == 1
    one_error_line(serve.stderr, path)
    with LogManager(log_dir, Settings(), read_only=True) as reader:  # the Spark reader's way in
        with pytest.raises(StorageError, match="seglog recover"):
            reader.high_watermark("t", 0)
        with pytest.raises(StorageError, match="seglog recover"):
            reader.get_log("t", 0)
    assert path.read_text() == DAMAGED


def test_the_daemon_never_replaces_an_unreadable_checkpoint(tmp_path: Path, log_dir: Path) -> None:
    """The daemon read the malformed file as empty and, giving back each partition it borrowed, wrote
    it back without t-0's entry: every committed offset forgotten (readers then saw uncommitted
    records, a restarted writer nothing committed). It now says so once, as an ERROR naming the file
    and ``seglog recover``, leaves the directory alone while the file cannot be read, and goes on once
    ``seglog recover`` rewrote it."""
    path = damaged_dir(log_dir)
    conf = write_conf(
        tmp_path / "seglog.toml",
        {"segment.ms": 1, "segment.bytes": 600},  # the roll job has work on both partitions
        {"log.initial.task.delay.ms": 0, "seglog.roll.check.interval.ms": 100, "seglog.index.check.interval.ms": 100},
    )
    with maintain_daemon(log_dir, conf) as (proc, err):
        seen = wait_for(err, "ERROR")  # from whichever job reads the checkpoints first
        for _ in range(4):  # then passes of every job, none of which says it again
            seen += wait_for(err, "roll: 0 partitions checked")
        assert path.read_text() == DAMAGED
        errors = [line for line in seen if "ERROR" in line]
        assert len(errors) == 1, errors
        assert str(path) in errors[0] and f"seglog recover --log-dir {log_dir}" in errors[0]
        assert all(len(list((log_dir / p).glob("*.log"))) == 1 for p in ("t-0", "t-1"))  # nothing rolled
        assert seglog("recover", "--log-dir", str(log_dir), "--no-progress").returncode == 0
        wait_for(err, "can be read again")
        wait_for(err, "segments_rolled=")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    assert OffsetCheckpointFile(path).read() == {("t", 0): 18, ("t", 1): 9}


def test_recover_rewrites_an_unreadable_checkpoint_from_the_sink_commit_records_and_the_logs(
    log_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``seglog recover`` took the malformed file for an empty one and wrote it back without entries:
    readers then showed t-0's uncommitted tail. It now says which file it could not read and rewrites
    it: t-0 from the sink's commit record (12, not its log end 18), t-1 from its log end; a dry run
    says so and writes nothing."""
    path = damaged_dir(log_dir)
    (log_dir / "seglog-sink.s.json").write_text(
        json.dumps(
            {
                "version": 1,
                "sink_id": "s",
                "query_id": "q",
                "batch_id": 3,
                "committed_at_ms": 0,
                "end_offsets": {"t": {"0": 12}},
            }
        )
    )
    before = {p: p.read_bytes() for p in log_dir.rglob("*") if p.is_file()}
    assert main(["recover", "--log-dir", str(log_dir), "--no-progress", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"checkpoint {path}: cannot read: Malformed line in checkpoint file [{path}]: t 0 12x" in out
    assert f"checkpoint {path}: would be rewritten from the logs: t-0 12 (sink commit record), t-1 9 (log end)" in out
    assert {p: p.read_bytes() for p in log_dir.rglob("*") if p.is_file()} == before

    assert main(["recover", "--log-dir", str(log_dir), "--no-progress", "--json"]) == 0
    [repair] = json.loads(capsys.readouterr().out)["checkpoints"]
    assert repair["file"] == str(path) and repair["rewritten"]
    assert repair["entries"] == {
        "t-0": {"offset": 12, "source": "sink commit record"},
        "t-1": {"offset": 9, "source": "log end"},
    }
    assert OffsetCheckpointFile(path).read() == {("t", 0): 12, ("t", 1): 9}
    rows = read_records(capsys, log_dir, "t", "--from-beginning")
    assert [int(r["value"]) for r in rows] == list(range(12))  # committed only


def test_recover_leaves_an_unreadable_checkpoint_it_cannot_rebuild_whole(log_dir: Path) -> None:
    """A partition recovery could not open (a live writer holds it) would lose its entry with the
    rewritten file: the file stays as it was, recovery says why and exits 1."""
    path = damaged_dir(log_dir)
    with Log.open(log_dir / "t-1", small_config(), high_watermark=9):
        done = seglog("recover", "--log-dir", str(log_dir), "--no-progress")
    assert done.returncode == 1
    assert f"checkpoint {path}: left as it was: partitions t-1 were not recovered" in done.stdout
    assert path.read_text() == DAMAGED


def test_describe_names_an_unreadable_checkpoint(log_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``seglog describe`` warned ``ignoring checkpoint`` and showed t-0's high watermark as 18, its
    log end: records never committed shown as committed. It now names the file (exit 1) and shows
    the high watermarks as unknown, and still describes every partition."""
    path = damaged_dir(log_dir)
    assert main(["describe", "--log-dir", str(log_dir)]) == 1
    out = capsys.readouterr().out
    assert f"checkpoint {path}: cannot read: Malformed line in checkpoint file [{path}]: t 0 12x" in out
    assert "t-0: log start offset 0, log end offset 18, high watermark -," in out
    assert main(["describe", "--log-dir", str(log_dir), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert [c["file"] for c in doc["unreadable_checkpoints"]] == [str(path)]
    assert [p["high_watermark"] for p in doc["partitions"]] == [None, None]


@pytest.mark.parametrize("name", [RECOVERY_POINT_CHECKPOINT_FILE, LOG_START_OFFSET_CHECKPOINT_FILE])
def test_a_writer_refuses_an_unreadable_checkpoint_it_would_write_back(log_dir: Path, name: str) -> None:
    """A writable LogManager read a malformed recovery-point or log-start checkpoint as empty and, at
    its close, replaced it with its own partitions' entries: every other partition's were gone (a
    raised log start forgotten: records below it readable again). It now refuses at once, before
    deleting the clean-shutdown marker, with one line naming the file and ``seglog recover``; a
    read-only manager, which writes nothing back, reads it as empty."""
    with LogManager(log_dir, Settings()) as manager:
        log = manager.get_or_create_log("t", 0)
        log.append({"value": [b"v"]})
        log.update_high_watermark(log.log_end_offset)
    path = log_dir / name
    path.write_text("0\n1\nt 0 x\n")
    with pytest.raises(StorageError) as refused:
        LogManager(log_dir, Settings())
    message = str(refused.value)
    assert str(path) in message and f"seglog recover --log-dir {log_dir}" in message and "\n" not in message
    assert path.read_text() == "0\n1\nt 0 x\n" and (log_dir / CLEAN_SHUTDOWN_FILE).exists()
    with LogManager(log_dir, Settings(), read_only=True) as reader:
        log = reader.get_log("t", 0)
        assert log is not None and log.read_records(0).num_rows == 1


def test_recover_removes_committed_records_below_a_damaged_log_start_only_when_the_loss_is_accepted(
    log_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A log-start checkpoint above the log end (damaged): a plain ``seglog recover`` quarantined every
    segment of t-0 (18 intact committed records) and exited 3, and the next one found a log starting at
    99999, above the committed offset, and said "no committed data lost": the loss was never accepted
    nor recorded. Now, without ``--accept-data-loss``, recovery leaves the segments and says, in one
    line, what they hold and how to go on (exit 1, every time); with it, the loss is recorded."""
    numbered_partition(log_dir, small_config(), 6)
    lso = log_dir / LOG_START_OFFSET_CHECKPOINT_FILE
    lso.write_text("0\n1\nt 0 99999\n")
    segments = sorted(p.name for p in (log_dir / "t-0").iterdir() if p.name != ".seglog.lock")
    assert main(["recover", "--log-dir", str(log_dir), "--no-progress", "--dry-run"]) == EXIT_COMMITTED_DATA_LOST
    assert "t-0: would lose committed offsets 0..17" in capsys.readouterr().out
    for _ in range(2):
        assert main(["recover", "--log-dir", str(log_dir), "--no-progress"]) == 1
        out = capsys.readouterr().out
        assert (
            f"t-0: StorageError: partition t-0 in {log_dir}: refused to remove committed offsets 0..17, nothing "
            f"changed: its checkpointed log start offset 99999 ({lso}) is above its log end, and recovery would "
            "remove every segment below it; restore the checkpoint or the segments, or remove them and record "
            f"the loss with `seglog recover --log-dir {log_dir} --accept-data-loss`" in out
        ), out
        assert sorted(p.name for p in (log_dir / "t-0").iterdir() if p.name != ".seglog.lock") == segments
        assert OffsetCheckpointFile(lso).read() == {("t", 0): 99999}
    assert main(["recover", "--log-dir", str(log_dir), "--no-progress", "--accept-data-loss"]) == 0
    capsys.readouterr()
    [accepted] = read_accepted_losses(log_dir)
    assert accepted["lost"] == [{"first": 0, "last": 17}]


def test_in_process_maintenance_says_an_unreadable_checkpoint_once_as_the_daemon_does(
    log_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Maintenance inside the writer's process (``seglog run``: ``start_maintenance`` on its
    LogManager) logged its refusal to replace a checkpoint that could not be read at every pass of
    every checkpoint job (an ERROR every few seconds), where the daemon says it once. Now both follow
    one rule: one ERROR naming the file and ``seglog recover``, the file left as it is, the partitions
    left alone until it can be read again (said once), then maintained again."""
    settings = Settings(
        topic_defaults=small_config().to_dict(),
        sections={
            "maintenance": {
                "log.initial.task.delay.ms": 0,
                "replica.high.watermark.checkpoint.interval.ms": 20,
                "log.flush.offset.checkpoint.interval.ms": 20,
            }
        },
        source="test",
    )
    caplog.set_level(logging.INFO, logger="maintenance")
    manager = LogManager(log_dir, settings)
    try:
        log = manager.get_or_create_log("t", 0)
        log.append({"value": [b"v"] * 3})
        log.update_high_watermark(log.log_end_offset)
        path = log_dir / REPLICATION_OFFSET_CHECKPOINT_FILE
        handle = start_maintenance(manager, jobs=["checkpoint-high-watermark", "checkpoint-recovery-point"])
        try:
            wait_until(lambda: OffsetCheckpointFile(path).read() == {("t", 0): 3})
            caplog.clear()
            # Under the directory's lock, as a process writing it would: a pass's read-merge-write
            # holds it, so none writes back the file it read just before.
            lock = FileLock(log_dir / ".lock", what=f"log directory {log_dir}")
            lock.acquire(timeout=10)
            try:
                path.write_text(DAMAGED)
            finally:
                lock.release()

            def errors() -> list[str]:
                return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]

            wait_until(lambda: bool(errors()))
            first = errors()
            assert str(path) in first[-1] and f"seglog recover --log-dir {log_dir}" in first[-1], first
            time.sleep(1)  # dozens of passes of both jobs
            assert path.read_text() == DAMAGED
            assert errors() == first
            path.write_text("0\n0\n")  # repaired (by hand): maintained again
            wait_until(lambda: "can be read again" in caplog.text)
            wait_until(lambda: OffsetCheckpointFile(path).read() == {("t", 0): 3})
        finally:
            handle.stop()
    finally:
        manager.close()
