"""Validate a Spark micro-batch, split it per partition and encode it, record batch by record batch.

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

Other columns are ignored, as Spark's Kafka sink ignores them.

A micro-batch reaches the driver as Arrow record batches, one Spark task's at a time and out of
order (:mod:`streaming.arrow_collect`). :class:`MicroBatchEncoder` hands each record batch to a
thread pool as it arrives: :func:`split_record_batch` validates it, picks each row's partition,
groups the rows per partition and encodes each group as Kafka v2 batches with offsets from 0, so this
work overlaps Spark producing the rest. Once the order of the record batches is known,
:meth:`MicroBatchEncoder.finish` lines the encoded pieces up per partition, in the micro-batch's row
order; the log gives them their offsets when they are appended (``Log.append_encoded``). Every
input problem surfaces before that, so a bad micro-batch writes nothing.

Every check runs over whole columns (Arrow compute, numpy, the numba partitioner and encoder), never
a Python loop per row; the only per-value loop is over a record batch's distinct topic names. Rows
keep their input order within a partition (stable sort), so records of one key stay in order.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from indexer.errors import (
    InvalidTopicError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    SchemaError,
    SeglogError,
    UnknownTopicOrPartitionError,
)
from indexer.file_names import TopicPartition, validate_topic
from indexer.records.batch_header import CREATE_TIME, LOG_APPEND_TIME
from indexer.records.columns import APPEND_SCHEMA, to_append_table
from indexer.records.encoder import EncodedBatches, encode_batches
from streaming.partitioner import partition_for_keys

logger = logging.getLogger(__name__)

SINK_COLUMNS = ("key", "value", "topic", "partition", "headers", "timestamp")


def check_sink_columns_once(names: Sequence[str]) -> None:
    """Each of :data:`SINK_COLUMNS` at most once among a micro-batch's column ``names`` (a join's leftover
    ``key``, say). Spark's Kafka sink silently takes the first of them; seglog refuses rather than guess
    which one was meant.

    Raises:
        SchemaError: one line naming the column, how often it appears and the micro-batch's columns.
    """
    for name in SINK_COLUMNS:
        count = names.count(name)
        if count > 1:
            raise SchemaError(
                f"column {name!r} appears {count} times in the micro-batch (columns: {list(names)}): drop or "
                "rename all but one (Spark's Kafka sink would silently take the first)"
            )


@dataclass(frozen=True, slots=True)
class TopicLayout:
    """What splitting and encoding need to know about a target topic."""

    num_partitions: int
    max_message_bytes: int
    segment_bytes: int
    compression: str = "none"
    log_append_time: bool = False
    batch_size: int | None = None  # the topic's batch.size: the size batches are packed up to

    @property
    def max_batch_bytes(self) -> int:
        """Largest Kafka batch to encode: it must fit ``max.message.bytes`` and a segment."""
        return min(self.max_message_bytes, self.segment_bytes)


@dataclass(frozen=True)
class PartitionBatches:
    """Encoded records for one partition, in row order: pieces of Kafka batches with offsets from 0
    each, appended one after the other (``Log.append_encoded`` gives them their offsets)."""

    topic: str
    partition: int
    pieces: tuple[EncodedBatches, ...]

    @property
    def num_rows(self) -> int:
        return sum(int(piece.record_counts.sum()) for piece in self.pieces)


@dataclass(frozen=True)
class SplitBatch:
    """One record batch of a micro-batch, validated, split per partition and encoded.

    ``round_robin_rows`` counts, per topic, the rows the partitioner spread round robin (null key, no
    partition): the next record batch's round robin starts after them.
    """

    num_rows: int
    round_robin_rows: Mapping[str, int]
    parts: tuple[PartitionBatches, ...]


_GIVE_TOPIC = "give SegmentLogSink a topic= or the micro-batch a 'topic' column"
"""What to do when a row has no topic, as Spark's Kafka sink says it ("Use the topic option for setting a topic")."""


