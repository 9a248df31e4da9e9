"""Tests of indexer/segment.py (Kafka's LogSegmentTest cases, spec section 4)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from indexer.clock import MockClock
from indexer.config import LogConfig
from indexer.errors import LogSegmentOffsetOverflowError, StorageError
from indexer.file_names import DELETED_FILE_SUFFIX
from indexer.log import Log
from indexer.log_values import RollParams
from indexer.records.columns import APPEND_SCHEMA, HEADERS_TYPE, to_append_table
from indexer.records.encoder import EncodedBatches, encode_batches
from indexer.records.file_records import FileRecords
from indexer.segment import LogSegment
from indexer.transaction_replay import TransactionReplay

T0 = 1_700_000_000_000


def batches(
    base_offset: int,
    values: list[bytes],
    *,
    timestamps: list[int] | None = None,
    per_batch: int | None = None,
) -> EncodedBatches:
    """``values`` as v2 batches from ``base_offset``; ``per_batch`` records each (default: one batch).
    Timestamps go in as given: -1 is a broker's "no timestamp", which ``to_append_table`` refuses."""
    stamps = timestamps if timestamps is not None else [T0] * len(values)
    n = len(values)
    table = pa.table(
        [
            pa.nulls(n, pa.binary()),
            pa.array(values, pa.binary()),
            pa.array(stamps, pa.int64()),
            pa.nulls(n, HEADERS_TYPE),
        ],
        schema=APPEND_SCHEMA,
    )
    if per_batch is None:
        return encode_batches(table, base_offset)
    parts = [encode_batches(table.slice(i, per_batch), base_offset + i) for i in range(0, len(values), per_batch)]
    starts = np.cumsum([0] + [p.total_bytes for p in parts[:-1]])
    shifted = [dataclasses.replace(p, positions=p.positions + start) for p, start in zip(parts, starts, strict=True)]
    return EncodedBatches(
        **{f.name: np.concatenate([getattr(p, f.name) for p in shifted]) for f in dataclasses.fields(EncodedBatches)}
    )


def raw(encoded: EncodedBatches) -> bytes:
    return encoded.buffer.tobytes()


def append_whole(segment: LogSegment, encoded: EncodedBatches) -> None:
    """One Kafka-style append of everything in ``encoded``."""
    i = int(np.argmax(encoded.max_timestamps))
    segment.append(
        encoded.last_offset,
        int(encoded.max_timestamps[i]),
        int(encoded.offsets_of_max_timestamp[i]),
        raw(encoded),
    )


@pytest.fixture
def clock() -> MockClock:
    return MockClock(T0)


def open_segment(directory: Path, base: int, clock: MockClock, **overrides: object) -> LogSegment:
    config = LogConfig.from_mapping({"index.interval.bytes": 10, "segment.index.bytes": 1000, **overrides})
    return LogSegment.open(directory, base, config, clock=clock)


@pytest.fixture
def segment(tmp_path: Path, clock: MockClock):
    seg = open_segment(tmp_path, 40, clock)
    yield seg
    seg.close()


def test_single_record_batch_sizes_are_kafkas() -> None:
    assert int(batches(0, [b"a"]).sizes[0]) == 69
    assert int(batches(0, [b"test"]).sizes[0]) == 72


@pytest.mark.parametrize(
    ("base", "largest"),
    [
        (0, -2147483648),
        (0, 2147483648),
        (1, 0),
        (100, 10),
        (2147483648, 0),
        (2147483648, 4294967296),
    ],
)
def test_append_for_log_segment_offset_overflow(tmp_path: Path, clock: MockClock, base: int, largest: int) -> None:
    seg = open_segment(tmp_path, base, clock)
    data = raw(batches(base if base >= 0 else 0, [b"hello"]))
    with pytest.raises(LogSegmentOffsetOverflowError) as info:
        seg.append(largest, T0, largest, data)
    assert info.value.offset == largest
    assert info.value.segment is seg
    assert seg.size == 0
    seg.close()


