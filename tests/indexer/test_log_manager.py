"""Tests for indexer/log_manager.py: partitions of a log directory, checkpoints, the clean-shutdown
marker (spec 6.1, 6.4), sharing a directory between managers, and read-only use of real vectors."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from indexer import file_names
from indexer.checkpoint import OffsetCheckpointFile
from indexer.clock import MockClock
from indexer.config import Settings
from indexer.errors import InvalidPartitionsError, InvalidTopicError, LogLockedError, StorageError
from indexer.log_manager import CLEAN_SHUTDOWN_CONTENT, LogManager

SETTINGS = Settings(topic_defaults={"segment.bytes": 2048, "index.interval.bytes": 200})


def manager(log_dir: Path, **kwargs: object) -> LogManager:
    return LogManager(log_dir, SETTINGS, clock=MockClock(), **kwargs)  # type: ignore[arg-type]


def fill(mgr: LogManager, topic: str, partition: int, appends: int = 10) -> int:
    log = mgr.get_or_create_log(topic, partition)
    for i in range(appends):
        log.append({"value": [f"{topic}-{partition}-{i}".encode() * 8] * 3})
    log.update_high_watermark(log.log_end_offset)
    return log.log_end_offset


def checkpoint(log_dir: Path, name: str) -> dict:
    return OffsetCheckpointFile(log_dir / name).read()


def test_close_writes_checkpoints_and_marker(tmp_path: Path) -> None:
    mgr = manager(tmp_path)
    assert mgr.had_clean_shutdown is False
    ends = {("a", 0): fill(mgr, "a", 0), ("a", 1): fill(mgr, "a", 1, 20), ("b.x", 0): fill(mgr, "b.x", 0, 3)}
    assert mgr.partitions() == [("a", 0), ("a", 1), ("b.x", 0)]
    mgr.close()
    mgr.close()  # idempotent
    assert checkpoint(tmp_path, file_names.RECOVERY_POINT_CHECKPOINT_FILE) == ends
    assert checkpoint(tmp_path, file_names.REPLICATION_OFFSET_CHECKPOINT_FILE) == ends
    assert checkpoint(tmp_path, file_names.LOG_START_OFFSET_CHECKPOINT_FILE) == {}
    assert (tmp_path / file_names.CLEAN_SHUTDOWN_FILE).read_bytes() == CLEAN_SHUTDOWN_CONTENT
    assert (tmp_path / file_names.RECOVERY_POINT_CHECKPOINT_FILE).read_text().startswith("0\n3\na 0 ")


def test_marker_is_deleted_on_open_and_only_a_clean_shutdown_skips_recovery(tmp_path: Path) -> None:
    mgr = manager(tmp_path)
    end = fill(mgr, "t", 0)
    mgr.close()
    last = sorted((tmp_path / "t-0").glob("*.log"))[-1]
    clean_size = last.stat().st_size
    with last.open("ab") as f:
        f.write(b"\x00" * 30)  # garbage a clean load does not look for

    mgr = manager(tmp_path)
    assert mgr.had_clean_shutdown is True
    assert not (tmp_path / file_names.CLEAN_SHUTDOWN_FILE).exists()  # KAFKA-10471
    log = mgr.get_log("t", 0)
    assert log is not None and log.log_end_offset == end and log.high_watermark == end
    assert last.stat().st_size == clean_size + 30
    log.close()  # closed outside the manager: the manager cannot vouch for it...
    del mgr  # ...and a process that dies without close() writes no marker

    mgr = manager(tmp_path)
    assert mgr.had_clean_shutdown is False
    log = mgr.get_log("t", 0)
    assert log is not None and log.log_end_offset == end
    assert last.stat().st_size == clean_size  # recovered: the garbage is cut
    mgr.close()


_CRASHING_WRITER = """
import os, signal, sys
from indexer.config import Settings
from indexer.clock import MockClock
from indexer.log_manager import LogManager
mgr = LogManager(sys.argv[1], Settings(), clock=MockClock())
log = mgr.get_or_create_log("crash", 0)
log.append({"value": [b"x" * 100] * 5})
log.flush()
with open(next(p for p in sorted(log.directory.glob("*.log"))), "ab") as f:
    f.write(b"torn")
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_partition_of_a_killed_writer_is_recovered_despite_the_marker(tmp_path: Path) -> None:
    mgr = manager(tmp_path)
    fill(mgr, "calm", 0)
    mgr.close()
    assert (tmp_path / file_names.CLEAN_SHUTDOWN_FILE).exists()
    (tmp_path / file_names.CLEAN_SHUTDOWN_FILE).rename(tmp_path / "marker")
    proc = subprocess.run([sys.executable, "-c", _CRASHING_WRITER, str(tmp_path)], timeout=120)
    assert proc.returncode == -signal.SIGKILL
    (tmp_path / "marker").rename(tmp_path / file_names.CLEAN_SHUTDOWN_FILE)  # another process closed cleanly
    log_file = next(iter(sorted((tmp_path / "crash-0").glob("*.log"))))
    assert log_file.read_bytes().endswith(b"torn")
    mgr = manager(tmp_path)
    assert mgr.had_clean_shutdown
    crashed = mgr.get_log("crash", 0)
    assert crashed is not None and crashed.log_end_offset == 5
    assert not log_file.read_bytes().endswith(b"torn")
    mgr.close()


