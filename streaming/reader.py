"""Read seglog partitions into Spark: a PySpark 4 Python data source named ``seglog``.

::

    from streaming.reader import register
    register(spark)
    df = (spark.read.format("seglog").option("topic", "events")
          .option("startingOffsets", "earliest").load("data/logs"))

Columns are those of Spark's Kafka source: ``key``, ``value`` (binary), ``topic``, ``partition``,
``offset``, ``timestamp`` (timestamp), ``timestampType`` (int), ``headers``. Options, as in Spark's
Kafka source (batch queries):

* ``topic`` (required): the topic to read;
* ``startingOffsets``: ``earliest`` (default), ``latest``, or JSON ``{"events": {"0": 23, "1": -2}}``
  (-2 = earliest, -1 = latest);
* ``startingTimestamp``: ms since the epoch; each partition starts at its first record with a
  timestamp at or after it (Kafka's ListOffsets by timestamp), or at its end if there is none;
* ``endingOffsets``: ``latest`` (default: the high watermark) or JSON as above (-1 = latest).

Only records below each partition's high watermark are read (what the sink committed). One Spark
partition per seglog partition; the log directory must be reachable from the executors (local
Spark, or a shared filesystem). Partitions are opened read-only: no lock, no writes, safe beside a
running writer.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from indexer.config import load_settings
from indexer.errors import ConfigError
from indexer.file_names import validate_topic
from indexer.log_manager import LogManager

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

EARLIEST = -2
LATEST = -1
READ_STEP_RECORDS = 100_000  # records per Arrow batch handed to Spark

SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
    "timestampType int, headers array<struct<key: string, value: binary>>"
)


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """One seglog partition's offsets ``[start, end)`` to read."""

    log_dir: str
    topic: str
    partition: int
    start: int
    end: int


def _offsets_option(options: Mapping[str, str], name: str, topic: str, default: int) -> dict[int, int] | int:
    """``earliest``/``latest`` as a sentinel, or a JSON per-partition map for ``topic``."""
    text = options.get(name)
    if text is None:
        return default
    if text in ("earliest", "latest"):
        return EARLIEST if text == "earliest" else LATEST
    try:
        doc = json.loads(text)
        return {int(p): int(o) for p, o in doc[topic].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ConfigError(f"option {name} must be earliest, latest or JSON like "
                          f'{{"{topic}": {{"0": 12}}}}, got {text!r}') from e


def _resolve(spec: dict[int, int] | int, partition: int, fallback: int, first: int, last: int) -> int:
    """One partition's offset from an offsets option; -2/-1 become ``first``/``last``."""
    value = spec.get(partition, fallback) if isinstance(spec, dict) else spec
    return first if value == EARLIEST else last if value == LATEST else value


def plan_ranges(log_dir: str, options: Mapping[str, str]) -> list[OffsetRange]:
    """The offset range of every partition of the ``topic`` option (runs on the driver)."""
    topic = validate_topic(options.get("topic", ""))
    starting = _offsets_option(options, "startingOffsets", topic, EARLIEST)
    ending = _offsets_option(options, "endingOffsets", topic, LATEST)
    timestamp = options.get("startingTimestamp")
    ranges = []
    manager = LogManager(log_dir, load_settings(), read_only=True)
    try:
        for name, partition in manager.partitions():
            if name != topic:
                continue
            log = manager.get_log(topic, partition)
            if log is None:
                continue
            first, last = log.log_start_offset, min(log.high_watermark, log.log_end_offset)
            if timestamp is not None:
                found = log.offset_for_timestamp(int(timestamp))
                start = last if found is None else found
            else:
                start = _resolve(starting, partition, EARLIEST, first, last)
            end = _resolve(ending, partition, LATEST, first, last)
            if not first <= start <= end <= last:
                raise ConfigError(
                    f"partition {topic}-{partition} holds committed offsets {first}..{last}; "
                    f"cannot read {start}..{end}"
                )
            ranges.append(OffsetRange(str(log_dir), topic, partition, start, end))
    finally:
        manager.close()
    return ranges


def read_range(piece: OffsetRange) -> Iterator[pa.RecordBatch]:
    """The records of one range as Arrow batches of :data:`SCHEMA` (runs on an executor)."""
    manager = LogManager(piece.log_dir, load_settings(), read_only=True)
    try:
        log = manager.get_log(piece.topic, piece.partition)
        start = piece.start
        while log is not None and start < piece.end:
            table = log.read_records(start, READ_STEP_RECORDS, max_offset=piece.end)
            if table.num_rows == 0:
                break
            n = table.num_rows
            millis = pc.cast(table.column("timestamp"), pa.timestamp("ms"))
            yield pa.RecordBatch.from_arrays(
                [
                    table.column("key").combine_chunks(),
                    table.column("value").combine_chunks(),
                    pa.repeat(pa.scalar(piece.topic, pa.string()), n),
                    pa.repeat(pa.scalar(piece.partition, pa.int32()), n),
                    table.column("offset").combine_chunks(),
                    pc.cast(millis, pa.timestamp("us", tz="UTC")).combine_chunks(),
                    table.column("timestampType").combine_chunks(),
                    table.column("headers").combine_chunks(),
                ],
                names=["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"],
            )
            start = int(table.column("offset")[-1].as_py()) + 1
    finally:
        manager.close()


class SeglogDataSource(DataSource):
    """``spark.read.format("seglog")``: see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return "seglog"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return _Reader(self.options)


class _Reader(DataSourceReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        path = options.get("path")
        if not path:
            raise ConfigError('the seglog source needs the log directory: .load("<log dir>")')
        self.log_dir = str(Path(path).absolute())
        self.options = options

    def partitions(self) -> list[InputPartition]:
        return list(plan_ranges(self.log_dir, self.options))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, OffsetRange)  # the partitions() above
        return read_range(partition)


def register(spark: SparkSession) -> None:
    """Make ``spark.read.format("seglog")`` available in this session."""
    spark.dataSource.register(SeglogDataSource)
