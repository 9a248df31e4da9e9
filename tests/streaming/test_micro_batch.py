"""Micro-batch validation, per-partition splitting and encoding (no Spark needed: Arrow in, encoded
batches out), record batch by record batch and reassembled in row order from any arrival order."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pytest

from indexer.errors import (
    InvalidTimestampError,
    InvalidTopicError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    SchemaError,
    UnknownTopicOrPartitionError,
)
from indexer.records.batch_header import LOG_APPEND_TIME
from indexer.records.decoder import decode_records
from streaming import micro_batch
from streaming.micro_batch import MicroBatchEncoder, PartitionBatches, TopicLayout, split_record_batch
from streaming.partitioner import partition_for_keys

LAYOUT = TopicLayout(num_partitions=4, max_message_bytes=1048588, segment_bytes=1 << 30)


def _split(table: pa.Table, *, topic: str | None = "t", layout: TopicLayout = LAYOUT, start: int = 0):
    return split_record_batch(table, default_topic=topic, layout=lambda _t: layout, null_key_start=start, now_ms=1000)


def _decoded(part: PartitionBatches) -> pa.Table:
    """A partition's records as a reader sees them (each piece's offsets count from 0)."""
    return pa.concat_tables(decode_records(piece.buffer) for piece in part.pieces)


def _values(parts: tuple[PartitionBatches, ...] | list[PartitionBatches]) -> dict[tuple[str, int], list[bytes]]:
    return {(p.topic, p.partition): _decoded(p).column("value").to_pylist() for p in parts}


def _encode_arrivals(
    table: pa.Table,
    rows_per_batch: int,
    *,
    topic: str | None = "t",
    layout: TopicLayout = LAYOUT,
    start: int = 0,
    seed: int = 0,
) -> list[PartitionBatches]:
    """``table`` cut into record batches that arrive in a random order, as Spark's collect sends them."""
    batches = table.to_batches(max_chunksize=rows_per_batch)
    arrival = list(range(len(batches)))
    random.Random(seed).shuffle(arrival)
    with ThreadPoolExecutor(2) as pool:
        encoder = MicroBatchEncoder(
            pool, default_topic=topic, layout=lambda _t: layout, null_key_start=start, now_ms=1000
        )
        for index in arrival:
            encoder.submit(batches[index])
        return encoder.finish([arrival.index(i) for i in range(len(batches))])


def test_rows_go_where_kafka_sends_them_in_input_order() -> None:
    keys = [f"user-{i % 13}".encode() for i in range(500)]
    table = pa.table({"key": keys, "value": [str(i).encode() for i in range(500)]})
    split = _split(table)
    expected = partition_for_keys(pa.array(keys), 4)
    assert [p.partition for p in split.parts] == sorted(set(expected.tolist()))
    assert split.num_rows == 500 and split.round_robin_rows == {}
    for part in split.parts:
        records = _decoded(part)
        rows = np.flatnonzero(expected == part.partition)
        assert records.column("offset").to_pylist() == list(range(rows.size))
        assert records.column("key").to_pylist() == [keys[i] for i in rows]
        assert records.column("value").to_pylist() == [str(i).encode() for i in rows]
        assert records.column("timestamp").to_pylist() == [1000] * rows.size


def test_explicit_partitions_topics_and_null_keys() -> None:
    table = pa.table(
        {
            "value": [b"a", b"b", b"c", b"d", b"e"],
            "topic": ["x", "y", "x", "x", "y"],
            "partition": pa.array([3, None, None, 0, None], type=pa.int32()),
            "extra": [1, 2, 3, 4, 5],
        }
    )
    split = _split(table, topic=None, start=1)
    # Null keys without a partition: round robin per topic from partition 1.
    assert _values(split.parts) == {
        ("x", 3): [b"a"],
        ("x", 1): [b"c"],
        ("x", 0): [b"d"],
        ("y", 1): [b"b"],
        ("y", 2): [b"e"],
    }
    assert split.round_robin_rows == {"x": 1, "y": 2}


def test_topic_option_overrides_the_column_as_in_spark() -> None:
    table = pa.table({"value": [b"a"], "topic": ["ignored"]})
    assert [p.topic for p in _split(table, topic="t").parts] == ["t"]


def test_batches_fit_max_message_bytes_and_segment_bytes() -> None:
    table = pa.table({"value": [b"x" * 100] * 50})
    for layout in (TopicLayout(1, 1048588, 1000), TopicLayout(1, 1000, 1 << 30)):
        (only,) = _split(table, layout=layout).parts
        (piece,) = only.pieces
        assert len(piece) > 1 and int(piece.sizes.max()) <= 1000
        assert only.num_rows == 50


def test_encoding_follows_the_topic() -> None:
    table = pa.table({"value": [b"x" * 100] * 50})
    (part,) = _split(table, layout=TopicLayout(1, 1048588, 1 << 30, "gzip", log_append_time=True)).parts
    (piece,) = part.pieces
    assert piece.total_bytes < 50 * 100
    records = decode_records(piece.buffer)
    assert records.column("timestampType").to_pylist() == [LOG_APPEND_TIME] * 50
    assert records.column("timestamp").to_pylist() == [1000] * 50


