"""TimeIndex (``.timeindex``): Kafka's TimeIndexTest cases, every maybe_append rule, properties and
real broker-written files."""

from __future__ import annotations

import bisect
import itertools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from indexer.errors import CorruptIndexError, IndexFullError, IndexOffsetOverflowError, InvalidOffsetError
from indexer.time_index import UNKNOWN_TIMESTAMP_OFFSET, TimeIndex, TimestampOffset
from tests.indexer.helpers import check_bulk_append, real_broker_indexes

BASE = 45
MAX_ENTRIES = 30


@pytest.fixture
def index(tmp_path: Path):
    idx = TimeIndex(tmp_path / "00000000000000000045.timeindex", BASE, MAX_ENTRIES * 12)
    yield idx
    idx.close()


def append_entries(idx: TimeIndex, count: int) -> None:
    for i in range(1, count + 1):
        idx.maybe_append(i * 10, i * 10 + BASE)


def test_unknown_constant() -> None:
    assert TimestampOffset.UNKNOWN == UNKNOWN_TIMESTAMP_OFFSET == (-1, -1)


def test_lookup(index: TimeIndex) -> None:
    assert index.lookup(100) == TimestampOffset(-1, BASE)
    append_entries(index, MAX_ENTRIES - 1)
    assert index.lookup(9) == TimestampOffset(-1, BASE)  # below the earliest entry
    assert index.lookup(25) == TimestampOffset(20, 65)  # between two entries
    assert index.lookup(30) == TimestampOffset(30, 75)  # exact
    assert index.lookup(10**12) == TimestampOffset(290, 335)


def test_entry_and_entry_overflow(index: TimeIndex) -> None:
    with pytest.raises(IndexError):
        index.entry(0)
    append_entries(index, MAX_ENTRIES - 1)
    assert [index.entry(i) for i in range(4)] == [(10, 55), (20, 65), (30, 75), (40, 85)]


def test_truncate(index: TimeIndex) -> None:
    append_entries(index, MAX_ENTRIES - 1)
    index.truncate()
    assert index.entries == 0
    assert index.last_entry == TimestampOffset(-1, BASE)
    append_entries(index, MAX_ENTRIES - 1)
    index.truncate_to(10 + BASE)
    assert index.entries == 0


def test_truncate_to_searches_by_offset(index: TimeIndex) -> None:
    append_entries(index, 5)  # (10,55) (20,65) (30,75) (40,85) (50,95)
    index.truncate_to(80)  # no exact entry: keep offsets < 80
    assert [index.entry(i) for i in range(index.entries)] == [(10, 55), (20, 65), (30, 75)]
    assert index.last_entry == TimestampOffset(30, 75)
    index.truncate_to(75)  # exact: that entry goes too
    assert index.last_entry == TimestampOffset(20, 65)
    index.truncate_to(1000)  # past the end: no-op
    assert index.entries == 2
    index.maybe_append(25, 70)
    assert index.last_entry == TimestampOffset(25, 70)


def test_append_rules(index: TimeIndex) -> None:
    append_entries(index, MAX_ENTRIES - 1)
    assert index.is_full()
    with pytest.raises(IndexFullError, match=r"full time index \(size = 29\)"):
        index.maybe_append(10000, 1000)
    with pytest.raises(InvalidOffsetError) as info:
        index.maybe_append(10000, (MAX_ENTRIES - 2) * 10, skip_full_check=True)
    assert str(info.value) == (
        f"Attempt to append an offset (280) to slot 29 no larger than the last offset appended (335) "
        f"to {index.path.absolute()}"
    )
    index.maybe_append(10000, 1000, skip_full_check=True)  # the reserved slot
    assert index.entries == MAX_ENTRIES
    with pytest.raises(IndexFullError, match="not even the reserved one"):
        index.maybe_append(10001, 1001, skip_full_check=True)
    index.maybe_append(10000, 1000, skip_full_check=True)  # same last entry again: harmless
    assert index.entries == MAX_ENTRIES


