"""FileRecords: broker-written files end to end, appends and reads, the vectorised scan, corruption."""

from __future__ import annotations

import errno
import os
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from indexer.errors import CorruptRecordError, StorageError
from indexer.records import _batch_scan
from indexer.records import file_records as file_records_module
from indexer.records.batch_header import CONTROL_FLAG_MASK, NO_TIMESTAMP
from indexer.records.file_records import MAX_FILE_SIZE, FileRecords, LogOffsetPosition
from tests.kafka_python import DefaultRecordBatchBuilder, LegacyRecordBatchBuilder, MemoryRecords

TS = 1_700_000_000_000
VECTOR_SETS = [
    "multi-segment-3x",
    "gzip-large-records",
    "snappy-headers",
    "transactions-commit",
    "mixed-codecs-epochs",
]


def v2_batch(base_offset: int, count: int = 3, *, compression: int = 0, value_size: int = 20) -> bytes:
    """A v2 batch written by kafka-python (an independent producer), offsets base_offset..+count-1."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for i in range(count):
        builder.append(
            i,
            timestamp=TS + base_offset + i,
            key=b"k%d" % i,
            value=bytes([65 + i % 26]) * value_size,
            headers=[],
        )
    data = bytearray(builder.build())
    data[0:8] = struct.pack(">q", base_offset)  # the base offset is not covered by the CRC
    return bytes(data)


def legacy_messages(magic: int, codec: int, first_offset: int, count: int = 3) -> bytes:
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 20)
    for i in range(count):
        offset = i if (magic == 1 and codec) else first_offset + i
        builder.append(offset, timestamp=TS + first_offset + i, key=None, value=b"legacy-%d" % i)
    data = bytearray(builder.build())
    if codec:
        data[0:8] = struct.pack(">q", first_offset + count - 1)
    return bytes(data)


def write_log(path: Path, batches: list[bytes]) -> FileRecords:
    records = FileRecords.open(path, file_already_exists=False)
    for batch in batches:
        records.append(batch)
    return records


@pytest.fixture
def ten_batches(tmp_path: Path) -> tuple[Path, list[bytes]]:
    batches = [v2_batch(10 * i, count=1 + i % 4, compression=i % 4, value_size=30 + 7 * i) for i in range(10)]
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"".join(batches))
    return path, batches


def ends(batches: list[bytes]) -> list[int]:
    return np.cumsum([len(b) for b in batches]).tolist()


# ---- broker-written files ----------------------------------------------------------------------


@pytest.mark.parametrize("vector_set", VECTOR_SETS)
def test_broker_written_logs_iterate_to_the_end(vectors_dir: Path, vector_set: str) -> None:
    """batches() and scan() agree with kafka-python on every .log: count, offsets, CRCs, timestamps."""
    logs = sorted((vectors_dir / vector_set).glob("*/*.log"))
    assert logs
    total_batches = 0
    for log in logs:
        data = log.read_bytes()
        expected = list(MemoryRecords(data))
        with FileRecords.open(log, mutable=False) as records:  # files and dirs are read-only
            scan = records.scan()
            batches = list(records.batches())
            assert scan.error is None, log
            assert scan.valid_bytes == records.size_in_bytes() == len(data)
            assert len(batches) == len(scan) == len(expected)
            assert [b.position for b in batches] == scan.positions.tolist()
            assert [b.size_in_bytes for b in batches] == scan.sizes.tolist() == [e.size_in_bytes for e in expected]
            assert [b.base_offset for b in batches] == scan.base_offsets.tolist()
            assert scan.base_offsets.tolist() == [e.base_offset for e in expected]
            assert [b.last_offset for b in batches] == scan.last_offsets.tolist()
            assert scan.last_offsets.tolist() == [e.last_offset for e in expected]
            assert scan.max_timestamps.tolist() == [e.max_timestamp for e in expected]
            assert [b.crc for b in batches] == [e.crc for e in expected]
            assert all(e.validate_crc() for e in expected)
            assert all(b.is_valid() for b in batches)
            assert [b.is_control for b in batches] == [e.is_control_batch for e in expected]
            assert [b.producer_id for b in batches] == [e.producer_id for e in expected]
        total_batches += len(expected)
    assert total_batches > 0


def test_hardware_and_python_crc_paths_agree(
    vectors_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compiled hardware CRC loop and the per-batch Python fallback find the same batches and errors."""
    data = bytearray((vectors_dir / "multi-segment-3x/invoice-0/00000000000000000000.log").read_bytes())
    clean = tmp_path / "clean.log"
    clean.write_bytes(bytes(data))
    data[len(data) // 2] ^= 0x10
    flipped = tmp_path / "flipped.log"
    flipped.write_bytes(bytes(data))
    results = []
    for hardware in (True, False):
        monkeypatch.setattr(_batch_scan, "HARDWARE_CRC32C", hardware and _batch_scan.HARDWARE_CRC32C)
        with FileRecords.open(clean, mutable=False) as a, FileRecords.open(flipped, mutable=False) as b:
            ok, bad = a.scan(), b.scan()
        assert ok.error is None and bad.error is not None
        results.append((ok.positions.tolist(), bad.valid_bytes, bad.error.position, str(bad.error)))
    assert results[0] == results[1]


# ---- appends, reads, sizes ---------------------------------------------------------------------


def test_append_accepts_bytes_views_and_arrays(tmp_path: Path) -> None:
    a, b, c = v2_batch(0), v2_batch(3), v2_batch(6)
    with write_log(tmp_path / "x.log", []) as records:
        assert records.append(a) == len(a)
        assert records.append(memoryview(b)) == len(b)
        assert records.append(np.frombuffer(c, dtype=np.uint8)) == len(c)
        assert records.size_in_bytes() == len(a + b + c)
        assert records.read(0, 10_000) == a + b + c
        assert records.read(len(a), len(b)) == b
        assert records.read(len(a + b + c) - 5, 100) == c[-5:]  # short at the end
        assert records.read(10_000, 10) == b""
        with pytest.raises(ValueError):
            records.read(-1, 10)
        assert [x.last_offset for x in records.batches()] == [2, 5, 8]


def test_append_refuses_to_pass_int32_positions(tmp_path: Path) -> None:
    with write_log(tmp_path / "x.log", []) as records:
        records._size = MAX_FILE_SIZE - 10  # pretend the file is almost 2 GiB
        with pytest.raises(ValueError, match="too large for segment"):
            records.append(b"x" * 11)
        records._size = 0


def test_preallocated_file_has_a_logical_size(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.log"
    records = FileRecords.open(path, file_already_exists=False, preallocate=True, init_file_size=1 << 20)
    assert (records.size_in_bytes(), path.stat().st_size) == (0, 1 << 20)
    batch = v2_batch(0)
    records.append(batch)
    records.append(batch)
    assert (records.size_in_bytes(), path.stat().st_size) == (2 * len(batch), 1 << 20)
    assert len(list(records.batches())) == 2
    assert records.scan().valid_bytes == 2 * len(batch)
    with pytest.raises(StorageError) as info:  # preallocation creates a new file
        FileRecords.open(path, file_already_exists=False, preallocate=True, init_file_size=1 << 20)
    assert info.value.errno == errno.EEXIST
    # Reopened before trimming (a crash): the zero tail reads as a size-0 entry -> corrupt.
    with FileRecords.open(path, mutable=False) as crashed:
        scan = crashed.scan()
        assert scan.valid_bytes == 2 * len(batch)
        assert isinstance(scan.error, CorruptRecordError)
        assert scan.error.position == 2 * len(batch)
    records.close()  # flush + trim to the logical size
    assert path.stat().st_size == 2 * len(batch)


def test_reopen_existing_file(ten_batches: tuple[Path, list[bytes]]) -> None:
    path, batches = ten_batches
    with FileRecords.open(path) as records:
        assert records.size_in_bytes() == sum(map(len, batches))
        records.append(v2_batch(100))
        assert [b.base_offset for b in records.batches()][-1] == 100


# ---- scan and batches ----------------------------------------------------------------------------


def test_scan_arrays(ten_batches: tuple[Path, list[bytes]]) -> None:
    path, batches = ten_batches
    with FileRecords.open(path, mutable=False) as records:
        scan = records.scan()
    expected = list(MemoryRecords(b"".join(batches)))
    assert scan.error is None
    assert scan.valid_bytes == path.stat().st_size
    assert scan.positions.tolist() == [0, *ends(batches)[:-1]]
    assert scan.sizes.tolist() == [len(b) for b in batches]
    assert scan.base_offsets.tolist() == [10 * i for i in range(10)]
    assert scan.last_offsets.tolist() == [e.last_offset for e in expected]
    assert scan.max_timestamps.tolist() == [e.max_timestamp for e in expected]
    assert scan.magics.tolist() == [2] * 10
    assert (scan.attributes & 7).tolist() == [i % 4 for i in range(10)]
    for array in (scan.positions, scan.sizes, scan.base_offsets, scan.last_offsets, scan.max_timestamps):
        assert array.dtype == np.int64


def test_scan_and_batches_of_a_range(ten_batches: tuple[Path, list[bytes]]) -> None:
    path, batches = ten_batches
    bounds = ends(batches)
    with FileRecords.open(path, mutable=False) as records:
        scan = records.scan(bounds[2], bounds[6])
        assert scan.positions.tolist() == bounds[2:6]
        assert scan.valid_bytes == bounds[6]
        assert [b.position for b in records.batches(bounds[2], bounds[6])] == bounds[2:6]
        assert len(records.scan(bounds[9])) == 0
        assert records.scan(bounds[9]).valid_bytes == bounds[9]


def test_empty_file(tmp_path: Path) -> None:
    with write_log(tmp_path / "x.log", []) as records:
        scan = records.scan()
        assert (len(scan), scan.valid_bytes, scan.error) == (0, 0, None)
        assert list(records.batches()) == []
        assert records.search_for_offset_with_size(0, 0) is None


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(min_value=0, max_value=10_000))
def test_torn_tail_ends_silently(tmp_path_factory: pytest.TempPathFactory, cut: int) -> None:
    """A file cut anywhere holds exactly the batches that end before the cut; no error (spec 3.7)."""
    batches = [v2_batch(3 * i, value_size=50 + i) for i in range(40)]
    data = b"".join(batches)
    cut = cut % (len(data) + 1)
    path = tmp_path_factory.mktemp("torn") / "0.log"
    path.write_bytes(data[:cut])
    complete = [e for e in ends(batches) if e <= cut]
    with FileRecords.open(path, mutable=False) as records:
        scan = records.scan()
        assert scan.error is None
        assert scan.valid_bytes == (complete[-1] if complete else 0)
        assert len(scan) == len(complete)
        assert [b.position + b.size_in_bytes for b in records.batches()] == complete


def test_size_below_14_is_corrupt(ten_batches: tuple[Path, list[bytes]]) -> None:
    path, batches = ten_batches
    end = path.stat().st_size
    with path.open("ab") as f:
        f.write(struct.pack(">qi", 77, 13) + bytes(30))
    with FileRecords.open(path, mutable=False) as records:
        scan = records.scan()
        assert isinstance(scan.error, CorruptRecordError)
        assert str(scan.error) == f"Found record size 13 smaller than minimum record overhead (14) in file {path}."
        assert (scan.error.position, scan.error.path, scan.valid_bytes, len(scan)) == (
            end,
            str(path),
            end,
            10,
        )
        with pytest.raises(CorruptRecordError, match="Found record size 13") as info:
            list(records.batches())
        assert info.value.position == end


def test_garbage_with_a_huge_size_is_a_partial_entry(ten_batches: tuple[Path, list[bytes]]) -> None:
    path, _ = ten_batches
    end = path.stat().st_size
    with path.open("ab") as f:
        f.write(struct.pack(">qi", 0, 1_000_000) + os.urandom(100))
    with FileRecords.open(path, mutable=False) as records:
        scan = records.scan()
        assert (scan.error, scan.valid_bytes) == (None, end)
        assert len(list(records.batches())) == 10


def test_garbage_that_fits_fails_its_crc(ten_batches: tuple[Path, list[bytes]]) -> None:
    path, _ = ten_batches
    end = path.stat().st_size
    with path.open("ab") as f:
        f.write(struct.pack(">qiib", 500, 100, 0, 2) + bytes(100 - 5))
    with FileRecords.open(path, mutable=False) as records:
        scan = records.scan()
        assert isinstance(scan.error, CorruptRecordError)
        assert "stored crc = 0" in str(scan.error)
        assert (scan.error.position, scan.error.offset, scan.valid_bytes) == (end, 500, end)
        assert records.scan(verify_crc=False).valid_bytes == end + 112
        last = list(records.batches())[-1]
        assert not last.is_valid()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(index=st.integers(0, 9), where=st.floats(0, 1, exclude_max=True), bit=st.integers(0, 7))
def test_bit_flip_under_the_crc_stops_the_scan(
    tmp_path_factory: pytest.TempPathFactory, index: int, where: float, bit: int
) -> None:
    batches = [v2_batch(10 * i, count=2, compression=i % 3, value_size=40) for i in range(10)]
    data = bytearray(b"".join(batches))
    position = ([0, *ends(batches)])[index]
    flip = position + 21 + int(where * (len(batches[index]) - 21))
    data[flip] ^= 1 << bit
    path = tmp_path_factory.mktemp("flip") / "0.log"
    path.write_bytes(bytes(data))
    with FileRecords.open(path, mutable=False) as records:
        scan = records.scan()
        assert isinstance(scan.error, CorruptRecordError)
        assert (scan.error.position, scan.error.offset) == (position, 10 * index)
        assert (scan.valid_bytes, len(scan)) == (position, index)
        bad = list(records.batches())[index]
        assert not bad.is_valid()
        with pytest.raises(CorruptRecordError, match=f"at position {position}"):
            bad.ensure_valid()


@settings(max_examples=30, deadline=None)
@given(flipped=st.sets(st.integers(0, 9), min_size=0, max_size=3))
def test_crc_check_on_two_threads_reports_the_first_bad_batch(
    tmp_path_factory: pytest.TempPathFactory, flipped: set[int]
) -> None:
    """Large scans check the two halves of the batches on two threads: any mix of bad batches in
    either half gives the scan of one thread (the first bad batch of all)."""
    batches = [v2_batch(10 * i, count=2, value_size=40) for i in range(10)]
    data = bytearray(b"".join(batches))
    starts = [0, *ends(batches)]
    for index in flipped:
        data[starts[index] + 30] ^= 0x04
    path = tmp_path_factory.mktemp("split") / "0.log"
    path.write_bytes(bytes(data))
    scans = []
    for threshold in (file_records_module.CRC_PARALLEL_MIN_BYTES, 0):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(file_records_module, "CRC_PARALLEL_MIN_BYTES", threshold)
            with FileRecords.open(path, mutable=False) as records:
                scan = records.scan()
        scans.append((scan.valid_bytes, len(scan), None if scan.error is None else str(scan.error)))
    assert scans[0] == scans[1]
    first = min(flipped, default=10)
    assert scans[1][:2] == (starts[first], first)


def test_partition_leader_epoch_is_not_under_the_crc(tmp_path: Path) -> None:
    data = bytearray(v2_batch(0))
    data[12:16] = struct.pack(">i", 42)  # the broker stamps it after the producer computed the CRC
    path = tmp_path / "0.log"
    path.write_bytes(bytes(data))
    with FileRecords.open(path, mutable=False) as records:
        assert records.scan().error is None
        (batch,) = records.batches()
        assert batch.partition_leader_epoch == 42 and batch.is_valid()


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ((8, struct.pack(">i", 40)), "smaller than the minimum allowed overhead 61"),
        ((16, b"\x05"), "Invalid magic 5"),
    ],
    ids=["v2-below-61", "magic-5"],
)
def test_impossible_headers_are_corrupt(
    ten_batches: tuple[Path, list[bytes]], patch: tuple[int, bytes], message: str
) -> None:
    path, batches = ten_batches
    offset, value = patch
    data = bytearray(path.read_bytes())
    position = ends(batches)[4]
    data[position + offset : position + offset + len(value)] = value
    path.write_bytes(bytes(data))
    with FileRecords.open(path, mutable=False) as records:
        scan = records.scan(verify_crc=False)
        assert isinstance(scan.error, CorruptRecordError)
        assert message in str(scan.error)
        assert (scan.error.position, scan.valid_bytes, len(scan)) == (position, position, 5)
        batch = list(records.batches())[5]
        assert not batch.is_valid()
        with pytest.raises(CorruptRecordError, match=message):
            batch.ensure_valid()


