"""`seglog bench reader` reads the same rows on every side and reports in the shared shape."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from seglog.bench.reader import Workload, compare, make_inputs
from tests.streaming.helpers import read_topic

pytestmark = pytest.mark.spark


def test_both_sides_hold_and_read_the_same_rows(spark: SparkSession, tmp_path: Path) -> None:
    workload = Workload(rows=2_000, rows_per_file=250, rounds=1)
    make_inputs(tmp_path, workload)
    parquet = pq.read_table(tmp_path / "parquet")
    stored = read_topic(tmp_path / "logs", "bench")  # kafka-python's decoding of the lz4 batches
    assert sorted(parquet.column("value").to_pylist()) == sorted(s.value for s in stored)
    assert parquet.column_names == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    result, floor = compare(spark, tmp_path, workload)
    assert (result.name, result.baseline, result.goal) == ("reader rows/s", "Spark Parquet file source (snappy)", 1.0)
    assert floor.name.startswith("floor: ") and floor.goal is None
    assert result.details["rows_counted"] == {"seglog": [2_000], "parquet": [2_000], "floor": [2_000]}
    for figure in (result, floor):
        assert figure.value > 0 and figure.ratio == pytest.approx(figure.value / figure.baseline_value)
