"""Scans read the ``.log`` with ``pread``: a writer's truncation never kills them.

The index job checks partitions another process writes (read-only, no lock), and ``seglog dump``
reads live logs. Mapped, a ``.log`` truncated underneath the header walk would fault with SIGBUS and
the daemon would die; ``FileRecords.scan`` reads chunks with ``pread`` (or hops from header to
header) and walks them with the kernel. The walk of any chunking equals one walk of the whole
range held in one buffer. The crash tests run the check in a subprocess and assert its exit code.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import indexer.records.file_records as file_records
from indexer.clock import MockClock
from indexer.config import LogConfig
from indexer.log import Log
from indexer.records.file_records import BatchScan, FileRecords

REPO = Path(__file__).resolve().parents[2]
T0 = 1_700_000_000_000
FIELDS = ("positions", "sizes", "base_offsets", "last_offsets", "max_timestamps", "magics", "attributes")


def sealed_segment(directory: Path, records: int, value_size: int) -> int:
    """A partition whose first segment is sealed; returns the second segment's base offset."""
    config = LogConfig.from_mapping({"segment.bytes": 1 << 30, "batch.size": 16 * 1024})
    with Log.open(directory, config, clock=MockClock(T0)) as log:
        sizes = np.random.default_rng(7).integers(1, value_size, records)
        log.append({"value": [b"x" * int(n) for n in sizes], "timestamp": [T0 + i for i in range(records)]})
        return log.roll().base_offset


def whole_walk(records: FileRecords, start: int = 0, end: int | None = None, *, verify_crc: bool) -> BatchScan:
    """The scan as one walk of the whole range in one buffer: one chunk larger than the file, no hops."""
    original = file_records.PREAD_SCAN_CHUNK_BYTES, file_records.PREAD_SCAN_HOP_MIN_BYTES
    file_records.PREAD_SCAN_CHUNK_BYTES = file_records.PREAD_SCAN_HOP_MIN_BYTES = 1 << 40
    try:
        return records.scan(start, end, verify_crc=verify_crc)
    finally:
        file_records.PREAD_SCAN_CHUNK_BYTES, file_records.PREAD_SCAN_HOP_MIN_BYTES = original


def same_scan(a: BatchScan, b: BatchScan) -> bool:
    return (
        all(np.array_equal(getattr(a, f), getattr(b, f)) for f in FIELDS)
        and a.valid_bytes == b.valid_bytes
        and str(a.error) == str(b.error)
    )


@pytest.fixture(scope="module")
def segment_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("scan") / "t-0"
    sealed_segment(directory, 3000, 4000)  # batches of 16 KiB, some records larger than a small chunk
    return directory / "00000000000000000000.log"


@settings(max_examples=25, deadline=None)
@given(
    chunk=st.integers(18, 300_000),
    hop=st.sampled_from([1, 15_000, file_records.PREAD_SCAN_HOP_MIN_BYTES]),
    start_batch=st.integers(0, 20),
    tail=st.sampled_from([b"", b"\x00" * 5, b"\x00" * 40, (10**6).to_bytes(12, "big") + b"\x00" * 60]),
    verify_crc=st.booleans(),
    short_of_a_batch_end=st.sampled_from([0, 1, 60, 61, 62]),
)
def test_the_scan_equals_one_walk_of_the_whole_range(
    segment_log: Path,
    tmp_path_factory: pytest.TempPathFactory,
    chunk: int,
    hop: int,
    start_batch: int,
    tail: bytes,
    verify_crc: bool,
    short_of_a_batch_end: int,
) -> None:
    """Any chunk size (smaller than one batch too), header hops over batches of any size, any start,
    torn or garbage tails, a range ending at or just short of a batch's end (a fetch's slice): the
    same arrays, valid bytes and error as one walk of the whole range."""
    path = tmp_path_factory.mktemp("tail") / "00000000000000000000.log"
    path.write_bytes(segment_log.read_bytes() + tail)
    original = file_records.PREAD_SCAN_CHUNK_BYTES, file_records.PREAD_SCAN_HOP_MIN_BYTES
    file_records.PREAD_SCAN_CHUNK_BYTES, file_records.PREAD_SCAN_HOP_MIN_BYTES = chunk, hop
    try:
        with FileRecords.open(path, mutable=False) as records:
            whole = whole_walk(records, verify_crc=verify_crc)
            start = int(whole.positions[min(start_batch, len(whole) - 1)])
            assert same_scan(records.scan(verify_crc=verify_crc), whole)
            assert same_scan(
                records.scan(start, verify_crc=verify_crc), whole_walk(records, start, verify_crc=verify_crc)
            )
            end = int(whole.positions[-1] + whole.sizes[-1]) - short_of_a_batch_end
            assert same_scan(
                records.scan(start, end, verify_crc=verify_crc), whole_walk(records, start, end, verify_crc=verify_crc)
            )
    finally:
        file_records.PREAD_SCAN_CHUNK_BYTES, file_records.PREAD_SCAN_HOP_MIN_BYTES = original


