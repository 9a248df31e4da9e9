"""Validate a Spark micro-batch and split it into per-partition record tables, before any write.

Input columns follow Spark's Kafka sink (``org.apache.spark.sql.kafka010.KafkaWriter``):

=============  ============================================  =====================================
column         Arrow type                                    meaning
=============  ============================================  =====================================
``value``      binary or string (required; may hold nulls)   record value, null = tombstone
``key``        binary or string                              record key, null = round robin
``topic``      string                                        target topic (the sink's ``topic``
                                                             option, when set, wins, as in Spark)
``partition``  any integer                                   target partition, null = partitioner
``headers``    list<struct<key string, value binary>>        record headers
``timestamp``  Arrow timestamp or int64 ms                   CreateTime, null = now
=============  ============================================  =====================================

Other columns are ignored, as Spark's Kafka sink ignores them. Every check runs over whole
columns (Arrow compute and numpy), never a Python loop per row; the only per-value loop is over the
batch's distinct topic names. Rows keep their input order within a partition (stable sort), so
records of one key stay in order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from indexer.errors import (
    InvalidTopicError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    SchemaError,
    UnknownTopicOrPartitionError,
)
from indexer.file_names import validate_topic
from indexer.records.batch_header import RECORD_BATCH_OVERHEAD
from indexer.records.columns import APPEND_SCHEMA, to_append_table
from streaming.partitioner import partition_for_keys

logger = logging.getLogger(__name__)

SINK_COLUMNS = ("key", "value", "topic", "partition", "headers", "timestamp")


@dataclass(frozen=True, slots=True)
class TopicLayout:
    """What the splitter needs to know about a target topic."""

    num_partitions: int
    max_message_bytes: int
    segment_bytes: int


@dataclass(frozen=True, slots=True)
class PartitionSlice:
    """The records of one batch for one partition, in input order, cut into appendable chunks.

    Each chunk's encoded size is at most ``segment.bytes`` (one append must fit in a segment).
    """

    topic: str
    partition: int
    chunks: tuple[pa.Table, ...]

    @property
    def num_rows(self) -> int:
        return sum(chunk.num_rows for chunk in self.chunks)


def _varint_sizes(values: np.ndarray) -> np.ndarray:
    """Bytes of the zig-zag varint of each int32 in ``values`` (Kafka ``ByteUtils.sizeOfVarint``)."""
    v = values.astype(np.int64)
    z = np.where(v >= 0, 2 * v, -2 * v - 1)
    return 1 + (z >= 1 << 7) + (z >= 1 << 14) + (z >= 1 << 21) + (z >= 1 << 28)


def _lengths(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Byte length of each binary value, -1 for null (the length Kafka writes for a null)."""
    lengths = pc.fill_null(pc.binary_length(array), -1).to_numpy(zero_copy_only=False)
    return np.asarray(lengths, dtype=np.int64)


def _field_sizes(lengths: np.ndarray) -> np.ndarray:
    """Encoded size of a length-prefixed field: varint(length) + max(length, 0)."""
    return np.asarray(_varint_sizes(lengths) + np.maximum(lengths, 0), dtype=np.int64)