def test_append_batches_checks_every_offset_before_writing(segment: LogSegment) -> None:
    encoded = batches(40, [b"x"] * 3, per_batch=1)
    bad = EncodedBatches(
        encoded.buffer,
        encoded.positions,
        encoded.sizes,
        encoded.base_offsets,
        np.array([40, 41, 40 + 2**31], dtype=np.int64),
        encoded.max_timestamps,
        encoded.offsets_of_max_timestamp,
        encoded.record_counts,
    )
    with pytest.raises(LogSegmentOffsetOverflowError) as info:
        segment.append_batches(bad)
    assert info.value.offset == 40 + 2**31
    assert segment.size == 0


def test_read_on_empty_segment(segment: LogSegment) -> None:
    assert segment.read(40, 300) is None


def test_read_before_first_offset(segment: LogSegment) -> None:
    encoded = batches(50, [b"hello", b"there", b"little", b"bee"])
    append_whole(segment, encoded)
    fetched = segment.read(41, 300)
    assert fetched is not None
    assert fetched.records == raw(encoded)
    assert fetched.fetch_offset_metadata.relative_position_in_segment == 0


def test_read_after_last_offset(segment: LogSegment) -> None:
    append_whole(segment, batches(50, [b"hello", b"there"]))
    assert segment.read(52, 200) is None
    assert segment.read(52, 200, min_one_message=True) is None


def test_read_from_gap(segment: LogSegment) -> None:
    first = batches(50, [b"hello", b"there"])
    second = batches(60, [b"alpha", b"beta"])
    append_whole(segment, first)
    append_whole(segment, second)
    fetched = segment.read(55, 200)
    assert fetched is not None
    assert fetched.records == raw(second)
    assert fetched.fetch_offset_metadata.relative_position_in_segment == first.total_bytes


def test_read_max_size_one_and_min_one_message(segment: LogSegment) -> None:
    encoded = batches(50, [b"hello", b"there"])
    append_whole(segment, encoded)
    partial = segment.read(50, 1)
    assert partial is not None
    assert partial.records == raw(encoded)[:1]
    assert partial.first_entry_incomplete
    whole = segment.read(50, 1, min_one_message=True)
    assert whole is not None
    assert whole.records == raw(encoded)
    assert not whole.first_entry_incomplete
    empty = segment.read(50, 0)
    assert empty is not None and empty.records == b""
    bounded = segment.read(50, 1000, max_position=10)
    assert bounded is not None and bounded.records == raw(encoded)[:10]
    with pytest.raises(ValueError):
        segment.read(50, -1)


def test_translate_offset_returns_batch_start(segment: LogSegment) -> None:
    encoded = batches(40, [b"a"] * 6, per_batch=2)
    segment.append_batches(encoded)
    found = segment.translate_offset(43)
    assert found is not None
    assert (found.offset, found.position, found.size) == (
        43,
        int(encoded.positions[1]),
        int(encoded.sizes[1]),
    )
    assert segment.translate_offset(46) is None


def test_index_interval_every_second_equal_append(tmp_path: Path, clock: MockClock) -> None:
    # 69-byte appends with index.interval.bytes = 2*69-1: entries at appends #3, #5, #7 (spec 4.2).
    seg = open_segment(tmp_path, 0, clock, **{"index.interval.bytes": 137})
    for offset in range(8):
        append_whole(seg, batches(offset, [b"a"], timestamps=[T0 + offset]))
    index = seg.offset_index
    assert [tuple(index.entry(i)) for i in range(index.entries)] == [(2, 138), (4, 276), (6, 414)]
    time_index = seg.time_index
    assert [tuple(time_index.entry(i)) for i in range(time_index.entries)] == [
        (T0 + 2, 2),
        (T0 + 4, 4),
        (T0 + 6, 6),
    ]
    seg.close()


def test_first_append_is_never_indexed(tmp_path: Path, clock: MockClock) -> None:
    seg = open_segment(tmp_path, 0, clock, **{"index.interval.bytes": 0})
    append_whole(seg, batches(0, [b"a"] * 50))
    assert seg.offset_index.entries == 0
    append_whole(seg, batches(50, [b"b"]))
    assert tuple(seg.offset_index.entry(0)) == (50, int(batches(0, [b"a"] * 50).total_bytes))
    seg.close()