def test_large_batches_are_walked_header_to_header(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without CRCs, v2 batches of ``PREAD_SCAN_HOP_MIN_BYTES`` or more (here 64 KiB, as a producer's
    ``batch.size``) cost one 61-byte read each, not their bytes."""
    directory = tmp_path / "t-0"
    config = LogConfig.from_mapping({"batch.size": 1 << 16})
    with Log.open(directory, config, clock=MockClock(T0)) as log:
        log.append({"value": [b"y" * 4000] * 8000, "timestamp": [T0] * 8000})
    path = directory / "00000000000000000000.log"
    read: list[int] = []
    preadv = file_records.os.preadv

    def counting(fd: int, buffers: list, position: int) -> int:
        got = preadv(fd, buffers, position)
        read.append(got)
        return got

    monkeypatch.setattr(file_records.os, "preadv", counting)
    with FileRecords.open(path, mutable=False) as records:
        scan = records.scan(verify_crc=False)
    assert path.stat().st_size > 30 << 20 and sum(read) < 10 << 20
    with FileRecords.open(path, mutable=False) as records:
        assert same_scan(scan, whole_walk(records, verify_crc=False))


def test_the_scan_reports_a_corrupt_entry_as_one_walk_of_the_whole_file(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    sealed_segment(directory, 500, 2000)
    path = directory / "00000000000000000000.log"
    with FileRecords.open(path, mutable=False) as records:
        middle = int(records.scan(verify_crc=False).positions[5])
    data = bytearray(path.read_bytes())
    data[middle + 100] ^= 0xFF  # a bad CRC
    data[middle + 8 : middle + 12] = (3).to_bytes(4, "big")  # and the next walk stops at a bad size
    path.write_bytes(bytes(data))
    with FileRecords.open(path, mutable=False) as records:
        for verify in (True, False):
            whole, read = whole_walk(records, verify_crc=verify), records.scan(verify_crc=verify)
            assert whole.error is not None and same_scan(read, whole)


def run_child(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )


TRUNCATE_DURING_THE_WALK = """
    import os, sys
    from pathlib import Path
    from indexer import index_check
    from indexer.records import _batch_scan

    directory, following = Path(sys.argv[1]), int(sys.argv[2])
    log_path = directory / "00000000000000000000.log"
    walk, hop = _batch_scan.scan_entries, _batch_scan.hop_v2_headers

    def truncating(kernel):
        def walk_after_a_cut(*args):
            os.truncate(log_path, 100)  # the writer truncates below its active segment, mid-check
            return kernel(*args)
        return walk_after_a_cut

    _batch_scan.scan_entries, _batch_scan.hop_v2_headers = truncating(walk), truncating(hop)
    try:
        index_check.segment_index_problem(directory, 0, next_base_offset=following, against_log=True)
        print("checked")
    except FileNotFoundError as e:
        print("skipped:", e)
"""


def test_a_truncation_during_the_header_walk_voids_the_check_without_a_crash(tmp_path: Path) -> None:
    """Deterministic: the ``.log`` is cut to 100 bytes right before a kernel walks its bytes (or
    hops over its headers). A mapped walk dies of SIGBUS here (exit code -7); the pread walk skips
    the segment this round."""
    directory = tmp_path / "t-0"
    following = sealed_segment(directory, 3000, 4000)
    done = run_child(TRUNCATE_DURING_THE_WALK, str(directory), str(following))
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.startswith("skipped:") and "changed while it was checked" in done.stdout


CONCURRENT_TRUNCATION = """
    import json, os, sys, threading, time
    from pathlib import Path
    from indexer.config import LogConfig
    from maintenance.metadata import index_problems, scan_partition

    directory = Path(sys.argv[1])
    log_path = directory / "00000000000000000000.log"
    size = os.path.getsize(log_path)
    stop = threading.Event()

    def writer():  # another process's writer truncating its sealed segment, step by step, then deleting it
        for k in range(1, 200):
            if stop.is_set():
                return
            os.truncate(log_path, size - k * size // 200)
            time.sleep(0.002)
        os.unlink(log_path)

    thread = threading.Thread(target=writer)
    thread.start()
    outcomes = {"problem": 0, "clean or skipped": 0}  # skipped: the .log changed during the check
    try:
        while thread.is_alive():
            meta = scan_partition(directory, LogConfig(), log_start_offset=0, high_watermark=0)
            problems = index_problems(meta)
            outcomes["problem" if problems else "clean or skipped"] += 1
    finally:
        stop.set()
        thread.join()
    print(json.dumps(outcomes))
"""


def test_the_index_check_beside_a_writer_truncating_its_log_never_crashes(tmp_path: Path) -> None:
    """Real concurrency: the index job's check of a partition another process writes
    (``maintenance.metadata.index_problems``) runs in a loop while the ``.log`` shrinks under it."""
    directory = tmp_path / "t-0"
    sealed_segment(directory, 6000, 4000)
    done = run_child(CONCURRENT_TRUNCATION, str(directory))
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    outcomes = json.loads(done.stdout)
    assert outcomes["problem"] > 0  # the index points past the shrunken log: reported, not crashed on
