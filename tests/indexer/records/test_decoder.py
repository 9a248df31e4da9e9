"""Tests of indexer/records/decoder.py: real broker batches, round trips, corrupt and invalid input."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from indexer.errors import CorruptRecordError, InvalidRecordError
from indexer.records import _kernels
from indexer.records.batch_header import (
    LOG_APPEND_TIME,
    BatchHeader,
    compute_batch_crc,
    pack_batch_header,
    parse_batch_header,
)
from indexer.records.columns import READ_SCHEMA, to_append_table
from indexer.records.decoder import decode_batch, decode_records
from indexer.records.encoder import encode_batches
from tests.indexer.records.helpers import record_dicts, table_rows
from tests.kafka_python import MemoryRecords, MemoryRecordsBuilder

TS = 1_700_000_000_000
VECTORS = Path(__file__).resolve().parents[3].parent / "shared" / "vectors" / "kafka"
LOG_FILES = sorted(p for p in VECTORS.glob("*/*/*.log") if p.stat().st_size) if VECTORS.is_dir() else []


def _kafka_python_rows(data: bytes) -> list[tuple[bool, tuple[Any, ...]]]:
    """(is control, row) for what kafka-python's MemoryRecords decodes; rows in READ_SCHEMA order
    with None for "no headers", as Spark."""
    records = MemoryRecords(data)
    rows = []
    while (batch := records.next_batch()) is not None:
        control = bool(getattr(batch, "is_control_batch", False))
        for r in batch:
            headers = [{"key": k, "value": v} for k, v in r.headers] or None
            rows.append((control, (r.offset, r.timestamp, r.timestamp_type, r.key, r.value, headers)))
    return rows


def _raw_batch(records: bytes, count: int, *, base_offset: int = 0, attributes: int = 0) -> bytes:
    """A v2 batch around hand-made ``records`` bytes, with a correct CRC."""
    header = BatchHeader(base_offset, 49 + len(records), 0, 2, 0, attributes, count - 1, TS, TS, -1, -1, -1, count)
    raw = bytearray(pack_batch_header(header) + records)
    raw[17:21] = compute_batch_crc(raw).to_bytes(4, "big")
    return bytes(raw)


def _encode(rows: list[dict[str, Any]], base_offset: int = 0, **kwargs: Any) -> bytes:
    return encode_batches(to_append_table(rows, now_ms=TS), base_offset, **kwargs).buffer.tobytes()


def test_appendix_b_vector_decodes() -> None:
    vector = bytes.fromhex(
        "00000000000000000000003900000000 02965a94b10000000000000000018bcfe568000000018bcfe56800"
        "ffffffffffffffffffffffffffff00000001 0e00000001026100".replace(" ", "")
    )
    table = decode_records(vector)
    assert table.schema == READ_SCHEMA
    assert table_rows(table) == [(0, TS, 0, None, b"a", None)]


def test_appendix_b_commit_marker() -> None:
    marker = bytes.fromhex(
        "0000000000000005 00000042 00000000 02 2f9f220c 0030 00000000 0000018bcfe56800 0000018bcfe56800"
        "0000000000000001 0000 ffffffff 00000001 20 00 00 00 08 00000001 0c 000000000000 00".replace(" ", "")
    )
    assert decode_records(marker).num_rows == 0  # control batches are skipped by default
    rows = table_rows(decode_records(marker, include_control=True))
    assert rows == [(5, TS, 0, b"\x00\x00\x00\x01", b"\x00" * 6, None)]  # COMMIT, coordinatorEpoch 0


@pytest.mark.parametrize("log_file", LOG_FILES, ids=lambda p: f"{p.parts[-3]}/{p.parts[-2]}")
def test_real_broker_logs_decode_like_kafka_python(log_file: Path) -> None:
    data = log_file.read_bytes()
    expected = _kafka_python_rows(data)
    assert table_rows(decode_records(data, path=log_file, include_control=True)) == [row for _, row in expected]
    assert table_rows(decode_records(data, path=log_file)) == [row for control, row in expected if not control]


def test_vectors_cover_compression_headers_and_control() -> None:
    codecs, with_headers, control = set(), 0, 0
    for log_file in LOG_FILES:
        data = np.fromfile(log_file, np.uint8)
        entries, _reason, _stop = _kernels.scan_batches(data, 0, data.shape[0])
        codecs.update((entries[:, _kernels.COL_ATTRIBUTES] & 7).tolist())
        control += int(((entries[:, _kernels.COL_ATTRIBUTES] & 0x20) != 0).sum())
        with_headers += decode_records(data).column("headers").drop_null().__len__()
    assert {0, 1, 2} <= codecs
    assert with_headers > 0 and control > 0


_record = record_dicts(
    max_small=40, max_large=9000, max_timestamp=2**62, max_header_key=8, max_header_value=9, max_headers=3
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    rows=st.lists(_record, max_size=40),
    base_offset=st.integers(0, 2**50),
    limit=st.integers(20_000, 60_000),  # a record is at most ~18 KB
    compression=st.sampled_from(["none", "gzip", "snappy", "lz4", "zstd"]),
)
def test_round_trip(rows: list[dict[str, Any]], base_offset: int, limit: int, compression: str) -> None:
    data = _encode(rows, base_offset, max_batch_bytes=limit, compression=compression)
    table = decode_records(data)
    expected = [
        (base_offset + i, r["timestamp"], 0, r["key"], r["value"], r["headers"] or None) for i, r in enumerate(rows)
    ]
    assert table_rows(table) == expected


@settings(max_examples=40, deadline=None)
@given(start=st.integers(95, 140), stop=st.integers(95, 140))
def test_start_and_max_offset_filter_records(start: int, stop: int) -> None:
    rows = [{"value": b"%d" % i, "timestamp": TS + i, "headers": [("i", b"%d" % i)]} for i in range(30)]
    data = _encode(rows, 100, max_batch_bytes=200)
    table = decode_records(data, start_offset=start, max_offset=stop)
    expected = [o for o in range(100, 130) if start <= o < stop]
    assert table.column("offset").to_pylist() == expected
    assert table.column("value").to_pylist() == [b"%d" % (o - 100) for o in expected]
    assert [h[0]["value"] for h in table.column("headers").to_pylist()] == [b"%d" % (o - 100) for o in expected]


def test_log_append_time_uses_the_batch_max_timestamp() -> None:
    rows = [{"value": b"a", "timestamp": TS}, {"value": b"b", "timestamp": TS - 7}]
    data = _encode(rows, timestamp_type=LOG_APPEND_TIME, log_append_time_ms=TS + 99)
    table = decode_records(data)
    assert table.column("timestamp").to_pylist() == [TS + 99, TS + 99]
    assert table.column("timestampType").to_pylist() == [1, 1]


def test_empty_and_partial_input() -> None:
    assert decode_records(b"").num_rows == 0
    first_batch = _encode([{"value": b"a", "timestamp": TS}])
    data = first_batch + _encode([{"value": b"b" * 300, "timestamp": TS}], 1)
    first = len(first_batch)
    for cut in (first + 5, first + 17, len(data) - 1):
        assert decode_records(data[:cut]).column("value").to_pylist() == [b"a"]  # the partial batch is ignored


def test_input_kinds() -> None:
    data = _encode([{"value": b"a", "timestamp": TS}])
    expected = table_rows(decode_records(data))
    for buf in (bytearray(data), memoryview(data), np.frombuffer(data, np.uint8).copy()):
        assert table_rows(decode_records(buf)) == expected
    with pytest.raises(TypeError, match="uint8"):
        decode_records(np.zeros(4, np.int32))


@settings(max_examples=60, deadline=None)
@given(batch=st.integers(0, 2), where=st.floats(0, 1, exclude_max=True), bit=st.integers(0, 7))
def test_bit_flip_gives_corrupt_record_error_at_the_batch(batch: int, where: float, bit: int) -> None:
    rows = [{"key": b"k%d" % i, "value": b"v" * 40, "timestamp": TS + i} for i in range(9)]
    encoded = encode_batches(to_append_table(rows, now_ms=TS), 0, max_batch_bytes=61 + 3 * 49)  # records of 49 bytes
    assert len(encoded) == 3
    data = bytearray(encoded.buffer.tobytes())
    position = int(encoded.positions[batch])
    index = position + 17 + int(where * (int(encoded.sizes[batch]) - 17))  # the CRC field or what it covers
    data[index] ^= 1 << bit
    with pytest.raises(CorruptRecordError) as info:
        decode_records(data, base_position=4096, path="/x/00000000000000000000.log", include_control=True)
    assert info.value.position == 4096 + position
    assert info.value.path == "/x/00000000000000000000.log"
    assert f"position {4096 + position} of /x/00000000000000000000.log" in str(info.value)
    assert decode_records(data, verify_crc=False, include_control=True, max_offset=3 * batch).num_rows == 3 * batch


_VALID = b"\x00\x00\x00\x01\x01\x00"  # attributes, tsDelta, offsetDelta, null key, null value, no headers


@pytest.mark.parametrize(
    ("records", "count", "fragment"),
    [
        (b"\xff\xff\xff\xff\xff\x01\x00", 1, "varint is longer than 5 bytes"),
        (b"\x18\x00" + b"\xff" * 10 + b"\x01", 1, "varlong is longer than 10 bytes"),
        (b"\x7e" + _VALID, 1, "declares 63 bytes but only 6 remain"),
        (b"\x0e" + _VALID + b"\x00", 1, "expected to read 7 bytes in record payload, but instead read 6"),
        (b"\x0c" + _VALID + b"\x00", 1, "1 bytes remain after the declared number of records"),
        (b"\x0c\x00\x00\x00\x01\x01\x01", 1, "invalid number of record headers -1"),
        (b"\x10\x00\x00\x00\x01\x01\x02\x01\x00", 1, "negative header key size -1"),
        (b"\x0e\x00\x00\x00\x0a\x01\x00\x00", 1, "key length of 5 exceeds the 3 bytes"),
        (b"\x0e\x00\x00\x00\x01\x0a\x00\x00", 1, "value length of 5 exceeds the 2 bytes"),
        (b"\x0a\x00\x00\x00\x01\x80\x00", 1, "varint runs past the end of its record"),
        (b"\x0c" + _VALID, 2, "invalid record count 2"),
        (b"\x0c" + _VALID, -1, "invalid record count -1"),
        (b"\x04\x00\x80" + b"\x00" * 4, 1, "varint runs past the end of its record"),
    ],
)
def test_valid_crc_but_invalid_records(records: bytes, count: int, fragment: str) -> None:
    good = _encode([{"value": b"a", "timestamp": TS}])
    data = good + _raw_batch(records, count, base_offset=1)
    with pytest.raises(InvalidRecordError) as info:
        decode_records(data, base_position=100, path="p.log")
    assert fragment in str(info.value)
    assert info.value.position == 100 + len(good)
    assert info.value.offset == 1


def test_non_canonical_varints_are_read_like_java() -> None:
    # keyLength 1 spelt in 5 bytes whose last byte has bits beyond 32 (Java's int drops them),
    # and timestampDelta 0 spelt in the maximum 10 bytes.
    key_length = b"\x82\x80\x80\x80\x70"
    timestamp_delta = b"\x80" * 9 + b"\x00"
    body = b"\x00" + timestamp_delta + b"\x00" + key_length + b"k" + b"\x01\x00"
    data = _raw_batch(bytes([2 * len(body)]) + body, 1)
    assert table_rows(decode_records(data)) == [(0, TS, 0, b"k", None, None)]


def test_framing_errors() -> None:
    good = _encode([{"value": b"a", "timestamp": TS}])
    too_small = bytearray(good)
    too_small[8:12] = (13).to_bytes(4, "big")
    with pytest.raises(CorruptRecordError, match=r"record size 13 smaller than minimum record overhead \(14\)") as info:
        decode_records(good + too_small, base_position=10)
    assert info.value.position == 10 + len(good)
    short_v2 = bytearray(good[:40])
    short_v2[8:12] = (28).to_bytes(4, "big")
    with pytest.raises(CorruptRecordError, match="size 40 is smaller than the minimum allowed overhead 61"):
        decode_records(bytes(short_v2))
    bad_magic = bytearray(good)
    bad_magic[16] = 3
    with pytest.raises(CorruptRecordError, match="Invalid magic found in record: 3"):
        decode_records(bytes(bad_magic))


def test_corrupt_compressed_stream_names_the_batch() -> None:
    good = _encode([{"value": b"a", "timestamp": TS}])
    rows = [{"value": b"abc" * 50, "timestamp": TS}] * 4
    batch = bytearray(_encode(rows, 1, compression="gzip"))
    batch[70:80] = b"\x00" * 10
    batch[17:21] = compute_batch_crc(batch).to_bytes(4, "big")
    with pytest.raises(CorruptRecordError, match="gzip") as info:
        decode_records(good + bytes(batch), path="c.log")
    assert (info.value.position, info.value.path, info.value.offset) == (len(good), "c.log", 1)


def test_legacy_entries_are_decoded_in_file_order() -> None:
    def legacy(offset: int, values: list[bytes]) -> bytes:
        builder = MemoryRecordsBuilder(magic=1, compression_type=0, batch_size=1 << 20, offset=offset)
        for i, value in enumerate(values):
            builder.append(timestamp=TS + i, key=None, value=value)
        builder.close()
        return bytes(builder.buffer())

    data = legacy(0, [b"a", b"b"]) + _encode([{"value": b"c", "timestamp": TS}], 2) + legacy(3, [b"d"])
    table = decode_records(data)
    assert table.column("offset").to_pylist() == [0, 1, 2, 3]
    assert table.column("value").to_pylist() == [b"a", b"b", b"c", b"d"]
    assert table.column("headers").null_count == 4
    assert decode_records(data, start_offset=1, max_offset=3).column("offset").to_pylist() == [1, 2]


def test_decode_batch_gives_per_record_details() -> None:
    rows = [
        {"key": b"k", "value": None, "timestamp": TS, "headers": [("a", b"1"), ("b", None)]},
        {"key": None, "value": b"vv", "timestamp": TS + 3},
    ]
    encoded = encode_batches(
        to_append_table(rows, now_ms=TS), 50, producer_id=1, producer_epoch=0, base_sequence=2**31 - 1
    )
    header = parse_batch_header(encoded.batch(0), position=777)
    decoded = decode_batch(encoded.batch(0), header, path="d.log")
    assert len(decoded) == 2
    assert decoded.offsets.tolist() == [50, 51]
    assert decoded.timestamps.tolist() == [TS, TS + 3]
    assert decoded.key_sizes.tolist() == [1, -1]
    assert decoded.value_sizes.tolist() == [-1, 2]
    assert decoded.sequences.tolist() == [2**31 - 1, 0]
    assert decoded.key.to_pylist() == [b"k", None]
    assert decoded.value.to_pylist() == [None, b"vv"]
    assert decoded.headers.to_pylist() == [[{"key": "a", "value": b"1"}, {"key": "b", "value": None}], None]
    with pytest.raises(CorruptRecordError) as info:
        decode_batch(encoded.batch(0)[:-1], header, path="d.log")
    assert info.value.position == 777


def test_decode_batch_of_a_control_batch(vectors_dir: Path) -> None:
    data = np.fromfile(
        vectors_dir / "transactions-commit" / "_confluent-ksql-default__command_topic-0" / "00000000000000000000.log",
        np.uint8,
    )
    entries, _reason, _stop = _kernels.scan_batches(data, 0, data.shape[0])
    control = [row for row in entries if row[_kernels.COL_ATTRIBUTES] & 0x20]
    assert control
    position, size = int(control[0][_kernels.COL_POSITION]), int(control[0][_kernels.COL_SIZE])
    header = parse_batch_header(data[position : position + size].tobytes(), position=position)
    decoded = decode_batch(data[position : position + size], header)
    assert len(decoded) == 1 and decoded.key_sizes.tolist() == [4] and decoded.value_sizes.tolist() == [6]
    assert decoded.key.to_pylist()[0][:2] == b"\x00\x00"  # ControlRecordType version 0


def test_invalid_utf8_header_key_is_replaced_like_java() -> None:
    record = b"\x00\x00\x00\x01\x01\x02\x02\xff\x01"  # one header: key b"\xff", null value
    data = _raw_batch(bytes([len(record) * 2]) + record, 1)
    assert decode_records(data).column("headers").to_pylist() == [[{"key": "\ufffd", "value": None}]]