def _topic_codes(table: pa.Table, default_topic: str | None, first_row: int) -> tuple[list[str], np.ndarray]:
    """Distinct topics of the batch and each row's index into them."""
    n = table.num_rows
    if default_topic is not None:
        return [validate_topic(default_topic)], np.zeros(n, dtype=np.int64)
    if "topic" not in table.column_names:
        raise InvalidTopicError(
            f"the micro-batch has no 'topic' column and the sink has no default topic: {_GIVE_TOPIC}"
        )
    column = table.column("topic")
    if pa.types.is_null(column.type) or (n and column.null_count == n):
        raise InvalidTopicError(f"every row has a null topic and the sink has no default topic: {_GIVE_TOPIC}")
    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        raise SchemaError(f"column 'topic': found type {column.type}, expected string")
    if column.null_count:
        row = first_row + int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
        raise InvalidTopicError(f"row {row} has a null topic and the sink has no default topic: {_GIVE_TOPIC}")
    encoded = column.combine_chunks().dictionary_encode()
    topics = [validate_topic(t) for t in encoded.dictionary.to_pylist()]
    return topics, encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)


def _check_partition_type(table: pa.Table) -> None:
    """A ``partition`` column must hold integers (or only nulls).

    Raises:
        SchemaError: it has another type.
    """
    if "partition" in table.column_names:
        kind = table.schema.field("partition").type
        if not (pa.types.is_integer(kind) or pa.types.is_null(kind)):
            raise SchemaError(f"column 'partition': found type {kind}, expected int")


def _partitions(
    table: pa.Table,
    keys: pa.Array,
    topics: list[str],
    codes: np.ndarray,
    layouts: list[TopicLayout],
    null_key_starts: list[int],
    first_row: int,
) -> tuple[np.ndarray, dict[str, int]]:
    """Each row's partition: the ``partition`` column where set, else Kafka's default partitioner;
    and per topic the rows spread round robin (null key, no partition), from ``null_key_starts``."""
    n = table.num_rows
    explicit = np.full(n, -1, dtype=np.int64)
    has_explicit = np.zeros(n, dtype=bool)
    if "partition" in table.column_names:
        column = table.column("partition")
        if not pa.types.is_null(column.type):
            has_explicit = column.is_valid().to_numpy(zero_copy_only=False)
            explicit = pc.fill_null(column, 0).to_numpy(zero_copy_only=False).astype(np.int64)
    limits = np.array([layout.num_partitions for layout in layouts], dtype=np.int64)[codes]
    bad = has_explicit & ((explicit < 0) | (explicit >= limits))
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        topic = topics[codes[row]]
        raise UnknownTopicOrPartitionError(
            f"row {first_row + row}: partition {explicit[row]} of topic {topic!r} is outside the topic's "
            f"partitions 0..{limits[row] - 1}"
        )
    partitions = explicit
    round_robin: dict[str, int] = {}
    for code in range(len(topics)):
        rows = np.flatnonzero((codes == code) & ~has_explicit)
        if not rows.size:
            continue
        topic_keys = keys if rows.size == n else keys.take(pa.array(rows))  # usually all rows: no copy
        chosen = partition_for_keys(topic_keys, layouts[code].num_partitions, null_key_start=null_key_starts[code])
        if rows.size == n:
            partitions[:] = chosen
        else:
            partitions[rows] = chosen
        if topic_keys.null_count:
            round_robin[topics[code]] = topic_keys.null_count
    return partitions, round_robin


def _too_large(error: RecordTooLargeError, row: int, topic: str, layout: TopicLayout) -> SeglogError:
    """The encoder's error for one record, told in the micro-batch's terms (its row, its topic's limits)."""
    size = int(error.size or 0)
    if size > layout.max_message_bytes:
        return RecordTooLargeError(
            f"row {row} of the micro-batch for topic {topic!r} needs a {size}-byte record batch, more than "
            f"max.message.bytes={layout.max_message_bytes}",
            size=size,
            limit=layout.max_message_bytes,
            index=row,
        )
    return RecordBatchTooLargeError(
        f"row {row} of the micro-batch for topic {topic!r} needs a {size}-byte record batch, more than "
        f"segment.bytes={layout.segment_bytes}"
    )


