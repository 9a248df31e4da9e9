"""OffsetIndex (``.index``): Kafka's OffsetIndexTest cases, the spec's worked examples, properties and
real broker-written files."""

from __future__ import annotations

import bisect
import itertools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from indexer.errors import (
    CorruptIndexError,
    IndexFullError,
    IndexOffsetOverflowError,
    InvalidOffsetError,
)
from indexer.offset_index import OffsetIndex, OffsetPosition
from tests.indexer.helpers import check_bulk_append, real_broker_indexes

BASE = 45


@pytest.fixture
def index(tmp_path: Path):
    idx = OffsetIndex(tmp_path / "00000000000000000045.index", BASE, 30 * 8)
    yield idx
    idx.close()


def fill(idx: OffsetIndex, pairs: list[tuple[int, int]]) -> None:
    for offset, position in pairs:
        idx.append(offset, position)


def test_lookup_on_empty_index_gives_base_offset_and_position_zero(index: OffsetIndex) -> None:
    assert index.lookup(92) == OffsetPosition(BASE, 0)
    assert index.lookup(BASE) == OffsetPosition(BASE, 0)


def test_lookup_extreme_cases(index: OffsetIndex) -> None:
    for i in range(index.max_entries):
        index.append(BASE + i + 1, i)
    assert index.lookup(BASE) == OffsetPosition(BASE, 0)  # below the first entry
    last = BASE + index.max_entries
    assert index.lookup(last) == OffsetPosition(last, index.max_entries - 1)
    assert index.lookup(last + 1000) == OffsetPosition(last, index.max_entries - 1)


def test_entry_and_entry_overflow(index: OffsetIndex) -> None:
    with pytest.raises(IndexError, match="0th entry"):
        index.entry(0)
    for i in range(index.max_entries):
        index.append(BASE + i, i)
    assert [index.entry(i) for i in range(index.max_entries)] == [
        OffsetPosition(BASE + i, i) for i in range(index.max_entries)
    ]
    with pytest.raises(IndexError):
        index.entry(index.max_entries)


def test_append_to_full_index_raises(index: OffsetIndex) -> None:
    for i in range(index.max_entries):
        index.append(BASE + i + 1, i)
    assert index.is_full()
    with pytest.raises(IndexFullError, match=r"full index \(size = 30\)") as info:
        index.append(BASE + index.max_entries + 1, 1)
    assert info.value.path == str(index.path.absolute())


def test_append_out_of_order_or_equal_raises_with_kafka_message(index: OffsetIndex) -> None:
    index.append(51, 0)
    with pytest.raises(InvalidOffsetError) as info:
        index.append(50, 1)
    assert str(info.value) == (
        f"Attempt to append an offset 50 to position 1 no larger than the last offset appended (51) "
        f"to {index.path.absolute()}"
    )
    assert info.value.offset == 50
    assert info.value.path == str(index.path.absolute())
    with pytest.raises(InvalidOffsetError):
        index.append(51, 1)
    assert index.entries == 1


def test_append_offset_outside_relative_range_raises_overflow(index: OffsetIndex) -> None:
    with pytest.raises(IndexOffsetOverflowError) as info:
        index.append(BASE + 2**31, 0)
    assert info.value.offset == BASE + 2**31
    assert str(index.path.absolute()) in str(info.value)
    with pytest.raises(IndexOffsetOverflowError):
        index.append(BASE - 1, 0)
    index.append(BASE + 2**31 - 1, 0)
    assert index.lookup(BASE + 2**31 + 5) == OffsetPosition(BASE + 2**31 - 1, 0)


