"""collect_arrow on a real local Spark: batches as they arrive, then the order that gives toArrow's rows;
micro_batch_plan inside a real foreachBatch."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from indexer.errors import ConfigError
from streaming.arrow_collect import collect_arrow, micro_batch_plan
from tests.streaming.helpers import json_input_stream, start_foreach_batch, write_json_inputs

pytestmark = pytest.mark.spark


def _collected(df) -> tuple[list[pa.RecordBatch], list[int]]:  # type: ignore[no-untyped-def]
    items = list(collect_arrow(df))
    *batches, order = items
    assert all(isinstance(b, pa.RecordBatch) for b in batches) and isinstance(order, list)
    return batches, order


def test_batches_put_in_order_are_to_arrows_rows(spark: SparkSession) -> None:
    df = spark.range(0, 5000, numPartitions=5).select(
        F.col("id"), F.concat(F.lit("v"), F.col("id").cast("string")).cast("binary").alias("value")
    )
    batches, order = _collected(df)
    assert len(batches) >= 5 and sorted(order) == list(range(len(batches)))
    table = pa.Table.from_batches([batches[i] for i in order])
    assert table.to_pydict() == df.toArrow().to_pydict()


def test_no_rows_give_one_empty_batch_of_the_schema(spark: SparkSession) -> None:
    df = spark.range(10).select(F.col("id"), F.lit(b"x").alias("value")).where("id < 0")
    (batch,), order = _collected(df)
    assert order == [0]
    assert batch.num_rows == 0 and batch.schema.names == ["id", "value"]
    assert batch.schema.field("value").type == pa.binary()


def test_the_jobs_error_is_raised_once_the_stream_is_read(spark: SparkSession) -> None:
    df = spark.range(0, 100, numPartitions=2).select(
        F.when(F.col("id") == 77, F.raise_error(F.lit("boom at 77"))).otherwise(F.col("id")).alias("id")
    )
    with pytest.raises(Exception, match="boom at 77"):
        _collected(df)
    assert spark.range(3).count() == 3  # the session is fine afterwards


def test_a_pyspark_without_the_internals_is_a_clear_error(spark: SparkSession, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr("pyspark.util._load_from_socket")
    with pytest.raises(ConfigError, match="written for pyspark 4.2"):
        list(collect_arrow(spark.range(3)))


def test_a_micro_batch_is_collected_from_its_own_plan(spark: SparkSession, tmp_path: Path) -> None:
    """In foreachBatch, micro_batch_plan gives the micro-batch over the query's own plan (no scan of
    foreachBatch's LogicalRDD): the micro-batch's rows, run once (the query counts each input row
    once); a changed DataFrame is left alone."""
    rows = write_json_inputs(tmp_path / "in", files=2, rows_per_file=50, keys=4)
    plans: list[str] = []
    collected: list[tuple[str, str]] = []

    def check(batch_df: DataFrame, batch_id: int) -> None:
        assert micro_batch_plan(batch_df.where("key = 'k1'")) is None
        direct = micro_batch_plan(batch_df)
        assert direct is not None
        plans.append(direct._jdf.queryExecution().executedPlan().toString())
        batches, order = _collected(direct)
        table = pa.Table.from_batches([batches[i] for i in order])
        collected.extend(zip(table.column("key").to_pylist(), table.column("value").to_pylist(), strict=True))

    query = start_foreach_batch(json_input_stream(spark, tmp_path / "in", files_per_trigger=1), check, tmp_path / "ck")
    query.awaitTermination()
    assert len(plans) == 2
    assert all("ExistingRDD" not in plan and "FileScan json" in plan for plan in plans)
    assert sorted(collected) == sorted(rows)
    assert [progress["numInputRows"] for progress in query.recentProgress] == [50, 50]


def test_a_dataframe_outside_foreach_batch_has_no_micro_batch_plan(spark: SparkSession) -> None:
    assert micro_batch_plan(spark.range(3)) is None