def read_files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sizes=st.lists(st.integers(min_value=0, max_value=120), min_size=1, max_size=30),
    interval=st.integers(min_value=0, max_value=400),
    split=st.integers(min_value=0, max_value=30),
    stamps=st.lists(st.integers(min_value=0, max_value=50), min_size=30, max_size=30),
)
def test_append_batches_matches_one_append_per_batch(
    tmp_path_factory: pytest.TempPathFactory, sizes: list[int], interval: int, split: int, stamps: list[int]
) -> None:
    values = [bytes(n) for n in sizes]
    table = to_append_table({"value": values, "timestamp": [T0 + s for s in stamps[: len(values)]]}, now_ms=T0)
    encoded = encode_batches(table, 7, max_batch_bytes=61 + 21 + 120)  # about one record per batch
    clock = MockClock(T0)
    one_by_one, at_once = tmp_path_factory.mktemp("one"), tmp_path_factory.mktemp("all")
    config = {"index.interval.bytes": interval, "segment.index.bytes": 4096}
    a = open_segment(one_by_one, 7, clock, **config)
    for i in range(len(encoded)):
        start, size = int(encoded.positions[i]), int(encoded.sizes[i])
        a.append(
            int(encoded.last_offsets[i]),
            int(encoded.max_timestamps[i]),
            int(encoded.offsets_of_max_timestamp[i]),
            encoded.buffer[start : start + size].tobytes(),
        )
    b = open_segment(at_once, 7, clock, **config)
    cut = min(split, len(encoded))
    b.append_batches(encoded, 0, cut)
    b.append_batches(encoded, cut)
    assert (a.max_timestamp_so_far, a.offset_of_max_timestamp_so_far) == (
        b.max_timestamp_so_far,
        b.offset_of_max_timestamp_so_far,
    )
    a.close()
    b.close()
    assert read_files(one_by_one) == read_files(at_once)


def alone(seg: LogSegment) -> TransactionReplay:
    """The producer-state replay of a log of just ``seg``."""
    return TransactionReplay(lambda: [(seg.base_offset, seg.log)])


def test_recover_rebuilds_the_indexes_of_per_batch_appends(tmp_path: Path, clock: MockClock) -> None:
    seg = open_segment(tmp_path, 0, clock, **{"index.interval.bytes": 100})
    encoded = batches(
        0, [bytes(i % 50) for i in range(40)], timestamps=[T0 + (i * 7) % 23 for i in range(40)], per_batch=1
    )
    seg.append_batches(encoded)
    expected_offsets = [tuple(seg.offset_index.entry(i)) for i in range(seg.offset_index.entries)]
    expected_times = [tuple(seg.time_index.entry(i)) for i in range(seg.time_index.entries)]
    assert seg.recover(alone(seg)) == 0
    assert [tuple(seg.offset_index.entry(i)) for i in range(seg.offset_index.entries)] == expected_offsets
    times = [tuple(seg.time_index.entry(i)) for i in range(seg.time_index.entries)]
    # recovery also writes the final (max timestamp) entry a closed segment ends with
    assert times[: len(expected_times)] == expected_times
    assert times[-1] == (seg.max_timestamp_so_far, seg.offset_of_max_timestamp_so_far)
    assert seg.max_timestamp_so_far == T0 + 22
    seg.close()


def test_recover_truncates_a_torn_tail_and_garbage(tmp_path: Path, clock: MockClock) -> None:
    seg = open_segment(tmp_path, 0, clock)
    encoded = batches(0, [b"hello"] * 10, per_batch=1)
    seg.append_batches(encoded)
    seg.log.append(raw(batches(10, [b"torn"]))[:30])
    assert seg.recover(alone(seg)) == 30
    assert seg.size == encoded.total_bytes
    assert seg.read_next_offset() == 10


def test_recover_stops_at_a_corrupt_batch(tmp_path: Path, clock: MockClock) -> None:
    seg = open_segment(tmp_path, 0, clock)
    encoded = batches(0, [b"hello"] * 10, per_batch=1)
    seg.append_batches(encoded)
    seg.close()
    path = tmp_path / "00000000000000000000.log"
    data = bytearray(path.read_bytes())
    corrupt_at = int(encoded.positions[6])
    data[corrupt_at + 65] ^= 0xFF  # a record byte of batch 6: its CRC no longer matches
    path.write_bytes(bytes(data))
    seg = LogSegment.open(
        tmp_path,
        0,
        LogConfig.from_mapping({"index.interval.bytes": 10}),
        clock=clock,
        file_already_exists=True,
    )
    assert seg.recover(alone(seg)) == len(data) - corrupt_at
    assert seg.read_next_offset() == 6
    assert all(seg.offset_index.entry(i).position < corrupt_at for i in range(seg.offset_index.entries))
    seg.close()


