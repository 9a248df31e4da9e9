"""AbstractIndex machinery: creation and opening rules, resize/trim/reset, read-only opening,
I/O error mapping, and the warm/cold search (results and the pages it touches)."""

from __future__ import annotations

import errno
import os
import stat
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from indexer import _index_kernels as kernels
from indexer import abstract_index
from indexer.abstract_index import plain_binary_search_slot_for, round_down_to_multiple
from indexer.errors import IndexOffsetOverflowError, StorageError
from indexer.offset_index import OffsetIndex, OffsetPosition
from indexer.time_index import TimeIndex

PAGE = 4096


def test_round_down_uses_java_truncating_division() -> None:
    assert round_down_to_multiple(67, 8) == 64
    assert round_down_to_multiple(-1, 8) == 0
    assert round_down_to_multiple(-9, 8) == -8
    assert round_down_to_multiple(10485760, 12) == 10485756


def test_new_file_is_preallocated_sparse_and_empty(tmp_path: Path) -> None:
    path = tmp_path / "0.index"
    with OffsetIndex(path, 0, 10 * 1024 * 1024) as idx:
        assert path.stat().st_size == 10485760
        assert idx.entries == 0 and idx.max_entries == 1310720 and idx.warm_entries == 1024
        assert idx.size_in_bytes == 0 and idx.length == 10485760
        assert path.stat().st_blocks * 512 < 1024 * 1024  # sparse, not written out
    assert path.stat().st_size == 0  # close() trims


def test_max_index_size_rounds_down(tmp_path: Path) -> None:
    with OffsetIndex(tmp_path / "0.index", 0, 67) as idx:
        assert idx.length == 64 and idx.max_entries == 8


def test_invalid_max_index_size_for_new_file_leaves_no_file(tmp_path: Path) -> None:
    path = tmp_path / "0.index"
    with pytest.raises(ValueError, match="Invalid max index size: 7"):
        OffsetIndex(path, 0, 7)
    assert not path.exists()
    with pytest.raises(ValueError, match="Invalid max index size: -1"):
        TimeIndex(path, 0)
    assert not path.exists()


def test_existing_file_counts_every_complete_slot(tmp_path: Path) -> None:
    """An un-trimmed index left by a crash: trailing zero slots are entries (reproduced exactly)."""
    path = tmp_path / "00000000000000000100.index"
    idx = OffsetIndex(path, 100, 8 * 10)
    idx.append(101, 0)
    idx.append(105, 4096)
    idx.close_handler()  # crash: nothing trimmed
    with OffsetIndex(path, 100, 8 * 10) as reopened:
        assert reopened.entries == 10 and reopened.max_entries == 10 and reopened.is_full()
        assert reopened.entry(9) == OffsetPosition(100, 0)
        assert reopened.last_offset == 100
        reopened.sanity_check()  # last offset == base: passes, as in Kafka
    assert path.stat().st_size == 80  # trimming to 10 entries keeps everything


def test_resize_trim_and_reset(tmp_path: Path) -> None:
    path = tmp_path / "0.index"
    with OffsetIndex(path, 0, 8 * 10) as idx:
        idx.append(1, 0)
        idx.append(2, 10)
        assert idx.resize(8 * 10) is False
        assert idx.resize(8 * 4 + 5) is True
        assert path.stat().st_size == 32 and idx.max_entries == 4
        assert idx.lookup(2) == OffsetPosition(2, 10)
        with pytest.raises(ValueError, match="holds 2 entries"):
            idx.resize(8)
        with pytest.raises(ValueError):
            idx.resize(-9)
        idx.trim_to_valid_size()
        assert path.stat().st_size == 16 and idx.is_full()
        idx.trim_to_valid_size()
        idx.reset()
        assert idx.entries == 0 and path.stat().st_size == 80 and idx.max_entries == 10
        idx.append(3, 0)
        assert idx.lookup(100) == OffsetPosition(3, 0)


