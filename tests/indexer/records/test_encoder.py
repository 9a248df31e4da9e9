"""Tests of indexer/records/encoder.py: byte equality with Kafka and kafka-python, batching, options."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from indexer.errors import RecordTooLargeError, SchemaError
from indexer.records import encoder as encoder_module
from indexer.records.batch_header import (
    COMPRESSION_IDS,
    LOG_APPEND_TIME,
    RECORD_BATCH_OVERHEAD,
    compute_batch_crc,
    parse_batch_header,
)
from indexer.records.columns import HEADERS_TYPE, to_append_table
from indexer.records.encoder import encode_batches, encode_planned, plan_batches
from tests.indexer.records.helpers import record_dicts
from tests.kafka_python import DefaultRecordBatch, DefaultRecordBatchBuilder, MemoryRecords

TS = 1_700_000_000_000
UNLIMITED = 2**31 - 1

# Appendix B of the spec: single-record batches, baseOffset 0, PLE 0, CreateTime, no key.
VECTOR_A = bytes.fromhex(
    "0000000000000000 00000039 00000000 02 965a94b1 0000 00000000 0000018bcfe56800 0000018bcfe56800"
    "ffffffffffffffff ffff ffffffff 00000001 0e 00 00 00 01 02 61 00".replace(" ", "")
)
VECTOR_TEST = bytes.fromhex(
    "0000000000000000 0000003c 00000000 02 ce68b28d 0000 00000000 0000018bcfe56800 0000018bcfe56800"
    "ffffffffffffffff ffff ffffffff 00000001 14 00 00 00 01 08 74657374 00".replace(" ", "")
)


def _table(rows: list[dict[str, Any]]) -> pa.Table:
    return to_append_table(rows, now_ms=TS) if rows else to_append_table({}, now_ms=TS)


def _kafka_python_batch(rows: list[dict[str, Any]], **producer: Any) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=-1, producer_epoch=-1,
        base_sequence=-1, batch_size=UNLIMITED,
    )  # fmt: skip
    if producer:
        builder.set_producer_state(**producer)
    for i, row in enumerate(rows):
        headers = [(h["key"], h["value"]) for h in row.get("headers") or []]
        assert builder.append(i, row["timestamp"], row.get("key"), row.get("value"), headers) is not None
    return bytes(builder.build())


@pytest.mark.parametrize(("value", "expected"), [("a", VECTOR_A), ("test", VECTOR_TEST)], ids=["a", "test"])
def test_appendix_b_vectors(value: str, expected: bytes) -> None:
    encoded = encode_batches(_table([{"value": value, "timestamp": TS}]), 0)
    assert encoded.buffer.tobytes() == expected
    assert len(encoded) == 1
    assert encoded.total_bytes == len(expected)
    assert bytes(encoded.batch(0)) == expected
    assert (encoded.first_offset, encoded.last_offset, encoded.max_timestamp) == (0, 0, TS)


_rows = st.lists(
    record_dicts(
        max_small=80, max_large=20_000, max_timestamp=2**61, max_header_key=10, max_header_value=70, max_headers=4
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(rows=_rows)
def test_bytes_equal_kafka_python(rows: list[dict[str, Any]]) -> None:
    encoded = encode_batches(_table(rows), 0, max_batch_bytes=UNLIMITED)
    assert len(encoded) == 1
    assert encoded.buffer.tobytes() == _kafka_python_batch(rows)


def test_bytes_equal_kafka_python_with_producer_state() -> None:
    # 10,000 records: offset deltas need 1-, 2- and 3-byte varints (zig-zag > 127, > 16383).
    rng = np.random.default_rng(7)
    stamps = (TS + rng.integers(-(10**9), 10**9, 10_000)).tolist()
    rows = [{"key": b"k", "value": b"v" * (i % 200), "timestamp": stamps[i], "headers": None} for i in range(10_000)]
    encoded = encode_batches(
        _table(rows),
        0,
        max_batch_bytes=UNLIMITED,
        producer_id=77,
        producer_epoch=3,
        base_sequence=10,
        is_transactional=True,
    )
    expected = _kafka_python_batch(rows, producer_id=77, producer_epoch=3, base_sequence=10, is_transactional=True)
    assert encoded.buffer.tobytes() == expected


def _kafka_python_batches(rows: list[dict[str, Any]], batch_size: int) -> list[bytes]:
    """kafka-python's producer batching: a builder of ``batch_size`` takes records until one does
    not fit (its first record always fits), then a new builder starts."""

    def builder() -> DefaultRecordBatchBuilder:
        return DefaultRecordBatchBuilder(
            magic=2, compression_type=0, is_transactional=False, producer_id=-1, producer_epoch=-1,
            base_sequence=-1, batch_size=batch_size,
        )  # fmt: skip

    batches, current, delta = [], builder(), 0
    for row in rows:
        headers = [(h["key"], h["value"]) for h in row.get("headers") or []]
        if current.append(delta, row["timestamp"], row.get("key"), row.get("value"), headers) is None:
            batches.append(bytes(current.build()))
            current, delta = builder(), 0
            assert current.append(delta, row["timestamp"], row.get("key"), row.get("value"), headers) is not None
        delta += 1
    batches.append(bytes(current.build()))
    return batches


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(rows=_rows, batch_size=st.integers(0, 30_000))
def test_batch_size_cuts_batches_as_kafka_pythons_producer(rows: list[dict[str, Any]], batch_size: int) -> None:
    """``batch_size`` is the producer's ``batch.size``: the same batches, byte for byte, as
    kafka-python's builder of that size (a record larger than it alone in its batch)."""
    encoded = encode_batches(_table(rows), 0, max_batch_bytes=UNLIMITED, batch_size=batch_size)
    expected = _kafka_python_batches(rows, batch_size)
    # kafka-python's offsets restart at 0 in each builder; ours are the log's, in the header only
    assert [bytes(encoded.batch(b))[8:] for b in range(len(encoded))] == [batch[8:] for batch in expected]


