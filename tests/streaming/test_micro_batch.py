"""Micro-batch validation and per-partition splitting (no Spark needed: Arrow in, slices out)."""

from __future__ import annotations

import warnings

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from indexer.errors import (
    InvalidTopicError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    SchemaError,
    UnknownTopicOrPartitionError,
)
from indexer.records.columns import APPEND_SCHEMA, HEADERS_TYPE, to_append_table
from streaming.micro_batch import TopicLayout, single_record_batch_sizes, split_batch
from streaming.partitioner import partition_for_keys

with warnings.catch_warnings():  # kafka-python 3 imports its protocol JSON with a deprecated API
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatchBuilder

LAYOUT = TopicLayout(num_partitions=4, max_message_bytes=1048588, segment_bytes=1 << 30)


def _split(table: pa.Table, *, topic: str | None = "t", layout: TopicLayout = LAYOUT, start: int = 0):
    return split_batch(table, default_topic=topic, layout=lambda _t: layout, null_key_start=start, now_ms=1000)


def _kafka_python_size(key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes | None]]) -> int:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
    builder.append(0, timestamp=1700000000000, key=key, value=value, headers=headers)
    return len(builder.build())


HEADER_LISTS = st.lists(st.tuples(st.text(max_size=20), st.one_of(st.none(), st.binary(max_size=200))), max_size=4)
ROWS = st.tuples(st.one_of(st.none(), st.binary(max_size=300)), st.one_of(st.none(), st.binary(max_size=20000)),
                 HEADER_LISTS)


@settings(deadline=None)
@given(st.lists(ROWS, min_size=1, max_size=8))
def test_single_record_batch_size_matches_kafka_python(rows: list) -> None:
    table = to_append_table(
        {"key": [r[0] for r in rows], "value": [r[1] for r in rows],
         "headers": pa.array([[{"key": k, "value": v} for k, v in r[2]] for r in rows], type=HEADERS_TYPE)},
        now_ms=0,
    )
    expected = [_kafka_python_size(k, v, h) for k, v, h in rows]
    assert single_record_batch_sizes(table).tolist() == expected


def test_known_sizes_from_the_spec() -> None:
    # Appendix B: value "a" -> 69 bytes, value "test" -> 72 bytes.
    table = to_append_table({"value": [b"a", b"test"]}, now_ms=0)
    assert single_record_batch_sizes(table).tolist() == [69, 72]


def test_rows_go_where_kafka_sends_them_in_input_order() -> None:
    keys = [f"user-{i % 13}".encode() for i in range(500)]
    table = pa.table({"key": keys, "value": [str(i).encode() for i in range(500)]})
    slices = _split(table)
    expected = partition_for_keys(pa.array(keys), 4)
    assert [s.partition for s in slices] == sorted(set(expected.tolist()))
    for s in slices:
        got = pa.concat_tables(s.chunks)
        assert got.schema == APPEND_SCHEMA
        rows = np.flatnonzero(expected == s.partition)
        assert got.column("value").to_pylist() == [str(i).encode() for i in rows]
        assert got.column("timestamp").to_pylist() == [1000] * rows.size


def test_explicit_partitions_topics_and_null_keys() -> None:
    table = pa.table({
        "value": [b"a", b"b", b"c", b"d", b"e"],
        "topic": ["x", "y", "x", "x", "y"],
        "partition": pa.array([3, None, None, 0, None], type=pa.int32()),
        "extra": [1, 2, 3, 4, 5],
    })
    slices = _split(table, topic=None, start=1)
    got = {(s.topic, s.partition): pa.concat_tables(s.chunks).column("value").to_pylist() for s in slices}
    # Null keys without a partition: round robin per topic from partition 1.
    assert got == {("x", 3): [b"a"], ("x", 1): [b"c"], ("x", 0): [b"d"], ("y", 1): [b"b"], ("y", 2): [b"e"]}


def test_topic_option_overrides_the_column_as_in_spark() -> None:
    table = pa.table({"value": [b"a"], "topic": ["ignored"]})
    assert [s.topic for s in _split(table, topic="t")] == ["t"]


def test_chunks_respect_segment_bytes() -> None:
    table = pa.table({"value": [b"x" * 100] * 50})
    sizes = single_record_batch_sizes(to_append_table(table, now_ms=0))
    layout = TopicLayout(1, 1048588, int(sizes[0]) * 7 + 3)
    (only,) = _split(table, layout=layout)
    assert [c.num_rows for c in only.chunks] == [7] * 7 + [1]
    assert only.num_rows == 50


def test_empty_batch_gives_no_slices_but_is_still_validated() -> None:
    assert _split(pa.table({"value": pa.array([], pa.binary())})) == []
    with pytest.raises(SchemaError):
        _split(pa.table({"key": pa.array([], pa.binary())}))


@pytest.mark.parametrize(
    "table, topic, error, message",
    [
        (pa.table({"key": [b"k"]}), "t", SchemaError, "no 'value' column"),
        (pa.table({"value": [1, 2]}), "t", SchemaError, "column 'value': found type int64"),
        (pa.table({"value": [b"v"], "key": [1.5]}), "t", SchemaError, "column 'key': found type double"),
        (pa.table({"value": [b"v"], "headers": ["h"]}), "t", SchemaError, "column 'headers'"),
        (pa.table({"value": [b"v"], "timestamp": ["now"]}), "t", SchemaError, "column 'timestamp'"),
        (pa.table({"value": [b"v"], "partition": ["0"]}), "t", SchemaError, "column 'partition': found type string"),
        (pa.table({"value": [b"v"], "topic": [7]}), None, SchemaError, "column 'topic': found type int64"),
        (pa.table({"value": [b"v"]}), None, InvalidTopicError, "no 'topic' column"),
        (pa.table({"value": [b"v", b"w"], "topic": ["ok", None]}), None, InvalidTopicError, "row 1 has a null topic"),
        (pa.table({"value": [b"v"], "topic": ["bad/name"]}), None, InvalidTopicError, "'bad/name' is illegal"),
        (pa.table({"value": [b"v"]}), "..", InvalidTopicError, "cannot be '..'"),
        (pa.table({"value": [b"v", b"w"], "partition": [0, 4]}), "t", UnknownTopicOrPartitionError,
         "row 1: partition 4 of topic 't' is outside the topic's partitions 0..3"),
        (pa.table({"value": [b"v"], "partition": [-1]}), "t", UnknownTopicOrPartitionError, "partition -1"),
    ],
)
def test_bad_input_is_rejected_with_a_clear_message(table: pa.Table, topic: str | None, error: type,
                                                    message: str) -> None:
    with pytest.raises(error, match=message):
        _split(table, topic=topic)


def test_record_too_large_names_row_size_and_limit() -> None:
    table = pa.table({"value": [b"small", b"x" * 2000, b"y" * 3000]})
    with pytest.raises(RecordTooLargeError, match=r"row 1 .* 2070-byte record batch, more than max.message.bytes=2000 "
                                                  r"\(2 such record") as info:
        _split(table, layout=TopicLayout(4, 2000, 1 << 30))
    assert (info.value.index, info.value.size, info.value.limit) == (1, 2070, 2000)
    with pytest.raises(RecordBatchTooLargeError, match="more than segment.bytes=1000"):
        _split(table, layout=TopicLayout(4, 1 << 20, 1000))
