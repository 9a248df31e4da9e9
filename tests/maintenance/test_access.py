"""How the daemon borrows partitions: one at a time, released after the job, reopened clean only when untouched."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import pytest

from indexer.checkpoint import OffsetCheckpointFile, update_checkpoint
from indexer.clock import MockClock
from indexer.file_names import partition_dirs
from indexer.log import Log
from maintenance import access as access_module
from maintenance.access import BorrowedLogs
from maintenance.report import JobReport
from tests.maintenance.conftest import append_batches, settings_for, small_config


def test_borrowed_partitions_are_released_and_reopened_clean_only_when_untouched(
    log_dir: Path, clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = Log.open(log_dir / "t-0", small_config(), clock=clock)
    append_batches(log, clock, 6)
    log.close()
    opens: list[bool] = []
    real_open = Log.open

    def recording_open(*args: Any, **kwargs: Any) -> Log:
        opens.append(kwargs["had_clean_shutdown"])
        return real_open(*args, **kwargs)

    monkeypatch.setattr(access_module.Log, "open", recording_open)
    access = BorrowedLogs(log_dir, settings_for(small_config()), clock=clock)

    def one_pass() -> None:
        report = JobReport("test")
        for _tp, borrowed in access.each_log(report):
            assert not borrowed.closed
        assert report.errors == []

    one_pass()
    one_pass()
    assert opens == [False, True]  # the second open trusts the daemon's own clean close
    # A writer that died holding the partition leaves its pid in the lock file: recover.
    (log_dir / "t-0" / ".seglog.lock").write_text("pid=999999 host=elsewhere since_ms=0\n")
    one_pass()
    assert opens[-1] is False
    one_pass()
    assert opens[-1] is True
    # Another process appended meanwhile (and closed cleanly): the newest segment changed, recover.
    writer = real_open(log_dir / "t-0", small_config(), clock=clock)
    append_batches(writer, clock, 3)
    writer.close()
    one_pass()
    assert opens[-1] is False
    # Every pass checkpointed what it released.
    recovery_points = OffsetCheckpointFile(log_dir / "recovery-point-offset-checkpoint").read()
    assert recovery_points == {("t", 0): writer.log_end_offset}


def test_a_pass_never_puts_back_an_older_high_watermark(log_dir: Path, clock: MockClock) -> None:
    """Executor writes publish a partition's high watermark without its lock, so one may land while the
    daemon holds the partition: the daemon's checkpoint write after the pass keeps the newer value,
    and still writes the entries nobody changed."""
    for partition in (0, 1):
        log = Log.open(log_dir / f"t-{partition}", small_config(), clock=clock)
        append_batches(log, clock, 4)
        log.close()
    hw_file = log_dir / "replication-offset-checkpoint"
    update_checkpoint(hw_file, {("t", 0): 3, ("t", 1): 3}, lock_path=log_dir / ".lock")
    access = BorrowedLogs(log_dir, settings_for(small_config()), clock=clock)
    report = JobReport("test")
    for tp, _borrowed in access.each_log(report):
        if tp == ("t", 0):  # the driver commits the batch its executors wrote
            update_checkpoint(hw_file, {("t", 0): 12}, lock_path=log_dir / ".lock")
    assert report.errors == []
    assert OffsetCheckpointFile(hw_file).read() == {("t", 0): 12, ("t", 1): 3}
    recovery_points = OffsetCheckpointFile(log_dir / "recovery-point-offset-checkpoint").read()
    assert recovery_points == {("t", 0): 12, ("t", 1): 12}


def test_a_stopped_access_borrows_nothing(log_dir: Path, clock: MockClock) -> None:
    Log.open(log_dir / "t-0", small_config(), clock=clock).close()
    access = BorrowedLogs(log_dir, settings_for(small_config()), clock=clock)
    access.stop()
    assert list(access.each_log(JobReport("test"))) == []


def test_only_live_partition_directories_are_maintained(log_dir: Path) -> None:
    for name in ("t-0", "t-1", "t-2.0123456789abcdef0123456789abcdef-delete", "not a partition", "x-y"):
        (log_dir / name).mkdir()
    (log_dir / "t-3").write_text("a file, not a directory")
    assert [tp for tp, _ in partition_dirs(log_dir)] == [("t", 0), ("t", 1)]


def test_the_daemon_says_why_it_recovers_a_partition(
    log_dir: Path, clock: MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The daemon recovers a partition from its recovery point whenever it cannot know it is as it
    left it; the loader's steps say why, in the daemon's words. Its first open of a partition of a
    cleanly shut down directory said "unflushed after an unclean shutdown" (the loader's default);
    only a writer that died holding the partition is an unclean shutdown."""
    with Log.open(log_dir / "t-0", small_config(), clock=clock) as log:
        append_batches(log, clock, 3)
    access = BorrowedLogs(log_dir, settings_for(small_config()), clock=clock)

    def reasons() -> list[str]:  # what the recovered segments' steps say, once each
        caplog.clear()
        with caplog.at_level("INFO", logger="indexer.log_loader"):
            for _tp, _log in access.each_log(JobReport("test")):
                pass
        return sorted({r.getMessage().split("] ", 1)[1] for r in caplog.records if "recover-segment" in r.getMessage()})

    assert reasons() == ["recover-segment: first opened by this process's maintenance: rebuilt indexes"]
    assert reasons() == []  # as the daemon left it: opened as cleanly shut down
    (log_dir / "t-0" / ".seglog.lock").write_text("pid=999999 host=elsewhere since_ms=0\n")
    assert reasons() == ["recover-segment: unflushed after an unclean shutdown: rebuilt indexes"]
    with Log.open(log_dir / "t-0", small_config(), clock=clock) as writer:
        append_batches(writer, clock, 1)
    assert reasons() == ["recover-segment: changed since this process's maintenance released it: rebuilt indexes"]


