"""`seglog bench sink` runs both sinks on the same input and reports in the shared shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from seglog.bench.report import write_json
from seglog.bench.sink import Workload, make_inputs, run_suite

pytestmark = pytest.mark.spark


def test_inputs_are_deterministic(tmp_path: Path) -> None:
    make_inputs(tmp_path / "a", Workload(2, 100, 1, 1))
    make_inputs(tmp_path / "b", Workload(2, 100, 1, 1))
    for name in ("part-0000.parquet", "part-0001.parquet"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_tiny_suite_reports_both_sinks(spark: SparkSession, tmp_path: Path) -> None:
    results = run_suite(spark, Workload(files=2, rows_per_file=500, files_per_trigger=1, rounds=1), tmp_path)
    rate, overhead = results
    assert (rate.name, rate.baseline, rate.goal) == ("sink rows/s", "Spark Parquet file sink", 1.0)
    assert rate.value > 0 and rate.baseline_value > 0 and rate.ratio == pytest.approx(rate.value / rate.baseline_value)
    assert overhead.details["micro_batches"] == 2  # one per input file
    assert 0 < overhead.value <= overhead.baseline_value  # the overhead is part of the sink call
    write_json(results, tmp_path / "out.json", suite="sink", quick=True)
    doc = json.loads((tmp_path / "out.json").read_text())
    assert [d["name"] for d in doc] == ["sink rows/s", "sink commit overhead per micro-batch"]
