"""The `seglog` Spark data source reads what the sink committed, by offset and by time."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import DataFrameReader, SparkSession

from indexer.config import LogConfig, Settings
from indexer.errors import ConfigError
from indexer.log import Log
from streaming.reader import plan_ranges, register
from streaming.sink import SegmentLogSink

pytestmark = pytest.mark.spark


@pytest.fixture()
def log_dir(tmp_path: Path) -> Path:
    """Topic "ev", 2 partitions: batch 0 (20 rows, timestamps 1000..1019) committed, batch 1 half-written."""
    with SegmentLogSink(tmp_path, topic="ev", num_partitions=2, settings=Settings()) as sink:
        sink.write_batch(pa.table({"key": [f"k{i % 5}".encode() for i in range(20)],
                                   "value": [f"v{i}".encode() for i in range(20)],
                                   "timestamp": pa.array(range(1000, 1020), pa.int64())}), 0, query_id="q")
    with Log.open(tmp_path / "ev-0", LogConfig()) as log:
        log.append({"value": [b"uncommitted"]})  # beyond the high watermark: must stay invisible
    return tmp_path


def test_reads_committed_records_with_kafka_source_columns(spark: SparkSession, log_dir: Path) -> None:
    register(spark)
    df = spark.read.format("seglog").option("topic", "ev").load(str(log_dir))
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]
    rows = df.orderBy("partition", "offset").collect()
    assert sorted(r.value for r in rows) == sorted(f"v{i}".encode() for i in range(20))
    assert {r.topic for r in rows} == {"ev"} and {r.timestampType for r in rows} == {0}
    for partition in (0, 1):
        offsets = [r.offset for r in rows if r.partition == partition]
        assert offsets == list(range(len(offsets)))
    first = min(rows, key=lambda r: int(r.value[1:]))
    assert int(first.timestamp.timestamp() * 1000) == 1000


def test_offsets_and_timestamps_select_ranges(spark: SparkSession, log_dir: Path) -> None:
    register(spark)

    def reader() -> DataFrameReader:  # options accumulate on a reader: a fresh one per read
        return spark.read.format("seglog").option("topic", "ev")

    some = reader().option("startingOffsets", json.dumps({"ev": {"0": 2, "1": -1}})) \
        .option("endingOffsets", json.dumps({"ev": {"0": 4}})).load(str(log_dir)).collect()
    assert sorted((r.partition, r.offset) for r in some) == [(0, 2), (0, 3)]
    late = reader().option("startingTimestamp", "1015").load(str(log_dir)).collect()
    assert sorted(int(r.value[1:]) for r in late) == list(range(15, 20))
    with pytest.raises(Exception, match="cannot read 0..99"):
        reader().option("endingOffsets", json.dumps({"ev": {"0": 99}})).load(str(log_dir)).collect()
    with pytest.raises(ConfigError, match="startingOffsets must be"):
        plan_ranges(str(log_dir), {"topic": "ev", "startingOffsets": "soon"})