def test_equal_timestamp_is_ignored_and_backwards_timestamp_raises(index: TimeIndex) -> None:
    index.maybe_append(100, 50)
    index.maybe_append(100, 60)  # equal timestamp, larger offset: ignored
    assert index.entries == 1 and index.last_entry == TimestampOffset(100, 50)
    index.maybe_append(200, 50)  # equal offset, larger timestamp: written
    assert index.entries == 2 and index.last_entry == TimestampOffset(200, 50)
    with pytest.raises(ValueError, match=r"Attempt to append a timestamp \(150\) to slot 2 no larger"):
        index.maybe_append(150, 70)
    assert index.entries == 2


def test_empty_index_ignores_no_timestamp(index: TimeIndex) -> None:
    index.maybe_append(-1, 50)  # magic v0 data: NO_TIMESTAMP
    assert index.entries == 0
    index.maybe_append(0, 50)
    assert index.entries == 1


def test_offset_overflow(index: TimeIndex) -> None:
    with pytest.raises(IndexOffsetOverflowError) as info:
        index.maybe_append(5, BASE + 2**31)
    assert info.value.offset == BASE + 2**31


def test_is_full_reserves_one_slot(tmp_path: Path, index: TimeIndex) -> None:
    assert not index.is_full()
    append_entries(index, MAX_ENTRIES - 1)
    assert index.is_full()
    with TimeIndex(tmp_path / "single.timeindex", 0, 12) as single:
        assert single.max_entries == 1 and single.is_full()  # full while empty


def test_last_entry(index: TimeIndex) -> None:
    assert index.last_entry == TimestampOffset(-1, BASE)
    index.maybe_append(1, 1 + BASE)
    assert index.last_entry == TimestampOffset(1, BASE + 1)