_KILLED_MAINTENANCE = """
import os, signal, sys
from pathlib import Path
from indexer.config import Settings
from indexer.lock import MAINTENANCE_ROLE
from indexer.log import Log
log = Log.open(Path(sys.argv[1]) / "calm-0", Settings().log_config("calm"), lock_role=MAINTENANCE_ROLE)
os.kill(os.getpid(), signal.SIGKILL)  # killed while borrowing the partition: its holder line stays
"""


@pytest.mark.parametrize("marker", [True, False])
def test_a_partition_a_killed_maintenance_process_held_is_not_called_unflushed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, marker: bool
) -> None:
    """A maintenance process appends nothing: its death leaves no unflushed records, and the reopen
    says whose interrupted work it checks instead of "unflushed after an unclean shutdown". Also when
    the log directory has no clean-shutdown marker (a writer of another partition was killed): the
    lock file of this partition says who died holding it (before, only read with a marker)."""
    mgr = manager(tmp_path)
    fill(mgr, "calm", 0)
    mgr.close()
    if not marker:
        (tmp_path / file_names.CLEAN_SHUTDOWN_FILE).unlink()
    # Killed before it checkpointed a recovery point: the reopen recovers every segment, and says why.
    OffsetCheckpointFile(tmp_path / file_names.RECOVERY_POINT_CHECKPOINT_FILE).write({("calm", 0): 0})
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_MAINTENANCE, str(tmp_path)])
    assert proc.wait(timeout=120) == -signal.SIGKILL
    caplog.set_level(logging.INFO)
    mgr = manager(tmp_path)
    assert mgr.get_log("calm", 0) is not None
    mgr.close()
    steps = [r.getMessage() for r in caplog.records if "recover-segment" in r.getMessage()]
    assert any(f"a maintenance process (pid {proc.pid}) died holding it" in m for m in steps), steps
    assert not [m for m in steps if "unflushed" in m], steps


def test_partitions_ignores_what_is_not_a_partition(tmp_path: Path) -> None:
    for name in [
        "t-0",
        "t-1",
        "my-topic-12",
        "t-0.0123456789abcdef0123456789abcdef-delete",
        "nodash",
        "t-x",
        "bad name-0",
    ]:
        (tmp_path / name).mkdir()
    (tmp_path / "file-3").write_text("")
    mgr = manager(tmp_path)
    assert mgr.partitions() == [("my-topic", 12), ("t", 0), ("t", 1)]
    mgr.close()


def test_get_log_of_a_missing_partition_and_invalid_names(tmp_path: Path) -> None:
    mgr = manager(tmp_path)
    assert mgr.get_log("nope", 0) is None
    with pytest.raises(InvalidTopicError):
        mgr.get_or_create_log("../evil", 0)
    with pytest.raises(ValueError):
        mgr.get_or_create_log("t", -1)
    mgr.close()
    with pytest.raises(ValueError, match="closed"):
        mgr.get_log("t", 0)


def test_a_partition_beyond_int32_is_refused_and_the_checkpoints_stay_readable(tmp_path: Path) -> None:
    # Kafka's partition is an int32: the checkpoint format (and its reader) takes no larger one, so a
    # partition 2**31 once written made every checkpoint of the directory unreadable (all ignored)
    mgr = manager(tmp_path)
    ends = {("t", 0): fill(mgr, "t", 0)}
    for partition in (2**31, 2**63):
        with pytest.raises(ValueError, match=f"partition must be .* got {partition}"):
            mgr.get_or_create_log("t", partition)
    with pytest.raises(InvalidPartitionsError, match=str(2**31)):
        mgr.create_topic("u", 2**31)
    mgr.close()
    assert mgr.partitions() == [("t", 0)]
    assert checkpoint(tmp_path, file_names.REPLICATION_OFFSET_CHECKPOINT_FILE) == ends
    assert manager(tmp_path).topics() == {"t": 1}


