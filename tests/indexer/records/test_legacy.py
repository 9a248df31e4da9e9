"""Magic v0/v1 message sets, cross-checked against kafka-python's LegacyRecordBatchBuilder."""

from __future__ import annotations

import struct
import zlib
from typing import Any

import pyarrow as pa
import pytest

from indexer.errors import CorruptRecordError, InvalidRecordError
from indexer.records.columns import READ_SCHEMA
from indexer.records.legacy import (
    RECORD_OVERHEAD_V1,
    decode_legacy_records,
    iter_legacy_entries,
    legacy_base_offset,
)
from tests.indexer.records.helpers import table_rows
from tests.kafka_python import LegacyRecordBatchBuilder, MemoryRecords

LEGACY_CODECS = [0, 1, 2, 3]  # none, gzip, snappy, lz4 (zstd never existed for v0/v1)
TS = 1_700_000_000_000


def build(magic: int, codec: int, *, first_offset: int = 100, count: int = 5) -> bytes:
    """A message set as a v0.10 broker stores it: compressed wrappers carry their last absolute offset."""
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 20)
    for i in range(count):
        # v1 compressed inner offsets are relative; everything else absolute.
        offset = i if (magic == 1 and codec) else first_offset + i
        key = None if i == 2 else b"key-%d" % i
        value = None if i == 3 else b"value-%d" % i * (i + 1)
        builder.append(offset, timestamp=TS + 10 * i, key=key, value=value)
    data = bytearray(builder.build())
    if codec:
        data[0:8] = struct.pack(">q", first_offset + count - 1)  # not covered by the CRC
    return bytes(data)


def reference(data: bytes) -> list[tuple[int, int, int, bytes | None, bytes | None]]:
    records = MemoryRecords(data)
    rows = []
    while (batch := records.next_batch()) is not None:
        for r in batch:
            timestamp = -1 if r.timestamp is None else r.timestamp
            timestamp_type = -1 if r.timestamp_type is None else r.timestamp_type
            rows.append((r.offset, timestamp, timestamp_type, r.key, r.value))
    return rows


def rows(table: pa.Table) -> list[tuple[Any, ...]]:
    return table_rows(table, ["offset", "timestamp", "timestampType", "key", "value"])


@pytest.mark.parametrize("codec", LEGACY_CODECS)
@pytest.mark.parametrize("magic", [0, 1])
def test_decode_matches_kafka_python(magic: int, codec: int) -> None:
    data = build(magic, codec) + build(magic, codec, first_offset=105, count=3)
    table = decode_legacy_records(data)
    assert table.schema == READ_SCHEMA
    assert rows(table) == reference(data)
    assert table.column("offset").to_pylist() == list(range(100, 108))
    assert table.column("headers").to_pylist() == [[]] * 8
    expected_type = -1 if magic == 0 else 0
    assert set(table.column("timestampType").to_pylist()) == {expected_type}


@pytest.mark.parametrize("codec", LEGACY_CODECS)
@pytest.mark.parametrize("magic", [0, 1])
def test_shallow_entries(magic: int, codec: int) -> None:
    data = build(magic, codec)
    entries = list(iter_legacy_entries(data, base_position=4096))
    assert len(entries) == (1 if codec else 5)
    assert all(e.is_valid and e.magic == magic and e.compression_id == codec for e in entries)
    assert sum(e.size_in_bytes for e in entries) == len(data)
    assert entries[0].position == 4096
    assert entries[-1].offset == 104
    assert legacy_base_offset(entries[0]) == 100
    deep = [r for e in entries for r in e.inner_entries()]
    assert [r.offset for r in deep] == [100, 101, 102, 103, 104]
    assert [r.key_size for r in deep] == [5, 5, -1, 5, 5]
    assert deep[3].value_size == -1


def test_v1_entry_size_is_overhead_plus_key_and_value() -> None:
    """An uncompressed v1 entry for value "hello" without key is 12 + 22 + 5 = 39 bytes (LogSegmentTest)."""
    builder = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1024)
    builder.append(0, timestamp=TS, key=None, value=b"hello")
    (entry,) = iter_legacy_entries(bytes(builder.build()))
    assert entry.size_in_bytes == 12 + RECORD_OVERHEAD_V1 + 5 == 39
    assert (entry.timestamp, entry.timestamp_type, entry.key, entry.value) == (TS, 0, None, b"hello")


