"""``seglog bench sink``: the exactly-once seglog sink against Spark's own Parquet file sink.

Workload: a directory of Parquet files (``key`` a user id out of 10,000, ``value`` a ~200-byte JSON
event) read by the same streaming file source with the same ``maxFilesPerTrigger`` and the same
trigger (``availableNow``), written by :class:`~streaming.sink.SegmentLogSink` (4 partitions) and by
``writeStream.format("parquet")`` (snappy, Spark's default), one after the other in one Spark
session, each side leading a round in turn (so as many times as every other side), after an
unmeasured round of every side (JIT and numba compilation, page cache).

On a ``local[...]`` master (default ``local[2]``) the sides are the sink with lz4-compressed batches
written on the driver (what ``writes="auto"`` picks there), the same uncompressed, the same lz4 sink
written on the executors, the driver path's floor and Parquet. On any other master
(``local-cluster[2,1,1024]``: two executor JVMs) they are the lz4 sink written on the executors (what
``auto`` picks there), the same written on the driver (the driver-collect path), the executor path's
floor and Parquet. A floor writes nothing: it hands each micro-batch's rows to Python where that
path gets them (collected to the driver; into the executors' Python workers by a ``mapInArrow``
that counts them), so no Python sink on that path can be faster.

Results (the shape of every ``seglog bench`` suite, :mod:`seglog.bench.report`):

* ``sink rows/s (lz4 batches, <where>)``: rows / wall time of the whole query (median of the rounds),
  seglog over Parquet (goals: >= 1.2x for the path ``auto`` picks on ``local[2]``, >= 1.0x for
  executor writes on a cluster): both sinks compress their output with their ecosystem's usual fast
  codec; the details give each round's own ratio too (the sides of a round run back to back, so a slow
  spell of the shared machine moves them all);
* ``sink rows/s (uncompressed batches)``: driver writes with ``compression.type=none`` (no goal);
* ``floor: ...`` rows/s: the floor of the master's goal path, over Parquet (no goal);
* ``driver CPU per micro-batch (executor writes)`` (cluster masters): CPU seconds of the driver's
  Python process and JVM per micro-batch, against the driver-collect path's (goal: at most 10% of
  it, ratio >= 10x); ``driver CPU per micro-batch (Spark's Parquet sink)`` beside it is Spark's own
  driver work per micro-batch (listing the source, planning, scheduling, the query's progress),
  which any sink pays, so the floor of the first figure;
* ``sink commit overhead per micro-batch``: fsync + commit record + high watermark publication,
  p50 over every micro-batch of the driver-written lz4 runs, against the p50 of the whole sink call
  (details: p90/p99/max and each phase).

``--quick`` (about a minute per master with Spark's start) uses 8 files of 40,000 rows and one round;
the full run 24 files of 100,000 rows and six rounds (a few minutes per master).

examples:
  seglog bench sink --quick
  seglog bench sink --json bench-sink.json
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from seglog.bench.report import (
    BenchResult,
    add_suite_arguments,
    latency_result,
    percentiles,
    publish,
    throughput_result,
)
from streaming.arrow_collect import collect_arrow, micro_batch_plan
from streaming.sink import BatchStats, SegmentLogSink

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pyspark.sql import DataFrame, SparkSession

logger = logging.getLogger(__name__)

SUITE = "sink"
NUM_PARTITIONS = 4
NUM_USERS = 10_000
# The sides of the comparison: (topic config, writes) of the seglog sink, or None for Spark's Parquet
# sink. Both sinks compress by default in their own ecosystem's usual way for the goal figures: Parquet
# pages with snappy (Spark's default), Kafka batches with lz4 (compression.type, a producer or topic
# setting); the uncompressed figure is reported beside it.
COMPRESSED, UNCOMPRESSED, EXECUTORS, PARQUET = "seglog-lz4", "seglog-none", "seglog-lz4-executors", "parquet"
# Floors, no sink at all: each micro-batch's key and value only handed to Python, where each seglog path
# gets them (collected to the driver as the driver path collects them; on the executors, a mapInArrow
# that counts them), then dropped. No Python sink can be faster than its path's floor.
COLLECT_FLOOR, EXECUTOR_FLOOR = "collect-only", "mapinarrow-only"
SIDES: dict[str, tuple[dict[str, str], str]] = {
    COMPRESSED: ({"compression.type": "lz4"}, "driver"),
    UNCOMPRESSED: ({"compression.type": "none"}, "driver"),
    EXECUTORS: ({"compression.type": "lz4"}, "executors"),
}
DEFAULT_MASTERS = ("local[2]", "local-cluster[2,1,1024]")
LOCAL_SIDES = (COMPRESSED, UNCOMPRESSED, EXECUTORS, COLLECT_FLOOR, PARQUET)
CLUSTER_SIDES = (EXECUTORS, COMPRESSED, EXECUTOR_FLOOR, PARQUET)
RATE_FIGURES = {  # the name of each side's rows/s figure
    COMPRESSED: "sink rows/s (lz4 batches, driver writes)",
    UNCOMPRESSED: "sink rows/s (uncompressed batches)",
    EXECUTORS: "sink rows/s (lz4 batches, executor writes)",
    COLLECT_FLOOR: "floor: rows collected to the driver, nothing written",
    EXECUTOR_FLOOR: "floor: rows into executors' Python (mapInArrow), nothing written",
}


@dataclass(frozen=True)
class Workload:
    files: int
    rows_per_file: int
    files_per_trigger: int
    rounds: int

    @property
    def rows(self) -> int:
        return self.files * self.rows_per_file


QUICK = Workload(files=8, rows_per_file=40_000, files_per_trigger=2, rounds=1)
FULL = Workload(files=24, rows_per_file=100_000, files_per_trigger=4, rounds=6)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``seglog bench sink``."""
    add_suite_arguments(parser, quick="small workload, one round (about a minute)")
    parser.add_argument("--work-dir", metavar="DIR", help="where inputs and outputs go (default: a temp dir)")
    parser.add_argument(
        "--master",
        action="append",
        metavar="MASTER",
        help="Spark master to measure on, repeatable (default: local[2], then local-cluster[2,1,1024]: "
        "two executor JVMs)",
    )


