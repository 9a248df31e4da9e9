"""The maintenance jobs on real segment files, driven by a MockClock."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from indexer.checkpoint import OffsetCheckpointFile
from indexer.clock import MockClock
from indexer.errors import StorageError
from indexer.file_names import REPLICATION_OFFSET_CHECKPOINT_FILE, quarantine_file
from indexer.index_check import segment_index_problem
from indexer.log import Log
from indexer.records.decoder import decode_records
from indexer.records.file_records import FileRecords
from maintenance import metadata
from maintenance.access import BorrowedLogs, OwnedLogs
from maintenance.jobs import JOBS
from maintenance.metadata import retention_plan as plan_retention
from maintenance.metadata import scan_partition
from tests.maintenance.conftest import START_MS, append_batches, settings_for, small_config


def index_problem(directory: Path, base: int, _size: int, following: int) -> str | None:
    problem = segment_index_problem(directory, base, next_base_offset=following, against_log=True)
    return None if problem is None else str(problem)


def owned(log_dir: Path, logs: dict[tuple[str, int], Log], clock: MockClock) -> OwnedLogs:
    return OwnedLogs(log_dir, settings_for(next(iter(logs.values())).config), logs, clock=clock)


def committed_log(log_dir: Path, clock: MockClock, appends: int, name: str = "t-0", **config: object) -> Log:
    """A log of ``appends`` 3-record appends, one second apart, with everything committed (HW = LEO)."""
    log = Log.open(log_dir / name, small_config(**config), clock=clock)
    append_batches(log, clock, appends)
    log.update_high_watermark(log.log_end_offset)
    return log


def files_with_suffix(path: Path, suffix: str) -> list[str]:
    return sorted(p.name for p in path.iterdir() if p.name.endswith(suffix))


class TestRetention:
    def test_by_time_deletes_expired_segments_asynchronously(self, log_dir: Path, clock: MockClock) -> None:
        log = committed_log(log_dir, clock, 20, retention_ms=10_000)
        try:
            before = [s.base_offset for s in log.segments]
            now = clock.milliseconds()
            expired = [s.base_offset for s in log.segments.values()[:-1] if now - s.largest_timestamp > 10_000]
            assert 0 < len(expired) < len(before) - 1
            report = JOBS["retention"].fn(owned(log_dir, {("t", 0): log}, clock))
            assert report.details == {"segments_deleted": len(expired)}
            assert [s.base_offset for s in log.segments] == before[len(expired) :]
            assert log.log_start_offset == before[len(expired)]
            # Renamed now, removed after file.delete.delay.ms (1 s in these tests).
            assert len(files_with_suffix(log.directory, ".log.deleted")) == len(expired)
            clock.advance(1000)
            assert files_with_suffix(log.directory, ".deleted") == []
        finally:
            log.close()

    def test_by_size_keeps_retention_bytes(self, log_dir: Path, clock: MockClock) -> None:
        log = committed_log(log_dir, clock, 20, retention_bytes=1500, retention_ms=-1)
        try:
            assert log.size_in_bytes > 3000
            report = JOBS["retention"].fn(owned(log_dir, {("t", 0): log}, clock))
            assert report.details["segments_deleted"] > 0
            # Kafka deletes the oldest segments only while what remains still holds retention.bytes.
            assert 1500 <= log.size_in_bytes < 1500 + log.segments.first_segment().size
        finally:
            log.close()

    def test_by_log_start_offset(self, log_dir: Path, clock: MockClock) -> None:
        log = committed_log(log_dir, clock, 20, retention_ms=-1)
        try:
            third = log.segments.values()[2]
            log.maybe_increment_log_start_offset(third.base_offset + 1)
            report = JOBS["retention"].fn(owned(log_dir, {("t", 0): log}, clock))
            assert report.details == {"segments_deleted": 2}
            assert log.segments.first_segment() is third
        finally:
            log.close()

    def test_nothing_above_the_high_watermark_is_deleted(self, log_dir: Path, clock: MockClock) -> None:
        log = committed_log(log_dir, clock, 20, retention_ms=1)
        try:
            log.update_high_watermark(log.segments.values()[1].base_offset)
            JOBS["retention"].fn(owned(log_dir, {("t", 0): log}, clock))
            assert log.segments.first_segment().base_offset <= log.high_watermark
            assert log.num_segments > 2
        finally:
            log.close()

    def test_daemon_plans_from_metadata_as_the_engine_decides(self, log_dir: Path, clock: MockClock) -> None:
        log = committed_log(log_dir, clock, 30, retention_ms=12_000)
        directory, leo = log.directory, log.log_end_offset
        bases = [s.base_offset for s in log.segments]
        log.close()
        OffsetCheckpointFile(log_dir / REPLICATION_OFFSET_CHECKPOINT_FILE).write({("t", 0): leo})
        meta = scan_partition(directory, small_config(retention_ms=12_000), log_start_offset=0, high_watermark=leo)
        plan = plan_retention(meta, clock.milliseconds())
        assert plan.base_offsets and not plan.last_segment_may_go
        access = BorrowedLogs(log_dir, settings_for(small_config(retention_ms=12_000)), clock=clock)
        report = JOBS["retention"].fn(access)
        assert report.details == {"segments_deleted": len(plan.base_offsets)}
        remaining = sorted(int(p.name.split(".")[0]) for p in directory.glob("*.log"))
        assert remaining == bases[len(plan.base_offsets) :]
        # The borrowed partition was released: another writer can open it right away.
        Log.open(directory, small_config(), clock=clock).close()

    def test_decides_from_metadata_only(self, log_dir: Path, clock: MockClock, monkeypatch: pytest.MonkeyPatch) -> None:
        """A retention pass over hundreds of segments reads no record data, in-process or in the daemon."""
        log = committed_log(log_dir, clock, 150, retention_ms=3_600_000, retention_bytes=10**9, segment_bytes=220)
        assert log.num_segments >= 150
        reads: list[str] = []
        for name in ("read", "batches", "scan", "search_for_offset_with_size"):
            original = getattr(FileRecords, name)

            def counting(
                self: FileRecords, *args: object, _name: str = name, _orig: object = original, **kw: object
            ) -> object:
                reads.append(f"{_name} {self.path.name}")
                return _orig(self, *args, **kw)  # type: ignore[operator]

            monkeypatch.setattr(FileRecords, name, counting)
        report = JOBS["retention"].fn(owned(log_dir, {("t", 0): log}, clock))
        assert report.errors == [] and report.actions == 0
        assert reads == []
        leo = log.log_end_offset
        log.close()
        OffsetCheckpointFile(log_dir / REPLICATION_OFFSET_CHECKPOINT_FILE).write({("t", 0): leo})
        opened: list[str] = []
        real_open = open

        def counting_open(path: object, *args: object, **kw: object) -> object:
            opened.append(str(path))
            return real_open(path, *args, **kw)  # type: ignore[call-overload]

        monkeypatch.setattr(metadata, "open", counting_open, raising=False)
        config = small_config(retention_ms=3_600_000, retention_bytes=10**9, segment_bytes=220)
        report = JOBS["retention"].fn(BorrowedLogs(log_dir, settings_for(config), clock=clock))
        assert report.partitions == 0 and report.actions == 0  # no partition needed opening
        assert reads == [] and not any(p.endswith(".log") for p in opened)
        assert len(opened) <= 1  # the time index of the oldest segment only


class TestRoll:
    def test_rolls_an_idle_segment_after_segment_ms(self, log_dir: Path, clock: MockClock) -> None:
        log = committed_log(log_dir, clock, 1, segment_ms=10_000)
        try:
            access = owned(log_dir, {("t", 0): log}, clock)
            assert JOBS["roll"].fn(access).actions == 0
            clock.advance(8_500)  # 9.5 s after the first record
            assert JOBS["roll"].fn(access).actions == 0
            clock.advance(1_000)
            report = JOBS["roll"].fn(access)
            assert report.details == {"segments_rolled": 1}
            sealed, active = log.segments.values()
            assert active.size == 0 and active.base_offset == log.log_end_offset
            # Sealed: trimmed indexes whose last time entry is the segment's max timestamp.
            assert sealed.offset_index_path.stat().st_size == 8 * sealed.offset_index.entries
            assert sealed.time_index_path.stat().st_size == 12 * sealed.time_index.entries
            assert sealed.time_index.last_entry.timestamp == START_MS
            assert index_problem(log.directory, sealed.base_offset, sealed.size, active.base_offset) is None
            # An empty active segment never rolls for time.
            clock.advance(60_000)
            assert JOBS["roll"].fn(access).actions == 0
        finally:
            log.close()

    def test_daemon_rolls_a_partition_nobody_writes(self, log_dir: Path, clock: MockClock) -> None:
        log = committed_log(log_dir, clock, 2, segment_ms=10_000)
        directory = log.directory
        log.close()
        access = BorrowedLogs(log_dir, settings_for(small_config(segment_ms=10_000)), clock=clock)
        assert JOBS["roll"].fn(access).partitions == 0
        clock.advance(20_000)
        assert JOBS["roll"].fn(access).details == {"segments_rolled": 1}
        assert len(files_with_suffix(directory, ".log")) == 2


def test_the_roll_pass_goes_on_beside_a_writers_reserved_bytes_and_a_damaged_partition(
    log_dir: Path, clock: MockClock
) -> None:
    """The daemon's roll pre-check reads the first batch header of each active segment from its file.
    A writer appending to a new segment reserves the bytes (zeros) before it fills them: the check
    raised CorruptRecordError ('record size 0 ... at position 0'), which ended the whole pass (ERROR
    'maintenance job roll failed' with a traceback, seen beside a `seglog append` loop) and left the
    other partitions unrolled. Bytes not written yet are no batch yet: no roll; a partition whose
    first batch is damaged is one partition's error, and the pass goes on."""
    writing = committed_log(log_dir, clock, 2, "a-0", segment_ms=10_000)
    writing.roll()
    with open(writing.directory / f"{writing.log_end_offset:020d}.log", "r+b") as f:
        f.write(bytes(300))  # reserved by the writer (posix_fallocate), not filled yet
    idle = committed_log(log_dir, clock, 2, "b-0", segment_ms=10_000)
    idle.close()
    damaged = committed_log(log_dir, clock, 2, "c-0", segment_ms=10_000)
    damaged.close()
    with open(damaged.directory / "00000000000000000000.log", "r+b") as f:
        f.seek(8)
        f.write((5).to_bytes(4, "big"))  # a batch size below any entry's
    clock.advance(20_000)
    try:
        access = BorrowedLogs(log_dir, settings_for(small_config(segment_ms=10_000)), clock=clock)
        report = JOBS["roll"].fn(access)
    finally:
        writing.close()
    assert report.details == {"segments_rolled": 1}
    assert [e.partition for e in report.errors] == ["c-0"]
    assert len(files_with_suffix(idle.directory, ".log")) == 2