# ---- legacy entries in a file ------------------------------------------------------------------------


def test_legacy_and_v2_entries_in_one_file(tmp_path: Path) -> None:
    parts = [
        legacy_messages(0, 0, 0),  # three v0 messages: 0, 1, 2
        legacy_messages(1, 1, 3),  # one gzip v1 wrapper: 3..5
        legacy_messages(0, 2, 6),  # one snappy v0 wrapper: 6..8
        legacy_messages(1, 3, 9, count=4),  # one lz4 v1 wrapper: 9..12
        v2_batch(13),
    ]
    with write_log(tmp_path / "0.log", parts) as records:
        scan = records.scan()
        batches = list(records.batches())
        assert scan.error is None
        assert scan.magics.tolist() == [0, 0, 0, 1, 0, 1, 2]
        assert scan.base_offsets.tolist() == [0, 1, 2, 3, 6, 9, 13] == [b.base_offset for b in batches]
        assert scan.last_offsets.tolist() == [0, 1, 2, 5, 8, 12, 15] == [b.last_offset for b in batches]
        assert scan.max_timestamps.tolist()[:3] == [NO_TIMESTAMP] * 3
        assert scan.max_timestamps.tolist()[3] == batches[3].max_timestamp == 0  # kafka-python's wrapper ts
        assert [b.compression_name for b in batches] == ["none"] * 3 + ["gzip", "snappy", "lz4", "none"]
        assert [b.records_count for b in batches] == [1, 1, 1, None, None, None, 3]
        assert [b.timestamp_type for b in batches][:4] == [-1, -1, -1, 0]
        assert all(b.is_valid() for b in batches)
        assert batches[3].producer_id == -1 and not batches[3].is_control