def make_inputs(directory: Path, workload: Workload, *, seed: int = 1) -> None:
    """Write the Parquet input files (deterministic for a seed)."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    kinds = np.array(["view", "click", "add_to_cart", "purchase"])
    for f in range(workload.files):
        n = workload.rows_per_file
        users = rng.integers(0, NUM_USERS, n)
        keys = pa.array(np.char.add("user-", users.astype(str)).astype(object), pa.string())
        ids = np.arange(f * n, (f + 1) * n)
        values = np.char.add(
            np.char.add(np.char.add('{"event_id":', ids.astype(str)), np.char.add(',"type":"', kinds[ids % 4])),
            np.char.add('","payload":"', np.char.add(np.full(n, "x" * 150), '"}')),
        )
        table = pa.table({"key": keys, "value": pa.array(values.astype(object), pa.string()).cast(pa.binary())})
        pq.write_table(table, directory / f"part-{f:04d}.parquet")


@dataclass(frozen=True)
class QueryRun:
    """One measured query: wall seconds, CPU seconds of the driver (its Python process and JVM), and
    the sink's stats of each micro-batch it wrote (none for Parquet)."""

    seconds: float
    driver_cpu_s: float
    micro_batches: int
    stats: list[BatchStats]


def driver_cpu_seconds(spark: SparkSession) -> float:
    """CPU seconds used so far by this Python process and the driver's JVM (``/proc``; on a ``local[...]``
    master the JVM also runs the tasks)."""
    pid = spark.sparkContext._gateway.proc.pid  # type: ignore[union-attr]
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    jvm = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
    return time.process_time() + jvm