def test_recover_from_the_callers_scan_reads_the_log_once(
    tmp_path: Path, clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    seg = open_segment(tmp_path, 0, clock, **{"index.interval.bytes": 100})
    seg.append_batches(batches(0, [bytes(i % 50) for i in range(40)], per_batch=1))
    torn = raw(batches(40, [b"torn"]))[:30]
    seg.log.append(torn)
    assert seg.recover(alone(seg)) == 30
    files = [tmp_path / "00000000000000000000.index", tmp_path / "00000000000000000000.timeindex"]
    expected = [p.read_bytes() for p in files]
    seg.log.append(torn)
    scan = seg.log.scan(0, verify_crc=True)
    monkeypatch.setattr(FileRecords, "scan", lambda *a, **k: pytest.fail("recover() read the .log again"))
    assert seg.recover(alone(seg), scan) == 30
    assert [p.read_bytes() for p in files] == expected and seg.size == scan.valid_bytes
    seg.close()


def test_truncate_to_removes_the_whole_containing_batch(segment: LogSegment) -> None:
    first = batches(40, [b"a", b"b", b"c"])
    second = batches(43, [b"d", b"e", b"f"])
    append_whole(segment, first)
    append_whole(segment, second)
    assert segment.truncate_to(44) == second.total_bytes
    assert segment.size == first.total_bytes
    assert segment.read_next_offset() == 43
    assert segment.truncate_to(100) == 0


def test_truncate_even_if_offset_points_to_a_gap(segment: LogSegment) -> None:
    append_whole(segment, batches(50, [b"hello", b"there"]))
    append_whole(segment, batches(53, [b"alpha", b"beta"]))
    segment.truncate_to(52)
    assert segment.read_next_offset() == 52


def test_truncate_full_resets_roll_state_and_timestamps(tmp_path: Path, clock: MockClock) -> None:
    seg = open_segment(tmp_path, 40, clock, **{"segment.ms": 100})
    append_whole(seg, batches(40, [b"a"], timestamps=[T0 - 500]))
    clock.advance(1000)
    assert seg.max_timestamp_so_far == T0 - 500
    seg.truncate_to(40)
    assert seg.size == 0
    assert seg.read(40, 100) is None
    # an emptied segment counts time from the truncation again (wall clock: no first batch)
    assert seg.time_waited_for_roll(clock.milliseconds(), -1) == 0
    seg.close()


def test_truncate_recomputes_max_timestamp(tmp_path: Path, clock: MockClock) -> None:
    seg = open_segment(tmp_path, 0, clock, **{"index.interval.bytes": 0})
    for offset, ts in enumerate([10, 30, 20, 50, 40]):
        append_whole(seg, batches(offset, [b"x"], timestamps=[T0 + ts]))
    assert seg.max_timestamp_so_far == T0 + 50
    seg.truncate_to(3)
    assert (seg.max_timestamp_so_far, seg.offset_of_max_timestamp_so_far) == (T0 + 30, 1)
    seg.close()


def test_truncate_resizes_trimmed_indexes(tmp_path: Path, clock: MockClock) -> None:
    seg = open_segment(tmp_path, 0, clock, **{"index.interval.bytes": 0})
    for offset in range(5):
        append_whole(seg, batches(offset, [b"x"]))
    seg.on_become_inactive_segment()
    assert seg.offset_index.is_full()
    seg.truncate_to(3)
    assert not seg.offset_index.is_full()
    assert not seg.time_index.is_full()
    seg.close()


def test_find_offset_by_timestamp(tmp_path: Path, clock: MockClock) -> None:
    seg = open_segment(tmp_path, 40, clock, **{"index.interval.bytes": 1})
    stamps = [T0 + 10 * i for i in range(30)]
    seg.append_batches(batches(40, [b"v%d" % i for i in range(30)], timestamps=stamps, per_batch=3))
    assert seg.find_offset_by_timestamp(T0 + 95).offset == 50
    assert seg.find_offset_by_timestamp(T0 + 100) == (T0 + 100, 50, 0)
    assert seg.find_offset_by_timestamp(T0 - 1).offset == 40
    assert seg.find_offset_by_timestamp(T0 + 291) is None
    assert seg.find_offset_by_timestamp(T0, starting_offset=44).offset == 44
    seg.close()


def test_find_offset_by_timestamp_with_unordered_timestamps(tmp_path: Path, clock: MockClock) -> None:
    seg = open_segment(tmp_path, 0, clock, **{"index.interval.bytes": 1})
    stamps = [T0 + t for t in (5, 1, 9, 3, 7, 2)]
    seg.append_batches(batches(0, [b"x"] * 6, timestamps=stamps, per_batch=2))
    assert seg.find_offset_by_timestamp(T0 + 6).offset == 2
    assert seg.find_offset_by_timestamp(T0 + 2).offset == 0
    seg.close()


def test_should_roll_on_size(tmp_path: Path, clock: MockClock) -> None:
    seg = open_segment(tmp_path, 0, clock)
    append_whole(seg, batches(0, [b"a"]))
    params = dict(max_segment_ms=10**9, max_timestamp_in_messages=T0, max_offset_in_messages=1, now=T0)
    assert not seg.should_roll(RollParams(max_segment_bytes=138, messages_size=69, **params))
    assert seg.should_roll(RollParams(max_segment_bytes=137, messages_size=69, **params))
    seg.close()


def test_should_roll_on_time_with_jitter(tmp_path: Path, clock: MockClock) -> None:
    config = LogConfig.from_mapping({"segment.ms": 1000, "segment.jitter.ms": 500})
    seg = LogSegment.open(tmp_path, 0, config, clock=clock)
    seg.roll_jitter_ms = 300  # drawn at random per segment; pinned for the test

    def params(now: int, ts: int = -1) -> RollParams:
        return RollParams(1000, 10**9, ts, 1, 10, now)

    assert not seg.should_roll(params(clock.milliseconds() + 10_000))  # never for an empty segment
    append_whole(seg, batches(0, [b"a"], timestamps=[-1]))  # no timestamps: wall clock since creation
    assert not seg.should_roll(params(T0 + 700))
    assert seg.should_roll(params(T0 + 701))
    seg.close()


def test_should_roll_on_record_time(tmp_path: Path, clock: MockClock) -> None:
    seg = open_segment(tmp_path, 0, clock, **{"segment.ms": 1000})
    append_whole(seg, batches(0, [b"a"], timestamps=[T0 - 50_000]))
    # wall clock is irrelevant once the first batch has a timestamp
    assert not seg.should_roll(RollParams(1000, 10**9, T0 - 49_000, 1, 10, T0 + 10**9))
    assert seg.should_roll(RollParams(1000, 10**9, T0 - 48_999, 1, 10, T0))
    seg.close()


def test_should_roll_on_full_index_and_offset_overflow(tmp_path: Path, clock: MockClock) -> None:
    seg = open_segment(tmp_path, 0, clock, **{"segment.index.bytes": 24, "index.interval.bytes": 0})
    params = RollParams(10**9, 10**9, T0, 5, 10, T0)
    append_whole(seg, batches(0, [b"a"]))
    assert not seg.should_roll(params)
    append_whole(seg, batches(1, [b"a"]))  # time index: 2 slots, one reserved -> full after one entry
    assert seg.time_index.entries == 1
    assert seg.should_roll(params)
    seg.close()
    other = tmp_path / "other"
    other.mkdir()
    seg = open_segment(other, 0, clock)
    assert seg.should_roll(RollParams(10**9, 10**9, T0, 2**31, 10, T0))
    assert not seg.should_roll(RollParams(10**9, 10**9, T0, 2**31 - 1, 10, T0))
    seg.close()


def test_appendable_batches_agrees_with_should_roll(tmp_path: Path, clock: MockClock) -> None:
    seg = open_segment(tmp_path, 0, clock, **{"index.interval.bytes": 100, "segment.index.bytes": 40})
    encoded = batches(0, [bytes(30)] * 40, timestamps=[T0 + i for i in range(40)], per_batch=1)
    count = seg.appendable_batches(encoded, 0, 10**9, 1500, T0)
    for i in range(len(encoded)):
        params = RollParams(
            10**9,
            1500,
            int(encoded.max_timestamps[i]),
            int(encoded.last_offsets[i]),
            int(encoded.sizes[i]),
            T0,
        )
        if seg.should_roll(params):
            break
        seg.append_batches(encoded, i, i + 1)
    assert count == i
    seg.close()


def test_read_next_offset(tmp_path: Path, clock: MockClock) -> None:
    seg = open_segment(tmp_path, 40, clock)
    assert seg.read_next_offset() == 40
    append_whole(seg, batches(40, [b"a", b"b"]))
    assert seg.read_next_offset() == 42
    seg.close()


def test_largest_timestamp_falls_back_to_mtime(segment: LogSegment) -> None:
    append_whole(segment, batches(40, [b"a"], timestamps=[-1]))
    segment.set_last_modified(T0 - 5000)
    assert segment.largest_record_timestamp is None
    assert segment.largest_timestamp == T0 - 5000


def test_change_file_suffixes_delete_and_deleted(tmp_path: Path, clock: MockClock) -> None:
    seg = open_segment(tmp_path, 0, clock)
    append_whole(seg, batches(0, [b"a"]))
    seg.flush()  # materialises both indexes
    seg.change_file_suffixes("", DELETED_FILE_SUFFIX)
    assert seg.has_suffix(DELETED_FILE_SUFFIX)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "00000000000000000000.index.deleted",
        "00000000000000000000.log.deleted",
        "00000000000000000000.timeindex.deleted",
    ]
    assert seg.read(0, 100).records == raw(batches(0, [b"a"]))  # still readable after the rename
    assert not seg.deleted()
    seg.delete_if_exists()
    assert seg.deleted()
    assert list(tmp_path.iterdir()) == []