def _record_size(encoded_one: bytes) -> int:
    return len(encoded_one) - RECORD_BATCH_OVERHEAD


def test_split_exactly_at_max_batch_bytes() -> None:
    rows = [{"value": b"0123456789", "timestamp": TS} for _ in range(7)]
    record = _record_size(encode_batches(_table(rows[:1]), 0).buffer.tobytes())
    assert (
        record == 17
    )  # length 1 + (attributes, tsDelta, offsetDelta, keyLength, valueLength 1 each + 10 + headerCount)
    exact = RECORD_BATCH_OVERHEAD + 3 * record
    encoded = encode_batches(_table(rows), 100, max_batch_bytes=exact)
    assert encoded.sizes.tolist() == [exact, exact, RECORD_BATCH_OVERHEAD + record]
    assert encoded.record_counts.tolist() == [3, 3, 1]
    assert encoded.base_offsets.tolist() == [100, 103, 106]
    assert encoded.last_offsets.tolist() == [102, 105, 106]
    assert encoded.positions.tolist() == [0, exact, 2 * exact]
    encoded = encode_batches(_table(rows), 100, max_batch_bytes=exact - 1)
    assert encoded.record_counts.tolist() == [2, 2, 2, 1]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(rows=_rows, limit=st.integers(200, 30_000), base_offset=st.integers(0, 2**40))
def test_batches_are_greedy_and_bounded(rows: list[dict[str, Any]], limit: int, base_offset: int) -> None:
    table = _table(rows)
    try:
        encoded = encode_batches(table, base_offset, max_batch_bytes=limit)
    except RecordTooLargeError as exc:
        assert exc.index is not None and exc.size is not None and exc.size > limit
        alone = encode_batches(table.slice(exc.index, 1), 0, max_batch_bytes=UNLIMITED)
        assert alone.total_bytes == exc.size
        return
    assert (encoded.sizes <= limit).all()
    assert encoded.record_counts.sum() == len(rows)
    assert encoded.base_offsets[0] == base_offset
    assert (encoded.base_offsets[1:] == encoded.last_offsets[:-1] + 1).all()
    starts = np.concatenate([[0], np.cumsum(encoded.record_counts)])
    for b in range(len(encoded) - 1):
        # One more record in batch b would not have fitted: the split is greedy.
        longer = encode_batches(table.slice(starts[b], encoded.record_counts[b] + 1), 0, max_batch_bytes=UNLIMITED)
        assert longer.total_bytes > limit
    for b in range(len(encoded)):
        header = parse_batch_header(encoded.batch(b))
        assert header.crc == compute_batch_crc(encoded.batch(b))
        assert header.base_offset == encoded.base_offsets[b]
        assert header.records_count == encoded.record_counts[b]
        assert header.max_timestamp == encoded.max_timestamps[b]
        assert header.base_timestamp == rows[starts[b]]["timestamp"]