def single_record_batch_sizes(records: pa.Table) -> np.ndarray:
    """Exact size (int64) of a v2 batch holding each record alone, uncompressed (spec 3.2, 3.4).

    A record alone has timestamp and offset deltas 0 (one varint byte each), so its batch is
    ``61 + varint(body) + body`` with ``body = attributes(1) + 1 + 1 + key + value + headers``.
    Kafka rejects a record whose batch would exceed ``max.message.bytes``; in a larger batch the
    record costs at most this much (its deltas grow by at most 13 bytes, the shared header saves 61),
    so the sum over rows bounds the encoded size of any run of them.

    ``records`` must have :data:`~indexer.records.columns.APPEND_SCHEMA`.
    """
    headers = records.column("headers").combine_chunks()
    counts = pc.fill_null(pc.list_value_length(headers), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    flat = pc.list_flatten(headers)
    per_header = _field_sizes(_lengths(pc.struct_field(flat, "key"))) + _field_sizes(
        _lengths(pc.struct_field(flat, "value"))
    )
    cumulative = np.concatenate(([0], np.cumsum(per_header)))
    ends = np.cumsum(counts)
    header_bytes = cumulative[ends] - cumulative[ends - counts]
    body = (
        3
        + _field_sizes(_lengths(records.column("key")))
        + _field_sizes(_lengths(records.column("value")))
        + _varint_sizes(counts)
        + header_bytes
    )
    return np.asarray(RECORD_BATCH_OVERHEAD + _varint_sizes(body) + body, dtype=np.int64)


def _topic_codes(table: pa.Table, default_topic: str | None) -> tuple[list[str], np.ndarray]:
    """Distinct topics of the batch and each row's index into them."""
    n = table.num_rows
    if default_topic is not None:
        return [validate_topic(default_topic)], np.zeros(n, dtype=np.int64)
    if "topic" not in table.column_names:
        raise InvalidTopicError("the micro-batch has no 'topic' column and the sink has no default topic")
    column = table.column("topic")
    if pa.types.is_null(column.type) or (n and column.null_count == n):
        raise InvalidTopicError("every row has a null topic and the sink has no default topic")
    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        raise SchemaError(f"column 'topic': found type {column.type}, expected string")
    if column.null_count:
        row = int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
        raise InvalidTopicError(f"row {row} has a null topic and the sink has no default topic")
    encoded = column.combine_chunks().dictionary_encode()
    topics = [validate_topic(t) for t in encoded.dictionary.to_pylist()]
    return topics, encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)


def _partitions(
    table: pa.Table, keys: pa.Array, topics: list[str], codes: np.ndarray, layouts: list[TopicLayout],
    null_key_start: int,
) -> np.ndarray:
    """Each row's partition: the ``partition`` column where set, else Kafka's default partitioner."""
    n = table.num_rows
    explicit = np.full(n, -1, dtype=np.int64)
    has_explicit = np.zeros(n, dtype=bool)
    if "partition" in table.column_names:
        column = table.column("partition")
        if not (pa.types.is_integer(column.type) or pa.types.is_null(column.type)):
            raise SchemaError(f"column 'partition': found type {column.type}, expected int")
        if not pa.types.is_null(column.type):
            has_explicit = column.is_valid().to_numpy(zero_copy_only=False)
            explicit = pc.fill_null(column, 0).to_numpy(zero_copy_only=False).astype(np.int64)
    limits = np.array([layout.num_partitions for layout in layouts], dtype=np.int64)[codes]
    bad = has_explicit & ((explicit < 0) | (explicit >= limits))
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        topic = topics[codes[row]]
        raise UnknownTopicOrPartitionError(
            f"row {row}: partition {explicit[row]} of topic {topic!r} is outside the topic's partitions "
            f"0..{limits[row] - 1}"
        )
    partitions = explicit
    for code in range(len(topics)):
        rows = np.flatnonzero((codes == code) & ~has_explicit)
        if rows.size == n:  # the usual case: one topic, no partition column; no copy of the keys
            partitions[:] = partition_for_keys(keys, layouts[code].num_partitions, null_key_start=null_key_start)
        elif rows.size:
            partitions[rows] = partition_for_keys(keys.take(pa.array(rows)), layouts[code].num_partitions,
                                                  null_key_start=null_key_start)
    return partitions