def test_deleted_segment_stays_readable_until_the_delay(log_dir: Path, clock: MockClock) -> None:
    """Async deletion: a reader holding a segment keeps reading it after retention removed it."""
    log = committed_log(log_dir, clock, 12, retention_ms=5_000)
    try:
        held = log.segments.first_segment()
        expected = decode_records(held.read(held.base_offset, 1 << 20).records)
        JOBS["retention"].fn(owned(log_dir, {("t", 0): log}, clock))
        assert held.base_offset not in log.segments
        assert held.log.path.name.endswith(".log.deleted")
        again = decode_records(held.read(held.base_offset, 1 << 20).records)
        assert again.equals(expected) and again.num_rows > 0
        clock.advance(999)
        assert held.log.path.exists()
        clock.advance(1)
        assert not held.log.path.exists()
    finally:
        log.close()


class TestIndexCare:
    def test_rebuilds_corrupt_indexes_in_process(self, log_dir: Path, clock: MockClock) -> None:
        log = committed_log(log_dir, clock, 30)
        try:
            first, second = log.segments.values()[:2]
            expected = first.offset_index_path.read_bytes(), second.time_index_path.read_bytes()
            assert len(expected[0]) >= 8 and len(expected[1]) >= 12
            # Corrupted in place (the live process has these files mapped): a zero-filled, un-trimmed
            # tail and a torn entry.
            with open(first.offset_index_path, "ab") as f:
                f.write(bytes(800))
            with open(second.time_index_path, "ab") as f:
                f.write(b"\x01\x02\x03")
            report = JOBS["index"].fn(owned(log_dir, {("t", 0): log}, clock))
            assert report.details == {"indexes_rebuilt": 2}, report
            assert first.offset_index_path.read_bytes() == expected[0]
            assert second.time_index_path.read_bytes() == expected[1]
        finally:
            log.close()

    def test_daemon_rebuilds_missing_indexes(self, log_dir: Path, clock: MockClock) -> None:
        log = committed_log(log_dir, clock, 30)
        first, second = log.segments.values()[:2]
        paths = [first.offset_index_path, second.time_index_path]
        expected = [p.read_bytes() for p in paths]
        log.close()
        for p in paths:
            p.unlink()
        access = BorrowedLogs(log_dir, settings_for(small_config()), clock=clock)
        report = JOBS["index"].fn(access)
        assert report.details == {"indexes_rebuilt": 2}, report
        assert [p.read_bytes() for p in paths] == expected
        assert JOBS["index"].fn(access).partitions == 0  # all fine now: not reopened

    def test_never_cuts_a_sealed_segment(self, log_dir: Path, clock: MockClock) -> None:
        log = committed_log(log_dir, clock, 30)
        try:
            first = log.segments.first_segment()
            size = first.size
            first.offset_index_path.unlink()
            with open(first.log.path, "r+b") as f:
                f.seek(size - 5)
                f.write(b"\xff\xff\xff\xff\xff")
            report = JOBS["index"].fn(owned(log_dir, {("t", 0): log}, clock))
            assert len(report.errors) == 1
            assert report.errors[0].partition == "t-0" and report.errors[0].path == str(first.log.path)
            assert "seglog recover" in report.errors[0].message
            assert first.log.path.stat().st_size == size
        finally:
            log.close()

    def test_truncates_what_a_dead_writer_left_above_the_commit(self, log_dir: Path, clock: MockClock) -> None:
        log = committed_log(log_dir, clock, 10)
        hw = log.log_end_offset
        append_batches(log, clock, 3)  # written, never committed
        directory = log.directory
        log.close()
        OffsetCheckpointFile(log_dir / REPLICATION_OFFSET_CHECKPOINT_FILE).write({("t", 0): hw - 6})
        # A sink commit record is ahead of the high watermark checkpoint (crash between commit and publish).
        (log_dir / "seglog-sink.events.json").write_text(
            json.dumps(
                {
                    "version": 1,
                    "sink_id": "events",
                    "query_id": "q",
                    "batch_id": 3,
                    "committed_at_ms": START_MS,
                    "end_offsets": {"t": {"0": hw}},
                }
            )
        )
        access = BorrowedLogs(log_dir, settings_for(small_config()), clock=clock)
        # The writer closed cleanly: its tail is trusted, nothing is opened.
        assert JOBS["index"].fn(access).partitions == 0
        # The writer died holding the partition (its pid is left in the lock file): its tail goes.
        (directory / ".seglog.lock").write_text("pid=999999 host=elsewhere since_ms=0\n")
        report = JOBS["index"].fn(access)
        assert report.details == {"offsets_truncated": 9}
        reopened = Log.open(directory, small_config(), clock=clock)
        try:
            assert reopened.log_end_offset == hw
        finally:
            reopened.close()
        assert JOBS["index"].fn(access).partitions == 0  # released cleanly: not reopened