def test_fetch_upper_bound_offset_worked_examples(index: OffsetIndex) -> None:
    first, second, third, fourth = (
        OffsetPosition(45, 0),
        OffsetPosition(46, 10),
        OffsetPosition(47, 23),
        OffsetPosition(48, 37),
    )
    assert index.fetch_upper_bound_offset(first, 5) is None
    fill(index, [first, second, third, fourth])
    assert index.fetch_upper_bound_offset(first, 5) == second
    assert index.fetch_upper_bound_offset(first, 10) == second
    assert index.fetch_upper_bound_offset(first, 22) == third
    assert index.fetch_upper_bound_offset(first, 23) == third
    assert index.fetch_upper_bound_offset(second, 24) == fourth
    assert index.fetch_upper_bound_offset(fourth, 1) is None
    assert index.fetch_upper_bound_offset(first, 200) is None
    assert index.fetch_upper_bound_offset(second, 200) is None


def test_reopen_after_close_keeps_entries_and_is_full(index: OffsetIndex) -> None:
    fill(index, [(51, 0), (52, 1)])
    index.close()
    assert index.path.stat().st_size == 16
    reopened = OffsetIndex(index.path, BASE)
    try:
        assert reopened.lookup(51) == OffsetPosition(51, 0)
        assert reopened.lookup(52) == OffsetPosition(52, 1)
        assert reopened.last_offset == 52
        assert reopened.entries == 2
        with pytest.raises(IndexFullError):  # the trimmed file has no free slot
            reopened.append(53, 1)
    finally:
        reopened.close()


def test_truncate_worked_example(tmp_path: Path) -> None:
    with OffsetIndex(tmp_path / "0.index", 0, 10 * 8) as idx:
        idx.truncate()
        fill(idx, [(i, i) for i in range(1, 10)])

        # each step truncates, checks what is left, then appends the next entry back
        for truncate_to, last in [(12, 9), (10, 9), (9, 8), (5, 4)]:
            idx.truncate_to(truncate_to)
            assert idx.lookup(10) == OffsetPosition(last, last)
            assert idx.last_offset == last
            idx.append(last + 1, last + 1)

        idx.truncate()
        assert idx.entries == 0
        assert idx.last_offset == 0
        idx.append(0, 0)

        idx.truncate_to(-3)  # nothing is <= -3: everything goes
        assert idx.entries == 0


def test_closed_index_raises_clear_error_and_close_is_idempotent(tmp_path: Path) -> None:
    idx = OffsetIndex(tmp_path / "0.index", 0, 10 * 8)
    idx.close_handler()
    assert idx.is_closed
    with pytest.raises(ValueError, match="is closed"):
        idx.lookup(1)
    with pytest.raises(ValueError, match="is closed"):
        idx.append(1, 1)
    idx.close()
    idx.close_handler()
    assert idx.path.stat().st_size == 80  # close_handler does not trim


def test_sanity_check_accepts_last_offset_equal_to_base_offset(tmp_path: Path) -> None:
    with OffsetIndex(tmp_path / "20.index", 20, 10 * 8) as idx:
        idx.append(20, 0)
        idx.sanity_check()


def test_sanity_check_rejects_last_offset_below_base(tmp_path: Path) -> None:
    path = tmp_path / "100.index"
    path.write_bytes(bytes.fromhex("00000001 00000000 ffffffff 00000010"))  # relative -1 in the last slot
    with OffsetIndex(path, 100, writable=False) as idx:
        assert idx.last_offset == 99
        with pytest.raises(CorruptIndexError) as info:
            idx.sanity_check()
    assert str(info.value) == (
        f"Corrupt index found, index file {path.absolute()} has non-zero size but the last offset is 99 "
        f"which is less than the base offset 100"
    )
    assert info.value.path == str(path.absolute())


def test_sanity_check_rejects_length_not_multiple_of_eight(tmp_path: Path) -> None:
    path = tmp_path / "0.index"
    path.write_bytes(bytes(20))
    with OffsetIndex(path, 0, writable=False) as idx:
        assert idx.entries == 2  # every complete slot counts
        with pytest.raises(CorruptIndexError, match="found 20 bytes which is neither positive nor a multiple of 8"):
            idx.sanity_check()