def test_sanity_check(tmp_path: Path, clock: MockClock) -> None:
    seg = open_segment(tmp_path, 0, clock)  # a fresh segment has only its .log
    with pytest.raises(StorageError) as info:
        seg.sanity_check(time_index_file_newly_created=True)
    assert info.value.path.endswith("00000000000000000000.index")
    append_whole(seg, batches(0, [b"a"]))  # the first append creates the offset index, as in Kafka
    seg.sanity_check(time_index_file_newly_created=True)
    assert (tmp_path / "00000000000000000000.timeindex").stat().st_size == 0
    seg.close()


def test_close_writes_final_time_index_entry_and_trims(tmp_path: Path, clock: MockClock) -> None:
    seg = open_segment(tmp_path, 0, clock, **{"index.interval.bytes": 10_000})
    for offset, ts in enumerate([5, 9, 7]):
        append_whole(seg, batches(offset, [b"a"], timestamps=[T0 + ts]))
    seg.close()
    assert (tmp_path / "00000000000000000000.index").stat().st_size == 0
    # one 12-byte entry: (max timestamp, offset of the batch that carried it)
    assert (tmp_path / "00000000000000000000.timeindex").read_bytes() == (T0 + 9).to_bytes(8, "big") + (1).to_bytes(
        4, "big"
    )


