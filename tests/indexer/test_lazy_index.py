"""LazyIndex: nothing touches the file before get(); get() is a thread-safe one-time open."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from indexer.errors import StorageError
from indexer.lazy_index import LazyIndex
from indexer.offset_index import OffsetIndex, OffsetPosition
from indexer.time_index import TimeIndex, TimestampOffset


def test_close_of_never_loaded_index_creates_nothing(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    lazy = LazyIndex.for_offset(path, 0, 1024)
    assert not lazy.is_loaded and lazy.path == path
    lazy.close()
    lazy.close_handler()
    assert not path.exists() and not lazy.is_loaded


def test_get_creates_and_preallocates_then_delegates(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.index"
    lazy = LazyIndex.for_offset(path, 100, 1024)
    index = lazy.get()
    assert isinstance(index, OffsetIndex) and lazy.is_loaded and lazy.get() is index
    assert path.stat().st_size == 1024
    index.append(105, 0)
    lazy.close()
    assert path.stat().st_size == 8
    assert index.is_closed


def test_for_time(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.timeindex"
    lazy = LazyIndex.for_time(path, 0, 12 * 10)
    index = lazy.get()
    assert isinstance(index, TimeIndex)
    index.maybe_append(1700000000000, 5)
    assert lazy.get().lookup(1700000000001) == TimestampOffset(1700000000000, 5)
    lazy.close()
    assert path.read_bytes() == bytes.fromhex("0000018bcfe56800 00000005")


def test_read_only_lazy_index_of_missing_file_fails_on_get_only(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    lazy = LazyIndex.for_offset(path, 0, 1024, writable=False)
    lazy.close()
    with pytest.raises(StorageError):
        lazy.get()
    assert not path.exists() and not lazy.is_loaded


def test_rename_before_load_tolerates_missing_source(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    lazy = LazyIndex.for_offset(path, 0, 1024)
    target = tmp_path / "00000000000000000000.index.deleted"
    lazy.rename_to(target)
    assert lazy.path == target and not target.exists()
    assert lazy.delete_if_exists() is False


def test_rename_before_and_after_load_moves_the_file(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    with OffsetIndex(path, 0, 80) as idx:
        idx.append(3, 30)
    lazy = LazyIndex.for_offset(path, 0, 80)
    swap = tmp_path / "00000000000000000000.index.swap"
    lazy.rename_to(swap)
    assert swap.exists() and not path.exists()
    assert lazy.get().lookup(3) == OffsetPosition(3, 30)
    lazy.rename_to(path)
    assert lazy.path == path and path.exists() and lazy.get().path == path
    with pytest.raises(StorageError):
        lazy.rename_to(tmp_path / "no-such-dir" / "x.index")
    lazy.close()


def test_rename_before_load_reports_other_errors(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    path.write_bytes(b"")
    lazy = LazyIndex.for_offset(path, 0, 80)
    with pytest.raises(StorageError) as info:
        lazy.rename_to(tmp_path / "no-such-dir" / "x.index")
    assert info.value.path == str(path)
    assert lazy.path == tmp_path / "no-such-dir" / "x.index"


def test_update_parent_dir_and_delete(tmp_path: Path) -> None:
    old_dir, new_dir = tmp_path / "t-0", tmp_path / "t-0.abc-delete"
    old_dir.mkdir()
    path = old_dir / "00000000000000000000.index"
    path.write_bytes(bytes(16))
    lazy = LazyIndex.for_offset(path, 0, 80)
    old_dir.rename(new_dir)
    lazy.update_parent_dir(new_dir)
    assert lazy.path == new_dir / path.name
    assert lazy.delete_if_exists() is True and not lazy.path.exists()

    other = LazyIndex.for_offset(new_dir / "00000000000000000050.index", 50, 80)
    other.get()
    other.update_parent_dir(old_dir)
    assert other.path == old_dir / "00000000000000000050.index"
    other.update_parent_dir(new_dir)
    assert other.delete_if_exists() is True and other.get().is_closed


def test_close_handler_after_load_unmaps_without_trimming(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    lazy = LazyIndex.for_offset(path, 0, 80)
    lazy.get().append(1, 1)
    lazy.close_handler()
    assert path.stat().st_size == 80
    with pytest.raises(ValueError, match="closed"):
        lazy.get().lookup(1)


def test_concurrent_get_opens_once(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    opened: list[int] = []

    def factory(p: Path) -> OffsetIndex:
        opened.append(1)
        return OffsetIndex(p, 0, 80)

    lazy: LazyIndex[OffsetIndex] = LazyIndex(path, factory)
    start = threading.Barrier(8)
    results: list[OffsetIndex] = []

    def worker() -> None:
        start.wait()
        results.append(lazy.get())

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(opened) == 1 and len({id(r) for r in results}) == 1
    lazy.close()
