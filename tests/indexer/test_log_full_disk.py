"""A log on a real full disk (a tmpfs made full, ``tiny_fs``): appends, rolls and closes that run out
of space fail with a :class:`StorageError` naming the file, leave the log as it was, and the log goes
on once space is freed: every committed record readable exactly once, in order."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from indexer.config import LogConfig, load_settings
from indexer.errors import StorageError
from indexer.log import Log
from indexer.log_manager import LogManager
from tests.filesystems import TinyFs

REPO = Path(__file__).resolve().parents[2]
TS = 1_700_000_000_000


Record = tuple[int, bytes, bytes, int, bytes]  # offset, key, value, timestamp, header "h"


def _rows(tag: str, n: int = 10, size: int = 500) -> list[dict[str, object]]:
    """``n`` records of ``size``-byte values, keys ``<tag>-<i>``, a header ``h`` = ``tag``."""
    return [
        {
            "key": f"{tag}-{i}".encode(),
            "value": bytes([i]) * size,
            "timestamp": TS + i,
            "headers": [("h", tag.encode())],
        }
        for i in range(n)
    ]


def _committed(log: Log) -> list[Record]:
    """Every record up to the high watermark."""
    table = log.read_records(log.log_start_offset)
    return [(r["offset"], r["key"], r["value"], r["timestamp"], r["headers"][0]["value"]) for r in table.to_pylist()]


def _expected(*tags: str) -> list[Record]:
    """The records of ``_rows(tag)`` for each tag, at consecutive offsets from 0."""
    return [
        (n, f"{tag}-{i}".encode(), bytes([i]) * 500, TS + i, tag.encode())
        for n, (tag, i) in enumerate((tag, i) for tag in tags for i in range(10))
    ]


def test_a_roll_on_a_full_disk_is_a_storage_error_not_a_bus_error(tiny_fs: TinyFs) -> None:
    """A segment of one batch has no time-index entry yet; sealing it on roll writes its final entry
    into a page of the pre-allocated (sparse) time index that the full disk cannot give. Written
    through the memory map, that store killed the process with SIGBUS (so a child process runs it)."""
    script = textwrap.dedent(
        f"""
        from pathlib import Path
        from indexer.config import LogConfig
        from indexer.errors import StorageError
        from indexer.log import Log
        from tests.filesystems import TinyFs
        from tests.indexer.test_log_full_disk import _committed, _expected, _rows

        fs = TinyFs(Path({str(tiny_fs.path)!r}))
        log = Log.open(fs.path / "t-0", LogConfig.from_mapping({{"segment.bytes": 6000}}))
        log.append(_rows("a"))
        log.update_high_watermark(log.log_end_offset)
        fs.fill()
        try:
            log.append(_rows("b"))  # rolls first
        except StorageError as e:
            print("failed:", e)
        fs.free()
        log.append(_rows("c"))
        log.update_high_watermark(log.log_end_offset)
        assert _committed(log) == _expected("a", "c"), _committed(log)
        log.close()
        print("ok")
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    assert "failed:" in done.stdout and "No space left on device" in done.stdout and "ok" in done.stdout


@pytest.mark.parametrize("leave_pages", [1, 2], ids=["offset-index-full", "time-index-full"])
def test_an_append_whose_index_entry_finds_no_space_is_undone(tiny_fs: TinyFs, leave_pages: int) -> None:
    """The `.log` bytes of an append fit, its first index entry in a segment does not (the index
    files are pre-allocated sparse, so their first entry needs a block): the append fails and leaves
    nothing behind. Before, the batch stayed in the `.log` at offsets the log end offset did not
    count, so the next append wrote the same offsets again (a read of them returned the failed
    append's records), or the half-written index refused every later append."""
    log = Log.open(tiny_fs.path / "t-0", LogConfig.from_mapping({"index.interval.bytes": 1}))
    try:
        log.append(_rows("a"))  # the segment's first batch: no index entry
        log.update_high_watermark(log.log_end_offset)
        size = log.active_segment.size
        tiny_fs.fill(leave=leave_pages * 4096)  # the .log's next pages fit, then 0 or 1 index page
        with pytest.raises(StorageError, match="No space left on device") as info:
            log.append(_rows("b"))
        assert str(info.value.path).endswith((".index", ".timeindex"))
        assert log.log_end_offset == 10 and log.active_segment.size == size
        assert os.path.getsize(log.active_segment.log.path) == size
        assert (log.active_segment.offset_index.entries, log.active_segment.time_index.entries) == (0, 0)
        tiny_fs.free()
        log.append(_rows("c"))
        log.update_high_watermark(log.log_end_offset)
        assert _committed(log) == _expected("a", "c")
        assert (log.active_segment.offset_index.entries, log.active_segment.time_index.entries) == (1, 1)
    finally:
        log.close()
    reopened = Log.open(tiny_fs.path / "t-0", LogConfig.from_mapping({}), had_clean_shutdown=False)
    try:
        reopened.update_high_watermark(reopened.log_end_offset)
        assert _committed(reopened) == _expected("a", "c")
    finally:
        reopened.close()


