"""Tests of indexer/segments.py (Kafka's LogSegmentsTest, spec 5.1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexer.clock import MockClock
from indexer.config import LogConfig
from indexer.records.columns import to_append_table
from indexer.records.encoder import encode_batches
from indexer.segment import LogSegment
from indexer.segments import LogSegments


@pytest.fixture
def make(tmp_path: Path):
    clock = MockClock()
    opened: list[LogSegment] = []

    def make_segment(base: int) -> LogSegment:
        segment = LogSegment.open(tmp_path, base, LogConfig(), clock=clock)
        opened.append(segment)
        return segment

    yield make_segment
    for segment in opened:
        segment.close_handlers()


def with_bases(make, *bases: int) -> LogSegments:
    segments = LogSegments("t-0")
    for base in bases:
        segments.add(make(base))
    return segments


def test_empty(make) -> None:
    segments = LogSegments("t-0")
    assert segments.is_empty() and len(segments) == 0
    assert segments.first_segment() is None and segments.last_segment() is None
    assert segments.floor_segment(5) is None
    assert segments.values() == [] and segments.size_in_bytes() == 0
    with pytest.raises(LookupError):
        segments.active_segment()


def test_add_replaces_and_remove(make) -> None:
    segments = LogSegments("t-0")
    first = make(1)
    assert segments.add(first) is None
    replacement = make(1)
    assert segments.add(replacement) is first
    assert segments.get(1) is replacement and segments.number_of_segments() == 1
    assert 1 in segments and segments.contains(1)
    assert segments.remove(1) is replacement
    assert segments.remove(1) is None
    assert segments.is_empty()


def test_ordering_and_neighbours(make) -> None:
    segments = with_bases(make, 4, 1, 3, 2)  # added out of order
    assert segments.base_offsets() == [1, 2, 3, 4]
    assert [s.base_offset for s in segments] == [1, 2, 3, 4]
    assert segments.first_segment_base_offset() == 1
    assert segments.active_segment().base_offset == 4
    assert segments.floor_segment(3).base_offset == 3
    assert segments.floor_segment(0) is None
    assert segments.lower_segment(3).base_offset == 2
    assert segments.lower_segment(1) is None
    assert segments.higher_segment(3).base_offset == 4
    assert segments.higher_segment(4) is None
    assert [s.base_offset for s in segments.higher_segments(2)] == [3, 4]
    assert [s.base_offset for s in segments.filter(lambda s: s.base_offset % 2 == 0)] == [2, 4]


@pytest.mark.parametrize(
    ("start", "stop", "expected"),
    [
        (1, 2, [1]),
        (1, 4, [1, 2, 3]),
        (2, 4, [2, 3]),
        (4, 4, []),
        (4, 5, [4]),
        (0, 2, [1]),
        (3, 100, [3, 4]),
        (7, 9, [4]),
    ],
)
def test_values_range(make, start: int, stop: int, expected: list[int]) -> None:
    segments = with_bases(make, 1, 2, 3, 4)
    assert [s.base_offset for s in segments.values(start, stop)] == expected


def test_values_rejects_backward_range(make) -> None:
    segments = with_bases(make, 1, 2)
    with pytest.raises(ValueError, match="from offset 5 which is greater than limit offset 4"):
        segments.values(5, 4)


def test_non_active_segments_from(make) -> None:
    segments = with_bases(make, 1, 2, 3, 4)
    assert [s.base_offset for s in segments.non_active_log_segments_from(2)] == [2, 3]
    assert [s.base_offset for s in segments.non_active_log_segments_from(4)] == []
    assert segments.non_active_log_segments_from(5) == []


def test_size_in_bytes_sums_segments(make) -> None:
    segments = with_bases(make, 0, 10)
    table = to_append_table({"value": [b"a"]}, now_ms=0)
    segments.get(0).append_batches(encode_batches(table, 0))
    segments.get(10).append_batches(encode_batches(table, 10))
    assert segments.size_in_bytes() == 138


def test_reader_snapshot_survives_removal(make) -> None:
    segments = with_bases(make, 1, 2, 3)
    snapshot = segments.values()
    segments.remove(2)
    assert [s.base_offset for s in snapshot] == [1, 2, 3]
    assert segments.base_offsets() == [1, 3]
    segments.clear()
    assert segments.is_empty()