def _check_sizes(sizes: np.ndarray, topics: list[str], codes: np.ndarray, layouts: list[TopicLayout]) -> None:
    """Reject the batch if one record alone would not fit ``max.message.bytes`` or ``segment.bytes``."""
    max_message = np.array([layout.max_message_bytes for layout in layouts], dtype=np.int64)[codes]
    too_large = np.flatnonzero(sizes > max_message)
    if too_large.size:
        row = int(too_large[0])
        raise RecordTooLargeError(
            f"row {row} of the micro-batch for topic {topics[codes[row]]!r} needs a {sizes[row]}-byte record batch, "
            f"more than max.message.bytes={max_message[row]} ({too_large.size} such record(s))",
            size=int(sizes[row]), limit=int(max_message[row]), index=row,
        )
    segment = np.array([layout.segment_bytes for layout in layouts], dtype=np.int64)[codes]
    too_large = np.flatnonzero(sizes > segment)
    if too_large.size:
        row = int(too_large[0])
        raise RecordBatchTooLargeError(
            f"row {row} of the micro-batch for topic {topics[codes[row]]!r} needs a {sizes[row]}-byte record batch, "
            f"more than segment.bytes={segment[row]}"
        )


def _chunk_bounds(sizes: np.ndarray, budget: int) -> list[tuple[int, int]]:
    """Cut rows into consecutive runs whose summed sizes stay within ``budget`` (each size <= budget)."""
    bounds = []
    start = 0
    cumulative = np.cumsum(sizes)
    base = 0
    n = sizes.size
    while start < n:
        stop = int(np.searchsorted(cumulative, base + budget, side="right"))
        bounds.append((start, stop))
        base = int(cumulative[stop - 1])
        start = stop
    return bounds


def split_batch(
    table: pa.Table,
    *,
    default_topic: str | None,
    layout: Callable[[str], TopicLayout],
    null_key_start: int,
    now_ms: int,
) -> list[PartitionSlice]:
    """Validate ``table`` (a micro-batch as Arrow) and split it per (topic, partition).

    Args:
        table: the micro-batch with the columns in the module docstring.
        default_topic: the sink's ``topic`` option; when set every row goes to it.
        layout: partitions and size limits of a topic (called once per distinct topic).
        null_key_start: first partition for null-key rows (round robin from there).
        now_ms: timestamp given to rows whose timestamp is null.

    Returns:
        One slice per partition that gets records, ordered by topic then partition.

    Raises:
        SchemaError: no ``value`` column, or a column of the wrong type.
        InvalidTopicError: no topic for a row, or an illegal topic name.
        UnknownTopicOrPartitionError: a partition outside the topic's partitions.
        RecordTooLargeError: a record whose batch would exceed ``max.message.bytes``.
        RecordBatchTooLargeError: a record whose batch would exceed ``segment.bytes``.
    """
    if "value" not in table.column_names:
        raise SchemaError(f"the micro-batch has no 'value' column (columns: {table.column_names})")
    ignored = [name for name in table.column_names if name not in SINK_COLUMNS]
    if ignored:
        logger.debug("ignoring micro-batch columns %s", ignored)
    records = to_append_table(
        table.select([name for name in APPEND_SCHEMA.names if name in table.column_names]), now_ms=now_ms
    )
    if table.num_rows == 0:
        return []
    topics, codes = _topic_codes(table, default_topic)
    layouts = [layout(topic) for topic in topics]
    partitions = _partitions(table, records.column("key").combine_chunks(), topics, codes, layouts, null_key_start)
    sizes = single_record_batch_sizes(records)
    _check_sizes(sizes, topics, codes, layouts)

    width = max(layout.num_partitions for layout in layouts)
    group = codes * width + partitions
    # A stable sort keeps input order within a partition; on 16-bit keys numpy uses a radix sort.
    order = np.argsort(group.astype(np.int16) if group.max() < 2**15 else group, kind="stable")
    grouped = records.take(pa.array(order))
    sorted_group = group[order]
    sorted_sizes = sizes[order]
    starts = np.concatenate(([0], np.flatnonzero(np.diff(sorted_group)) + 1))
    ends = np.concatenate((starts[1:], [order.size]))
    slices = []
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        code, partition = divmod(int(sorted_group[start]), width)
        budget = layouts[code].segment_bytes
        chunks = tuple(
            grouped.slice(start + lo, hi - lo) for lo, hi in _chunk_bounds(sorted_sizes[start:end], budget)
        )
        slices.append(PartitionSlice(topics[code], partition, chunks))
    return slices