def split_record_batch(
    batch: pa.RecordBatch | pa.Table,
    *,
    default_topic: str | None,
    layout: Callable[[str], TopicLayout],
    null_key_start: int,
    now_ms: int,
    first_row: int = 0,
    round_robin_before: Mapping[str, int] | None = None,
) -> SplitBatch:
    """Validate ``batch`` (a micro-batch or a record batch of one), split it per (topic, partition)
    and encode each partition's rows as Kafka batches with offsets from 0.

    Args:
        batch: rows with the columns in the module docstring.
        default_topic: the sink's ``topic`` option; when set every row goes to it.
        layout: partitions, size limits and encoding of a topic (called once per distinct topic).
        null_key_start: first partition of the micro-batch's null-key rows (round robin from there).
        now_ms: timestamp given to rows whose timestamp is null, and the LogAppendTime of batches
            for topics with ``message.timestamp.type=LogAppendTime``.
        first_row: the micro-batch row of ``batch``'s first row (error messages count from it).
        round_robin_before: per topic, the rows spread round robin in the micro-batch's earlier
            record batches: this batch's round robin goes on after them.

    Returns:
        The batch's partitions (ordered by topic then partition), each with one piece.

    Raises:
        SchemaError: no ``value`` column, a column of the wrong type, or a sink column twice.
        InvalidTimestampError: a negative timestamp (Kafka's producer refuses them).
        InvalidTopicError: no topic for a row, or an illegal topic name.
        UnknownTopicOrPartitionError: a partition outside the topic's partitions.
        RecordTooLargeError: a record whose batch would exceed ``max.message.bytes`` (the first such row).
        RecordBatchTooLargeError: a record whose batch would exceed ``segment.bytes``.
    """
    table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
    check_sink_columns_once(table.column_names)
    if "value" not in table.column_names:
        raise SchemaError(f"the micro-batch has no 'value' column (columns: {table.column_names})")
    ignored = [name for name in table.column_names if name not in SINK_COLUMNS]
    if ignored:
        logger.debug("ignoring micro-batch columns %s", ignored)
    records = to_append_table(
        table.select([name for name in APPEND_SCHEMA.names if name in table.column_names]),
        now_ms=now_ms,
        first_row=first_row,
    )
    # Decided by the schema, as Spark's Kafka sink does at the start of a query: an empty micro-batch
    # (and the schema check of the sink, which has no rows) fails on them too.
    topics, codes = _topic_codes(table, default_topic, first_row)
    _check_partition_type(table)
    if table.num_rows == 0:
        return SplitBatch(0, {}, ())
    layouts = [layout(topic) for topic in topics]
    before = round_robin_before or {}
    starts = [null_key_start + before.get(topic, 0) for topic in topics]
    partitions, round_robin = _partitions(
        table, records.column("key").combine_chunks(), topics, codes, layouts, starts, first_row
    )
    width = max(layout.num_partitions for layout in layouts)
    group = codes * width + partitions
    # A stable sort keeps input order within a partition; on 16-bit keys numpy uses a radix sort.
    order = np.argsort(group.astype(np.int16) if group.max() < 2**15 else group, kind="stable")
    sorted_group = group[order]
    bounds = np.concatenate(([0], np.flatnonzero(np.diff(sorted_group)) + 1, [order.size])).tolist()
    grouped = records if len(bounds) == 2 else records.take(pa.array(order))  # one gather: cheaper than one per part
    parts = []
    errors: list[tuple[int, SeglogError]] = []
    for start, end in zip(bounds[:-1], bounds[1:], strict=True):
        code, partition = divmod(int(sorted_group[start]), width)
        topic_layout = layouts[code]
        rows = grouped.slice(start, end - start)
        try:
            encoded = encode_batches(
                rows,
                0,
                max_batch_bytes=topic_layout.max_batch_bytes,
                batch_size=topic_layout.batch_size,
                compression=topic_layout.compression,
                timestamp_type=LOG_APPEND_TIME if topic_layout.log_append_time else CREATE_TIME,
                log_append_time_ms=now_ms if topic_layout.log_append_time else None,
            )
        except RecordTooLargeError as e:  # the first such row of this partition; report the first of all
            row = first_row + int(order[start + int(e.index or 0)])
            errors.append((row, _too_large(e, row, topics[code], topic_layout)))
            continue
        parts.append(PartitionBatches(topics[code], partition, (encoded,)))
    if errors:
        raise min(errors, key=lambda found: found[0])[1]
    return SplitBatch(table.num_rows, round_robin, tuple(parts))