def test_appendix_b_bytes(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000045.index"
    idx = OffsetIndex(path, 45, 4096)
    idx.append(46, 0)
    idx.append(50, 4096)
    idx.flush()
    data = path.read_bytes()
    assert len(data) == 4096  # pre-allocated, zeros until trimmed
    assert data[:16] == bytes.fromhex("00000001 00000000 00000005 00001000")
    assert data[16:] == bytes(4096 - 16)
    idx.close()
    assert path.read_bytes() == bytes.fromhex("00000001 00000000 00000005 00001000")


def test_positions_outside_int32_are_rejected(index: OffsetIndex) -> None:
    with pytest.raises(ValueError, match="position"):
        index.append(46, 2**31)
    assert index.entries == 0


def kafka_ceiling_slot(values: list[int], target: int) -> int:
    """Smallest slot with value >= target, or -1; an exact match on slot 0 gives slot 1 (Kafka's search)."""
    j = bisect.bisect_left(values, target)
    if j == 0 and values and values[0] == target:
        j = 1
    return j if j < len(values) else -1


sorted_offsets = st.lists(st.integers(0, 5000), min_size=0, max_size=200, unique=True).map(sorted)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rel_offsets=sorted_offsets,
    targets=st.lists(st.integers(-10, 5100), max_size=40),
    truncate_at=st.integers(-5, 5100),
)
def test_random_appends_match_sorted_list_model(
    tmp_path_factory: pytest.TempPathFactory, rel_offsets: list[int], targets: list[int], truncate_at: int
) -> None:
    """lookup / floor / ceiling / truncate_to against a sorted-list model."""
    base = 1000
    path = tmp_path_factory.mktemp("model") / "00000000000000001000.index"
    offsets = [base + r for r in rel_offsets]
    positions = [7 * i for i in range(len(offsets))]
    with OffsetIndex(path, base, 8 * 256) as idx:
        fill(idx, list(zip(offsets, positions, strict=True)))
        for t in [base + r for r in targets]:
            i = bisect.bisect_right(offsets, t) - 1
            expected = OffsetPosition(offsets[i], positions[i]) if i >= 0 else OffsetPosition(base, 0)
            assert idx.lookup(t) == expected
            assert idx.largest_lower_bound_slot_for(t) == i
            assert idx.smallest_upper_bound_slot_for(t) == kafka_ceiling_slot(offsets, t)
            p = t - base  # by value (position)
            jv = kafka_ceiling_slot(positions, p)
            got = idx.fetch_upper_bound_offset(OffsetPosition(0, 0), p)
            assert got == (OffsetPosition(offsets[jv], positions[jv]) if jv >= 0 else None)
        many_offsets, many_positions = idx.lookup_many(np.array([base + t for t in targets], dtype=np.int64))
        assert [OffsetPosition(int(o), int(p)) for o, p in zip(many_offsets, many_positions, strict=True)] == [
            idx.lookup(base + t) for t in targets
        ]
        target = base + truncate_at
        idx.truncate_to(target)
        kept = [o for o in offsets if o < target]
        assert idx.entries == len(kept)
        assert idx.last_offset == (kept[-1] if kept else base)
        assert [idx.entry(i).offset for i in range(idx.entries)] == kept


