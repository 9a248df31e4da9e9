"""Tests of Log.append_encoded: batches encoded with any base offset get the log's next offsets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from indexer.config import LogConfig
from indexer.errors import RecordBatchTooLargeError, RecordTooLargeError
from indexer.log import Log
from indexer.records.batch_header import CREATE_TIME, LOG_APPEND_TIME, compute_batch_crc, parse_batch_header
from indexer.records.columns import to_append_table
from indexer.records.encoder import EncodedBatches, encode_batches, plan_batches, planned_batches
from tests.indexer.conftest import T0


def records(n: int, start: int = 0) -> pa.Table:
    """``n`` keyed records with increasing timestamps and a header on every third."""
    return to_append_table(
        {
            "key": [f"k{i % 7}".encode() for i in range(start, start + n)],
            "value": [f"value-{i}".encode() * (1 + i % 5) for i in range(start, start + n)],
            "timestamp": [T0 + i for i in range(start, start + n)],
            "headers": [[{"key": "h", "value": b"x"}] if i % 3 == 0 else None for i in range(start, start + n)],
        },
        now_ms=T0,
    )


def encode(table: pa.Table, log: Log, **kwargs: Any) -> EncodedBatches:
    return encode_batches(table, 0, max_batch_bytes=log.config.max_message_bytes, **kwargs)


def files(log: Log) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(log.directory.iterdir()) if p.name.endswith(("log", "index"))}


CONFIG = {"max.message.bytes": 600, "segment.bytes": 2000, "index.interval.bytes": 500}


def test_files_are_those_of_append_of_the_same_records(open_log: Any) -> None:
    appended, encoded = open_log("a-0", **CONFIG), open_log("b-0", **CONFIG)
    for log in (appended, encoded):
        log.append(records(20), now_ms=T0)
    expected = [appended.append(records(n, start), now_ms=T0) for n, start in ((150, 20), (1, 170), (90, 171))]
    got = [
        encoded.append_encoded(encode(records(n, start), encoded), now_ms=T0)
        for n, start in ((150, 20), (1, 170), (90, 171))
    ]
    assert got == expected
    assert sum(info.rolled for info in got) >= 3  # the appends span segments
    assert encoded.num_segments == appended.num_segments
    appended.close()
    encoded.close()
    assert files(encoded) == files(appended)


def test_offsets_are_written_into_the_buffer_and_crcs_stay_valid(open_log: Any) -> None:
    log = open_log("t-0", **CONFIG)
    log.append(records(5), now_ms=T0)
    batches = encode(records(30), log)
    info = log.append_encoded(batches)
    assert (info.first_offset, info.last_offset, info.num_records) == (5, 34, 30)
    assert batches.base_offsets[0] == 0  # the caller's metadata keeps the encoder's offsets
    for i in range(len(batches)):
        batch = bytes(batches.batch(i))
        header = parse_batch_header(batch, 0)
        assert header.base_offset == 5 + int(batches.base_offsets[i])
        assert compute_batch_crc(batch) == header.crc
    log.update_high_watermark(log.log_end_offset)
    assert log.read_records(5).column("value").to_pylist() == records(30).column("value").to_pylist()


def test_a_batch_larger_than_segment_bytes_writes_nothing(open_log: Any) -> None:
    log = open_log("t-0", **{"segment.bytes": 300})
    log.append(records(1), now_ms=T0)
    before = (log.log_end_offset, log.size_in_bytes, files(log))
    with pytest.raises(RecordBatchTooLargeError, match=r"at offset 1 is larger than segment.bytes = 300"):
        log.append_encoded(encode(records(40), log))
    assert (log.log_end_offset, log.size_in_bytes, files(log)) == before


def test_a_batch_larger_than_max_message_bytes_is_refused(open_log: Any) -> None:
    """Kafka's UnifiedLogTest.testMessageSizeCheck: RecordTooLargeException, nothing stored."""
    log = open_log("m-0", **{"max.message.bytes": 300})
    log.append(records(1), now_ms=T0)
    before = (log.log_end_offset, log.size_in_bytes, files(log))
    encoded = encode_batches(records(40), 0, max_batch_bytes=5000)
    with pytest.raises(RecordTooLargeError, match=r"at offset 1 is larger than max.message.bytes = 300") as info:
        log.append_encoded(encoded)
    assert info.value.limit == 300 and info.value.size == int(encoded.sizes[0])
    assert (log.log_end_offset, log.size_in_bytes, files(log)) == before