class MicroBatchEncoder:
    """Splits and encodes the record batches of one micro-batch on a thread pool as they arrive, then
    lines them up per partition in the micro-batch's row order.

    Arrival order is not row order, and the round robin of null-key rows and the row numbers in error
    messages depend on the record batches before, so each batch is first split as if it came first.
    :meth:`finish` then fixes, in row order, the batches for which that guess was wrong. One whose
    round robin starts ``d`` later only moves its rows from partition ``p`` to ``(p + d) % partitions``
    when all its rows of that topic went round robin (a keyless stream): its parts are relabelled. A
    batch that mixes keyed and null-key rows is split again, and one that failed is split again in
    row order to raise its error with the micro-batch's row numbers. Not thread-safe: one caller
    feeds it.
    """

    def __init__(
        self,
        executor: Executor,
        *,
        default_topic: str | None,
        layout: Callable[[str], TopicLayout],
        null_key_start: int,
        now_ms: int,
    ) -> None:
        self._executor = executor
        self._default_topic = default_topic
        self._layout = layout
        self._null_key_start = null_key_start
        self._now_ms = now_ms
        self._batches: list[pa.RecordBatch] = []
        self._futures: list[Future[SplitBatch]] = []
        self._timing = threading.Lock()
        self.split_ms = 0.0  # time the pool spent splitting and encoding (mostly overlapping the collect)

    def submit(self, batch: pa.RecordBatch) -> None:
        """Start splitting and encoding the next record batch to arrive."""
        self._batches.append(batch)
        self._futures.append(self._executor.submit(self._split, batch, 0, None))

    def _split(self, batch: pa.RecordBatch, first_row: int, before: Mapping[str, int] | None) -> SplitBatch:
        started = time.perf_counter()
        try:
            return split_record_batch(
                batch,
                default_topic=self._default_topic,
                layout=self._layout,
                null_key_start=self._null_key_start,
                now_ms=self._now_ms,
                first_row=first_row,
                round_robin_before=before,
            )
        finally:
            with self._timing:
                self.split_ms += (time.perf_counter() - started) * 1e3

    def finish(self, order: list[int]) -> list[PartitionBatches]:
        """Wait for every batch; ``order`` lists them (by arrival index) in row order. Returns each
        written partition's pieces in row order, partitions ordered by topic then partition.

        Raises:
            SeglogError: the first bad row's error, in row order (see :func:`split_record_batch`).
        """
        if sorted(order) != list(range(len(self._batches))):
            raise ValueError(f"the order {order} does not list the {len(self._batches)} record batches once each")
        first_row = 0
        before: Counter[str] = Counter()
        splits: dict[int, SplitBatch | Future[SplitBatch]] = {}
        for index in order:
            batch, future = self._batches[index], self._futures[index]
            if future.exception() is not None:  # raises the error again, with the micro-batch's row numbers
                guess = self._split(batch, first_row, before)
                splits[index] = guess
            else:
                guess = future.result()
                shifted = self._shifted(guess, before)
                splits[index] = shifted or self._executor.submit(self._split, batch, first_row, dict(before))
            before.update(guess.round_robin_rows)
            first_row += batch.num_rows
        pieces: dict[TopicPartition, list[EncodedBatches]] = {}
        for index in order:
            split = splits[index]
            for part in (split.result() if isinstance(split, Future) else split).parts:
                pieces.setdefault((part.topic, part.partition), []).extend(part.pieces)
        return [
            PartitionBatches(topic, partition, tuple(pieces[(topic, partition)])) for topic, partition in sorted(pieces)
        ]

    def _shifted(self, split: SplitBatch, before: Mapping[str, int]) -> SplitBatch | None:
        """``split`` (split as if no round robin came before) with its round robin going on after
        ``before``, or None when only splitting again gives that."""
        shifts = {topic: before.get(topic, 0) % self._layout(topic).num_partitions for topic in split.round_robin_rows}
        if not any(shifts.values()):
            return split
        rows: Counter[str] = Counter()
        for part in split.parts:
            rows[part.topic] += part.num_rows
        if any(shift and rows[topic] != split.round_robin_rows[topic] for topic, shift in shifts.items()):
            return None  # keyed and null-key rows of one topic: the null-key rows' partitions change alone
        moved = [
            PartitionBatches(
                part.topic,
                (part.partition + shifts.get(part.topic, 0)) % self._layout(part.topic).num_partitions,
                part.pieces,
            )
            for part in split.parts
        ]
        return SplitBatch(
            split.num_rows, split.round_robin_rows, tuple(sorted(moved, key=lambda part: (part.topic, part.partition)))
        )

    def cancel(self) -> None:
        """Drop the batches not started yet (the micro-batch failed)."""
        for future in self._futures:
            future.cancel()
