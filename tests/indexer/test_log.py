"""Tests of indexer/log.py (Kafka's LocalLogTest / UnifiedLogTest cases, spec section 5)."""

from __future__ import annotations

import errno
import os
import re
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import indexer.records.append_pipeline as append_pipeline
import indexer.records.encoder as encoder_module
from indexer.clock import MockClock, SystemClock
from indexer.config import LogConfig
from indexer.data_loss import record_accepted_loss
from indexer.errors import (
    InvalidOffsetError,
    LogLockedError,
    OffsetOutOfRangeError,
    OffsetsInNoSegmentError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    SchemaError,
    StorageError,
)
from indexer.log import Log
from indexer.records.file_records import FileRecords

T0 = 1_700_000_000_000
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def clock() -> MockClock:
    return MockClock(T0)


@pytest.fixture
def open_log(tmp_path: Path, clock: MockClock) -> Iterator:
    opened: list[Log] = []

    def opener(name: str = "t-0", **config: object) -> Log:
        log = Log.open(tmp_path / name, LogConfig.from_mapping(config), clock=clock)
        opened.append(log)
        return log

    yield opener
    for log in opened:
        log.close()


def values(n: int, start: int = 0, size: int = 1) -> dict[str, list]:
    return {"value": [bytes([65 + (i % 26)]) * size for i in range(start, start + n)]}


def segment_files(directory: Path, suffix: str = ".log") -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(suffix))


def batch_bases(log: Log) -> list[list[int]]:
    """Per segment, the base offsets of its batches (read straight from the files)."""
    out = []
    for segment in log.segments:
        with FileRecords.open(segment.log.path, mutable=False) as records:
            out.append([b.base_offset for b in records.batches()])
    return out


# -- append and offsets ----------------------------------------------------------------------


def test_append_assigns_offsets_and_reads_stop_at_the_high_watermark(open_log) -> None:
    log = open_log()
    info = log.append(values(3), now_ms=T0)
    assert (info.first_offset, info.last_offset, info.num_records, info.num_batches) == (0, 2, 3, 1)
    assert (info.max_timestamp, info.offset_of_max_timestamp, info.log_append_time_ms) == (T0, 2, -1)
    assert info.valid_bytes == 3 * 8 + 61 + 12 - 12  # three 8-byte records in one 61-byte-header batch
    info = log.append({"key": ["k"], "value": ["v"], "timestamp": [T0 + 5], "headers": [[{"key": "h", "value": b"x"}]]})
    assert (info.first_offset, info.last_offset) == (3, 3)
    assert log.log_end_offset == 4
    assert log.high_watermark == 0
    assert log.read_records(0).num_rows == 0  # nothing committed yet
    assert log.update_high_watermark(100) == 4  # clamped to the log end offset
    table = log.read_records(0)
    assert table.column("offset").to_pylist() == [0, 1, 2, 3]
    assert table.slice(3).to_pylist() == [
        {
            "offset": 3,
            "timestamp": T0 + 5,
            "timestampType": 0,
            "key": b"k",
            "value": b"v",
            "headers": [{"key": "h", "value": b"x"}],
        }
    ]
    assert log.read_records(1, 2).column("offset").to_pylist() == [1, 2]
    assert log.read_records(1, max_offset=3).column("offset").to_pylist() == [1, 2]
    assert log.read_records(4).num_rows == 0
    empty = log.append(values(0))
    assert (empty.first_offset, empty.last_offset, empty.num_records) == (4, 3, 0)


def test_log_append_time(open_log, clock: MockClock) -> None:
    log = open_log(**{"message.timestamp.type": "LogAppendTime"})
    clock.advance(1234)
    info = log.append({"value": [b"a", b"b"], "timestamp": [5, 6]})
    assert info.log_append_time_ms == T0 + 1234
    log.update_high_watermark(log.log_end_offset)
    table = log.read_records(0)
    assert table.column("timestamp").to_pylist() == [T0 + 1234] * 2
    assert table.column("timestampType").to_pylist() == [1, 1]


def test_input_problems_write_nothing(open_log) -> None:
    log = open_log(**{"max.message.bytes": 200, "segment.bytes": 1000})
    log.append(values(1))
    size = log.size_in_bytes
    with pytest.raises(SchemaError):
        log.append({"value": [b"a"], "colour": ["red"]})
    with pytest.raises(SchemaError, match="column 'key'.* expected a sequence of values"):
        log.append({"key": "k", "value": "v"})  # one record as a dict of scalars, not of columns
    with pytest.raises(RecordTooLargeError) as info:
        log.append({"value": [b"a", b"b" * 500]})
    assert info.value.index == 1
    assert (log.log_end_offset, log.size_in_bytes) == (1, size)


def test_batch_larger_than_segment_bytes(open_log) -> None:
    log = open_log(**{"segment.bytes": 100})
    with pytest.raises(RecordBatchTooLargeError, match="segment.bytes = 100"):
        log.append(values(1, size=200))
    assert (log.log_end_offset, log.size_in_bytes, log.num_segments) == (0, 0, 1)


def test_roll_on_size_splits_appends_at_batch_boundaries(open_log) -> None:
    # max.message.bytes 200 -> batches of <= 200 bytes; segment.bytes 500 -> 2 such batches per segment
    log = open_log(**{"segment.bytes": 500, "max.message.bytes": 200})
    info = log.append(values(60, size=10))
    assert info.rolled > 0
    bases = batch_bases(log)
    assert [segment.base_offset for segment in log.segments] == [b[0] for b in bases]
    assert all(segment.size <= 500 for segment in log.segments)
    assert sum(len(b) for b in bases) == info.num_batches
    log.update_high_watermark(log.log_end_offset)
    assert log.read_records(0).column("offset").to_pylist() == list(range(60))


