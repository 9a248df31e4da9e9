"""A log directory checkpoint that cannot be read (a malformed line) never makes a process forget,
hide or show the wrong records: readers refuse it instead of showing uncommitted records, the
maintenance daemon never replaces it (one ERROR line, then it leaves the directory alone), and
``seglog recover`` rewrites it, saying from what (``seglog describe`` names it)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from indexer.config import Settings
from indexer.errors import StorageError
from indexer.file_names import (
    CLEAN_SHUTDOWN_FILE,
    LOG_START_OFFSET_CHECKPOINT_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
)
from indexer.log import Log
from indexer.log_manager import LogManager
from tests.maintenance.conftest import (
    REPO,
    SEGLOG,
    numbered_partition,
    small_config,
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