def test_record_too_large_names_the_row() -> None:
    rows = [{"value": b"x" * 10, "timestamp": TS} for _ in range(5)] + [{"value": b"y" * 2000, "timestamp": TS}]
    with pytest.raises(RecordTooLargeError) as info:
        encode_batches(_table(rows), 0, max_batch_bytes=1000)
    assert info.value.index == 5
    assert info.value.limit == 1000
    # body: attributes, tsDelta, offsetDelta, keyLength (1 each) + valueLength (2) + 2000 + headerCount = 2007
    assert info.value.size == RECORD_BATCH_OVERHEAD + 2 + 2007
    assert "record 5" in str(info.value)


def test_sliced_table_encodes_like_a_copy() -> None:
    rows = [
        {"key": f"k{i}".encode(), "value": None if i % 3 else b"v" * i, "timestamp": TS + i,
         "headers": [{"key": f"h{i}", "value": None if i % 2 else b"x"}] if i % 4 else None}
        for i in range(20)
    ]  # fmt: skip
    table = _table(rows)
    sliced = encode_batches(table.slice(5, 9), 42)
    copied = encode_batches(_table(rows[5:14]), 42)
    assert sliced.buffer.tobytes() == copied.buffer.tobytes()


def test_log_append_time_sets_attribute_and_max_timestamp() -> None:
    rows = [{"value": b"a", "timestamp": TS + 5}, {"value": b"b", "timestamp": TS}]
    encoded = encode_batches(_table(rows), 0, timestamp_type=LOG_APPEND_TIME, log_append_time_ms=TS + 1000)
    header = parse_batch_header(encoded.batch(0))
    assert header.timestamp_type == LOG_APPEND_TIME
    assert (header.base_timestamp, header.max_timestamp) == (TS + 5, TS + 1000)
    assert encoded.max_timestamps.tolist() == [TS + 1000]
    batch = DefaultRecordBatch(encoded.buffer.tobytes())
    assert [r.timestamp for r in batch] == [TS + 1000, TS + 1000]


def test_producer_fields_and_sequences_continue_across_batches() -> None:
    rows = [{"value": b"0123456789", "timestamp": TS} for _ in range(5)]
    encoded = encode_batches(
        _table(rows), 7, max_batch_bytes=RECORD_BATCH_OVERHEAD + 2 * 17, partition_leader_epoch=9,
        producer_id=5, producer_epoch=2, base_sequence=2**31 - 3, is_transactional=True,
    )  # fmt: skip
    headers = [parse_batch_header(encoded.batch(b)) for b in range(len(encoded))]
    assert [h.base_sequence for h in headers] == [2**31 - 3, 2**31 - 1, 1]  # wraps past INT_MAX like Kafka
    assert all(h.is_transactional and h.producer_id == 5 and h.producer_epoch == 2 for h in headers)
    assert all(h.partition_leader_epoch == 9 for h in headers)
    assert encoded.offsets_of_max_timestamp.tolist() == encoded.last_offsets.tolist() == [8, 10, 11]


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_are_read_by_kafka_python(codec: str) -> None:
    rows = [{"key": b"key-%d" % i, "value": b"value " * 20, "timestamp": TS + i, "headers": None} for i in range(500)]
    plain = encode_batches(_table(rows), 10, max_batch_bytes=20_000)
    encoded = encode_batches(_table(rows), 10, max_batch_bytes=20_000, compression=codec)
    assert encoded.record_counts.tolist() == plain.record_counts.tolist()
    assert (encoded.sizes < plain.sizes).all()
    assert encoded.positions.tolist() == np.concatenate([[0], np.cumsum(encoded.sizes)[:-1]]).tolist()
    codec_id = COMPRESSION_IDS[codec]
    assert all(parse_batch_header(encoded.batch(b)).compression_id == codec_id for b in range(len(encoded)))
    records = MemoryRecords(encoded.buffer.tobytes())
    seen = []
    while (batch := records.next_batch()) is not None:
        assert batch.compression_type == codec_id
        assert batch.validate_crc()
        seen.extend((r.offset, r.key, r.value, r.timestamp) for r in batch)
    assert seen == [(10 + i, r["key"], r["value"], r["timestamp"]) for i, r in enumerate(rows)]