def test_zero_length_file_opens_and_grows(tmp_path: Path) -> None:
    path = tmp_path / "0.index"
    path.write_bytes(b"")
    with OffsetIndex(path, 0, writable=False) as ro:
        assert ro.entries == 0 and ro.max_entries == 0 and ro.lookup(5) == OffsetPosition(0, 0)
        ro.sanity_check()
    with OffsetIndex(path, 0, 8 * 4) as idx:
        assert idx.is_full()
        idx.flush()
        idx.reset()  # grows to max_index_size
        assert path.stat().st_size == 32
        idx.append(1, 1)
        idx.truncate()
        assert idx.resize(0) is True  # back to an unmapped, empty file
        assert idx.lookup(1) == OffsetPosition(0, 0) and idx.lookup_many(np.array([1]))[0].tolist() == [0]


def test_delete_rename_and_update_parent_dir(tmp_path: Path) -> None:
    path = tmp_path / "0.index"
    idx = OffsetIndex(path, 0, 80)
    idx.append(1, 1)
    target = tmp_path / "0.index.deleted"
    idx.rename_to(target)
    assert idx.path == target and target.exists() and not path.exists()
    assert idx.lookup(1) == OffsetPosition(1, 1)  # the mapping survives the rename
    with pytest.raises(StorageError) as info:
        idx.rename_to(tmp_path / "missing-dir" / "0.index")
    assert info.value.errno == errno.ENOENT and info.value.path == str(target)
    assert idx.path == tmp_path / "missing-dir" / "0.index"  # updated even though the move failed
    idx.update_parent_dir(tmp_path)
    assert idx.path == tmp_path / "0.index"
    with pytest.raises(StorageError, match="No such file"):
        idx.rename_to(target)  # the file is still at target, so tmp_path/0.index is missing
    assert idx.path == target
    assert idx.delete_if_exists() is True
    assert idx.delete_if_exists() is False
    assert idx.is_closed


def test_relative_offset_and_can_append_offset(tmp_path: Path) -> None:
    with OffsetIndex(tmp_path / "0.index", 1000, 80) as idx:
        assert idx.relative_offset(1000) == 0
        assert idx.relative_offset(1000 + 2**31 - 1) == 2**31 - 1
        assert idx.can_append_offset(1000) and not idx.can_append_offset(999)
        assert not idx.can_append_offset(1000 + 2**31)
        with pytest.raises(IndexOffsetOverflowError) as info:
            idx.relative_offset(999)
        assert str(info.value) == f"Integer overflow for offset: 999 ({idx.path.absolute()})"
        assert info.value.offset == 999 and info.value.path == str(idx.path.absolute())


def test_read_only_missing_file_raises_storage_error_and_creates_nothing(tmp_path: Path) -> None:
    path = tmp_path / "0.index"
    with pytest.raises(StorageError) as info:
        OffsetIndex(path, 0, 80, writable=False)
    assert info.value.errno == errno.ENOENT and info.value.path == str(path)
    assert str(path) in str(info.value)
    assert not path.exists()


def test_read_only_open_of_unwritable_file_in_unwritable_dir(tmp_path: Path) -> None:
    """KAFKA-5104: read-only opening never creates, resizes or writes (checked by bytes and mtime,
    because as root the permissions alone are not enforced)."""
    directory = tmp_path / "t-0"
    directory.mkdir()
    path = directory / "00000000000000000010.index"
    with OffsetIndex(path, 10, 8 * 16) as idx:  # 16 slots, 3 used: close trims to 24 bytes
        for o in (11, 15, 20):
            idx.append(o, o * 100)
    untrimmed = directory / "00000000000000000010.timeindex"
    tidx = TimeIndex(untrimmed, 10, 12 * 8)
    tidx.maybe_append(1700000000000, 11)
    tidx.close_handler()  # untrimmed: 96 bytes
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    os.utime(untrimmed, ns=(1_000_000_000, 1_000_000_000))
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in (path, untrimmed)}
    os.chmod(path, 0o444)
    os.chmod(untrimmed, 0o444)
    os.chmod(directory, 0o555)
    try:
        with OffsetIndex(path, 10, 8 * 16, writable=False) as idx:
            assert not idx.writable and idx.entries == 3
            assert idx.lookup(16) == OffsetPosition(15, 1500)
            idx.sanity_check()
            idx.flush()  # nothing to write
            idx.trim_to_valid_size()  # no-op when read-only
            for mutate in (
                lambda: idx.append(30, 1),
                lambda: idx.resize(8),
                idx.reset,
                lambda: idx.truncate_to(11),
            ):
                with pytest.raises(ValueError, match="read-only"):
                    mutate()
        with TimeIndex(untrimmed, 10, 12 * 8, writable=False, whole_file=True) as tidx:
            assert tidx.entries == 8  # trailing zero slots counted, nothing trimmed on close
        with TimeIndex(untrimmed, 10, 12 * 8, writable=False) as tidx:
            assert tidx.entries == 1  # a reader maps only the slots before the zero tail
        assert not (directory / "00000000000000000099.index").exists()
        with pytest.raises(StorageError):
            OffsetIndex(directory / "00000000000000000099.index", 99, 80, writable=False)
        after = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in (path, untrimmed)}
        assert after == before
        assert sorted(p.name for p in directory.iterdir()) == sorted([path.name, untrimmed.name])
    finally:
        os.chmod(directory, 0o755)
        os.chmod(path, 0o644)
        os.chmod(untrimmed, 0o644)
    assert stat.S_IMODE(directory.stat().st_mode) == 0o755