def test_roll_on_time_with_jitter(open_log, clock: MockClock) -> None:
    log = open_log(**{"segment.ms": 1000, "segment.jitter.ms": 300})
    log.append({"value": [b"a"], "timestamp": [T0]})
    jitter = log.active_segment.roll_jitter_ms
    assert 0 <= jitter < 300
    log.append({"value": [b"b"], "timestamp": [T0 + 1000 - jitter]})
    assert log.num_segments == 1
    log.append({"value": [b"c"], "timestamp": [T0 + 1001 - jitter]})
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_roll_on_wall_clock_without_record_timestamps(open_log, clock: MockClock) -> None:
    log = open_log(**{"segment.ms": 1000, "message.timestamp.type": "LogAppendTime"})
    log.append(values(1))
    clock.advance(1000)
    log.append(values(1))
    assert log.num_segments == 1
    clock.advance(1)
    log.append(values(1))
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_explicit_roll_seals_the_old_segment_and_flushes(open_log, tmp_path: Path) -> None:
    log = open_log()
    log.append(values(5))
    segment = log.roll()
    assert segment.base_offset == 5 and log.num_segments == 2
    assert log.recovery_point == 5
    assert (tmp_path / "t-0" / "00000000000000000000.index").stat().st_size == 0  # trimmed
    assert log.roll() is log.active_segment  # an empty active segment at the LEO is replaced
    assert [s.base_offset for s in log.segments] == [0, 5]


def test_continue_at_leaves_a_gap_and_a_whole_flushed_segment(open_log, tmp_path: Path) -> None:
    log = open_log()
    log.append(values(5))
    with pytest.raises(InvalidOffsetError):
        log.continue_at(5)
    log.continue_at(9)
    assert (log.log_end_offset, log.recovery_point, log.active_segment.base_offset) == (9, 9, 9)
    assert all((tmp_path / "t-0" / f"{9:020d}{suffix}").exists() for suffix in (".log", ".index", ".timeindex"))
    assert log.append(values(1)).first_offset == 9
    # the gap is a loss until recorded as accepted (what `seglog recover --accept-data-loss` does first)
    assert log.read_records(0, max_offset=10).column("offset").to_pylist() == [0, 1, 2, 3, 4]
    with pytest.raises(OffsetsInNoSegmentError, match=r"offsets 5\.\.8 of t-0"):
        log.read_records(5, max_offset=10)
    record_accepted_loss(tmp_path, {"topic": "t", "partition": 0, "lost": [{"first": 5, "last": 8}]})
    assert log.read_records(0, max_offset=10).column("offset").to_pylist() == [0, 1, 2, 3, 4, 9]


def test_flush_messages_moves_the_recovery_point(open_log) -> None:
    log = open_log(**{"flush.messages": 3})
    log.append(values(2))
    assert log.recovery_point == 0
    log.append(values(1))
    assert log.recovery_point == 3
    log.append(values(1))
    log.flush(3)
    assert log.recovery_point == 3
    log.flush()
    assert log.recovery_point == 4