def test_opening_a_crashed_log_on_a_full_disk_is_not_a_bus_error(tiny_fs: TinyFs) -> None:
    """A writer that dies leaves its active segment's index files at their pre-allocated size, a
    sparse tail of holes. On tmpfs a read through a mapping allocates the page it touches, so with
    the disk full the validator (which read every slot through a map) and the loader (which read
    the last slot of a reopened index through its map) killed the process with SIGBUS: recovery,
    its dry run and the maintenance jobs could not run until space was freed."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    crash = textwrap.dedent(
        f"""
        import os
        from pathlib import Path
        from indexer.config import LogConfig
        from indexer.log import Log
        from tests.indexer.test_log_full_disk import _rows

        log = Log.open(Path({str(tiny_fs.path / "t-0")!r}), LogConfig.from_mapping({{"index.interval.bytes": 1}}))
        log.append(_rows("a"))
        log.append(_rows("b"))
        log.flush()
        os._exit(0)  # the writer dies: nothing trimmed
        """
    )
    done = subprocess.run([sys.executable, "-c", crash], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert os.path.getsize(tiny_fs.path / "t-0" / "00000000000000000000.index") > 1 << 20  # pre-allocated
    tiny_fs.fill()
    check = textwrap.dedent(
        f"""
        from pathlib import Path
        from indexer.config import LogConfig
        from indexer.log import Log
        from indexer.log_loader import LogLoader
        from tests.indexer.test_log_full_disk import _committed, _expected

        directory, config = Path({str(tiny_fs.path / "t-0")!r}), LogConfig.from_mapping({{}})
        report = LogLoader(directory, config, had_clean_shutdown=False).check()  # a dry run
        assert report.next_offset == 20, report
        log = Log.open(directory, config)  # recovers
        log.update_high_watermark(log.log_end_offset)
        assert _committed(log) == _expected("a", "b")
        print("ok")
        """
    )
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0 and "ok" in done.stdout, (done.returncode, done.stdout, done.stderr[-2000:])


def test_a_checkpoint_the_full_disk_refuses_leaves_no_temporary_file(tiny_fs: TinyFs) -> None:
    """Every file seglog replaces is written to a temporary file that is renamed over it. When the
    disk refuses the write, the temporary file is deleted: before, each checkpoint's ``.tmp`` stayed
    in the log directory (holding the pages it got), and the clean-shutdown marker's, named after the
    process, was never replaced by a later write."""
    log_dir = tiny_fs.path / "logs"
    settings = load_settings()
    with LogManager(log_dir, settings) as logs:
        log = logs.get_or_create_log("t", 0)
        log.append(_rows("a"))
        log.flush()
        log.update_high_watermark(log.log_end_offset)
        tiny_fs.fill()
        with pytest.raises(StorageError, match="No space left on device"):
            logs.close()
    assert sorted(p.name for p in log_dir.iterdir() if p.name.endswith(".tmp")) == []
    tiny_fs.free()
    with LogManager(log_dir, settings) as logs:
        log = logs.get_or_create_log("t", 0)
        log.update_high_watermark(log.log_end_offset)  # (its checkpoint was refused)
        assert _committed(log) == _expected("a")
    assert sorted(p.name for p in log_dir.iterdir() if p.name.endswith(".tmp")) == []