def test_at_most_kafkas_partitions_per_request_are_created_by_any_writer(tmp_path: Path) -> None:
    """Kafka's controller refuses a CreateTopics or CreatePartitions request making more than 10,000
    partitions; every writer that creates or grows a topic (topic create/alter, the sink, seglog run,
    which asks ``partition_count`` first) is held to it, before anything is recorded."""
    mgr = manager(tmp_path)
    for ask in (lambda: mgr.partition_count("t", 10_001), lambda: mgr.create_topic("t", 10_001)):
        with pytest.raises(InvalidPartitionsError, match="would get 10001 new partitions at once, more than 10000"):
            ask()
    assert mgr.create_topic("t", 3) == 3
    with pytest.raises(InvalidPartitionsError, match="would get 10001 new partitions at once"):
        mgr.add_partitions("t", 10_004)
    assert mgr.topics() == {"t": 3}
    assert mgr.add_partitions("t", 10_003) == 3  # 10,000 new ones: allowed
    assert mgr.partition_count("t", 10_003) == 10_003  # an existing topic's count: nothing to create
    mgr.close()


def test_concurrent_get_or_create_returns_one_log(tmp_path: Path) -> None:
    mgr = manager(tmp_path)
    logs: list[object] = []
    threads = [threading.Thread(target=lambda: logs.append(mgr.get_or_create_log("t", 0))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(logs) == 8 and all(log is logs[0] for log in logs)
    assert mgr.all_logs() == [logs[0]]
    mgr.close()


def test_managers_sharing_a_directory_keep_each_others_entries(tmp_path: Path) -> None:
    first, second = manager(tmp_path), manager(tmp_path)
    end_a = fill(first, "a", 0)
    end_b = fill(second, "b", 0, 4)
    with pytest.raises(LogLockedError):
        second.get_log("a", 0)  # the partition has one writer
    first.checkpoint_recovery_points()  # flushed nothing yet: recovery point 0
    first.flush_all()
    first.checkpoint_recovery_points()
    second.checkpoint_all()
    assert checkpoint(tmp_path, file_names.RECOVERY_POINT_CHECKPOINT_FILE) == {("a", 0): end_a, ("b", 0): 0}
    # a-0's entry is still the one its creation wrote (nothing committed), b-0's is second's
    assert checkpoint(tmp_path, file_names.REPLICATION_OFFSET_CHECKPOINT_FILE) == {("a", 0): 0, ("b", 0): end_b}
    second.close()
    first.close()
    assert checkpoint(tmp_path, file_names.RECOVERY_POINT_CHECKPOINT_FILE) == {
        ("a", 0): end_a,
        ("b", 0): end_b,
    }
    assert checkpoint(tmp_path, file_names.REPLICATION_OFFSET_CHECKPOINT_FILE) == {
        ("a", 0): end_a,
        ("b", 0): end_b,
    }
    third = manager(tmp_path)
    assert [log.directory.name for log in third.load_all()] == ["a-0", "b-0"]
    third.close()


def test_log_start_offset_checkpoint_holds_only_raised_starts(tmp_path: Path) -> None:
    mgr = manager(tmp_path)
    fill(mgr, "t", 0)
    fill(mgr, "u", 0)
    log = mgr.get_or_create_log("t", 0)
    assert log.maybe_increment_log_start_offset(7)
    mgr.checkpoint_log_start_offsets()
    assert checkpoint(tmp_path, file_names.LOG_START_OFFSET_CHECKPOINT_FILE) == {("t", 0): 7}
    mgr.close()
    reopened = manager(tmp_path)
    t0 = reopened.get_log("t", 0)
    assert t0 is not None and t0.log_start_offset == 7
    t0.truncate_fully_and_start_at(3)  # the start offset went back to the first segment's base
    reopened.checkpoint_log_start_offsets()
    assert checkpoint(tmp_path, file_names.LOG_START_OFFSET_CHECKPOINT_FILE) == {}
    reopened.close()


def test_read_only_manager_changes_nothing(tmp_path: Path) -> None:
    mgr = manager(tmp_path)
    end = fill(mgr, "t", 0)
    mgr.close()
    before = sorted((p.name, p.stat().st_mtime_ns) for p in tmp_path.rglob("*"))
    reader = manager(tmp_path, read_only=True)
    assert reader.had_clean_shutdown
    log = reader.get_log("t", 0)
    assert log is not None and log.read_only and log.high_watermark == end
    assert reader.high_watermark("t", 0) == end
    with pytest.raises(ValueError):
        reader.get_or_create_log("new", 0)
    with pytest.raises(ValueError):
        reader.checkpoint_recovery_points()
    reader.close()
    assert sorted((p.name, p.stat().st_mtime_ns) for p in tmp_path.rglob("*")) == before


def test_read_only_on_real_vectors(vectors_dir: Path) -> None:
    log_dir = vectors_dir / "multi-segment-3x"
    reader = LogManager(log_dir, Settings(), read_only=True)
    assert reader.partitions() == [("invoice", p) for p in range(5)]
    assert reader.high_watermark("invoice", 0) == 100294
    log = reader.get_log("invoice", 0)
    assert log is not None
    assert log.log_end_offset == 100294 and log.high_watermark == 100294
    assert log.segments.base_offsets() == [0, 30626, 60611, 90867]
    assert len(reader.load_all()) == 5
    reader.close()


def test_writable_manager_on_a_copy_of_the_vectors(vectors_dir: Path, tmp_path: Path) -> None:
    source = vectors_dir / "mixed-codecs-epochs"
    for path in source.rglob("*"):
        target = tmp_path / path.relative_to(source)
        if path.is_dir():
            target.mkdir()
        else:
            target.write_bytes(path.read_bytes())
    os.chmod(tmp_path, 0o755)
    mgr = LogManager(tmp_path, Settings(), clock=MockClock())
    log = mgr.get_log("lsx1", 0)
    assert log is not None and log.high_watermark == 14 == log.log_end_offset
    mgr.close()
    assert checkpoint(tmp_path, file_names.RECOVERY_POINT_CHECKPOINT_FILE) == {("lsx1", 0): 14}


def _files(log_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(log_dir)): p.read_bytes() for p in sorted(log_dir.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("start", [100, 15])
def test_a_damaged_log_start_checkpoint_makes_a_writer_refuse_not_delete(tmp_path: Path, start: int) -> None:
    """After an unclean shutdown, ``log-start-offset-checkpoint`` says t-0 starts at ``start``: above its
    log end 18 (100; no high watermark checkpointed, or that would be named first), or above its
    checkpointed high watermark 12 (15; 12..17 uncommitted). A writer's
    open quarantined every segment and started the log at 100, or took the log as starting at 15 (the
    high watermark jumping over uncommitted records, retention then deleting committed ones), with
    only a warning. It now refuses with one line naming the file, the value and ``seglog recover``,
    and changes nothing."""
    mgr = manager(tmp_path)
    log = mgr.get_or_create_log("t", 0)
    for _ in range(6):
        log.append({"value": [b"x" * 300] * 3})
        log.roll()
    log.update_high_watermark(12)
    mgr.close()
    (tmp_path / file_names.LOG_START_OFFSET_CHECKPOINT_FILE).write_text(f"0\n1\nt 0 {start}\n")
    if start == 100:
        (tmp_path / file_names.REPLICATION_OFFSET_CHECKPOINT_FILE).write_text("0\n0\n")
    (tmp_path / file_names.CLEAN_SHUTDOWN_FILE).unlink()
    before = _files(tmp_path)
    writer = manager(tmp_path)
    with pytest.raises(StorageError) as refused:
        writer.get_or_create_log("t", 0)
    message = str(refused.value)
    assert (
        f"checkpointed log start offset {start} ({tmp_path / file_names.LOG_START_OFFSET_CHECKPOINT_FILE})" in message
    )
    above = "its log end offset 18" if start == 100 else "its checkpointed high watermark 12"
    assert above in message and f"seglog recover --log-dir {tmp_path}" in message and "\n" not in message
    writer.close()
    after = _files(tmp_path)
    assert {k: v for k, v in after.items() if k != file_names.CLEAN_SHUTDOWN_FILE} == before


def test_an_unreadable_high_watermark_checkpoint_makes_a_writer_refuse_not_hide_records(tmp_path: Path) -> None:
    """``replication-offset-checkpoint`` damaged (a malformed line): a writer that opened and closed t-0
    without committing started it at its log start offset and replaced the file with that, so readers
    saw none of its committed records and the committed offset was forgotten. The writer now
    refuses with one line naming the file and ``seglog recover``, and the file stays as it was."""
    mgr = manager(tmp_path)
    end = fill(mgr, "t", 0)
    mgr.close()
    damaged = tmp_path / file_names.REPLICATION_OFFSET_CHECKPOINT_FILE
    damaged.write_text(f"0\n1\nt 0 {end}x\n")
    writer = manager(tmp_path)
    with pytest.raises(StorageError) as refused:
        writer.get_or_create_log("t", 0)
    message = str(refused.value)
    assert str(damaged) in message and f"seglog recover --log-dir {tmp_path}" in message and "\n" not in message
    writer.close()
    assert damaged.read_text() == f"0\n1\nt 0 {end}x\n"
    reader = manager(tmp_path, read_only=True)  # nor may a reader take it for "no entry" (up to the log end)
    with pytest.raises(StorageError, match="seglog recover"):
        reader.get_log("t", 0)
    reader.close()