@pytest.mark.parametrize("when", ["before its borrow", "while a job holds it", "with the whole log directory"])
def test_a_partition_deleted_during_a_pass_is_no_error(
    log_dir: Path, clock: MockClock, caplog: pytest.LogCaptureFixture, when: str
) -> None:
    """A topic removed with rm -rf (or the log directory with it) while a daemon pass handles it
    made the pass log 'maintenance job roll failed on t-0: FileNotFoundError' and ``--once`` exit 1,
    as if the partition were damaged, and a borrow after the removal brought the partition (and the log
    directory) back, empty. It is said as what it is, nothing is recreated, and the other partitions
    are maintained."""
    caplog.set_level(logging.INFO)
    for partition in (0, 1):
        with Log.open(log_dir / f"t-{partition}", small_config(), clock=clock) as log:
            append_batches(log, clock, 3)
    access = BorrowedLogs(log_dir, settings_for(small_config()), clock=clock)
    gone = log_dir if when == "with the whole log directory" else log_dir / "t-0"

    def wanted(tp: tuple[str, int], _meta: object) -> bool:
        if tp == ("t", 0) and when == "before its borrow":
            shutil.rmtree(gone)
        return True

    report = JobReport("roll")
    worked_on = []
    for tp, log in access.each_log(report, wanted):
        with report.partition(f"{tp[0]}-{tp[1]}", log.directory):
            if when != "before its borrow" and tp == ("t", 0):
                shutil.rmtree(gone)
                log.roll()  # the job's own writes fail, and so does giving the partition back
            worked_on.append(tp)
    assert report.errors == [], report.errors
    assert ("t", 1) in worked_on or when == "with the whole log directory"
    assert "t-0: its directory" in caplog.text and "was removed during the pass" in caplog.text
    assert " ERROR " not in caplog.text and "failed on" not in caplog.text
    assert not gone.exists()  # not brought back as an empty partition (or an empty log directory)