def test_a_failing_partition_is_reported_and_the_others_still_run(
    log_dir: Path, clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs = {
        ("a", 0): committed_log(log_dir, clock, 12, "a-0", retention_ms=5_000),
        ("b", 0): committed_log(log_dir, clock, 12, "b-0", retention_ms=5_000),
    }
    try:
        broken = logs[("a", 0)]
        path = broken.segments.first_segment().log.path

        def fail() -> int:
            raise StorageError(f"rename failed on {path}: disk on fire", path=path)

        monkeypatch.setattr(broken, "apply_retention", fail)
        report = JOBS["retention"].fn(owned(log_dir, logs, clock))
        assert [(e.partition, e.path) for e in report.errors] == [("a-0", str(path))]
        assert report.partitions == 2 and report.details["segments_deleted"] > 0
    finally:
        for log in logs.values():
            log.close()


def test_checkpoint_jobs_merge_with_other_owners(log_dir: Path, clock: MockClock) -> None:
    log = committed_log(log_dir, clock, 5)
    try:
        path = log_dir / REPLICATION_OFFSET_CHECKPOINT_FILE
        OffsetCheckpointFile(path).write({("other", 3): 77})
        report = JOBS["checkpoint-high-watermark"].fn(owned(log_dir, {("t", 0): log}, clock))
        assert report.details == {"entries_written": 1}
        assert OffsetCheckpointFile(path).read() == {("other", 3): 77, ("t", 0): log.high_watermark}
        log.maybe_increment_log_start_offset(4)
        JOBS["checkpoint-log-start-offset"].fn(owned(log_dir, {("t", 0): log}, clock))
        JOBS["checkpoint-recovery-point"].fn(owned(log_dir, {("t", 0): log}, clock))
        assert OffsetCheckpointFile(log_dir / "log-start-offset-checkpoint").read() == {("t", 0): 4}
        recovery_points = OffsetCheckpointFile(log_dir / "recovery-point-offset-checkpoint").read()
        assert recovery_points == {("t", 0): log.recovery_point}
    finally:
        log.close()


def test_a_daemons_checkpoint_pass_counts_the_partitions_it_opened(log_dir: Path, clock: MockClock) -> None:
    """``seglog maintain --once checkpoint-high-watermark`` opens (recovering if need be), flushes and
    gives back every partition, which writes its entries; over 3,000 partitions that took 60 s and
    its report said '0 worked on, 0 actions'. Each partition it opened is counted as worked on."""
    for name in ("a-0", "b-0"):
        committed_log(log_dir, clock, 2, name).close()
    (log_dir / REPLICATION_OFFSET_CHECKPOINT_FILE).unlink(missing_ok=True)
    access = BorrowedLogs(log_dir, settings_for(small_config()), clock=clock)
    report = JOBS["checkpoint-high-watermark"].fn(access)
    assert (report.checked, report.partitions, report.errors) == (2, 2, [])


def test_flush_job_moves_the_recovery_point_after_flush_ms(log_dir: Path, clock: MockClock) -> None:
    log = committed_log(log_dir, clock, 3, flush_ms=5_000)
    try:
        access = owned(log_dir, {("t", 0): log}, clock)
        log.flush()
        append_batches(log, clock, 1, step_ms=0)
        assert log.recovery_point < log.log_end_offset
        assert JOBS["flush"].fn(access).actions == 0
        clock.advance(5_000)
        assert JOBS["flush"].fn(access).details == {"logs_flushed": 1}
        assert log.recovery_point == log.log_end_offset
    finally:
        log.close()


def test_planner_matches_engine_on_random_logs(log_dir: Path) -> None:
    """plan_retention's sure deletions are exactly a prefix the engine deletes too."""
    rng = np.random.default_rng(7)
    for trial in range(5):
        clock = MockClock(START_MS)
        retention_ms = int(rng.integers(2_000, 20_000))
        retention_bytes = int(rng.choice([-1, int(rng.integers(500, 5_000))]))
        config = small_config(retention_ms=retention_ms, retention_bytes=retention_bytes)
        log = Log.open(log_dir / f"p-{trial}", config, clock=clock)
        append_batches(log, clock, int(rng.integers(5, 25)))
        log.update_high_watermark(int(rng.integers(0, log.log_end_offset + 1)))
        log.close()
        hw = log.high_watermark
        log = Log.open(log_dir / f"p-{trial}", config, clock=clock, had_clean_shutdown=True, high_watermark=hw)
        try:
            meta = scan_partition(log.directory, config, log_start_offset=0, high_watermark=log.high_watermark)
            plan = plan_retention(meta, clock.milliseconds())
            bases = [s.base_offset for s in log.segments]
            deleted = log.delete_old_segments()
            assert list(plan.base_offsets) == bases[: len(plan.base_offsets)]
            assert deleted >= len(plan.base_offsets)
            assert deleted == len(plan.base_offsets) or plan.last_segment_may_go
        finally:
            log.close()


def test_readers_and_appends_interleave_with_the_jobs(log_dir: Path, clock: MockClock) -> None:
    """In one process: a reader thread and an appender thread against roll, retention and index passes.

    The reader always gets whole, contiguous offset ranges starting at the offset it asked for (or,
    once retention moved past its start, OffsetOutOfRangeError); appends never fail; the jobs never
    report an error. The mock clock runs far faster than the threads, and the delete delay is one
    loop turn: segment files are deleted under reads in flight too (the deterministic interleavings
    are in tests/indexer/test_log_read_races.py).
    """
    from indexer.errors import OffsetOutOfRangeError

    log = committed_log(
        log_dir, clock, 10, retention_bytes=2500, retention_ms=-1, segment_ms=2_000, file_delete_delay_ms=500
    )
    access = owned(log_dir, {("t", 0): log}, clock)
    stop = threading.Event()
    problems: list[BaseException] = []
    reads = [0]

    def reader() -> None:
        while not stop.is_set():
            start = log.log_start_offset
            try:
                table = log.read_records(start, max_records=40)
            except OffsetOutOfRangeError:
                continue
            except BaseException as e:  # noqa: BLE001 - collected for the assertion below
                problems.append(e)
                return
            offsets = table.column("offset").to_pylist()
            if offsets != list(range(start, start + len(offsets))):
                problems.append(AssertionError(f"read from {start} returned {offsets[:5]}..."))
                return
            reads[0] += 1

    def appender() -> None:
        try:
            while not stop.is_set():
                log.append({"value": [b"w" * 40] * 3, "timestamp": [clock.milliseconds()] * 3})
                log.update_high_watermark(log.log_end_offset)
        except BaseException as e:  # noqa: BLE001 - collected for the assertion below
            problems.append(e)

    threads = [threading.Thread(target=reader), threading.Thread(target=appender)]
    for t in threads:
        t.start()
    reports = []
    try:
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and not problems:
            clock.advance(500)  # also runs the due deletions of .deleted files
            reports += [JOBS[name].fn(access) for name in ("roll", "retention", "index")]
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
        log.close()
    assert problems == []
    assert reads[0] > 0 and all(r.errors == [] for r in reports)
    assert sum(r.details.get("segments_deleted", 0) for r in reports) > 0


def test_daemon_removes_deleted_files_an_earlier_run_left(log_dir: Path, clock: MockClock) -> None:
    """A run that ends before ``file.delete.delay.ms`` (``--once``, a stopped or killed daemon) leaves
    its ``.deleted`` files behind; a later run removes them, as a broker's restart does (spec 6.2),
    although nothing else about the partition needs opening. The run that renamed them leaves them
    to its own delayed deletion."""
    log = committed_log(log_dir, clock, 20, retention_ms=10_000)
    directory, leo = log.directory, log.log_end_offset
    log.close()
    OffsetCheckpointFile(log_dir / REPLICATION_OFFSET_CHECKPOINT_FILE).write({("t", 0): leo})
    settings = settings_for(small_config(retention_ms=10_000))
    first = BorrowedLogs(log_dir, settings, clock=clock)
    assert JOBS["retention"].fn(first).details["segments_deleted"] > 0
    left = files_with_suffix(directory, ".deleted")
    assert left
    again = JOBS["retention"].fn(first)  # its own deletion is still pending: not reopened for it
    assert again.partitions == 0 and files_with_suffix(directory, ".deleted") == left

    later = BorrowedLogs(log_dir, settings, clock=MockClock(clock.milliseconds()))  # the next run
    report = JOBS["retention"].fn(later)
    assert files_with_suffix(directory, ".deleted") == []
    assert report.details == {"deleted_files_removed": len(left)}
    assert JOBS["retention"].fn(later).partitions == 0


def test_a_wall_clock_set_back_delays_no_removal_of_deleted_files(log_dir: Path, clock: MockClock) -> None:
    """The daemon's delayed deletion of its ``.deleted`` files counts ``file.delete.delay.ms`` on the
    monotonic clock (its timer, as Kafka's scheduler does). Which ``.deleted`` files its own deletion
    will still remove was judged by the wall clock: set back an hour after a retention pass, the
    daemon took the files another run (a killed ``--once retention``) left in that partition for its
    own, pending for an hour more, and left them there. Now judged on the monotonic clock too."""
    log = committed_log(log_dir, clock, 20, retention_ms=10_000, file_delete_delay_ms=60_000)
    directory, leo = log.directory, log.log_end_offset
    log.close()
    OffsetCheckpointFile(log_dir / REPLICATION_OFFSET_CHECKPOINT_FILE).write({("t", 0): leo})
    daemon = BorrowedLogs(log_dir, settings_for(small_config(retention_ms=10_000, file_delete_delay_ms=60_000)), clock)
    assert JOBS["retention"].fn(daemon).details["segments_deleted"] > 0
    assert files_with_suffix(directory, ".deleted")
    clock.set_wall_ms(clock.milliseconds() - 3_600_000)
    clock.advance(60_000)  # its own deletion ran, on time
    assert files_with_suffix(directory, ".deleted") == []
    (directory / "00000000000000000000.log.deleted").write_bytes(b"left by another run")
    report = JOBS["retention"].fn(daemon)
    assert report.details == {"deleted_files_removed": 1}
    assert files_with_suffix(directory, ".deleted") == []


def test_retention_names_each_quarantine_file_it_deletes(log_dir: Path, clock: MockClock) -> None:
    """Quarantine files hold the only copy of bytes recovery removed: the report (and the log) names
    each one retention deletes and why, as it does each deleted segment."""
    log = committed_log(log_dir, clock, 3, retention_ms=-1)
    directory = log.directory
    log.close()
    kept = quarantine_file(directory, 0, 70)
    kept.write_bytes(b"x" * 10)
    old = quarantine_file(directory, 3, 0)
    old.write_bytes(b"y" * 10)
    now = int(time.time() * 1000)
    os.utime(old, ns=((now - 7_200_000) * 1_000_000,) * 2)
    config = small_config(retention_ms=-1, quarantine_retention_ms=3_600_000)
    report = JOBS["retention"].fn(BorrowedLogs(log_dir, settings_for(config), clock=MockClock(now)))
    assert report.details == {"quarantine_files_deleted": 1}
    assert report.findings == [f"t-0: deleted quarantine file {old.name} (quarantine.retention.ms breached)"]
    assert kept.exists() and not old.exists()