def run_query(spark: SparkSession, inputs: Path, out: Path, files_per_trigger: int, side: str) -> QueryRun:
    """Run one availableNow query of ``side`` (a key of :data:`SIDES`, :data:`PARQUET` or a floor) to the end."""

    schema = spark.read.parquet(str(inputs)).schema
    df = spark.readStream.schema(schema).option("maxFilesPerTrigger", files_per_trigger).parquet(str(inputs))
    checkpoint = str(out / "checkpoint")
    sink = None
    if side == PARQUET:
        writer = df.writeStream.format("parquet").option("path", str(out / "parquet"))
    elif side == COLLECT_FLOOR:
        writer = df.writeStream.foreachBatch(_collect_only)
    elif side == EXECUTOR_FLOOR:
        writer = df.writeStream.foreachBatch(_map_in_arrow_only)
    else:
        config, writes = SIDES[side]
        sink = SegmentLogSink(
            out / "logs",
            topic="bench",
            num_partitions=NUM_PARTITIONS,
            config=config,
            checkpoint_location=checkpoint,
            writes=writes,
        )
        writer = df.writeStream.foreachBatch(sink)
    _settle(spark)
    cpu = driver_cpu_seconds(spark)
    started = time.perf_counter()
    query = writer.option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    cpu = driver_cpu_seconds(spark) - cpu
    micro_batches = len(query.recentProgress)
    stats = []
    if sink is not None:
        sink.close()
        stats = [b for b in sink.history if not b.skipped]
        micro_batches = len(stats)
    return QueryRun(elapsed, cpu, max(micro_batches, 1), stats)


def _collect_only(batch_df: DataFrame, batch_id: int) -> None:
    """The driver path's floor: the micro-batch (key and value, the sink's columns) collected as the sink
    collects it."""
    for _ in collect_arrow(micro_batch_plan(batch_df) or batch_df):
        pass