def test_lookup_many_matches_lookup_on_large_index(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    n = 20000
    offsets = 10 + np.cumsum(rng.integers(1, 9, n))
    with OffsetIndex(tmp_path / "10.index", 10, 8 * n) as idx:
        for i, o in enumerate(offsets.tolist()):
            idx.append(o, 100 * i)
        targets = rng.integers(0, int(offsets[-1]) + 50, 5000)
        for subset in (targets[:10], targets):  # per-target kernel, then the search tree
            got_offsets, got_positions = idx.lookup_many(subset)
            expected = [idx.lookup(int(t)) for t in subset]
            assert got_offsets.tolist() == [e.offset for e in expected]
            assert got_positions.tolist() == [e.position for e in expected]
        shaped_offsets, _ = idx.lookup_many(targets[:12].reshape(3, 4))
        assert shaped_offsets.shape == (3, 4)


def test_lookup_many_on_unsorted_crashed_index_reproduces_kafka_search(tmp_path: Path) -> None:
    """An un-trimmed index left by a crash has trailing zero slots (key == base): not sorted."""
    path = tmp_path / "5.index"
    idx = OffsetIndex(path, 5, 8 * 64)
    fill(idx, [(10, 0), (20, 100), (30, 200)])
    idx.close_handler()  # crash: no trim
    with OffsetIndex(path, 5, writable=False, whole_file=True) as crashed:
        assert crashed.entries == 64
        targets = np.arange(0, 40)
        got_offsets, got_positions = crashed.lookup_many(targets)
        expected = [crashed.lookup(int(t)) for t in targets]
        assert got_offsets.tolist() == [e.offset for e in expected]
        assert got_positions.tolist() == [e.position for e in expected]
        crashed.sanity_check()  # zero slots decode to the base offset: the check passes, as in Kafka


def test_lookup_many_rejects_non_integer_targets(index: OffsetIndex) -> None:
    with pytest.raises(TypeError, match="integer"):
        index.lookup_many(np.array([1.5]))


def test_real_broker_index_files_open_read_only_and_pass_sanity_check(vectors_dir: Path) -> None:
    non_empty = 0
    for base, idx in real_broker_indexes(vectors_dir, OffsetIndex, ".index", 8):
        if idx.entries == 0:
            assert idx.lookup(base + 5) == OffsetPosition(base, 0)
            continue
        non_empty += 1
        entries = [idx.entry(i) for i in range(idx.entries)]
        offsets = [e.offset for e in entries]
        positions = [e.position for e in entries]
        all_offsets, all_positions = idx.to_arrays()
        assert all_offsets.tolist() == offsets and all_positions.tolist() == positions
        assert offsets == sorted(set(offsets)) and positions == sorted(set(positions))
        assert offsets[0] > base and positions[0] > 0
        for e in entries:
            assert idx.lookup(e.offset) == e
            assert idx.lookup(e.offset + 1) == e or idx.lookup(e.offset + 1).offset == e.offset + 1
        got_offsets, got_positions = idx.lookup_many(np.array(offsets))
        assert got_offsets.tolist() == offsets and got_positions.tolist() == positions
    assert non_empty >= 10


def floor_model(offsets: list[int], positions: list[int], base: int, targets: np.ndarray) -> list[OffsetPosition]:
    found = []
    for t in targets.tolist():
        i = bisect.bisect_right(offsets, t) - 1
        found.append(OffsetPosition(offsets[i], positions[i]) if i >= 0 else OffsetPosition(base, 0))
    return found


@pytest.mark.parametrize("n", [1, 2, 7, 8, 9, 64, 65, 513, 4097])
def test_lookup_many_targets_at_between_below_above_and_repeated(tmp_path: Path, n: int) -> None:
    """Every kind of target, shuffled and repeated, on search trees of 1 to 5 levels, against bisect."""
    base = 1000
    offsets = (base + 1 + 3 * np.arange(n)).tolist()
    positions = (50 * np.arange(n)).tolist()
    with OffsetIndex(tmp_path / f"{base}.index", base, 8 * n) as idx:
        fill(idx, list(zip(offsets, positions, strict=True)))
        edges = [base - 1, base, -(2**63), 2**63 - 1, offsets[-1] + 1]
        targets = np.concatenate([offsets, np.add(offsets, 1), np.subtract(offsets, 1), edges, offsets[::3]])
        targets = np.random.default_rng(n).permutation(np.tile(targets, 2)).astype(np.int64)
        got_offsets, got_positions = idx.lookup_many(targets)
        expected = floor_model(offsets, positions, base, targets)
        assert got_offsets.tolist() == [e.offset for e in expected]
        assert got_positions.tolist() == [e.position for e in expected]


def test_lookup_many_on_empty_index_misses_everything(index: OffsetIndex) -> None:
    targets = np.array([-(2**63), BASE - 1, BASE, BASE + 1, 2**63 - 1] * 20)
    offsets, positions = index.lookup_many(targets)
    assert offsets.tolist() == [BASE] * targets.size and positions.tolist() == [0] * targets.size
    assert index.lookup_many(np.array([], dtype=np.int64))[0].size == 0


def test_lookup_many_search_tree_follows_appends_truncation_resize_and_reset(tmp_path: Path) -> None:
    """The cached tree is reused while the index is unchanged and never answers for an older state,
    even when a truncation and new appends bring the entry count back to what it was."""
    idx = OffsetIndex(tmp_path / "0.index", 0, 8 * 64)
    targets = np.arange(-5, 700)

    def check() -> None:
        offsets, positions = idx.lookup_many(targets)
        expected = [idx.lookup(int(t)) for t in targets]  # per-target search of the mapped bytes
        assert offsets.tolist() == [e.offset for e in expected]
        assert positions.tolist() == [e.position for e in expected]

    try:
        fill(idx, [(10 * i, 100 * i) for i in range(1, 41)])
        check()
        tree = idx._search_tree
        assert tree is not None and tree.tree is not None and tree.entries == 40
        check()
        assert idx._search_tree is tree  # unchanged index: the tree is reused
        fill(idx, [(10 * i, 100 * i) for i in range(41, 51)])
        check()
        assert idx._search_tree is not tree and idx._search_tree.entries == 50
        idx.truncate_to(205)
        fill(idx, [(205 + 5 * i, 7 * i) for i in range(30)])  # 50 entries again, other contents
        assert idx.entries == 50
        check()
        assert idx.lookup_many(np.array([230]))[1].tolist() == [35]
        idx.trim_to_valid_size()
        check()
        idx.reset()
        check()
        assert idx.lookup_many(targets)[0].tolist() == [0] * targets.size
    finally:
        idx.close()
    assert idx._search_tree is None  # closing drops the tree's memory


@settings(max_examples=80, deadline=None)
@given(
    prefix=st.integers(0, 5),
    steps=st.lists(st.tuples(st.integers(-2, 40), st.integers(-3, 5000)), max_size=40),
    slots=st.integers(1, 40),
    start=st.integers(-3, 3),
)
def test_append_many_equals_repeated_appends_or_writes_nothing(
    tmp_path_factory: pytest.TempPathFactory, prefix: int, steps: list[tuple[int, int]], slots: int, start: int
) -> None:
    """Bulk append writes exactly the bytes of single appends; on any error it writes nothing."""
    base = 1000
    offsets = list(itertools.accumulate((delta for delta, _ in steps), initial=base + start))[1:]
    positions = [position for _, position in steps]
    prefix = min(prefix, len(offsets))
    directory = tmp_path_factory.mktemp("bulk")
    with (
        OffsetIndex(directory / "one.index", base, 8 * slots) as one,
        OffsetIndex(directory / "many.index", base, 8 * slots) as many,
    ):
        pairs = list(zip(offsets, positions, strict=True))
        if check_bulk_append(one, many, pairs, prefix, fill, OffsetIndex.append_many):
            assert many.to_arrays()[0].tolist() == one.to_arrays()[0].tolist()
            assert many.last_offset == one.last_offset


def test_append_many_full_index_error_names_the_file(index: OffsetIndex) -> None:
    with pytest.raises(IndexFullError, match=r"full index \(size = 30\)") as info:
        index.append_many(np.arange(BASE, BASE + 31), np.arange(31))
    assert info.value.path == str(index.path.absolute())
    assert index.entries == 0
    with pytest.raises(ValueError, match="1-d arrays of one length"):
        index.append_many(np.arange(3), np.arange(2))
