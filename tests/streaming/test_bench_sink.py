"""`seglog bench sink` runs both sinks on the same input and reports in the shared shape."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from indexer.config import load_settings
from indexer.log_manager import LogManager
from indexer.records.file_records import FileRecords
from seglog.bench.report import write_json
from seglog.bench.sink import COMPRESSED, EXECUTORS, Workload, make_inputs, run_query, run_suite

pytestmark = pytest.mark.spark


def test_inputs_are_deterministic(tmp_path: Path) -> None:
    make_inputs(tmp_path / "a", Workload(2, 100, 1, 1))
    make_inputs(tmp_path / "b", Workload(2, 100, 1, 1))
    for name in ("part-0000.parquet", "part-0001.parquet"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_tiny_suite_reports_every_side(spark: SparkSession, tmp_path: Path) -> None:
    results = run_suite(spark, Workload(files=2, rows_per_file=500, files_per_trigger=1, rounds=1), tmp_path)
    compressed, uncompressed, executors, floor, overhead = results
    assert (compressed.name, compressed.baseline, compressed.goal) == (
        "sink rows/s (lz4 batches, driver writes)",
        "Spark Parquet file sink (snappy)",
        1.2,
    )
    assert (uncompressed.name, uncompressed.goal) == ("sink rows/s (uncompressed batches)", None)
    assert (executors.name, executors.goal) == ("sink rows/s (lz4 batches, executor writes)", None)
    assert (floor.name, floor.goal) == ("floor: rows collected to the driver, nothing written", None)
    for rate in (compressed, uncompressed, executors, floor):
        assert rate.value > 0 and rate.baseline_value > 0
        assert rate.ratio == pytest.approx(rate.value / rate.baseline_value)
        assert rate.details["round_ratios"] == [pytest.approx(rate.ratio)]  # one round: its ratio is the median's
        assert rate.details["master"] == "local[2]"
    assert compressed.baseline_value == uncompressed.baseline_value  # one Parquet measurement
    assert all(cpu[0] > 0 for key, cpu in compressed.details.items() if key.endswith("_driver_cpu_s_per_micro_batch"))
    assert overhead.details["micro_batches"] == 2  # one per input file, of the lz4 runs
    assert 0 < overhead.value <= overhead.baseline_value  # the overhead is part of the sink call
    write_json(results, tmp_path / "out.json", suite="sink", quick=True)
    doc = json.loads((tmp_path / "out.json").read_text())
    assert [d["name"] for d in doc] == [
        "sink rows/s (lz4 batches, driver writes)",
        "sink rows/s (uncompressed batches)",
        "sink rows/s (lz4 batches, executor writes)",
        "floor: rows collected to the driver, nothing written",
        "sink commit overhead per micro-batch",
    ]


@pytest.mark.parametrize("side", [COMPRESSED, EXECUTORS])
def test_the_lz4_sides_write_lz4_batches(spark: SparkSession, tmp_path: Path, side: str) -> None:
    """The goal figures' sinks really store compressed batches, and they read back exactly."""
    inputs = tmp_path / "input"
    make_inputs(inputs, Workload(1, 300, 1, 1))
    run_query(spark, inputs, tmp_path / "out", 1, side)
    batches = [
        entry
        for path in sorted((tmp_path / "out" / "logs").glob("bench-*/*.log"))
        for entry in FileRecords.open(path, mutable=False).batches()
    ]
    assert batches and {batch.compression_name for batch in batches} == {"lz4"}
    manager = LogManager(tmp_path / "out" / "logs", load_settings(), read_only=True)
    try:
        values = sorted(
            value
            for p in range(4)
            if (log := manager.get_log("bench", p)) is not None
            for value in log.read_records(0, max_offset=log.high_watermark).column("value").to_pylist()
        )
    finally:
        manager.close()
    assert values == sorted(pq.read_table(inputs).column("value").to_pylist())