@pytest.mark.parametrize(
    ("call", "err"),
    [
        ("ftruncate", errno.ENOSPC),
        ("open", errno.EACCES),
    ],
)
def test_os_errors_become_storage_errors_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: str, err: int
) -> None:
    path = tmp_path / "0.index"
    with OffsetIndex(path, 0, 80) as idx:

        def fail(*args: object, **kwargs: object) -> None:
            raise OSError(err, os.strerror(err))

        monkeypatch.setattr(abstract_index.os, call, fail)
        with pytest.raises(StorageError) as info:
            idx.resize(160)
        monkeypatch.undo()
        assert info.value.errno == err and info.value.path == str(path)
        assert str(path.absolute()) in str(info.value)
        assert idx.length == 80  # unchanged
        idx.append(1, 1)


def test_storage_error_on_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))

    monkeypatch.setattr(abstract_index.mmap, "mmap", fail)
    with pytest.raises(StorageError) as info:
        OffsetIndex(tmp_path / "0.index", 0, 80)
    assert info.value.errno == errno.EMFILE


# ---------------------------------------------------------------------------------- search


def build_offset_index(path: Path, rel_offsets: list[int], positions: list[int]) -> OffsetIndex:
    idx = OffsetIndex(path, 0, 8 * max(1, len(rel_offsets)))
    for o, p in zip(rel_offsets, positions, strict=True):
        idx.append(o, p)
    return idx


@settings(max_examples=80, deadline=None)
@given(
    gaps=st.lists(st.integers(1, 5), min_size=0, max_size=2500),
    data=st.data(),
)
def test_warm_cold_search_equals_plain_binary_search(
    tmp_path_factory: pytest.TempPathFactory, gaps: list[int], data: st.DataObject
) -> None:
    """Up to 2500 entries, so both the warm section (1024 slots) and the cold part are exercised."""
    offsets = np.cumsum(gaps).tolist() if gaps else []
    positions = [3 * o for o in offsets]
    path = tmp_path_factory.mktemp("search") / "0.index"
    idx = build_offset_index(path, offsets, positions)
    try:
        top = (offsets[-1] if offsets else 0) + 3
        targets = data.draw(st.lists(st.integers(-2, top), max_size=25)) + [-2, 0, top]
        if offsets:
            targets += [offsets[0], offsets[-1], offsets[max(0, len(offsets) - 1026)]]
        for t in targets:
            for by_value in (False, True):
                target = 3 * t if by_value else t
                values = positions if by_value else offsets
                llb = idx.largest_lower_bound_slot_for(target, by_value=by_value)
                sub = idx.smallest_upper_bound_slot_for(target, by_value=by_value)
                assert llb == plain_binary_search_slot_for(idx, target, by_value=by_value)
                assert sub == plain_binary_search_slot_for(idx, target, by_value=by_value, upper_bound=True)
                below = [i for i, v in enumerate(values) if v <= target]
                above = [i for i, v in enumerate(values) if v >= target]
                assert llb == (below[-1] if below else -1)
                expected_sub = above[0] if above else -1
                if values and target == values[0]:  # Kafka quirk, see test_smallest_upper_bound_of_first_entry
                    expected_sub = 1 if len(values) > 1 else -1
                assert sub == expected_sub
    finally:
        idx.close()