def test_resize(index: TimeIndex) -> None:
    assert index.resize(MAX_ENTRIES * 12) is False
    assert index.resize(MAX_ENTRIES // 2 * 12) is True
    assert index.max_entries == MAX_ENTRIES // 2
    assert index.resize(MAX_ENTRIES * 2 * 12) is True
    assert index.path.stat().st_size == MAX_ENTRIES * 2 * 12


def test_default_size_preallocation(tmp_path: Path) -> None:
    with TimeIndex(tmp_path / "0.timeindex", 0, 10 * 1024 * 1024) as idx:
        assert idx.length == 10485756 and idx.max_entries == 873813 and idx.warm_entries == 682
        assert idx.path.stat().st_size == 10485756


def test_sanity_check(tmp_path: Path, index: TimeIndex) -> None:
    index.sanity_check()
    append_entries(index, 5)
    index.sanity_check()
    index.close()
    data = index.path.read_bytes()
    assert len(data) == 60

    decreasing = tmp_path / "dec.timeindex"
    decreasing.write_bytes(data[:12] + (5).to_bytes(8, "big") + data[20:24])  # last ts 5 < first 10
    with TimeIndex(decreasing, BASE, writable=False) as idx, pytest.raises(CorruptIndexError) as info:
        idx.sanity_check()
    assert str(info.value) == (
        f"Corrupt time index found, time index file ({decreasing.absolute()}) has non-zero size but the last "
        f"timestamp is 5 which is less than the first timestamp 10"
    )

    below_base = tmp_path / "below.timeindex"
    below_base.write_bytes(data[:12] + data[12:20] + (-1).to_bytes(4, "big", signed=True))
    with (
        TimeIndex(below_base, BASE, writable=False) as idx,
        pytest.raises(CorruptIndexError, match="first offset 45"),
    ):
        idx.sanity_check()

    bad_length = tmp_path / "len.timeindex"
    bad_length.write_bytes(data[:59])
    with TimeIndex(bad_length, BASE, writable=False) as idx:
        assert idx.entries == 4
        with pytest.raises(CorruptIndexError, match="found 59 bytes which is neither positive nor a multiple of 12"):
            idx.sanity_check()


def test_crashed_untrimmed_time_index_fails_sanity_check(tmp_path: Path) -> None:
    path = tmp_path / "0.timeindex"
    idx = TimeIndex(path, 0, 12 * 10)
    idx.maybe_append(1700000000000, 3)
    idx.close_handler()  # crash: 9 trailing zero slots
    with TimeIndex(path, 0, writable=False, whole_file=True) as crashed:
        assert crashed.entries == 10
        assert crashed.last_entry == TimestampOffset(0, 0)
        with pytest.raises(CorruptIndexError, match="last timestamp is 0"):
            crashed.sanity_check()


def test_appendix_b_bytes(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000045.timeindex"
    with TimeIndex(path, 45, 12 * 10) as idx:
        idx.maybe_append(1700000000000, 50)
    assert path.read_bytes() == bytes.fromhex("0000018bcfe56800 00000005")


def test_negative_and_large_timestamps_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "0.timeindex"
    path.write_bytes(
        (-(2**62)).to_bytes(8, "big", signed=True)
        + (1).to_bytes(4, "big")
        + (2**63 - 1).to_bytes(8, "big")
        + (2).to_bytes(4, "big")
    )
    with TimeIndex(path, 0, writable=False) as idx:
        assert idx.entry(0) == TimestampOffset(-(2**62), 1)
        assert [a.tolist() for a in idx.to_arrays()] == [[-(2**62), 2**63 - 1], [1, 2]]
        assert idx.lookup(-(2**62)) == TimestampOffset(-(2**62), 1)
        assert idx.lookup(0) == TimestampOffset(-(2**62), 1)
        assert idx.lookup(2**63 - 1) == TimestampOffset(2**63 - 1, 2)
        assert idx.lookup(-(2**63)) == TimestampOffset(-1, 0)
        timestamps, offsets = idx.lookup_many(np.array([-(2**63), 0, 2**63 - 1], dtype=np.int64))
        assert timestamps.tolist() == [-1, -(2**62), 2**63 - 1] and offsets.tolist() == [0, 1, 2]


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(st.tuples(st.integers(0, 30), st.integers(0, 3)), max_size=150),
    targets=st.lists(st.integers(-5, 5000), max_size=30),
    truncate_at=st.integers(0, 700),
)
def test_random_appends_match_model(
    tmp_path_factory: pytest.TempPathFactory,
    steps: list[tuple[int, int]],
    targets: list[int],
    truncate_at: int,
) -> None:
    """Running-max timestamps and non-decreasing offsets, as a segment appends them, against a model."""
    base = 100
    path = tmp_path_factory.mktemp("model") / "00000000000000000100.timeindex"
    model: list[tuple[int, int]] = []
    ts, off = -1, base
    with TimeIndex(path, base, 12 * 200) as idx:
        for dts, doff in steps:
            ts, off = ts + dts, off + doff
            idx.maybe_append(ts, off)
            if ts > (model[-1][0] if model else -1):
                model.append((ts, off))
        assert [tuple(idx.entry(i)) for i in range(idx.entries)] == model
        stamps = [m[0] for m in model]
        for t in targets:
            i = bisect.bisect_right(stamps, t) - 1
            assert idx.lookup(t) == (TimestampOffset(*model[i]) if i >= 0 else TimestampOffset(-1, base))
        got_ts, got_off = idx.lookup_many(np.array(targets, dtype=np.int64))
        assert list(zip(got_ts.tolist(), got_off.tolist(), strict=True)) == [tuple(idx.lookup(t)) for t in targets]
        target = base + truncate_at
        idx.truncate_to(target)
        # Entries with offset < target survive; with equal offsets Kafka's search may stop on any of them.
        kept = [m for m in model if m[1] < target]
        assert [tuple(idx.entry(i)) for i in range(idx.entries)] == model[: idx.entries]
        assert len(kept) <= idx.entries <= len([m for m in model if m[1] <= target])
        assert idx.last_entry == (TimestampOffset(*model[idx.entries - 1]) if idx.entries else (-1, base))


def test_real_broker_time_index_files_open_read_only_and_pass_sanity_check(vectors_dir: Path) -> None:
    non_empty = 0
    for base, idx in real_broker_indexes(vectors_dir, TimeIndex, ".timeindex", 12):
        if idx.entries == 0:
            continue
        non_empty += 1
        entries = [idx.entry(i) for i in range(idx.entries)]
        stamps = [e.timestamp for e in entries]
        assert stamps == sorted(set(stamps))
        all_stamps, all_offsets = idx.to_arrays()
        assert all_stamps.tolist() == stamps and all_offsets.tolist() == [e.offset for e in entries]
        assert all(e.offset >= base for e in entries)
        assert idx.last_entry == entries[-1]
        for e in entries:
            assert idx.lookup(e.timestamp) == e
        got_ts, got_off = idx.lookup_many(np.array(stamps))
        assert got_ts.tolist() == stamps and got_off.tolist() == [e.offset for e in entries]
    assert non_empty >= 20


def test_lookup_many_below_between_above_repeated_and_empty(tmp_path: Path) -> None:
    base = 10
    with TimeIndex(tmp_path / "10.timeindex", base, 12 * 1000) as idx:
        targets = np.array([-(2**63), -1, 0, 5, 2**63 - 1] * 10, dtype=np.int64)
        stamps, offsets = idx.lookup_many(targets)
        assert stamps.tolist() == [-1] * targets.size and offsets.tolist() == [base] * targets.size
        model = [(1000 + 7 * i, base + 2 * i) for i in range(900)]
        for timestamp, offset in model:
            idx.maybe_append(timestamp, offset, skip_full_check=True)
        keys = [m[0] for m in model]
        targets = np.concatenate([keys, np.add(keys, 3), np.subtract(keys, 1), [999, 2**63 - 1, -(2**63)]])
        targets = np.random.default_rng(3).permutation(np.tile(targets, 2)).astype(np.int64)
        stamps, offsets = idx.lookup_many(targets)
        expected = []
        for t in targets.tolist():
            i = bisect.bisect_right(keys, t) - 1
            expected.append(model[i] if i >= 0 else (-1, base))
        assert list(zip(stamps.tolist(), offsets.tolist(), strict=True)) == expected


def test_lookup_many_after_truncation_to_the_same_entry_count(tmp_path: Path) -> None:
    """A truncation invalidates the cached search tree even when appends restore the entry count."""
    with TimeIndex(tmp_path / "0.timeindex", 0, 12 * 100) as idx:
        for i in range(1, 51):
            idx.maybe_append(100 * i, 10 * i)
        targets = np.arange(0, 6000, 10)
        assert idx.lookup_many(targets)[1].tolist() == [idx.lookup(int(t)).offset for t in targets]
        idx.truncate_to(255)
        for i in range(26, 51):
            idx.maybe_append(100 * i, 255 + i)
        assert idx.entries == 50
        stamps, offsets = idx.lookup_many(targets)
        expected = [idx.lookup(int(t)) for t in targets]
        assert stamps.tolist() == [e.timestamp for e in expected]
        assert offsets.tolist() == [e.offset for e in expected]
        assert idx.lookup_many(np.array([2600]))[1].tolist() == [281]


@settings(max_examples=80, deadline=None)
@given(
    prefix=st.integers(0, 5),
    steps=st.lists(st.tuples(st.integers(-2, 20), st.integers(-2, 4)), max_size=40),
    first=st.tuples(st.integers(-4, 3), st.integers(-2, 2)),
    slots=st.integers(1, 30),
    skip_full_check=st.booleans(),
)
def test_append_many_equals_repeated_maybe_append_or_writes_nothing(
    tmp_path_factory: pytest.TempPathFactory,
    prefix: int,
    steps: list[tuple[int, int]],
    first: tuple[int, int],
    slots: int,
    skip_full_check: bool,
) -> None:
    """Bulk append writes exactly what maybe_append one by one writes (skips, reserved slot and
    all); on any error it writes nothing."""
    base = 100
    stamps = list(itertools.accumulate((dts for dts, _ in steps), initial=first[0]))[1:]
    offsets = list(itertools.accumulate((doff for _, doff in steps), initial=base + first[1]))[1:]
    prefix = min(prefix, len(stamps))
    directory = tmp_path_factory.mktemp("bulk")
    with (
        TimeIndex(directory / "one.timeindex", base, 12 * slots) as one,
        TimeIndex(directory / "many.timeindex", base, 12 * slots) as many,
    ):

        def singles(idx: TimeIndex, pairs: list[tuple[int, int]]) -> None:
            for t, o in pairs:
                idx.maybe_append(t, o, skip_full_check=skip_full_check)

        def bulk(idx: TimeIndex, timestamps: np.ndarray, offsets: np.ndarray) -> None:
            idx.append_many(timestamps, offsets, skip_full_check)

        if check_bulk_append(one, many, list(zip(stamps, offsets, strict=True)), prefix, singles, bulk):
            assert many.last_entry == one.last_entry