def test_legacy_crc_and_inner_errors_stop_the_scan(tmp_path: Path) -> None:
    good = legacy_messages(1, 0, 0)
    bad_crc = bytearray(legacy_messages(1, 0, 3))
    bad_crc[-1] ^= 0xFF
    path = tmp_path / "0.log"
    path.write_bytes(good + bytes(bad_crc))
    with FileRecords.open(path, mutable=False) as records:
        scan = records.scan()
        assert isinstance(scan.error, CorruptRecordError) and "stored crc" in str(scan.error)
        assert scan.valid_bytes == len(good) + 2 * (len(bad_crc) // 3)
    wrapper = bytearray(legacy_messages(1, 1, 10))
    wrapper[-5] ^= 0xFF  # inside the gzip stream: the CRC catches it; without CRC the inflate fails
    path.write_bytes(good + bytes(wrapper))
    with FileRecords.open(path, mutable=False) as records:
        assert records.scan().error is not None
        unchecked = records.scan(verify_crc=False)
        assert isinstance(unchecked.error, CorruptRecordError)
        assert (unchecked.error.position, unchecked.valid_bytes) == (len(good), len(good))


# ---- translateOffset ----------------------------------------------------------------------------------


def test_search_for_offset_with_size(ten_batches: tuple[Path, list[bytes]]) -> None:
    path, batches = ten_batches
    starts = [0, *ends(batches)[:-1]]
    with FileRecords.open(path, mutable=False) as records:
        last = [b.last_offset for b in records.batches()]
        # offset 31 is inside batch 3 (30..33): batch granularity returns that batch
        assert records.search_for_offset_with_size(31, 0) == LogOffsetPosition(last[3], starts[3], len(batches[3]))
        assert records.search_for_offset_with_size(0, 0) == LogOffsetPosition(last[0], 0, len(batches[0]))
        # a gap (offsets 4..9 do not exist) resolves to the next batch
        assert records.search_for_offset_with_size(5, 0) == LogOffsetPosition(last[1], starts[1], len(batches[1]))
        assert records.search_for_offset_with_size(2, starts[5]).position == starts[5]
        assert records.search_for_offset_with_size(last[9] + 1, 0) is None


# ---- truncation, flush, rename, delete -----------------------------------------------------------------


def test_truncate_to(ten_batches: tuple[Path, list[bytes]]) -> None:
    path, batches = ten_batches
    bounds = ends(batches)
    with FileRecords.open(path) as records:
        assert records.truncate_to(bounds[-1]) == 0
        assert records.truncate_to(bounds[4]) == bounds[-1] - bounds[4]
        assert path.stat().st_size == records.size_in_bytes() == bounds[4]
        with pytest.raises(ValueError) as info:
            records.truncate_to(bounds[4] + 1)
        assert str(info.value) == (
            f"Attempt to truncate log segment {path} to {bounds[4] + 1} bytes failed, "
            f"size of this log segment is {bounds[4]} bytes."
        )
        records.append(v2_batch(500))
        assert [b.base_offset for b in records.batches()][-1] == 500


def test_rename_delete_and_mtime(ten_batches: tuple[Path, list[bytes]]) -> None:
    path, _ = ten_batches
    records = FileRecords.open(path)
    target = path.with_name(path.name + ".deleted")
    records.rename_to(target)
    assert records.path == target and not path.exists()
    assert len(list(records.batches())) == 10  # the descriptor survives the rename
    records.set_last_modified(1_600_000_000_123)
    assert records.last_modified_ms == 1_600_000_000_123
    assert records.delete_if_exists()
    assert not target.exists()
    assert not records.delete_if_exists()
    with pytest.raises(StorageError, match="closed"):
        records.read(0, 10)


def test_close_is_idempotent_and_close_handlers_does_not_trim(tmp_path: Path) -> None:
    path = tmp_path / "0.log"
    records = FileRecords.open(path, file_already_exists=False, preallocate=True, init_file_size=4096)
    records.append(v2_batch(0))
    records.close_handlers()
    assert path.stat().st_size == 4096
    records.close()
    reopened = FileRecords.open(path, file_already_exists=True)
    reopened.close()
    reopened.close()


# ---- OSError -> StorageError ---------------------------------------------------------------------------


def test_open_errors_name_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir" / "0.log"
    with pytest.raises(StorageError) as info:
        FileRecords.open(missing)
    assert (info.value.path, info.value.errno) == (str(missing), errno.ENOENT)
    with pytest.raises(StorageError) as info:
        FileRecords.open(missing, mutable=False)
    assert info.value.errno == errno.ENOENT


@pytest.mark.parametrize(
    ("function", "action"),
    [("pwrite", "append"), ("fsync", "flush"), ("ftruncate", "truncate"), ("pread", "read")],
)
def test_os_errors_become_storage_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, function: str, action: str
) -> None:
    records = write_log(tmp_path / "0.log", [v2_batch(0), v2_batch(3)])
    size = records.size_in_bytes()

    def fail(*args: object) -> None:
        raise OSError(errno.ENOSPC if function == "pwrite" else errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, function, fail)
    calls = {
        "append": lambda: records.append(b"x" * 100),
        "flush": records.flush,
        "truncate": lambda: records.truncate_to(10),
        "read": lambda: records.read(0, 10),
    }
    with pytest.raises(StorageError) as info:
        calls[action]()
    assert info.value.path == str(tmp_path / "0.log")
    assert info.value.errno in (errno.ENOSPC, errno.EIO)
    assert records.size_in_bytes() == size  # a failed write or truncate leaves the logical size alone
    monkeypatch.undo()
    records.close()


def test_control_batches_are_flagged(vectors_dir: Path) -> None:
    log = next(p for p in sorted((vectors_dir / "transactions-commit").glob("*/*.log")) if p.stat().st_size)
    with FileRecords.open(log, mutable=False) as records:
        scan = records.scan()
        flags = [b.is_control for b in records.batches()]
    assert flags == ((scan.attributes & CONTROL_FLAG_MASK) != 0).tolist()
