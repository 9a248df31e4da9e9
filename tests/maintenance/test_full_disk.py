"""The maintenance jobs on a real full disk (a tmpfs made full, ``tiny_fs``): a checkpoint that cannot
be written is an error of the job's report, one line naming the file (``--once`` exits 1), and the
next pass after space is freed writes it."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from indexer.checkpoint import OffsetCheckpointFile
from indexer.clock import MockClock
from indexer.file_names import (
    LOG_START_OFFSET_CHECKPOINT_FILE,
    PARTITION_LOCK_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
)
from indexer.log import Log
from maintenance.access import BorrowedLogs, LogAccess, OwnedLogs
from maintenance.jobs import JOBS
from seglog.cli import main
from tests.filesystems import TinyFs
from tests.maintenance.conftest import START_MS, append_batches, settings_for, small_config

CHECKPOINTS = (RECOVERY_POINT_CHECKPOINT_FILE, LOG_START_OFFSET_CHECKPOINT_FILE, REPLICATION_OFFSET_CHECKPOINT_FILE)


@pytest.mark.parametrize("borrowed", [True, False], ids=["daemon", "in-process"])
def test_a_checkpoint_the_full_disk_refuses_is_a_job_error_naming_the_file(
    tiny_fs: TinyFs, clock: MockClock, borrowed: bool, caplog: pytest.LogCaptureFixture
) -> None:
    log_dir = tiny_fs.path / "logs"
    log = Log.open(log_dir / "t-0", small_config(), clock=clock)
    append_batches(log, clock, 3)
    log.update_high_watermark(log.log_end_offset)
    checkpoint = log_dir / REPLICATION_OFFSET_CHECKPOINT_FILE
    access: LogAccess
    if borrowed:
        log.close()
        access = BorrowedLogs(log_dir, settings_for(small_config()), clock=clock)
    else:
        access = OwnedLogs(log_dir, settings_for(small_config()), {("t", 0): log}, clock=clock)
    job = JOBS["checkpoint-high-watermark"].fn
    try:
        tiny_fs.fill()
        with caplog.at_level(logging.ERROR):
            report = job(access)
        # the daemon writes all three checkpoints as it gives a partition back
        written = [e.path for e in report.errors]
        assert written == ([str(log_dir / name) for name in CHECKPOINTS] if borrowed else [str(checkpoint)])
        assert all(e.partition == "t-0" and "No space left on device" in e.message for e in report.errors)
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert errors and all(r.exc_info is None for r in errors), [r.getMessage() for r in errors]
        assert not checkpoint.exists()
        tiny_fs.free()
        assert not job(access).errors
        # (the daemon commits no high watermark: the partition had no entry, so it gets none)
        written_by_job = log_dir / (RECOVERY_POINT_CHECKPOINT_FILE if borrowed else REPLICATION_OFFSET_CHECKPOINT_FILE)
        assert OffsetCheckpointFile(written_by_job).read() == {("t", 0): 9}
    finally:
        if not borrowed:
            log.close()


def test_maintain_once_on_a_full_disk_exits_1_with_one_line(
    tiny_fs: TinyFs, clock: MockClock, capsys: pytest.CaptureFixture[str]
) -> None:
    log_dir: Path = tiny_fs.path / "logs"
    with Log.open(log_dir / "t-0", small_config(), clock=clock) as log:
        append_batches(log, clock, 3)
    tiny_fs.fill()
    assert main(["maintain", "--log-dir", str(log_dir), "--once", "checkpoint-recovery-point"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "recovery-point-offset-checkpoint" in err, err


@pytest.mark.parametrize("leave_pages", [1, 3], ids=["quarantine-copy", "cleaned-copy"])
def test_recover_on_a_full_disk_leaves_no_partial_copy(
    tiny_fs: TinyFs, clock: MockClock, capsys: pytest.CaptureFixture[str], leave_pages: int
) -> None:
    """Salvaging a damaged segment copies the damaged range to a quarantine file and the kept batches
    to `<base>.log.cleaned`; the full disk refuses one of the copies part way. Before, the partial
    copy stayed behind, holding the little space there was until a later recovery replaced it."""
    log_dir = tiny_fs.path / "logs"
    with Log.open(log_dir / "t-0", small_config(segment_bytes=1 << 20), clock=clock) as log:
        for _ in range(6):
            log.append({"value": [bytes(500)] * 10, "timestamp": [START_MS] * 10})
    segment = log_dir / "t-0" / "00000000000000000000.log"
    data = bytearray(segment.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 8] = b"\xff" * 8  # a batch in the middle fails its CRC
    segment.write_bytes(bytes(data))
    tiny_fs.fill(leave=leave_pages * 4096)
    assert main(["recover", "--log-dir", str(log_dir), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "No space left on device" in err, err
    assert segment.read_bytes() == bytes(data)
    leftovers = [p.name for p in (log_dir / "t-0").iterdir() if p.name.endswith((".cleaned", ".tmp"))]
    # The quarantine copy of 2 pages stays, and so does the failed recovery's line in the partition's
    # lock file (its next open must recover it): one page between them and what is free.
    lock_bytes = (log_dir / "t-0" / PARTITION_LOCK_FILE).stat().st_blocks * 512
    assert leftovers == [] and tiny_fs.available() + lock_bytes == 4096
    tiny_fs.free()
    assert main(["recover", "--log-dir", str(log_dir), "--no-progress"]) == 0
    assert [p.name for p in (log_dir / "t-0").glob("*.quarantine")] != []