def test_log_append_time_topics_take_batches_encoded_with_the_append_time(open_log: Any) -> None:
    appended = open_log("a-0", **{"message.timestamp.type": "LogAppendTime"})
    log = open_log("b-0", **{"message.timestamp.type": "LogAppendTime"})
    with pytest.raises(ValueError, match="timestamp_type=LOG_APPEND_TIME"):
        log.append_encoded(encode(records(3), log))
    expected = appended.append(records(3), now_ms=T0 + 99)
    info = log.append_encoded(encode(records(3), log, timestamp_type=LOG_APPEND_TIME, log_append_time_ms=T0 + 99))
    assert info == expected
    assert info.log_append_time_ms == T0 + 99
    log.update_high_watermark(log.log_end_offset)
    table = log.read_records(0)
    assert table.column("timestamp").to_pylist() == [T0 + 99] * 3
    assert table.column("timestampType").to_pylist() == [LOG_APPEND_TIME] * 3
    create_time = open_log("c-0")
    with pytest.raises(ValueError, match="timestamp_type=CREATE_TIME"):
        create_time.append_encoded(encode(records(3), log, timestamp_type=LOG_APPEND_TIME, log_append_time_ms=T0))
    assert create_time.log_end_offset == 0


def test_batches_must_carry_the_topics_codec(open_log: Any) -> None:
    gzip = open_log("g-0", **{"compression.type": "gzip"})
    with pytest.raises(ValueError, match="compression.type is gzip"):
        gzip.append_encoded(encode(records(50), gzip, compression="lz4"))
    assert gzip.append_encoded(encode(records(50), gzip, compression="gzip")).num_records == 50
    # One small record does not shrink with gzip: the encoder writes it uncompressed, as Log.append stores
    # it (the sink's micro-batches of a row or two per partition; they were refused).
    tiny = encode(records(1, 50), gzip, compression="gzip")
    assert tiny.buffer[21 + 1] & 0x07 == 0  # the attributes' codec bits: none
    assert gzip.append_encoded(tiny).num_records == 1
    uncompressed = open_log("u-0", **{"compression.type": "uncompressed"})
    with pytest.raises(ValueError, match="compression.type is uncompressed"):
        uncompressed.append_encoded(encode(records(50), uncompressed, compression="gzip"))
    producer = open_log("p-0")  # compression.type=producer: any codec is kept as it is
    producer.append_encoded(encode(records(50), producer, compression="lz4"))
    producer.append_encoded(encode(records(50, 50), producer))
    for log in (gzip, producer):
        log.update_high_watermark(log.log_end_offset)
    assert producer.read_records(0).column("value").to_pylist() == records(100).column("value").to_pylist()
    assert gzip.read_records(0).column("value").to_pylist() == records(51).column("value").to_pylist()


def test_what_cannot_be_stored_as_it_is_is_refused(open_log: Any, tmp_path: Path) -> None:
    log = open_log("t-0")
    table = records(10)
    metadata_only = planned_batches(plan_batches(table, 0))  # sizes and offsets, no bytes
    with pytest.raises(ValueError, match="back to back"):
        log.append_encoded(metadata_only)
    frozen = encode(table, log)
    frozen.buffer.setflags(write=False)
    with pytest.raises(ValueError, match="read-only"):
        log.append_encoded(frozen)
    legacy = encode(table, log)
    legacy.buffer[legacy.positions + 16] = 1  # magic v1
    with pytest.raises(ValueError, match="only v2"):
        log.append_encoded(legacy)
    assert log.log_end_offset == 0
    empty = log.append_encoded(encode(table.slice(0, 0), log))
    assert (empty.first_offset, empty.last_offset, empty.num_records) == (0, -1, 0)
    log.append(records(1))
    log.close()
    with Log.open(tmp_path / "t-0", LogConfig(), read_only=True) as reader:
        with pytest.raises(ValueError, match="read-only"):
            reader.append_encoded(encode(table, reader))


def test_batches_of_any_base_offset_are_renumbered(open_log: Any) -> None:
    log = open_log("t-0")
    batches = encode_batches(records(10), 1000, max_batch_bytes=200)
    info = log.append_encoded(batches)
    assert (info.first_offset, info.last_offset, info.num_batches) == (0, 9, len(batches))
    log.update_high_watermark(log.log_end_offset)
    assert log.read_records(0).column("offset").to_pylist() == list(range(10))
    assert log.read_records(0).column("timestampType").to_pylist() == [CREATE_TIME] * 10