def test_incompressible_batch_is_stored_uncompressed() -> None:
    rng = np.random.default_rng(1)
    rows = [{"value": rng.bytes(500), "timestamp": TS}]
    encoded = encode_batches(_table(rows), 0, compression="gzip")
    header = parse_batch_header(encoded.batch(0))
    assert header.compression_id == 0
    assert encoded.buffer.tobytes() == encode_batches(_table(rows), 0).buffer.tobytes()


def test_empty_table_gives_no_batches() -> None:
    encoded = encode_batches(_table([]), 5)
    assert len(encoded) == 0 and encoded.total_bytes == 0
    assert encoded.max_timestamp == -1
    with pytest.raises(ValueError, match="no batches"):
        encoded.first_offset  # noqa: B018


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_batch_bytes": 60}, "max_batch_bytes"),
        ({"compression": "brotli"}, "unknown compression"),
        ({"timestamp_type": 2}, "timestamp_type"),
        ({"timestamp_type": LOG_APPEND_TIME}, "log_append_time_ms"),
        ({"is_transactional": True}, "producer id"),
    ],
)
def test_bad_arguments(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        encode_batches(_table([{"value": b"a", "timestamp": TS}]), 0, **kwargs)
    with pytest.raises(ValueError, match="base_offset"):
        encode_batches(_table([{"value": b"a", "timestamp": TS}]), -1)


def test_table_must_have_the_append_schema() -> None:
    with pytest.raises(SchemaError, match="'key'.*to_append_table"):
        encode_batches(pa.table({"value": [b"a"]}), 0)
    with pytest.raises(SchemaError, match="unknown column.*partition"):
        encode_batches(_table([{"value": b"a", "timestamp": TS}]).append_column("partition", pa.array([0])), 0)
    table = _table([{"value": b"a", "timestamp": TS}]).set_column(2, "timestamp", pa.array([None], pa.int64()))
    with pytest.raises(SchemaError, match="nulls"):
        encode_batches(table, 0)


# -- planning once, encoding ranges of batches -------------------------------------------------------


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(rows=_rows, limit=st.integers(41_000, 90_000), cuts=st.lists(st.integers(0, 40), max_size=5))
def test_planned_ranges_concatenate_to_the_whole_encoding(
    rows: list[dict[str, Any]], limit: int, cuts: list[int]
) -> None:
    """Ranges of a plan, encoded into one reused buffer, are byte for byte the whole encoding."""
    table = _table(rows)
    whole = encode_batches(table, 7, max_batch_bytes=limit)
    plan = plan_batches(table, 7, max_batch_bytes=limit)
    assert (len(plan), plan.total_bytes) == (len(whole), whole.total_bytes)
    bounds = sorted({0, len(plan), *(c for c in cuts if c < len(plan))})
    out = np.full(plan.total_bytes + 3, 0xAA, np.uint8)  # stale bytes from an earlier use
    pieces = []
    for start, stop in zip(bounds, bounds[1:], strict=False):
        part = encode_planned(plan, start, stop, out=out)
        assert part.total_bytes == plan.range_bytes(start, stop)
        assert part.positions.tolist() == (whole.positions[start:stop] - whole.positions[start]).tolist()
        for field in ("sizes", "base_offsets", "last_offsets", "max_timestamps", "record_counts"):
            assert getattr(part, field).tolist() == getattr(whole, field)[start:stop].tolist()
        pieces.append(part.buffer.tobytes())
    assert b"".join(pieces) == whole.buffer.tobytes()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(rows=_rows, block=st.integers(1, 12), limit=st.integers(200, 30_000))
def test_plan_blocks_start_batches_and_are_greedy_inside(rows: list[dict[str, Any]], block: int, limit: int) -> None:
    """A table of more than PLAN_BLOCK_ROWS records starts a batch every PLAN_BLOCK_ROWS records and
    is planned block by block on several threads: each block is cut exactly as on its own, and a
    record too large is reported as one pass over the whole table reports it (the first one)."""
    table = _table(rows)
    try:  # one pass: the table is far below the real PLAN_BLOCK_ROWS
        encode_batches(table, 5, max_batch_bytes=limit)
        first_too_large = None
    except RecordTooLargeError as exc:
        first_too_large = (exc.index, exc.size)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(encoder_module, "PLAN_BLOCK_ROWS", block)
        if first_too_large is not None:
            with pytest.raises(RecordTooLargeError) as blocked_error:
                encode_batches(table, 5, max_batch_bytes=limit)
            assert (blocked_error.value.index, blocked_error.value.size) == first_too_large
            return
        blocked = encode_batches(table, 5, max_batch_bytes=limit)
    pieces = [
        encode_batches(table.slice(lo, block), 5 + lo, max_batch_bytes=limit) for lo in range(0, len(rows), block)
    ]
    assert blocked.buffer.tobytes() == b"".join(piece.buffer.tobytes() for piece in pieces)
    assert blocked.record_counts.tolist() == [c for piece in pieces for c in piece.record_counts.tolist()]


@settings(max_examples=40, deadline=None)
@given(
    value_lens=st.lists(st.integers(0, 5000), min_size=1, max_size=60),
    chunk_bytes=st.integers(1, 12_000),
    bounds=st.tuples(st.integers(0, 60), st.integers(0, 60)),
)
def test_chunks_cover_a_batch_range_in_bounded_greedy_runs(
    value_lens: list[int], chunk_bytes: int, bounds: tuple[int, int]
) -> None:
    plan = plan_batches(_table([{"value": b"v" * n, "timestamp": TS} for n in value_lens]), 0, max_batch_bytes=5100)
    start, stop = sorted(min(b, len(plan)) for b in bounds)
    ranges = plan.chunks(chunk_bytes, start, stop)
    assert [a for a, _ in ranges] + [stop] == [start] + [b for _, b in ranges] or (start == stop and ranges == [])
    for a, b in ranges:
        assert b > a
        assert plan.range_bytes(a, b) <= chunk_bytes or b == a + 1
        if b < stop:  # greedy: one more batch would not have fitted
            assert plan.range_bytes(a, b + 1) > chunk_bytes


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_encode_planned_to_hands_over_every_chunk_once(workers: int) -> None:
    """Chunks written from several threads, in any order, at their positions make the whole encoding."""
    rows = [{"key": b"k" * (i % 5), "value": b"v" * (i % 700), "timestamp": TS + i} for i in range(2000)]
    plan = plan_batches(_table(rows), 3, max_batch_bytes=5000)
    whole = encode_planned(plan).buffer.tobytes()
    start, stop = 2, len(plan) - 1
    origin = int(plan.positions[start])
    out = bytearray(plan.range_bytes(start, stop))
    seen: list[int] = []

    def write(data: np.ndarray, position: int) -> None:
        assert out[position : position + data.nbytes] == bytes(data.nbytes)  # nothing written twice
        out[position : position + data.nbytes] = data.tobytes()
        seen.append(position)

    encoder_module.encode_planned_to(plan, start, stop, write, workers=workers, chunk_bytes=12_000)
    assert bytes(out) == whole[origin : origin + len(out)]
    assert len(seen) == len(plan.chunks(12_000, start, stop))


def test_python_crc_fallback_gives_the_same_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [{"key": b"k" * (i % 3), "value": b"v" * i, "timestamp": TS + i} for i in range(300)]
    hardware = encode_batches(_table(rows), 0, max_batch_bytes=2000)
    monkeypatch.setattr(encoder_module, "HARDWARE_CRC32C", False)
    assert encode_batches(_table(rows), 0, max_batch_bytes=2000).buffer.tobytes() == hardware.buffer.tobytes()


def test_encode_planned_checks_its_range_and_buffer() -> None:
    plan = plan_batches(_table([{"value": b"v" * 100, "timestamp": TS}] * 30), 0, max_batch_bytes=1000)
    assert len(plan) > 2
    with pytest.raises(ValueError, match="outside the plan"):
        encode_planned(plan, 2, len(plan) + 1)
    with pytest.raises(ValueError, match="at least"):
        encode_planned(plan, 0, 2, out=np.empty(plan.range_bytes(0, 2) - 1, np.uint8))
    assert len(encode_planned(plan, 1, 1)) == 0
    compressed = plan_batches(_table([{"value": b"v" * 100, "timestamp": TS}] * 30), 0, compression="lz4")
    with pytest.raises(ValueError, match="uncompressed plans"):
        encode_planned(compressed, 0, 1, out=np.empty(compressed.range_bytes(0, 1), np.uint8))


def test_header_with_null_key_is_rejected() -> None:
    headers = pa.array([[{"key": None, "value": b"x"}]], type=HEADERS_TYPE)
    table = pa.table(
        {
            "key": pa.array([None], pa.binary()),
            "value": pa.array([b"v"]),
            "timestamp": pa.array([TS]),
            "headers": headers,
        }
    )
    with pytest.raises(SchemaError, match="null key"):
        encode_batches(table, 0)