def test_read_only_segment_without_index_files(tmp_path: Path, clock: MockClock) -> None:
    seg = open_segment(tmp_path, 0, clock)
    seg.append_batches(batches(0, [b"a"] * 10, timestamps=[T0 + i for i in range(10)], per_batch=2))
    seg.close()
    (tmp_path / "00000000000000000000.index").unlink()
    (tmp_path / "00000000000000000000.timeindex").unlink()
    before = read_files(tmp_path)
    ro = LogSegment.open(tmp_path, 0, LogConfig(), clock=clock, file_already_exists=True, read_only=True)
    assert ro.read_next_offset() == 10
    assert ro.translate_offset(5).position == int(batches(0, [b"a"] * 10, per_batch=2).positions[2])
    assert ro.find_offset_by_timestamp(T0 + 3).offset == 3
    ro.close()
    assert read_files(tmp_path) == before


def _index_entries(directory: Path) -> list[tuple[int, int]]:
    """(offset, position) of every entry of every ``.index`` file in ``directory``, as bytes on disk."""
    out = []
    for path in sorted(directory.glob("*.index")):
        base = int(path.name[: -len(".index")])
        words = np.frombuffer(path.read_bytes(), dtype=">i4").reshape(-1, 2)
        out += [(base + int(relative), int(position)) for relative, position in words]
    return out