def test_flush_fsync_error_becomes_storage_error(open_log, monkeypatch: pytest.MonkeyPatch) -> None:
    log = open_log()
    log.append(values(1))

    def failing_fsync(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(StorageError) as info:
        log.flush()
    assert info.value.errno == errno.ENOSPC
    assert info.value.path is not None and "t-0" in info.value.path
    assert log.recovery_point == 0
    monkeypatch.undo()


# -- read --------------------------------------------------------------------------------------


def test_read_fetch_semantics(open_log) -> None:
    log = open_log()
    for i in range(5):
        log.append(values(1, start=i))  # five 69-byte batches
    log.update_high_watermark(5)
    fetched = log.read(0, 1000)
    assert len(fetched.records) == 5 * 69
    assert log.read(0, 1, min_one_message=True).records.__len__() == 69
    partial = log.read(0, 1, min_one_message=False)
    assert len(partial.records) == 1 and partial.first_entry_incomplete
    at_bound = log.read(1, 1000, max_offset=1)
    assert at_bound.records == b""
    assert (
        at_bound.fetch_offset_metadata.message_offset,
        at_bound.fetch_offset_metadata.relative_position_in_segment,
    ) == (1, 69)
    beyond = log.read(3, 1000, max_offset=1)
    assert beyond.records == b"" and beyond.fetch_offset_metadata.relative_position_in_segment == 3 * 69
    assert len(log.read(1, 1000, max_offset=3).records) == 2 * 69
    assert log.read(5, 1000).records == b""
    with pytest.raises(OffsetOutOfRangeError) as info:
        log.read(6, 1000)
    assert info.value.offset == 6
    with pytest.raises(OffsetOutOfRangeError):
        log.read_records(6)


def test_read_records_across_segments_and_large_batches(open_log, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("indexer.log._READ_CHUNK_BYTES", 1000)  # the 3 KB batch is larger than a chunk
    log = open_log(**{"segment.bytes": 4000, "max.message.bytes": 2_000_000})
    log.append(values(3, size=1000))  # one ~3 KB batch in the first segment
    log.append(values(50, start=3, size=20))
    log.update_high_watermark(log.log_end_offset)
    assert log.num_segments >= 2
    table = log.read_records(2)
    assert table.column("offset").to_pylist() == list(range(2, 53))
    assert table.column("value").to_pylist()[0] == b"C" * 1000


def test_offset_for_timestamp(open_log) -> None:
    log = open_log(**{"segment.bytes": 400, "index.interval.bytes": 100})
    stamps = [T0 + 10 * i for i in range(40)]
    for i in range(0, 40, 4):
        log.append({"value": [b"v"] * 4, "timestamp": stamps[i : i + 4]})
    assert log.num_segments > 1
    log.update_high_watermark(30)
    assert log.offset_for_timestamp(T0 - 5) == 0
    assert log.offset_for_timestamp(T0 + 95) == 10
    assert log.offset_for_timestamp(T0 + 290) == 29
    assert log.offset_for_timestamp(T0 + 291) is None  # offset 30 is above the high watermark
    log.update_high_watermark(40)
    assert log.offset_for_timestamp(T0 + 291) == 30
    assert log.offset_for_timestamp(T0 + 391) is None


def test_max_timestamp_and_offset_names_the_record_inside_its_batch(open_log) -> None:
    """ListOffsets MAX_TIMESTAMP: the first record holding the largest timestamp, not the last offset of
    its batch (what the segment keeps); none while that record is above the high watermark, as Kafka."""
    log = open_log(**{"segment.bytes": 400, "index.interval.bytes": 100})
    assert log.max_timestamp_and_offset() is None
    log.append({"value": [b"v"] * 3, "timestamp": [T0, T0 + 50, T0 + 20]})  # offsets 0-2
    log.update_high_watermark(3)
    assert log.max_timestamp_and_offset() == (T0 + 50, 1, 0)  # 0: the leader epoch seglog writes
    for i in range(3, 30, 3):
        log.append({"value": [b"v"] * 3, "timestamp": [T0 + i, T0 + 5 * i, T0 + i]})  # max at i + 1
    assert log.num_segments > 1
    assert log.max_timestamp_and_offset() is None  # the largest, T0 + 5 * 27, is not committed
    log.update_high_watermark(30)
    assert log.max_timestamp_and_offset() == (T0 + 5 * 27, 28, 0)
    log.append({"value": [b"v"], "timestamp": [T0 + 1000]})  # offset 30, not committed
    assert log.max_timestamp_and_offset() is None
    log.update_high_watermark(31)
    assert log.max_timestamp_and_offset() == (T0 + 1000, 30, 0)


# -- high watermark and log start offset -------------------------------------------------------


def test_high_watermark_rules(open_log) -> None:
    log = open_log()
    log.append(values(10))
    assert log.update_high_watermark(4) == 4
    assert log.update_high_watermark(11) == 10  # clamped to the log end offset
    assert log.update_high_watermark(2) == 2  # may go back
    with pytest.raises(OffsetOutOfRangeError):
        log.maybe_increment_log_start_offset(3)
    assert log.maybe_increment_log_start_offset(2)
    assert not log.maybe_increment_log_start_offset(1)
    assert log.update_high_watermark(0) == 2  # never below the log start offset
    with pytest.raises(OffsetOutOfRangeError):
        log.read_records(1)


# -- truncation --------------------------------------------------------------------------------


def test_truncate_to(open_log, tmp_path: Path, clock: MockClock) -> None:
    log = open_log(**{"segment.bytes": 300, "file.delete.delay.ms": 1000})
    for i in range(12):
        log.append(values(2, start=2 * i))
    log.update_high_watermark(24)
    bases = [s.base_offset for s in log.segments]
    assert len(bases) > 2
    assert not log.truncate_to(24)
    target = bases[1] + 1  # inside the first batch of the second segment
    assert log.truncate_to(target)
    assert (log.log_end_offset, log.high_watermark) == (target, target)
    assert [s.base_offset for s in log.segments] == bases[:2]
    # the whole batch holding the target went: the second segment is empty again
    assert log.active_segment.size == 0
    assert log.read_records(0).column("offset").to_pylist() == list(range(bases[1]))
    deleted = segment_files(tmp_path / "t-0", ".log.deleted")
    assert len(deleted) == len(bases) - 2
    clock.advance(1000)
    assert segment_files(tmp_path / "t-0", ".deleted") == []
    log.append(values(1))
    assert log.read_records(target, max_offset=target + 1).column("offset").to_pylist() == [target]


def test_truncate_below_first_segment_truncates_fully(open_log) -> None:
    log = open_log()
    log.truncate_fully_and_start_at(50)
    log.append(values(5))
    assert log.truncate_to(10)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (10, 10, 10)
    assert [s.base_offset for s in log.segments] == [10]
    with pytest.raises(ValueError):
        log.truncate_to(-1)


def test_truncate_fully_and_start_at(open_log, tmp_path: Path, clock: MockClock) -> None:
    log = open_log(**{"segment.bytes": 200, "file.delete.delay.ms": 500})
    for i in range(5):
        log.append(values(2, start=2 * i))
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (100, 100, 100)
    assert [s.base_offset for s in log.segments] == [100]
    assert segment_files(tmp_path / "t-0") == ["00000000000000000100.log"]
    clock.advance(500)
    assert segment_files(tmp_path / "t-0", ".deleted") == []
    log.append(values(1))
    log.update_high_watermark(101)
    assert log.read_records(100).column("offset").to_pylist() == [100]
    log.truncate_fully_and_start_at(100)  # same base offset as the active segment
    assert log.log_end_offset == 100 and log.active_segment.size == 0


# -- retention -----------------------------------------------------------------------------------


def retention_log(open_log, **config: object) -> Log:
    """Five segments of 2 records each: timestamps T0+0..T0+9, rolled explicitly."""
    log = open_log(**{"file.delete.delay.ms": 1000, **config})
    for i in range(5):
        log.append({"value": [b"x", b"y"], "timestamp": [T0 + 2 * i, T0 + 2 * i + 1]})
        log.roll()
    return log


def test_retention_by_time(open_log, clock: MockClock, tmp_path: Path) -> None:
    log = retention_log(open_log, **{"retention.ms": 10_000})
    log.update_high_watermark(10)
    clock.advance(10_004)  # segments whose max timestamp is T0+1 and T0+3 are now older than 10 s
    assert log.delete_old_segments() == 2
    assert log.log_start_offset == 4
    assert [s.base_offset for s in log.segments] == [4, 6, 8, 10]
    assert len(segment_files(tmp_path / "t-0", ".log.deleted")) == 2
    clock.advance(1000)
    assert segment_files(tmp_path / "t-0", ".deleted") == []


def test_closing_a_log_releases_the_files_of_segments_awaiting_deletion(
    open_log, clock: MockClock, tmp_path: Path
) -> None:
    """Segments renamed ``.deleted`` keep their descriptors until ``file.delete.delay.ms`` passes (for
    readers in the middle of them); a closed log has no readers left, so it releases them then. Kept
    until the delay, every retention pass of a process that opens and closes logs (``maintain
    --once``, executor writes, ``seglog run``'s maintenance) held 3 descriptors a deleted segment:
    past 1024, py4j's callback server (select) stops, and with it every foreachBatch sink."""

    def descriptors() -> int:
        return len(os.listdir("/proc/self/fd"))

    before = descriptors()
    log = retention_log(open_log, **{"retention.ms": 10_000})
    log.update_high_watermark(10)
    assert log.read_records(0, 10).num_rows == 10  # every segment's files open
    clock.advance(10_004)
    assert log.delete_old_segments() == 2
    log.close()
    assert descriptors() == before
    assert len(segment_files(tmp_path / "t-0", ".log.deleted")) == 2
    clock.advance(1000)  # the delayed deletion still removes the files
    assert segment_files(tmp_path / "t-0", ".deleted") == []


def test_retention_stops_at_the_high_watermark(open_log, clock: MockClock) -> None:
    log = retention_log(open_log, **{"retention.ms": 1})
    log.update_high_watermark(5)
    clock.advance(10**6)
    assert log.delete_old_segments() == 2  # [0,2) and [2,4); [4,6) is not wholly below the HW
    log.update_high_watermark(10)
    assert log.delete_old_segments() == 3
    assert [s.base_offset for s in log.segments] == [10]  # the empty active segment is never deleted
    assert log.log_start_offset == 10


def test_retention_deleting_everything_rolls_first(open_log, clock: MockClock) -> None:
    log = open_log(**{"retention.ms": 1})
    log.append(values(3))
    log.update_high_watermark(3)
    clock.advance(10**6)
    assert log.delete_old_segments() == 1
    assert [s.base_offset for s in log.segments] == [3]
    assert (log.log_start_offset, log.log_end_offset) == (3, 3)


def test_retention_by_size(open_log) -> None:
    log = retention_log(open_log, **{"retention.bytes": 3 * 77 + 1, "retention.ms": -1})
    assert log.segments.first_segment().size == 77
    log.update_high_watermark(10)
    # 5 * 77 bytes: a segment goes only while the rest still holds >= retention.bytes (Kafka)
    assert log.delete_old_segments() == 1
    assert log.size_in_bytes == 4 * 77
    log.config = LogConfig.from_mapping({"retention.bytes": 2 * 77, "retention.ms": -1})
    assert log.delete_old_segments() == 2
    assert log.size_in_bytes == 2 * 77
    assert log.log_start_offset == 6


def test_retention_by_log_start_offset(open_log) -> None:
    log = retention_log(open_log, **{"retention.ms": -1})
    log.update_high_watermark(10)
    log.maybe_increment_log_start_offset(5)
    assert log.delete_old_segments() == 2  # [0,2), [2,4) lie wholly below offset 5
    assert log.log_start_offset == 5
    assert log.read_records(5).column("offset").to_pylist() == list(range(5, 10))


def test_retention_uses_metadata_only(open_log, clock: MockClock, monkeypatch: pytest.MonkeyPatch) -> None:
    log = retention_log(open_log, **{"retention.ms": 10_000, "retention.bytes": 100})
    log.update_high_watermark(10)
    clock.advance(10**6)

    def no_reads(*args: object, **kwargs: object) -> None:
        raise AssertionError("retention read log data")

    monkeypatch.setattr(FileRecords, "read", no_reads)
    monkeypatch.setattr(FileRecords, "batches", no_reads)
    monkeypatch.setattr(FileRecords, "scan", no_reads)
    assert log.delete_old_segments() == 5


def test_async_deletion_keeps_a_held_segment_readable(open_log, clock: MockClock) -> None:
    log = retention_log(open_log, **{"retention.ms": 1})
    log.update_high_watermark(10)
    held = log.segments.first_segment()
    expected = held.read(0, 1000).records
    clock.advance(10_000)
    assert log.delete_old_segments() == 5
    assert held.log.path.name.endswith(".log.deleted")
    assert held.read(0, 1000).records == expected  # a reader holding the segment keeps working
    assert log.next_pending_deletion_ms == clock.milliseconds() + 1000
    assert log.delete_pending_files(clock.milliseconds() + 999) == 0
    assert log.delete_pending_files(clock.milliseconds() + 1000) == 5
    assert held.deleted()
    clock.advance(1000)  # the scheduled task finds nothing left to do
    assert log.next_pending_deletion_ms is None


class _JumpingClock(SystemClock):
    """The real clock, whose wall time can be set back (an NTP step, a VM resumed from a snapshot)."""

    def __init__(self) -> None:
        self.back_ms = 0

    def milliseconds(self) -> int:
        return super().milliseconds() - self.back_ms


def test_deleted_files_go_after_the_delay_when_the_wall_clock_jumps_back(tmp_path: Path) -> None:
    """``file.delete.delay.ms`` is a duration: the deletion task runs when it has passed, whatever the
    wall clock did meanwhile (a jump back of an hour kept the files until a later task came by)."""
    clock = _JumpingClock()
    log = Log.open(
        tmp_path / "t-0", LogConfig.from_mapping({"file.delete.delay.ms": 100, "retention.ms": 1}), clock=clock
    )
    for _ in range(3):
        log.append({"value": [b"x"], "timestamp": [clock.milliseconds() - 10_000]})
        log.roll()
    log.update_high_watermark(log.log_end_offset)
    assert log.delete_old_segments() == 3
    assert segment_files(tmp_path / "t-0", ".log.deleted")
    clock.back_ms = 3_600_000
    deadline = time.monotonic() + 10
    while segment_files(tmp_path / "t-0", ".log.deleted") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not segment_files(tmp_path / "t-0", ".log.deleted")
    assert log.next_pending_deletion_ms is None
    log.close()


# -- open, close, locks, read-only ---------------------------------------------------------------


def test_reopen_keeps_data_and_offsets(tmp_path: Path, clock: MockClock) -> None:
    config = LogConfig.from_mapping({"segment.bytes": 300})
    log = Log.open(tmp_path / "t-0", config, clock=clock)
    for i in range(10):
        log.append(values(2, start=2 * i))
    log.close()
    log.close()  # idempotent
    log = Log.open(tmp_path / "t-0", config, clock=clock, had_clean_shutdown=True, recovery_point=20, high_watermark=20)
    assert (log.log_end_offset, log.high_watermark, log.recovery_point) == (20, 20, 20)
    assert log.read_records(0).column("offset").to_pylist() == list(range(20))
    log.close()


def test_second_writer_in_process_is_refused(open_log, tmp_path: Path) -> None:
    open_log()
    with pytest.raises(LogLockedError) as info:
        Log.open(tmp_path / "t-0", LogConfig())
    assert f"pid {os.getpid()}" in str(info.value)


def test_second_writer_in_another_process_is_refused(open_log, tmp_path: Path) -> None:
    open_log()
    code = (
        "import sys\n"
        "from indexer.log import Log\n"
        "from indexer.config import LogConfig\n"
        "from indexer.errors import LogLockedError\n"
        "try:\n"
        "    Log.open(sys.argv[1], LogConfig())\n"
        "except LogLockedError as e:\n"
        "    print('locked:', e)\n"
        "    sys.exit(3)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "t-0")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert result.returncode == 3, result.stderr
    assert f"pid {os.getpid()}" in result.stdout


def test_reads_of_a_closed_log_say_the_log_is_closed(open_log, monkeypatch: pytest.MonkeyPatch) -> None:
    log = open_log(**{"segment.bytes": 200})
    for _ in range(4):
        log.append(values(3, size=20))
    log.update_high_watermark(log.log_end_offset)
    closed = re.escape(f"cannot read: the log {log.directory} is closed")
    log.close()
    for read in (
        lambda: log.read_records(0),
        lambda: log.read(4, 100),
        lambda: log.offset_for_timestamp(0),
        lambda: log.max_timestamp_and_offset(),
    ):
        with pytest.raises(ValueError, match=closed):  # not "index file ... is closed"
            read()


def test_a_read_racing_close_says_the_log_is_closed(open_log, monkeypatch: pytest.MonkeyPatch) -> None:
    # A read that finds its files closed under it must not report a storage failure (a StorageError
    # of the .log, EBADF): nothing failed but the caller's use of a log it closed.
    log = open_log()
    log.append(values(3))
    log.update_high_watermark(log.log_end_offset)
    read = FileRecords.read

    def close_first(records: FileRecords, position: int, size: int) -> bytes:
        log.close()
        return read(records, position, size)

    monkeypatch.setattr(FileRecords, "read", close_first)
    with pytest.raises(ValueError, match=re.escape(f"cannot read: the log {log.directory} is closed")):
        log.read_records(0)


def test_read_only_log_sees_a_live_writer_and_refuses_mutations(open_log, tmp_path: Path) -> None:
    writer = open_log(**{"index.interval.bytes": 1, "segment.index.bytes": 4096})
    for i in range(6):
        writer.append({"value": [b"v"], "timestamp": [T0 + 10 * i]})
    # the writer's active indexes are preallocated: their zero-filled tail reads as (base, 0) entries
    assert (tmp_path / "t-0" / "00000000000000000000.timeindex").stat().st_size == 4092
    reader = Log.open(tmp_path / "t-0", LogConfig(), read_only=True)
    assert (reader.log_end_offset, reader.high_watermark) == (6, 6)
    assert reader.read_records(0).column("offset").to_pylist() == list(range(6))
    assert reader.read_records(4, 1).column("offset").to_pylist() == [4]
    assert reader.offset_for_timestamp(T0 + 35) == 4
    assert reader.active_segment.max_timestamp_so_far == T0 + 50
    for mutate in (
        lambda: reader.append(values(1)),
        reader.roll,
        lambda: reader.truncate_to(0),
        reader.flush,
        reader.delete_old_segments,
    ):
        with pytest.raises(ValueError, match="read-only"):
            mutate()
    reader.close()


def test_read_only_log_opened_mid_append_ends_at_the_last_whole_batch(
    open_log, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader that opens while the writer's append has reserved its bytes (``posix_fallocate``:
    zeros) but not yet filled them reads the committed batches only, never the zeros (a consumer
    given those zeros as a batch aborts: librdkafka asserts on them)."""
    writer = open_log()
    writer.append(values(5, size=100))
    writer.update_high_watermark(writer.log_end_offset)
    committed = (tmp_path / "t-0" / "00000000000000000000.log").read_bytes()
    seen: list[tuple[int, int, int, bytes]] = []
    append_positioned = FileRecords.append_positioned

    def reserve_then_read(self: FileRecords, size: int, fill: Any) -> int:
        def fill_after_a_reader_opened(write: Any) -> None:
            assert self.path.stat().st_size == len(committed) + size  # reserved, zeros for now
            with Log.open(tmp_path / "t-0", LogConfig(), read_only=True, high_watermark=5) as reader:
                records = reader.read(0, 1 << 20).records
                assert isinstance(records, bytes)
                seen.append((reader.log_end_offset, reader.high_watermark, reader.read(5, 1 << 20).records, records))
            fill(write)

        return append_positioned(self, size, fill_after_a_reader_opened)

    monkeypatch.setattr(FileRecords, "append_positioned", reserve_then_read)
    writer.append(values(5, size=100))
    assert seen == [(5, 5, b"", committed)]


def test_read_only_open_of_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(StorageError):
        Log.open(tmp_path / "nope-0", LogConfig(), read_only=True)


# -- the real broker vectors ---------------------------------------------------------------------


def kafka_python_records(directory: Path) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """Every data record of the ``.log`` files, decoded by kafka-python (an independent decoder)."""
    with warnings.catch_warnings():  # kafka-python's package import uses deprecated importlib APIs
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.record.memory_records import MemoryRecords

    out = []
    for path in sorted(directory.glob("*.log")):
        records = MemoryRecords(path.read_bytes())
        while (batch := records.next_batch()) is not None:
            if batch.is_control_batch:
                continue
            out.extend((r.offset, r.timestamp, r.key, r.value) for r in batch)
    return out


def test_read_only_open_of_real_broker_segments(vectors_dir: Path) -> None:
    directory = vectors_dir / "multi-segment-3x" / "invoice-0"
    before = {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in directory.iterdir()}
    log = Log.open(directory, LogConfig(), read_only=True)
    try:
        assert [s.base_offset for s in log.segments] == [0, 30626, 60611, 90867]
        table = log.read_records(0)
        expected = kafka_python_records(directory)
        assert table.num_rows == len(expected) == log.log_end_offset
        got = list(
            zip(
                table.column("offset").to_pylist(),
                table.column("timestamp").to_pylist(),
                table.column("key").to_pylist(),
                table.column("value").to_pylist(),
                strict=True,
            )
        )
        assert got == expected
        for offset in (0, 1, 30625, 30626, 60700, log.log_end_offset - 1):
            assert log.read_records(offset, 1).to_pylist()[0]["offset"] == offset
        stamps = table.column("timestamp").to_numpy()
        for i in (0, 17, 30626, 75_000, len(stamps) - 1):
            expected_offset = int((stamps >= stamps[i]).argmax())
            assert log.offset_for_timestamp(int(stamps[i])) == expected_offset
        assert log.offset_for_timestamp(int(stamps.max()) + 1) is None
    finally:
        log.close()
    assert {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in directory.iterdir()} == before


def test_read_records_schema(open_log) -> None:
    log = open_log()
    assert log.read_records(0).schema == pa.schema(log.read_records(0).schema)  # empty table keeps READ_SCHEMA
    assert log.read_records(0).column_names == [
        "offset",
        "timestamp",
        "timestampType",
        "key",
        "value",
        "headers",
    ]


def test_failed_physical_deletion_is_reported_after_trying_all(
    open_log, clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = retention_log(open_log, **{"retention.ms": 1})
    log.update_high_watermark(10)
    clock.advance(10_000)
    assert log.delete_old_segments() == 5
    real_unlink = os.unlink
    attempts: list[str] = []

    def failing_unlink(path: object, *args: object, **kwargs: object) -> None:
        attempts.append(str(path))
        if str(path).endswith("00000000000000000000.log.deleted"):
            raise OSError(errno.EACCES, "Permission denied")
        real_unlink(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "unlink", failing_unlink)
    with pytest.raises(StorageError) as info:
        log.delete_pending_files(clock.milliseconds() + 1000)
    assert info.value.errno == errno.EACCES
    assert sum(p.endswith(".log.deleted") for p in attempts) == 5  # the other four were still deleted


def test_concurrent_reader_sees_a_consistent_prefix(open_log) -> None:
    import threading

    log = open_log(**{"segment.bytes": 2000, "index.interval.bytes": 100})
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            for i in range(150):
                log.append(values(3, start=3 * i, size=20))
                if i % 40 == 39:
                    log.roll()
        except BaseException as e:  # reported by the main thread
            errors.append(e)
        finally:
            stop.set()

    thread = threading.Thread(target=writer)
    thread.start()
    checks = 0
    while not stop.is_set() or checks == 0:
        end = log.log_end_offset
        table = log.read_records(0, max_offset=end)
        assert table.column("offset").to_pylist() == list(range(end))
        checks += 1
    thread.join()
    assert not errors
    assert log.log_end_offset == 450 and checks > 1


# -- large appends: chunked encoding overlapping the writes ------------------------------------------


def _pipelined_append(
    directory: Path, table: pa.Table, chunk_bytes: int, config: dict[str, object]
) -> tuple[object, dict[str, bytes], int]:
    """Append ``table`` to a new log with chunks of ``chunk_bytes``; (info, files, chunks encoded)."""
    calls = []
    original = append_pipeline._encode_in_chunks

    def counting(*args: object) -> object:
        for encoded in original(*args):  # type: ignore[arg-type]
            calls.append(len(encoded))
            yield encoded

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(append_pipeline, "_APPEND_CHUNK_BYTES", chunk_bytes)
        patch.setattr(append_pipeline, "_encode_in_chunks", counting)
        log = Log.open(directory, LogConfig.from_mapping(config), clock=MockClock(T0))
        try:
            info = log.append(table)
        finally:
            log.close()
    files = {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.name.endswith(("log", "index"))}
    return info, files, len(calls)


@settings(max_examples=15, deadline=None)
@given(
    n=st.integers(500, 1500),
    seed=st.integers(0, 2**32 - 1),
    chunk_kib=st.integers(1, 4),
    max_batch=st.sampled_from([300, 500, 1000]),
    segment_kib=st.sampled_from([32, 1024]),
    interval=st.sampled_from([0, 500, 4096]),
    with_headers=st.booleans(),
    codec=st.sampled_from(["gzip", "lz4"]),
)
def test_chunked_append_writes_the_files_of_one_encoding(
    tmp_path_factory: pytest.TempPathFactory,
    n: int,
    seed: int,
    chunk_kib: int,
    max_batch: int,
    segment_kib: int,
    interval: int,
    with_headers: bool,
    codec: str,
) -> None:
    """Encoding the planned batches chunk by chunk (into recycled buffers, in a helper thread)
    gives the batches, rolls and index entries of encoding the whole table at once."""
    rng = np.random.default_rng(seed)
    key_lens = rng.integers(-1, 20, n)
    value_lens = rng.integers(-1, 100, n)
    columns: dict[str, object] = {
        "key": [None if k < 0 else bytes(rng.integers(0, 256, k, dtype=np.uint8)) for k in key_lens],
        "value": [None if v < 0 else bytes([v % 256]) * v for v in value_lens],
        "timestamp": (T0 + rng.integers(-50, 50, n).cumsum()).tolist(),
    }
    if with_headers:
        columns["headers"] = [
            None if i % 7 == 0 else [{"key": "h" * (i % 5), "value": bytes(i % 11)}] * (i % 3) for i in range(n)
        ]
    table = pa.table(columns)
    config = {
        "max.message.bytes": max_batch,
        "segment.bytes": segment_kib * 1024,
        "index.interval.bytes": interval,
        "segment.index.bytes": 4096,
        "compression.type": codec,
    }
    root = tmp_path_factory.mktemp("chunked")
    whole_info, whole_files, whole_chunks = _pipelined_append(root / "whole-0", table, 1 << 40, config)
    info, files, chunks = _pipelined_append(root / "chunked-0", table, chunk_kib * 1024, config)
    assert (whole_chunks, chunks >= 3) == (0, True)  # every record fits a batch: chunked
    assert info == whole_info
    assert files == whole_files


def test_chunked_append_checks_every_record_before_writing(open_log, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(append_pipeline, "_APPEND_CHUNK_BYTES", 1024)
    log = open_log(**{"max.message.bytes": 500})
    table = {"value": [b"v" * 50] * 400 + [b"x" * 600]}  # the record too large is in the last chunk
    with pytest.raises(RecordTooLargeError) as info:
        log.append(table)
    assert info.value.index == 400
    assert (log.log_end_offset, log.size_in_bytes) == (0, 0)


def test_chunked_append_write_error_stops_the_encoder(open_log, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(append_pipeline, "_APPEND_CHUNK_BYTES", 1024)
    log = open_log(**{"max.message.bytes": 300, "compression.type": "gzip"})
    calls = []
    original = FileRecords.append

    def failing(self: FileRecords, data: object) -> int:
        calls.append(1)
        if len(calls) == 2:
            raise StorageError(f"append to {self.path} failed", path=self.path, errno=errno.EIO)
        return original(self, data)  # type: ignore[arg-type]

    monkeypatch.setattr(FileRecords, "append", failing)
    with pytest.raises(StorageError):
        log.append({"value": [b"v" * 50] * 2000})
    assert len(calls) == 2
    assert not [t for t in threading.enumerate() if t.name == "seglog-append-encoder"]
    assert 0 < log.log_end_offset < 2000  # the first chunk was written, as a crash would leave it


@settings(max_examples=15, deadline=None)
@given(
    n=st.integers(1, 3000),
    seed=st.integers(0, 2**32 - 1),
    max_batch=st.sampled_from([300, 1000, 8000]),
    segment_kib=st.sampled_from([16, 1024]),
    interval=st.sampled_from([0, 500, 4096]),
    with_headers=st.booleans(),
    workers=st.integers(1, 3),
)
def test_parallel_positioned_append_writes_the_files_of_a_buffered_append(
    tmp_path_factory: pytest.TempPathFactory,
    n: int,
    seed: int,
    max_batch: int,
    segment_kib: int,
    interval: int,
    with_headers: bool,
    workers: int,
) -> None:
    """Encoding uncompressed batches on several threads, each chunk written at its file position as it
    is ready, writes the files (and returns the result) of encoding in order and writing that."""
    rng = np.random.default_rng(seed)
    columns: dict[str, object] = {
        "key": [None if k < 0 else bytes(rng.integers(0, 256, k, dtype=np.uint8)) for k in rng.integers(-1, 20, n)],
        "value": [None if v < 0 else bytes([v % 256]) * v for v in rng.integers(-1, 100, n)],
        "timestamp": (T0 + rng.integers(-50, 50, n).cumsum()).tolist(),
    }
    if with_headers:
        columns["headers"] = [[{"key": "h", "value": bytes(i % 11)}] * (i % 3) for i in range(n)]
    table = pa.table(columns)
    config = LogConfig.from_mapping(
        {"max.message.bytes": max_batch, "segment.bytes": segment_kib * 1024, "index.interval.bytes": interval}
    )
    root = tmp_path_factory.mktemp("positioned")
    results = {}
    for name, positioned in (("buffered-0", False), ("positioned-0", True)):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(append_pipeline, "_ENCODE_WORKERS", workers)
            patch.setattr(encoder_module, "DEFAULT_CHUNK_BYTES", 1)  # a chunk per batch: writes out of order
            patch.setattr(append_pipeline.AppendPlan, "_encodes_at_positions", lambda self, flag=positioned: flag)
            with Log.open(root / name, config, clock=MockClock(T0)) as log:
                info = log.append(table)
                info2 = log.append(table.slice(0, n // 2))
        files = {p.name: p.read_bytes() for p in sorted((root / name).iterdir()) if p.name.endswith(("log", "index"))}
        results[name] = (info, info2, files)
    assert results["positioned-0"] == results["buffered-0"]


def test_positioned_append_failure_leaves_nothing(open_log, monkeypatch: pytest.MonkeyPatch) -> None:
    log = open_log()
    log.append({"value": [b"a"] * 10})
    size = log.size_in_bytes

    def failing(*args: object, **kwargs: object) -> None:
        raise RuntimeError("encoder died")

    monkeypatch.setattr(append_pipeline, "encode_planned_to", failing)
    with pytest.raises(RuntimeError):
        log.append({"value": [b"b"] * 10})
    assert (log.log_end_offset, log.size_in_bytes) == (10, size)
    assert log.active_segment.log.path.stat().st_size == size  # the reserved range is cut off again
    monkeypatch.undo()
    log.append({"value": [b"c"] * 5})
    assert log.read_records(0, max_offset=15).column("value").to_pylist() == [b"a"] * 10 + [b"c"] * 5


def test_positioned_append_on_a_full_disk_is_a_storage_error(open_log, monkeypatch: pytest.MonkeyPatch) -> None:
    log = open_log()

    def no_space(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", no_space)
    with pytest.raises(StorageError) as info:
        log.append({"value": [b"v"] * 100})
    assert info.value.errno == errno.ENOSPC and str(log.active_segment.log.path) in str(info.value)
    assert (log.log_end_offset, log.size_in_bytes) == (0, 0)


def test_positioned_append_failing_half_way_leaves_nothing(open_log, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write that fails after other chunks were written (here: the disk fills up) cuts the file back."""
    log = open_log(**{"max.message.bytes": 2000})
    log.append({"value": [b"a"] * 10})
    size = log.size_in_bytes
    monkeypatch.setattr(encoder_module, "DEFAULT_CHUNK_BYTES", 1)  # a chunk (and a pwrite) per batch
    real_pwrite, calls = os.pwrite, []

    def pwrite_until_full(fd: int, data: Any, offset: int) -> int:
        calls.append(offset)
        if len(calls) == 5:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", pwrite_until_full)
    with pytest.raises(StorageError) as info:
        log.append({"value": [b"b" * 100] * 200})
    assert info.value.errno == errno.ENOSPC and str(log.active_segment.log.path) in str(info.value)
    assert len(calls) >= 5
    monkeypatch.undo()
    assert (log.log_end_offset, log.size_in_bytes) == (10, size)
    assert log.active_segment.log.path.stat().st_size == size
    log.append({"value": [b"c"] * 5})
    assert log.read_records(0, max_offset=15).column("value").to_pylist() == [b"a"] * 10 + [b"c"] * 5


def test_compressed_batch_larger_than_segment_bytes_uncompressed_is_appended(open_log) -> None:
    log = open_log(**{"segment.bytes": 400, "compression.type": "gzip"})
    info = log.append({"value": [b"a" * 100] * 5})  # 5 records: ~600 bytes raw, ~100 compressed
    assert (info.num_batches, log.log_end_offset) == (1, 5)
    with pytest.raises(RecordBatchTooLargeError, match="segment.bytes = 400"):
        log.append({"value": [os.urandom(512)]})  # incompressible: stored raw, 587 bytes
    assert log.log_end_offset == 5


def test_truncation_after_a_clean_reopen_keeps_the_max_timestamp_of_what_stays(tmp_path: Path) -> None:
    """Found by the model test: after a reopen the segment's maximum timestamp is not cached yet;
    a truncation that empties the time index must still find the maximum of the batches kept."""
    config = LogConfig.from_mapping({"index.interval.bytes": 150})
    clock = MockClock(T0)
    with Log.open(tmp_path / "t-0", config, clock=clock) as log:
        log.append([{"timestamp": T0}, {"timestamp": T0 + 1}])
        log.append([{"timestamp": T0}, {"timestamp": T0 + 2}])
    with Log.open(tmp_path / "t-0", config, clock=clock, had_clean_shutdown=True, recovery_point=4) as log:
        log.truncate_to(2)
        log.append([{"timestamp": T0}])
        sealed = log.active_segment
        log.roll()
        assert sealed.time_index.last_entry == (T0 + 1, 1)