def _count_rows(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield pa.RecordBatch.from_pydict({"rows": [sum(batch.num_rows for batch in batches)]})


def _map_in_arrow_only(batch_df: DataFrame, batch_id: int) -> None:
    """The executor path's floor: the micro-batch's key and value handed to the executors' Python workers."""
    batch_df.select("key", "value").mapInArrow(_count_rows, "rows long").collect()


def _settle(spark: SparkSession) -> None:
    """Start a query from a clean slate: the dirty pages earlier queries left for the kernel to write
    back (Spark's Parquet sink does not fsync) are written now, and both heaps are collected, so one
    side's leftovers are not paid for by the next side's timed run."""
    os.sync()
    spark.sparkContext._jvm.System.gc()  # type: ignore[union-attr]
    gc.collect()


def run_suite(spark: SparkSession, workload: Workload, work_dir: Path) -> list[BenchResult]:
    """Measure the sinks on ``workload``; inputs and outputs under ``work_dir``."""
    master = spark.sparkContext.master or "local"
    local = master == "local" or master.startswith("local[")
    sides = list(LOCAL_SIDES if local else CLUSTER_SIDES)
    inputs = work_dir / "input"
    make_inputs(inputs, workload)
    for side in sides:  # a whole unmeasured round: JIT, numba and the page cache reach their steady state
        run_query(spark, inputs, work_dir / f"warmup-{side}", workload.files_per_trigger, side)
        shutil.rmtree(work_dir / f"warmup-{side}", ignore_errors=True)
    times: dict[str, list[float]] = {side: [] for side in sides}
    cpu: dict[str, list[float]] = {side: [] for side in sides}
    batch_stats: list[BatchStats] = []
    for r in range(workload.rounds):
        for side in sides[r % len(sides) :] + sides[: r % len(sides)]:  # each side leads a round in turn
            out = work_dir / f"round{r}-{side}"
            run = run_query(spark, inputs, out, workload.files_per_trigger, side)
            times[side].append(run.seconds)
            cpu[side].append(run.driver_cpu_s / run.micro_batches)
            if side == COMPRESSED:
                batch_stats.extend(run.stats)
            logger.info("round %d %s: %.2f s, driver CPU %.3f s per micro-batch", r, side, run.seconds, cpu[side][-1])
            shutil.rmtree(out, ignore_errors=True)
    rates = {side: workload.rows / statistics.median(seconds) for side, seconds in times.items()}
    overhead = [b.commit_overhead_ms for b in batch_stats]
    whole = [b.collect_ms + b.prepare_ms + b.append_ms + b.commit_overhead_ms for b in batch_stats]
    details: dict[str, Any] = {
        "master": master,
        "rows": workload.rows,
        "files": workload.files,
        "files_per_trigger": workload.files_per_trigger,
        "rounds": workload.rounds,
        "partitions": NUM_PARTITIONS,
        **{f"{side}_seconds": seconds for side, seconds in times.items()},
        **{f"{side}_driver_cpu_s_per_micro_batch": seconds for side, seconds in cpu.items()},
    }
    overhead_p = percentiles(overhead)

    def rate(side: str, goal: float | None) -> BenchResult:
        """rows/s of ``side`` against Parquet's, with each round's own ratio."""
        return throughput_result(
            RATE_FIGURES[side],
            "rows/s",
            rates[side],
            "Spark Parquet file sink (snappy)",
            rates[PARQUET],
            goal,
            round_ratios=_round_ratios(times, side),
            **details,
        )

    # The goal is on the path ``writes="auto"`` picks: driver writes on a local master, executor writes on a cluster.
    goal_side, goal = (COMPRESSED, 1.2) if local else (EXECUTORS, 1.0)
    results = [rate(side, goal if side == goal_side else None) for side in sides if side != PARQUET]
    if not local:
        # Executor writes against the collect path, and beside them the floor under every foreachBatch
        # sink: Spark's own driver work per micro-batch, the Parquet sink's.
        for name, side, cpu_goal in (("executor writes", EXECUTORS, 10.0), ("Spark's Parquet sink", PARQUET, None)):
            results.append(
                latency_result(
                    f"driver CPU per micro-batch ({name})",
                    "s",
                    statistics.median(cpu[side]),
                    "driver-collect path (driver writes)",
                    statistics.median(cpu[COMPRESSED]),
                    cpu_goal,
                    **details,
                )
            )
    return [
        *results,
        latency_result(
            "sink commit overhead per micro-batch",
            "ms",
            overhead_p["p50"],
            "whole sink call (p50)",
            percentiles(whole)["p50"],
            None,
            micro_batches=len(overhead),
            overhead=overhead_p,
            sink_call=percentiles(whole),
            collect=percentiles([b.collect_ms for b in batch_stats]),
            split=percentiles([b.split_ms for b in batch_stats]),
            prepare=percentiles([b.prepare_ms for b in batch_stats]),
            append=percentiles([b.append_ms for b in batch_stats]),
            flush=percentiles([b.flush_ms for b in batch_stats]),
            commit=percentiles([b.commit_ms + b.publish_ms for b in batch_stats]),
        ),
    ]


def _round_ratios(times: dict[str, list[float]], side: str) -> list[float]:
    """Each round's rows/s of ``side`` over Parquet's in the same round."""
    return [parquet / seconds for seconds, parquet in zip(times[side], times[PARQUET], strict=True)]


def run(args: argparse.Namespace) -> int:
    """Run the suite on each master, print the table, optionally save JSON; 0 when it ran (goals are
    reported, not enforced)."""
    from streaming.session import build_spark_session

    workload = QUICK if args.quick else FULL
    results: list[BenchResult] = []
    for master in args.master or DEFAULT_MASTERS:
        spark = build_spark_session(master, "seglog-bench-sink")
        try:
            if args.work_dir:
                work_dir = Path(args.work_dir)
                work_dir.mkdir(parents=True, exist_ok=True)
                results.extend(run_suite(spark, workload, work_dir))
            else:
                with tempfile.TemporaryDirectory(prefix="seglog-bench-sink-") as tmp:
                    results.extend(run_suite(spark, workload, Path(tmp)))
        finally:
            spark.stop()
    publish(results, json_path=args.json, suite=SUITE, quick=args.quick)
    return 0