def test_a_writer_reopening_after_each_small_append_indexes_every_index_interval_bytes(
    tmp_path: Path, clock: MockClock
) -> None:
    """One small append per open (an executor task per micro-batch): entries still come every
    ~``index.interval.bytes``, where counting from 0 at each open (Kafka) would write none."""
    config = LogConfig.from_mapping({"index.interval.bytes": 1000, "segment.bytes": 1 << 20})
    sizes = []
    for i in range(120):
        log = Log.open(tmp_path / "t-0", config, clock=clock, had_clean_shutdown=True)
        try:
            info = log.append({"value": [b"x" * (20 + i % 37)] * (1 + i % 3), "timestamp": [T0 + i] * (1 + i % 3)})
            sizes.append(info.valid_bytes)
        finally:
            log.close()
    entries = _index_entries(tmp_path / "t-0")
    positions = [0] + [position for _offset, position in entries]
    gaps = np.diff(positions)
    assert len(entries) >= sum(sizes) // (1000 + max(sizes)) > 0
    assert all(1000 < gap <= 1000 + max(sizes) for gap in gaps)  # strictly more than the interval, as Kafka
    never_closed = tmp_path / "never-closed"
    log = Log.open(never_closed, config, clock=clock)
    try:
        for i in range(120):
            log.append({"value": [b"x" * (20 + i % 37)] * (1 + i % 3), "timestamp": [T0 + i] * (1 + i % 3)})
    finally:
        log.close()
    assert _index_entries(never_closed) == entries  # as dense as a writer that never closed


def _kafka_offset_index(sizes: list[int], last_offsets: list[int], base: int, interval: int) -> bytes:
    """The ``.index`` bytes Kafka's rule gives for one append per batch, counted from 0 (spec 4.2)."""
    out, counter, position = b"", 0, 0
    for size, last in zip(sizes, last_offsets, strict=True):
        if counter > interval:
            out += (last - base).to_bytes(4, "big") + position.to_bytes(4, "big")
            counter = 0
        counter += size
        position += size
    return out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sizes=st.lists(st.integers(min_value=0, max_value=120), min_size=1, max_size=40),
    interval=st.integers(min_value=0, max_value=600),
    reopen_every=st.integers(min_value=1, max_value=8),
)
def test_uninterrupted_writer_index_is_kafkas_byte_for_byte_and_reopening_changes_nothing(
    tmp_path_factory: pytest.TempPathFactory, sizes: list[int], interval: int, reopen_every: int
) -> None:
    table = to_append_table({"value": [bytes(n) for n in sizes], "timestamp": [T0] * len(sizes)}, now_ms=T0)
    encoded = encode_batches(table, 7, max_batch_bytes=61 + 21 + 120)  # about one record per batch
    clock = MockClock(T0)
    config = {"index.interval.bytes": interval, "segment.index.bytes": 4096}
    kept, reopened = tmp_path_factory.mktemp("kept"), tmp_path_factory.mktemp("reopened")
    seg = open_segment(kept, 7, clock, **config)
    seg.append_batches(encoded)
    seg.close()
    expected = _kafka_offset_index(encoded.sizes.tolist(), encoded.last_offsets.tolist(), 7, interval)
    assert (kept / "00000000000000000007.index").read_bytes() == expected
    for start in range(0, len(encoded), reopen_every):
        seg = open_segment(reopened, 7, clock, **config)
        seg.offset_index.resize(4096)  # as the loader does for an active segment
        seg.time_index.resize(4096)
        seg.append_batches(encoded, start, min(start + reopen_every, len(encoded)))
        seg.close()
    assert (reopened / "00000000000000000007.index").read_bytes() == expected
