"""``spark.read.format("seglog")`` and ``spark.readStream.format("seglog")``: Spark's Kafka source over a
log directory (a PySpark 4.2 Python data source).

::

    df = spark.readStream.format("seglog").option("subscribe", "events").load("data/logs")

Installing seglog registers the source in every SparkSession (the top-level module
``pyspark_seglog``, see docs/reader.md); :func:`register` does it by hand. Columns and options are
those of Spark's Kafka source (:mod:`streaming.source_options`); offsets in Spark's checkpoint are
Kafka's JSON, ``{"events": {"0": 42}}``. Only committed records are read: below each partition's high
watermark (``read_committed``: its last stable offset, without aborted transactions).

Where the work runs: every option is checked on the driver when the DataFrame is created (``load``),
and the subscription against the log directory's topics where the offsets are first taken (one clear
:class:`~indexer.errors.SeglogError` line inside Spark's ``AnalysisException``). Offsets are planned
on the driver (the stream reader is a long-lived Python worker there; it keeps the
``Trigger.AvailableNow`` target and the ``maxTriggerDelay`` clock); records are read on the
executors, one task per offset range, as Arrow record batches straight from the engine's decoder.
The log directory must be reachable from the executors (local Spark, or a shared filesystem).
Partitions are opened read-only: no lock, no writes, safe beside a running writer.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from indexer.config import Settings
from indexer.data_loss import CheckpointedEnd, missing_committed_records
from indexer.errors import (
    ConfigError,
    CorruptRecordError,
    InvalidTimestampError,
    LogDirectoryNotFoundError,
    NotALogDirectoryError,
    OffsetOutOfRangeError,
)
from indexer.file_names import TopicPartition, is_listed_to_patterns, log_dirs_below, partition_dir_name
from indexer.limits import INT64_MAX
from indexer.log_manager import LogManager, check_log_dir
from indexer.records.isolation import IsolationLevel
from streaming.offset_ranges import OffsetRange, rate_limit, split_ranges
from streaming.session import local_log_dir
from streaming.source_options import (
    EARLIEST,
    LATEST,
    OffsetSpec,
    SourceOptions,
    SpecKind,
    parse_source_options,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)

READ_STEP_RECORDS = 100_000  # records per Arrow batch handed to Spark
# ... and at most about this many bytes of them: a batch's key, value and headers columns are each one
# Arrow array, which holds at most 2 GiB (32-bit offsets), and each batch is held whole by the worker
# and the JVM.
READ_STEP_BYTES = 256 << 20
KAFKA_SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
)
HEADERS_FIELD = StructField(
    "headers", ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))
)
_NAMES = KAFKA_SCHEMA.names
NOT_A_SINK = (
    'format("seglog") only reads; write with streaming.sink.SegmentLogSink: '
    "writeStream.foreachBatch(SegmentLogSink(log_dir, topic=..., checkpoint_location=...)), or for a batch "
    "DataFrame SegmentLogSink(log_dir, topic=..., query_id=<a name for this write>)(df, 0) (docs/streaming.md)"
)

Offsets = dict[TopicPartition, int]


@dataclass(frozen=True)
class PartitionState:
    """What a partition offers a reader now: ``[first, last)`` = log start offset .. high watermark
    (``read_committed``: last stable offset). ``missing``: ``(log end offset, the offset it must
    reach)`` when its checkpoints (:func:`indexer.data_loss.checkpointed_end`: the high watermark,
    else the recovery point) are above the log end, i.e. records are missing from the log (damage,
    files copied before the checkpoint), which readers report as data loss."""

    first: int
    last: int
    missing: tuple[int, CheckpointedEnd] | None = None


@dataclass(frozen=True)
class RangeToRead(InputPartition):
    """One Spark task: a partition's offsets ``[start, end)`` and how to read them (pickled to executors).
    ``start`` EARLIEST and ``end`` LATEST are the partition's start and committed end when the task reads
    (a batch query's earliest and latest, see :func:`plan_tasks`)."""

    log_dir: str
    topic: str
    partition: int
    start: int
    end: int
    include_headers: bool
    isolation_level: IsolationLevel
    fail_on_data_loss: bool


class LogDirView:
    """The subscribed partitions of a log directory, opened read-only (a context manager)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.manager = LogManager(options.log_dir, Settings(), read_only=True)
        self.states: dict[TopicPartition, PartitionState] = {}
        try:
            for topic, partition in self.manager.partitions():
                if options.subscription.wants(topic, partition):
                    state = self._state(topic, partition)
                    if state is not None:  # None: deleted since the listing
                        self.states[(topic, partition)] = state
        except BaseException:
            self.manager.close()
            raise

    def _state(self, topic: str, partition: int) -> PartitionState | None:
        must_reach = self.manager.checkpointed_end(topic, partition)  # before the open: checkpoints only grow
        log = self.manager.get_log(topic, partition)
        if log is None:
            return None
        last = min(log.high_watermark, log.log_end_offset)
        if self.options.isolation_level is IsolationLevel.READ_COMMITTED:
            last = min(last, log.last_stable_offset)
        missing = (
            (log.log_end_offset, must_reach)
            if must_reach is not None and must_reach.offset > log.log_end_offset
            else None
        )
        return PartitionState(log.log_start_offset, max(last, log.log_start_offset), missing)

    def offset_for_timestamp(self, tp: TopicPartition, timestamp: int) -> int | None:
        log = self.manager.get_log(*tp)
        return None if log is None else log.offset_for_timestamp(timestamp)

    def close(self) -> None:
        self.manager.close()

    def __enter__(self) -> LogDirView:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def check_options(options: Mapping[str, str]) -> SourceOptions:
    """Parse the options and check the log directory (runs on the driver at ``load``).

    Whether the subscribed topics are there is checked where the offsets are first taken
    (:func:`check_subscription`): a query restarted from its checkpoint after one of its topics was
    deleted meets that as data loss, as Kafka's source does, not as an unknown topic.

    Raises:
        ConfigError: a bad option, a missing or wrong log directory.
    """
    parsed = parse_source_options(options)
    path = local_log_dir(parsed.log_dir).absolute()
    parsed = replace(parsed, log_dir=str(path))
    try:
        check_log_dir(path)  # the engine's rule (a partition directory, a file), worded for .load() here
    except LogDirectoryNotFoundError:
        raise ConfigError(f"log directory {path} does not exist") from None
    except NotALogDirectoryError:
        if not path.is_dir():
            raise ConfigError(f"log directory {path} is not a directory") from None
        raise ConfigError(
            f"{path} is a partition directory; give the log directory that holds it: {path.parent}"
        ) from None
    return parsed


def check_subscription(view: LogDirView) -> None:
    """Every topic and partition the subscription names is there, and it holds at least one
    partition. Checked where the offsets are first taken: a batch query's plan, a streaming query's
    first run (a restart goes on from its checkpoint, where a partition that is gone is data loss,
    see :func:`data_loss`). Kafka's source would wait for a missing topic; a log directory has no
    producer that could create it later, so a wrong name is a mistake.

    Raises:
        ConfigError: a topic or partition that is not there, a pattern that matches none.
    """
    path = view.options.log_dir
    present = view.manager.partitions()
    if not present:
        below = log_dirs_below(Path(path))
        hint = ""
        if below:
            which = "load that" if len(below) == 1 else "load one of them"
            hint = f"; {', '.join(map(str, below))} below it {'does' if len(below) == 1 else 'do'}: {which}"
        raise ConfigError(f"{path} holds no topic partition (no <topic>-<partition> directory){hint}")
    topics = sorted({t for t, _ in present})
    sub = view.options.subscription
    missing = [t for t in sub.topics if t not in topics]
    missing += [f"{t}-{p}" for t, p in sub.assigned if (t, p) not in present]
    if missing or not view.states:
        what = f"no topic matches {sub.pattern!r}" if not missing else f"{', '.join(missing)} not found"
        if not missing and not all(map(is_listed_to_patterns, topics)):
            what += " (a pattern never matches internal topics nor __cluster_metadata: subscribe to them by name)"
        raise ConfigError(f"{sub.describe()}: {what} in {path} (topics there: {', '.join(topics)})")


def resolve(view: LogDirView, spec: OffsetSpec, *, starting: bool) -> Offsets:
    """Each subscribed partition's offset by ``spec`` (Kafka's ListOffsets: -2 earliest, -1 latest,
    timestamps to the first offset at or after them).

    Applied where the offsets are taken: a batch query's plan, a streaming query's first run (a restart
    goes on from its checkpoint, whatever the partitions are now, as Kafka's source).

    Raises:
        ConfigError: JSON naming other partitions than the subscription's; or
            ``startingOffsetsByTimestampStrategy=error`` and no record at or after a starting timestamp.
    """
    if spec.per_partition and set(spec.per_partition) != set(view.states):
        extra, left_out = set(spec.per_partition) - set(view.states), set(view.states) - set(spec.per_partition)
        wrong = ([f"it names {_names(extra)}, not one of them"] if extra else []) + (
            [f"it leaves out {_names(left_out)}"] if left_out else []
        )
        raise ConfigError(
            f"option {spec.option} must name exactly the partitions of {view.options.subscription.describe()}: "
            f"{_names(view.states)} ({'; '.join(wrong)})"
        )
    found: Offsets = {}
    for tp, state in view.states.items():
        if spec.kind in (SpecKind.EARLIEST, SpecKind.LATEST):
            found[tp] = state.first if spec.kind is SpecKind.EARLIEST else state.last
        elif spec.kind is SpecKind.OFFSETS:
            value = spec.per_partition[tp]
            found[tp] = state.first if value == EARLIEST else state.last if value == LATEST else value
        else:
            ts = spec.timestamp if spec.kind is SpecKind.TIMESTAMP else spec.per_partition[tp]
            offset = view.offset_for_timestamp(tp, ts)
            if offset is None and starting and not view.options.timestamp_strategy_latest:
                raise ConfigError(
                    f"option {spec.option}: {tp[0]}-{tp[1]} has no record at or after timestamp {ts} "
                    "(startingOffsetsByTimestampStrategy=latest starts such partitions at their end)"
                )
            found[tp] = state.last if offset is None else min(offset, state.last)
    return found


def _names(partitions: Iterable[TopicPartition]) -> str:
    """``topic-partition`` names, in order, comma-separated."""
    return ", ".join(f"{t}-{p}" for t, p in sorted(partitions))


def check_in_range(view: LogDirView, offsets: Offsets, option: str) -> None:
    """Offsets given explicitly must not lie beyond what is committed."""
    for tp, offset in sorted(offsets.items()):
        if offset > view.states[tp].last:
            raise ConfigError(
                f"option {option}: offset {offset} of {tp[0]}-{tp[1]} is beyond its committed records "
                f"(they end at {view.states[tp].last})"
            )


def data_loss(
    fail_on_data_loss: bool,
    log_dir: str,
    tp: TopicPartition,
    start: int,
    first: int | None,
    *,
    last: int | None = None,
    committed: CheckpointedEnd | None = None,
    not_in: str | None = None,
    unreadable: CorruptRecordError | None = None,
    kept: bool = False,
) -> None:
    """Offsets ``start..first`` are gone (retention, a deleted partition: ``first`` None), or the
    partition now ends at ``last``, before ``start`` (truncated or recreated), or offsets
    ``start..committed`` are committed but the log ends at ``start`` (damaged or missing files), or the
    checkpoint holds offset ``start`` of a partition the subscription ``not_in`` does not name, or
    offsets ``start..first`` cannot be read (``unreadable``: damage or offsets in no segment file,
    before ``seglog recover``, which names them lost, or with ``kept`` keeps one copy of them): raise,
    or warn when ``failOnDataLoss=false`` (the read then goes on from ``first``, or from ``last``, as
    Kafka's source, or reads what the log holds).

    Raises:
        OffsetOutOfRangeError: ``failOnDataLoss=true`` (the default).
    """
    name = f"{tp[0]}-{tp[1]}"
    if committed is not None:  # the engine's words for it (what its writers refuse)
        directory = Path(log_dir) / partition_dir_name(*tp)
        message = str(missing_committed_records(directory, start, committed.offset, committed.by))
    elif unreadable is not None:  # the engine's words: the file or partition, the offsets, `seglog recover`
        assert first is not None
        outcome = "keeps them (one copy, the batch in offset order)" if kept else "names them lost"
        message = (
            f"{unreadable}; offsets {start}..{first - 1} of {name} cannot be read until "
            f"`seglog recover --log-dir {log_dir}` salvages the partition and {outcome}"
        )
    elif not_in is not None:
        message = (
            f"{name} is not in {not_in}, but the checkpoint holds its offset {start} (the query ran with "
            "another subscription): its records from there on will not be read"
        )
    elif last is not None:
        message = (
            f"{name} ends at {last}, before offset {start} this query reached (truncated or recreated): "
            "some data may have been lost"
        )
    else:
        if first is None:
            check_still_there(log_dir)
            what = f"partition {name} is gone"
        else:
            what = f"offsets {start}..{first - 1} of {name} were deleted (the log now starts at {first})"
        message = f"{what} before this query read them: some data may have been lost"
    if fail_on_data_loss:
        raise OffsetOutOfRangeError(
            f"{message}. If you don't want your query to fail on such cases, set the source option "
            f"failOnDataLoss to false",
            offset=start,
            path=Path(log_dir),
        )
    logger.warning("%s; skipped (failOnDataLoss=false)", message)


def check_still_there(log_dir: str) -> None:
    """Before a partition counts as gone (data loss by ``failOnDataLoss``): the log directory that held
    it must still be one. Gone (moved, deleted) or empty (a filesystem not mounted leaves its empty
    mount point; a topic deleted leaves the directory's checkpoint files), it lists no partition, and
    as data loss ``failOnDataLoss=false`` would drop them all from the offsets, to read them again from
    offset 0 once the directory is back, and a task would skip its range. Kafka's source does not take
    a broker it cannot reach for deleted topics either.

    Raises:
        LogDirectoryNotFoundError: ``log_dir`` does not exist or is empty.
    """
    try:
        empty = not any(Path(log_dir).iterdir())
    except FileNotFoundError:
        what = "does not exist (moved, deleted, or not mounted)"
    else:
        if not empty:
            return
        what = "is empty (its filesystem not mounted, or not the directory the query read)"
    raise LogDirectoryNotFoundError(
        f"log directory {log_dir} {what}: the query cannot read its partitions; failOnDataLoss does not apply "
        "(nothing says they were deleted)",
        path=log_dir,
    )


def missing_committed(options: SourceOptions, tp: TopicPartition, state: PartitionState) -> None:
    """Warn that records are missing from the end of ``tp``'s log (its checkpointed high watermark, or
    without one its recovery point, is above its log end), in the engine's words; the query reads up
    to the log end.

    Not data loss by ``failOnDataLoss``: the query never had those offsets to read (a query that had
    read past the log end is, see :func:`data_loss`), and a broker serves such a log up to its end too
    (it clamps the high watermark): the broker-written directories in ``../shared/vectors`` were
    copied at other moments than their checkpoints. The engine's writers refuse the partition until
    ``seglog recover --accept-data-loss``, and ``seglog describe --verify`` reports it.
    """
    if state.missing is not None:
        end, must_reach = state.missing
        directory = Path(options.log_dir) / partition_dir_name(*tp)
        loss = missing_committed_records(directory, end, must_reach.offset, must_reach.by)
        logger.warning("seglog source: %s; reading %s-%d up to its log end", loss, *tp)


def to_json(offsets: Offsets) -> dict[str, dict[str, int]]:
    """Kafka's offsets JSON (topics, then partitions, in order: equal offsets give equal JSON)."""
    doc: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        doc.setdefault(topic, {})[str(partition)] = offset
    return doc


def from_json(doc: Mapping[str, Mapping[str, int]]) -> Offsets:
    return {(topic, int(p)): int(o) for topic, parts in doc.items() for p, o in parts.items()}


def plan_tasks(
    options: SourceOptions,
    ranges: list[OffsetRange],
    *,
    open_start: frozenset[TopicPartition] = frozenset(),
    open_end: frozenset[TopicPartition] = frozenset(),
) -> list[RangeToRead]:
    """The ranges split by ``minPartitions``/``maxRecordsPerPartition``, as Spark tasks.

    A partition in ``open_start`` (``open_end``) starts (ends) where its log starts (its committed
    records end) when its first (last) task reads, not where it did when the query planned: Kafka's
    late binding of a batch query's earliest and latest (``KafkaBatchPartitionReader.resolveRange``), so
    a DataFrame read again sees the records committed since; one whose range was empty then gets a task
    when its end is open. The split is planned on the sizes of the ranges now.
    """
    pieces = split_ranges(
        ranges, min_partitions=options.min_partitions, max_records_per_partition=options.max_records_per_partition
    )
    tasks = []
    for r in ranges:
        tp = (r.topic, r.partition)
        mine = [p for p in pieces if (p.topic, p.partition) == tp] or ([r] if tp in open_end else [])
        for i, piece in enumerate(mine):
            start = EARLIEST if i == 0 and tp in open_start else piece.start
            end = LATEST if i == len(mine) - 1 and tp in open_end else piece.end
            tasks.append(
                RangeToRead(
                    options.log_dir,
                    r.topic,
                    r.partition,
                    start,
                    end,
                    options.include_headers,
                    options.isolation_level,
                    options.fail_on_data_loss,
                )
            )
    return tasks


def binds_when_read(spec: OffsetSpec, tp: TopicPartition) -> bool:
    """Whether ``spec`` gives ``tp`` its log's start or end as such (``earliest``, ``latest``, or -2/-1 in
    JSON offsets), which a batch task takes when it reads (:func:`plan_tasks`). Timestamps are resolved
    when the query plans, as in Kafka's source."""
    if spec.kind in (SpecKind.EARLIEST, SpecKind.LATEST):
        return True
    return spec.kind is SpecKind.OFFSETS and spec.per_partition[tp] in (EARLIEST, LATEST)


def read_range(piece: RangeToRead) -> Iterator[pa.RecordBatch]:
    """The records of one task as Arrow batches of the source's columns (runs on an executor)."""
    manager = LogManager(piece.log_dir, Settings(), read_only=True)
    try:
        tp = (piece.topic, piece.partition)
        must_reach = manager.checkpointed_end(*tp)  # before the open: checkpoints only grow
        log = manager.get_log(*tp)
        if log is None:
            data_loss(piece.fail_on_data_loss, piece.log_dir, tp, piece.start, None)
            return
        start = log.log_start_offset if piece.start == EARLIEST else piece.start
        if start < log.log_start_offset:
            data_loss(piece.fail_on_data_loss, piece.log_dir, tp, start, log.log_start_offset)
            start = log.log_start_offset
        end = min(log.high_watermark, log.log_end_offset)
        stop = end if piece.end == LATEST else piece.end
        reach = max(stop, start)  # planned on the driver up to piece.end (or from an explicit start)
        if end < reach:  # the log ends before it now
            if must_reach is not None and must_reach.offset > end:
                data_loss(piece.fail_on_data_loss, piece.log_dir, tp, end, None, committed=must_reach)
            else:
                data_loss(piece.fail_on_data_loss, piece.log_dir, tp, reach, None, last=end)
        while start < min(stop, end):
            try:
                table = log.read_records(
                    start, READ_STEP_RECORDS, max_offset=stop, isolation_level=piece.isolation_level
                )
            except CorruptRecordError as e:
                unreadable = log.unreadable_offsets(e)
                if unreadable is None:  # nothing to skip to: only `seglog recover` can go on
                    raise
                lost = unreadable.offsets
                resume = stop if lost.end is None else min(lost.end, stop)
                first = start if e.offset is None else max(start, e.offset)
                data_loss(
                    piece.fail_on_data_loss, piece.log_dir, tp, first, resume, unreadable=e, kept=not unreadable.lost
                )
                start = resume
                continue
            if table.num_rows == 0:
                break
            for part in _within_bytes(table, READ_STEP_BYTES):
                yield _spark_batch(part, piece)
            start = int(table.column("offset")[-1].as_py()) + 1
    finally:
        manager.close()


def _within_bytes(table: pa.Table, limit: int) -> Iterator[pa.Table]:
    """``table`` cut at its chunk boundaries (the engine's reads) into runs of at most ``limit`` bytes,
    or one chunk when a chunk alone is larger; the whole table when it is within ``limit``."""
    if table.nbytes <= limit:
        yield table
        return
    run: list[pa.RecordBatch] = []
    size = 0
    for chunk in table.to_batches():
        if run and size + chunk.nbytes > limit:
            yield pa.Table.from_batches(run, schema=table.schema)
            run, size = [], 0
        run.append(chunk)
        size += chunk.nbytes
    if run:
        yield pa.Table.from_batches(run, schema=table.schema)


def _spark_batch(table: pa.Table, piece: RangeToRead) -> pa.RecordBatch:
    """A decoded READ_SCHEMA table as the Kafka source's columns (vectorised, no per-record work)."""
    n = table.num_rows
    micros = spark_micros(table, piece)
    columns = [
        table.column("key").combine_chunks(),
        table.column("value").combine_chunks(),
        _repeated_string(piece.topic, n),
        pa.array(np.full(n, piece.partition, np.int32)),
        table.column("offset").combine_chunks(),
        micros.view(pa.timestamp("us", tz="UTC")),
        table.column("timestampType").combine_chunks(),
    ]
    names = _NAMES
    if piece.include_headers:
        columns.append(table.column("headers").combine_chunks())
        names = [*_NAMES, "headers"]
    return pa.RecordBatch.from_arrays(columns, names=names)


def spark_micros(table: pa.Table, piece: RangeToRead) -> pa.Array:
    """The records' timestamps (ms) as the microseconds of Spark's timestamp column.

    Raises:
        InvalidTimestampError: a timestamp past what a long of microseconds holds (one written in
            nanoseconds, say), which Spark's Kafka source fails on too (``Math.multiplyExact``); it
            would otherwise wrap around into another instant.
    """
    millis = table.column("timestamp").combine_chunks()
    try:
        return pc.multiply_checked(millis, 1000)
    except pa.ArrowInvalid:
        bad = pc.index(pc.greater(pc.abs(millis), INT64_MAX // 1000), True).as_py()
        offset, timestamp = table.column("offset")[bad].as_py(), millis[bad].as_py()
        raise InvalidTimestampError(
            f"the record at offset {offset} of {piece.topic}-{piece.partition} has timestamp {timestamp} ms, past "
            f"what Spark's timestamp column holds (+-{INT64_MAX // 1000} ms, microseconds in a long): written in "
            "micro- or nanoseconds? Spark's Kafka source fails on it too",
            timestamp=timestamp,
        ) from None


def _repeated_string(text: str, n: int) -> pa.Array:
    """``n`` copies of ``text`` as a string array, built from two numpy buffers (``pa.repeat`` of a
    string scalar costs ~0.5 us per row, the largest part of a batch's conversion)."""
    data = text.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * len(data)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data * n)])


def offsets_behind_latest(source_progress: Mapping[str, object]) -> dict[str, float]:
    """The Kafka source's ``min/max/avgOffsetsBehindLatest`` from one entry of a query progress's
    ``sources`` (its ``latestOffset`` minus its ``endOffset``, per partition). Python data sources
    cannot report custom metrics in PySpark 4.2, so the figures are derived from the offsets the
    source does report; empty when the progress has no latest offset."""
    latest, end = source_progress.get("latestOffset"), source_progress.get("endOffset")
    if not isinstance(latest, str) or not isinstance(end, str) or latest == "null":
        return {}
    ends = from_json(json.loads(end))
    behind = [max(0, offset - ends.get(tp, offset)) for tp, offset in from_json(json.loads(latest)).items()]
    if not behind:
        return {}
    return {
        "avgOffsetsBehindLatest": sum(behind) / len(behind),
        "maxOffsetsBehindLatest": float(max(behind)),
        "minOffsetsBehindLatest": float(min(behind)),
    }


def _read(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """A planned range; Spark hands ``InputPartition(None)`` to one task when nothing was planned."""
    return read_range(partition) if isinstance(partition, RangeToRead) else iter(())


class SeglogDataSource(DataSource):
    """``format("seglog")``: see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return "seglog"

    def schema(self) -> StructType:
        return source_schema(check_options(self.options))  # every option error surfaces here, at load()

    def reader(self, schema: StructType) -> DataSourceReader:
        return _BatchReader(check_schema(check_options(self.options), schema))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return _StreamReader(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """Refused: ``df.write.format("seglog")`` (see :data:`NOT_A_SINK`).

        Raises:
            ConfigError: always.
        """
        raise ConfigError(NOT_A_SINK)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """Refused: ``writeStream.format("seglog")`` (see :data:`NOT_A_SINK`, docs/streaming.md for why).

        Raises:
            ConfigError: always.
        """
        raise ConfigError(NOT_A_SINK)


def source_schema(options: SourceOptions) -> StructType:
    """The Kafka source's columns (``headers`` only with ``includeHeaders=true``)."""
    return StructType([*KAFKA_SCHEMA.fields, HEADERS_FIELD]) if options.include_headers else KAFKA_SCHEMA


def check_schema(options: SourceOptions, schema: StructType) -> SourceOptions:
    """Refuse a schema the user set with ``.schema(...)`` (Spark then skips :meth:`SeglogDataSource.schema`
    and the tasks would fail on the columns they return), as Kafka's source refuses one.

    Raises:
        ConfigError: ``schema`` is not the source's own.
    """
    if schema != source_schema(options):
        raise ConfigError(
            f"the seglog source has a fixed schema (Kafka's source columns), it cannot be set with .schema(); "
            f"got {schema.simpleString()}"
        )
    return options


class _BatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        starting = options.starting
        if starting is not None and (
            starting.kind is SpecKind.LATEST
            or LATEST in starting.per_partition.values()
            and starting.kind is SpecKind.OFFSETS
        ):
            raise ConfigError(f"option {starting.option} cannot be latest (-1) in a batch query")
        for name, value in (
            ("maxOffsetsPerTrigger", options.max_offsets_per_trigger),
            ("minOffsetsPerTrigger", options.min_offsets_per_trigger),
        ):
            if value is not None:
                logger.info("seglog source: option %s applies to streaming queries only; ignored", name)
        self.options = options

    def partitions(self) -> list[InputPartition]:
        options = self.options
        with LogDirView(options) as view:
            check_subscription(view)
            starting = options.starting or OffsetSpec(SpecKind.EARLIEST, "startingOffsets")
            ending = options.ending or OffsetSpec(SpecKind.LATEST, "endingOffsets")
            starts = resolve(view, starting, starting=True)
            ends = resolve(view, ending, starting=False)
            check_in_range(view, starts, starting.option)
            check_in_range(view, ends, ending.option)
            open_start = frozenset(tp for tp in starts if binds_when_read(starting, tp))
            open_end = frozenset(tp for tp in ends if binds_when_read(ending, tp))
            ranges = []
            for tp, end in sorted(ends.items()):
                missing_committed(options, tp, view.states[tp])
                start, first = starts[tp], view.states[tp].first
                if tp in open_start:  # earliest: the log start now, maybe past an ending offset (nothing left)
                    start = min(start, end)
                elif start > end:
                    raise ConfigError(f"{tp[0]}-{tp[1]}: the starting offset {start} is after the ending offset {end}")
                elif start < first:
                    data_loss(options.fail_on_data_loss, options.log_dir, tp, start, first)
                    start = min(first, end)
                ranges.append(OffsetRange(tp[0], tp[1], start, end))
        return list(plan_tasks(options, ranges, open_start=open_start, open_end=open_end))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition)


class _StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Runs in one long-lived Python worker on the driver for the whole query run (state is kept)."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self._given = options
        self._schema = schema
        self._target: dict[TopicPartition, PartitionState] | None = None  # Trigger.AvailableNow
        self._states: dict[TopicPartition, PartitionState] | None = None  # of the last latestOffset
        self._last_trigger_ms = 0  # Kafka's lastTriggerMillis: the first trigger never waits
        self._reported: set[tuple[TopicPartition, PartitionState]] = set()  # missing committed records

    @cached_property
    def options(self) -> SourceOptions:
        """The options, checked by the first call Spark makes (every call goes through here), not in
        ``__init__``: PySpark 4.2's stream runner cannot report an error raised while it builds the
        reader (its ``finally: reader.stop()`` then fails with ``UnboundLocalError``, which replaces
        ours as the last line of the query's error).

        Raises:
            ConfigError: as :func:`check_options` and :func:`check_schema`, or an ending offsets option
                (batch queries only).
        """
        options = check_schema(check_options(self._given), self._schema)
        if options.ending is not None:
            raise ConfigError(f"option {options.ending.option} is for batch queries only (spark.read)")
        return options

    def _snapshot(self) -> dict[TopicPartition, PartitionState]:
        """The subscribed partitions now. Under ``Trigger.AvailableNow`` only those of the run's target,
        each ending at its target (where the run stops) or before, if the log now ends there, and
        starting where the log starts now (retention may have passed the target: nothing is left to
        read there): what retention deleted during the run is data loss found when the driver plans a
        batch, as under other triggers, not by a task."""
        with LogDirView(self.options) as view:
            states = view.states
        if self._target is not None:
            states = {
                tp: replace(now, last=max(now.first, min(now.last, self._target[tp].last)))
                for tp, now in states.items()
                if tp in self._target
            }
        self._states = states
        return states

    def initialOffset(self) -> dict[str, dict[str, int]]:
        with LogDirView(self.options) as view:
            check_subscription(view)
            starts = resolve(
                view, self.options.starting or OffsetSpec(SpecKind.LATEST, "startingOffsets"), starting=True
            )
            check_in_range(view, starts, self.options.starting.option if self.options.starting else "")
        return to_json(starts)

    def getDefaultReadLimit(self) -> ReadLimit:
        # Python's ReadLimit has no composite: any limit other than ReadAllAvailable means "apply the
        # options" (max, min and maxTriggerDelay together), see latestOffset.
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._snapshot()
        target = to_json({tp: state.last for tp, state in self._target.items()})
        logger.info("seglog source: Trigger.AvailableNow reads up to %s", target)

    def latestOffset(self, start: dict[str, dict[str, int]], limit: ReadLimit) -> dict[str, dict[str, int]]:
        states = self._snapshot()
        begin = self._begin(from_json(start), states)
        latest = {tp: state.last for tp, state in states.items()}
        ends = latest
        if not isinstance(limit, ReadAllAvailable):
            backlog = sum(max(0, latest[tp] - begin[tp]) for tp in latest)
            minimum, now = self.options.min_offsets_per_trigger, int(time.time() * 1000)
            if (
                minimum is not None
                and self._target is None
                and backlog < minimum
                and now - self._last_trigger_ms < self.options.max_trigger_delay_ms
            ):
                return start
            self._last_trigger_ms = now
            if self.options.max_offsets_per_trigger is not None:
                ends = rate_limit(begin, latest, self.options.max_offsets_per_trigger)
        return start if to_json(ends) == to_json(from_json(start)) else to_json(ends)

    def _begin(self, starts: Offsets, states: Mapping[TopicPartition, PartitionState]) -> Offsets:
        """Where each partition's next batch starts: new partitions at their earliest, offsets that
        retention removed at the log start, a truncated partition at its end (data-loss rule)."""
        sub = self.options.subscription
        for tp in sorted(set(starts) - set(states)):
            not_in = None if sub.wants(*tp) else sub.describe()  # else deleted
            data_loss(self.options.fail_on_data_loss, self.options.log_dir, tp, starts[tp], None, not_in=not_in)
        begin: Offsets = {}
        for tp, state in states.items():
            if (tp, state) not in self._reported:  # once per state: not a warning at every trigger
                missing_committed(self.options, tp, state)
                self._reported.add((tp, state))
            if tp not in starts:
                logger.info("seglog source: new partition %s-%d, read from offset %d", *tp, state.first)
            offset = starts.get(tp, state.first)
            if offset > state.last:
                data_loss(self.options.fail_on_data_loss, self.options.log_dir, tp, offset, None, last=state.last)
                offset = state.last
            begin[tp] = max(offset, state.first)
        return begin

    def reportLatestOffset(self) -> dict[str, dict[str, int]] | None:
        states = self._states if self._states is not None else self._snapshot()
        return to_json({tp: state.last for tp, state in states.items()})

    def partitions(self, start: dict[str, dict[str, int]], end: dict[str, dict[str, int]]) -> list[InputPartition]:
        starts, ends = from_json(start), from_json(end)
        states = self._states if self._states is not None else self._snapshot()
        ranges = []
        for tp, stop in sorted(ends.items()):
            # A partition found after the query started (a new topic of its pattern, an added
            # partition) is read from its beginning, offset 0: records retention already removed
            # from it are data loss, as Kafka's "Added partition ... starts from N instead of 0".
            offset = starts.get(tp, 0 if tp in states else stop)
            first = states[tp].first if tp in states else None
            if first is not None and offset < first:
                data_loss(self.options.fail_on_data_loss, self.options.log_dir, tp, offset, first)
                offset = min(first, stop)
            ranges.append(OffsetRange(tp[0], tp[1], offset, stop))
        return list(plan_tasks(self.options, ranges))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition)


def register(spark: SparkSession) -> None:
    """Make ``format("seglog")`` available in ``spark`` by hand (installing seglog does it already)."""
    spark.dataSource.register(SeglogDataSource)