def _set_wrapper(data: bytes, *, attributes: int, timestamp: int) -> bytes:
    out = bytearray(data)
    out[17] = attributes
    out[18:26] = struct.pack(">q", timestamp)
    out[12:16] = struct.pack(">I", zlib.crc32(out[16:]))
    return bytes(out)


def test_log_append_time_wrapper_overrides_inner_timestamps() -> None:
    data = _set_wrapper(build(1, 1), attributes=0x08 | 1, timestamp=TS + 999)
    table = decode_legacy_records(data)
    assert table.column("timestamp").to_pylist() == [TS + 999] * 5
    assert table.column("timestampType").to_pylist() == [1] * 5
    assert rows(table) == reference(data)


def test_crc_mismatch_names_the_position() -> None:
    data = bytearray(build(1, 0))
    second = struct.unpack_from(">i", data, 8)[0] + 12
    data[second + 30] ^= 0x01  # inside the second message
    with pytest.raises(CorruptRecordError, match="stored crc") as info:
        decode_legacy_records(bytes(data), base_position=1000, path="/x/0.log")
    assert (info.value.position, info.value.path, info.value.offset) == (1000 + second, "/x/0.log", 101)
    assert decode_legacy_records(bytes(data), verify_crc=False).num_rows == 5
    entries = list(iter_legacy_entries(bytes(data)))
    assert [e.is_valid for e in entries] == [True, False, True, True, True]


def test_inner_crc_is_checked() -> None:
    builder = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1024)
    builder.append(0, timestamp=TS, key=None, value=b"inner")
    inner = bytearray(builder.build())
    inner[-1] ^= 0xFF
    wrapper = _wrap(bytes(inner), magic=1, codec=1, offset=7)
    with pytest.raises(CorruptRecordError, match="stored crc"):
        decode_legacy_records(wrapper)


def _wrap(inner: bytes | None, *, magic: int, codec: int, offset: int) -> bytes:
    """A legacy wrapper message (valid CRC) holding ``inner`` compressed with gzip (codec 1)."""
    value = None if inner is None else zlib.compress(inner, wbits=31) if codec == 1 else inner
    body = struct.pack(">bB", magic, codec) + (struct.pack(">q", TS) if magic == 1 else b"")
    body += struct.pack(">i", -1)
    body += struct.pack(">i", -1) if value is None else struct.pack(">i", len(value)) + value
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(message)) + message


@pytest.mark.parametrize(
    ("data", "error", "message"),
    [
        (_wrap(None, magic=1, codec=1, offset=3), InvalidRecordError, "null value"),
        (_wrap(b"", magic=1, codec=1, offset=3), InvalidRecordError, "no inner records"),
        (_wrap(build(1, 1), magic=1, codec=1, offset=3), InvalidRecordError, "contains a compressed message"),
        (_wrap(build(0, 0), magic=1, codec=1, offset=3), InvalidRecordError, "does not match wrapper magic"),
        (
            _wrap(build(1, 0, first_offset=0), magic=1, codec=1, offset=2),
            InvalidRecordError,
            "negative absolute",
        ),
        (_wrap(b"not gzip at all", magic=1, codec=2, offset=3), CorruptRecordError, "does not decompress"),
    ],
    ids=["null-value", "empty", "nested", "magic-mismatch", "negative-base", "bad-stream"],
)
def test_invalid_wrappers(data: bytes, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message) as info:
        decode_legacy_records(data, base_position=50, path="p.log")
    assert info.value.position == 50  # type: ignore[attr-defined]


def test_structural_errors() -> None:
    good = build(1, 0, count=1)
    with pytest.raises(CorruptRecordError, match="truncated"):
        decode_legacy_records(good[:-1])
    with pytest.raises(CorruptRecordError, match="smaller than minimum record overhead"):
        decode_legacy_records(struct.pack(">qi", 0, 13) + bytes(13))
    v2 = bytearray(good)
    v2[16] = 2
    with pytest.raises(InvalidRecordError, match="Invalid magic 2"):
        decode_legacy_records(bytes(v2))
    long_key = bytearray(good)
    long_key[26:30] = struct.pack(">i", 1000)
    with pytest.raises(InvalidRecordError, match="key length 1000"):
        decode_legacy_records(bytes(long_key), verify_crc=False)
    padded = bytearray(good) + b"\x00"
    padded[8:12] = struct.pack(">i", struct.unpack_from(">i", good, 8)[0] + 1)
    with pytest.raises(InvalidRecordError, match="end 1 bytes early"):
        decode_legacy_records(bytes(padded), verify_crc=False)