def test_smallest_upper_bound_of_first_entry_is_the_next_slot(tmp_path: Path) -> None:
    """Kafka quirk kept on purpose: an exact match on slot 0 is never compared in the cold binary
    search (its range starts there), so the smallest upper bound of entry 0's own key is slot 1, or
    -1 for a single entry. fetch_upper_bound_offset stays correct (it only needs *an* upper bound)."""
    idx = build_offset_index(tmp_path / "0.index", [5, 6, 7], [50, 60, 70])
    try:
        assert idx.smallest_upper_bound_slot_for(5) == 1
        assert idx.smallest_upper_bound_slot_for(6) == 1
        assert idx.smallest_upper_bound_slot_for(4) == 0
        assert idx.largest_lower_bound_slot_for(5) == 0
        assert idx.fetch_upper_bound_offset(OffsetPosition(0, 0), 50) == OffsetPosition(6, 60)
        idx.truncate_to(6)
        assert idx.smallest_upper_bound_slot_for(5) == -1
    finally:
        idx.close()


def probed_pages(trace: np.ndarray, entry_size: int) -> set[int]:
    count = int(trace[0])
    assert count < trace.size  # every probe recorded
    return {int(slot) * entry_size // PAGE for slot in trace[1 : count + 1]}


@pytest.mark.parametrize("index_class", [OffsetIndex, TimeIndex])
def test_warm_lookups_touch_only_the_tail_pages(tmp_path: Path, index_class: type) -> None:
    """The KAFKA-6432 property, deterministically: record which slots each strategy probes.

    For every target in the warm section the warm/cold search probes only slots of the last 8 KiB
    (at most 3 pages), while the plain binary search also probes slot 0 and the middle of the file.
    """
    n = 100_000
    path = tmp_path / ("0.index" if index_class is OffsetIndex else "0.timeindex")
    idx = index_class(path, 0, index_class.ENTRY_SIZE * (n + 1))
    for i in range(n):
        if index_class is OffsetIndex:
            idx.append(2 * i + 1, 10 * i)
        else:
            idx.maybe_append(1000 + 2 * i, 2 * i + 1)
    try:
        entry_size = index_class.ENTRY_SIZE
        first_hot = n - 1 - idx.warm_entries
        warm_pages = set(range(first_hot * entry_size // PAGE, (n * entry_size - 1) // PAGE + 1))
        assert len(warm_pages) <= 3
        plain_touched: set[int] = set()
        key = (lambda i: 2 * i + 1) if index_class is OffsetIndex else (lambda i: 1000 + 2 * i)
        for slot in range(first_hot + 1, n):
            for target in (key(slot), key(slot) + 1):
                warm_trace = np.zeros(64, np.int64)
                plain_trace = np.zeros(64, np.int64)
                warm = idx.largest_lower_bound_slot_for(target, trace=warm_trace)
                plain = plain_binary_search_slot_for(idx, target, trace=plain_trace)
                assert warm == plain == slot
                assert probed_pages(warm_trace, entry_size) <= warm_pages
                plain_touched |= probed_pages(plain_trace, entry_size)
        assert 0 in plain_touched and (n // 2) * entry_size // PAGE in plain_touched
        assert len(plain_touched - warm_pages) >= 5
        cold_trace = np.zeros(64, np.int64)
        assert idx.largest_lower_bound_slot_for(key(10), trace=cold_trace) == 10
        assert 0 in probed_pages(cold_trace, entry_size)  # cold lookups search from the start
    finally:
        idx.close()


def test_concurrent_lookups_during_appends_and_resizes(tmp_path: Path) -> None:
    """Lock-free readers racing a writer that appends and remaps: answers are always entries."""
    idx = OffsetIndex(tmp_path / "0.index", 0, 8 * 64)
    stop = threading.Event()
    errors: list[BaseException] = []
    reads = [0]

    def reader() -> None:
        try:
            while not stop.is_set():
                reads[0] += 1
                found = idx.lookup(10**6)
                assert found.offset == 0 or found.position == found.offset * 10
                offsets, positions = idx.lookup_many(np.arange(0, 3000, 7))
                assert ((offsets == 0) | (positions == offsets * 10)).all()
        except BaseException as e:  # noqa: BLE001 - handed to the main thread
            errors.append(e)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for i in range(1, 2000):
            if idx.is_full():
                idx.resize(idx.length * 2)
            idx.append(i, i * 10)
    finally:
        stop.set()
        for t in threads:
            t.join()
        idx.close()
    assert not errors, errors[0]
    assert reads[0] > 0


@pytest.mark.parametrize("n", [1, 8, 9, 64, 65, 1000])
def test_search_tree_layout(n: int) -> None:
    """Cache-line aligned nodes; each level holds every 8th key of the one below, padded to whole nodes."""
    keys = np.arange(n, dtype=np.int64) * 3 - 7
    tree, starts = kernels.build_search_tree(keys)
    fanout = kernels.SEARCH_FANOUT
    assert tree.ctypes.data % 64 == 0 and starts[0] == 0 and (starts % fanout == 0).all()
    level = keys
    for k, start in enumerate(starts.tolist()):
        end = starts[k + 1] if k + 1 < starts.size else tree.size
        assert tree[start : start + level.size].tolist() == level.tolist()
        assert (tree[start + level.size : end] == np.iinfo(np.int64).max).all()
        assert end - start == -(-level.size // fanout) * fanout
        level = level[::fanout]
    assert tree.size - starts[-1] == fanout  # the top level is one node


@settings(max_examples=80, deadline=None)
@given(
    keys=st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=700, unique=True).map(sorted),
    targets=st.lists(st.integers(-(2**63), 2**63 - 1), max_size=80),
)
def test_search_tree_floor_matches_searchsorted(keys: list[int], targets: list[int]) -> None:
    """Any strictly increasing int64 keys (the extremes included), any targets."""
    key_array = np.array(keys, dtype=np.int64)
    target_array = np.array(targets + keys[::5], dtype=np.int64)
    values = np.arange(key_array.size, dtype=np.int64) * 10
    tree, starts = kernels.build_search_tree(key_array)
    found_keys, found_values = kernels.floor_many_tree(tree, starts, values, target_array, -1, -2)
    slots = np.searchsorted(key_array, target_array, side="right") - 1
    assert found_keys.tolist() == np.where(slots >= 0, key_array[slots], -1).tolist()
    assert found_values.tolist() == np.where(slots >= 0, slots * 10, -2).tolist()


def test_search_tree_floor_split_over_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Large batches are cut into one slice per CPU; the slices' answers land in the right places."""
    monkeypatch.setattr(kernels, "_TARGETS_PER_THREAD", 100)
    monkeypatch.setattr(os, "cpu_count", lambda: 3)
    keys = np.arange(1, 5000, dtype=np.int64) * 5
    tree, starts = kernels.build_search_tree(keys)
    targets = np.random.default_rng(1).integers(-10, 30000, 1001)
    found_keys, found_values = kernels.floor_many_tree(tree, starts, keys * 2, targets, -1, -2)
    slots = np.searchsorted(keys, targets, side="right") - 1
    assert found_keys.tolist() == np.where(slots >= 0, keys[slots], -1).tolist()
    assert found_values.tolist() == np.where(slots >= 0, keys[slots] * 2, -2).tolist()


def test_read_only_reader_survives_the_writer_trimming_on_roll(tmp_path: Path) -> None:
    """A reader maps only the written entries of a live writer's pre-allocated index, so the trim
    on roll cannot leave it a mapping past the end of the file (SIGBUS on the next lookup)."""
    path = tmp_path / "00000000000000000000.index"
    writer = OffsetIndex(path, 0, 8 * 4096)
    for i in range(1, 100):
        writer.append(i * 10, i * 1000)
    with OffsetIndex(path, 0, writable=False) as reader:
        assert reader.entries == 99
        writer.trim_to_valid_size()  # the roll: the file shrinks to 99 entries
        assert reader.lookup(505) == OffsetPosition(500, 50000)
        assert reader.lookup(10**6) == OffsetPosition(990, 99000)
    writer.close()