def test_empty_batch_gives_no_parts_but_is_still_validated() -> None:
    assert _split(pa.table({"value": pa.array([], pa.binary())})).parts == ()
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
        (
            pa.table({"value": [b"v", b"w"], "partition": [0, 4]}),
            "t",
            UnknownTopicOrPartitionError,
            "row 1: partition 4 of topic 't' is outside the topic's partitions 0..3",
        ),
        (pa.table({"value": [b"v"], "partition": [-1]}), "t", UnknownTopicOrPartitionError, "partition -1"),
        (
            pa.Table.from_arrays([pa.array([b"v"]), pa.array([b"k"]), pa.array(["j"])], ["value", "key", "key"]),
            "t",
            SchemaError,
            r"column 'key' appears 2 times in the micro-batch \(columns: \['value', 'key', 'key'\]\)",
        ),
    ],
)
def test_bad_input_is_rejected_with_a_clear_message(
    table: pa.Table, topic: str | None, error: type, message: str
) -> None:
    with pytest.raises(error, match=message):
        _split(table, topic=topic)


def test_record_too_large_names_the_first_such_row_its_size_and_the_limit() -> None:
    table = pa.table({"key": [b"a", b"b", b"c", b"d"], "value": [b"small", b"y" * 3000, b"x" * 2000, b"z"]})
    with pytest.raises(
        RecordTooLargeError, match=r"row 1 .* 3071-byte record batch, more than max.message.bytes=2000$"
    ) as info:
        _split(table, layout=TopicLayout(4, 2000, 1 << 30))
    assert (info.value.index, info.value.size, info.value.limit) == (1, 3071, 2000)
    with pytest.raises(RecordBatchTooLargeError, match="row 1 .* more than segment.bytes=1000"):
        _split(table, layout=TopicLayout(4, 1 << 20, 1000))


def test_arrivals_in_any_order_give_the_partitions_of_the_whole_micro_batch() -> None:
    n = 1000
    keys = pa.array([None if i % 3 == 0 else f"user-{i % 17}".encode() for i in range(n)], pa.binary())
    table = pa.table({"key": keys, "value": [str(i).encode() for i in range(n)]})
    expected = _values(_split(table, start=7).parts)  # one record batch, null keys round robin from 7
    for rows_per_batch, seed in ((1000, 0), (101, 1), (64, 2), (7, 3)):
        parts = _encode_arrivals(table, rows_per_batch, start=7, seed=seed)
        assert _values(parts) == expected


def test_a_keyless_batch_is_relabelled_not_split_again(monkeypatch: pytest.MonkeyPatch) -> None:
    table = pa.table({"value": [str(i).encode() for i in range(999)], "topic": ["a", "b", "a"] * 333})
    expected = _values(_split(table, topic=None, start=5).parts)
    splits = []
    monkeypatch.setattr(
        micro_batch, "split_record_batch", lambda *a, **k: splits.append(1) or split_record_batch(*a, **k)
    )  # type: ignore[func-returns-value]
    parts = _encode_arrivals(table, 101, topic=None, start=5, seed=7)  # odd batches: most start mid-round
    assert _values(parts) == expected
    assert len(splits) == 10  # once per record batch
    mixed = table.append_column("key", pa.array([b"k" if i % 2 else None for i in range(999)], pa.binary()))
    splits.clear()
    assert _values(_encode_arrivals(mixed, 101, topic=None, start=5, seed=7)) == _values(
        _split(mixed, topic=None, start=5).parts
    )
    assert len(splits) > 10  # keyed and null-key rows mixed: split again


def test_arrivals_report_the_first_bad_row_of_the_micro_batch() -> None:
    values = [b"v"] * 100
    values[77] = b"x" * 500
    values[33] = b"y" * 600
    table = pa.table({"value": values, "partition": pa.array([1] * 100, pa.int32())})
    layout = TopicLayout(4, 300, 1 << 30)
    for seed in range(4):
        with pytest.raises(RecordTooLargeError, match="row 33 ") as info:
            _encode_arrivals(table, 10, layout=layout, seed=seed)
        assert info.value.index == 33
    table = table.set_column(1, "partition", pa.array([1] * 60 + [9] + [1] * 39, pa.int32()))
    with pytest.raises(UnknownTopicOrPartitionError, match="row 60: partition 9"):
        _encode_arrivals(table, 10, seed=5)
    before_1970 = pa.array([1_000] * 45 + [-1_000] + [1_000] * 54, pa.int64()).cast(pa.timestamp("us", tz="UTC"))
    with pytest.raises(InvalidTimestampError, match="^row 45: timestamp -1 is negative") as bad_time:
        _encode_arrivals(pa.table({"value": [b"v"] * 100, "timestamp": before_1970}), 10, seed=6)
    assert bad_time.value.index == 45
