"""``seglog bench reader``: ``readStream.format("seglog")`` against Spark's Parquet file source.

Workload: the same records (``key`` a user id out of 10,000, ``value`` a ~200-byte JSON event, and the
Kafka source's other columns) stored twice: in a seglog topic of 4 partitions (written by the sink, as
lz4 batches: the usual Kafka producer codec) and as Parquet files (snappy, Spark's default) holding
exactly the rows the seglog source returns. Each side is a streaming query with the same trigger
(``availableNow``) and the same micro-batch size (``maxOffsetsPerTrigger`` = ``maxFilesPerTrigger`` x
rows per file, 4 tasks per micro-batch on both sides) into Spark's no-op sink, one after the other in
one Spark session, each side leading a round in turn, after an unmeasured round of both.

Results (the shape of every ``seglog bench`` suite, :mod:`seglog.bench.report`):

* ``reader rows/s``: rows / wall time of the whole query (median of the rounds), seglog over Parquet
  (goal >= 1.0x); the details give each round's own ratio and the rows each query counted;
* ``reader rows/s, 2 executors over 1``: the seglog query on ``local-cluster[2,1,1024]`` over
  ``local-cluster[1,1,1024]`` (separate executor JVMs with their own Python workers; one session each,
  one after the other in this process): how the read scales per added executor (no goal; the details
  give records/s added by the second executor). Skipped with ``--no-cluster``.

``--quick`` uses 400,000 rows and one round (about two minutes with the cluster part); the full run
2,000,000 rows and three rounds.

examples:
  seglog bench reader --quick
  seglog bench reader --json bench-reader.json
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
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from indexer.config import Settings
from indexer.records.isolation import IsolationLevel
from seglog.bench.report import BenchResult, add_suite_arguments, publish, throughput_result
from streaming.reader import RangeToRead, read_range
from streaming.sink import SegmentLogSink

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)

SUITE = "reader"
TOPIC = "bench"
NUM_PARTITIONS = 4
NUM_USERS = 10_000
FILES_PER_TRIGGER = NUM_PARTITIONS  # 4 tasks per micro-batch on both sides
SEGLOG, PARQUET = "seglog", "parquet"


@dataclass(frozen=True)
class Workload:
    rows: int
    rows_per_file: int
    rounds: int

    @property
    def rows_per_trigger(self) -> int:
        return self.rows_per_file * FILES_PER_TRIGGER


QUICK = Workload(rows=400_000, rows_per_file=25_000, rounds=1)
FULL = Workload(rows=2_000_000, rows_per_file=50_000, rounds=3)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``seglog bench reader``."""
    add_suite_arguments(parser, quick="400,000 rows, one round (about two minutes)")
    parser.add_argument("--work-dir", metavar="DIR", help="where the inputs go (default: a temp dir)")
    parser.add_argument("--master", default="local[2]", help="Spark master of the main comparison (default: local[2])")
    parser.add_argument("--no-cluster", action="store_true", help="skip the 1 vs 2 executors figure")


def make_inputs(work_dir: Path, workload: Workload, *, seed: int = 1) -> None:
    """The seglog topic (``work_dir/logs``) and the Parquet files (``work_dir/parquet``) of the same rows."""
    rng = np.random.default_rng(seed)
    kinds = np.array(["view", "click", "add_to_cart", "purchase"])
    step = 100_000
    with SegmentLogSink(
        work_dir / "logs",
        topic=TOPIC,
        num_partitions=NUM_PARTITIONS,
        settings=Settings(),
        config={"compression.type": "lz4"},
    ) as sink:
        for batch_id, start in enumerate(range(0, workload.rows, step)):
            n = min(step, workload.rows - start)
            users = rng.integers(0, NUM_USERS, n)
            ids = np.arange(start, start + n)
            values = np.char.add(
                np.char.add(np.char.add('{"event_id":', ids.astype(str)), np.char.add(',"type":"', kinds[ids % 4])),
                np.char.add('","payload":"', np.char.add(np.full(n, "x" * 150), '"}')),
            )
            sink.write_batch(
                pa.table(
                    {
                        "key": pa.array(np.char.add("user-", users.astype(str)).astype(object), pa.string()).cast(
                            pa.binary()
                        ),
                        "value": pa.array(values.astype(object), pa.string()).cast(pa.binary()),
                    }
                ),
                batch_id,
                query_id="bench",
            )
    parquet = work_dir / "parquet"
    parquet.mkdir(parents=True, exist_ok=True)
    batches = [
        batch
        for p in range(NUM_PARTITIONS)
        for batch in read_range(
            RangeToRead(
                str(work_dir / "logs"), TOPIC, p, 0, workload.rows, False, IsolationLevel.READ_UNCOMMITTED, True
            )
        )
    ]
    table = pa.Table.from_batches(batches)
    for f, start in enumerate(range(0, table.num_rows, workload.rows_per_file)):
        path = parquet / f"part-{f:05d}.parquet"
        pq.write_table(table.slice(start, workload.rows_per_file), path)
        os.utime(path, (f, f))  # oldest first: Spark's file source takes files in modification order


def run_query(
    spark: SparkSession, work_dir: Path, workload: Workload, side: str, checkpoint: Path
) -> tuple[float, int]:
    """Run one availableNow query of ``side`` into the no-op sink; returns (seconds, rows read)."""
    if side == SEGLOG:
        df = (
            spark.readStream.format("seglog")
            .option("subscribe", TOPIC)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", workload.rows_per_trigger)
            .load(str(work_dir / "logs"))
        )
    else:
        schema = spark.read.parquet(str(work_dir / "parquet")).schema
        df = (
            spark.readStream.schema(schema)
            .option("maxFilesPerTrigger", FILES_PER_TRIGGER)
            .parquet(str(work_dir / "parquet"))
        )
    gc.collect()
    spark.sparkContext._jvm.System.gc()  # type: ignore[union-attr]
    started = time.perf_counter()
    query = (
        df.writeStream.format("noop").option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    )
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    rows = sum(int(p["numInputRows"]) for p in query.recentProgress)
    shutil.rmtree(checkpoint, ignore_errors=True)
    return elapsed, rows


def compare(spark: SparkSession, work_dir: Path, workload: Workload) -> BenchResult:
    """The seglog source against the Parquet file source, side by side in ``spark``."""
    for side in (SEGLOG, PARQUET):  # an unmeasured round: JIT, numba, the Python workers, the page cache
        run_query(spark, work_dir, workload, side, work_dir / f"warmup-{side}")
    times: dict[str, list[float]] = {SEGLOG: [], PARQUET: []}
    counted: dict[str, list[int]] = {SEGLOG: [], PARQUET: []}
    for r in range(workload.rounds):
        for side in (SEGLOG, PARQUET) if r % 2 == 0 else (PARQUET, SEGLOG):
            seconds, rows = run_query(spark, work_dir, workload, side, work_dir / f"round{r}-{side}")
            times[side].append(seconds)
            counted[side].append(rows)
            logger.info("round %d %s: %.2f s, %d rows", r, side, seconds, rows)
    rates = {side: workload.rows / statistics.median(seconds) for side, seconds in times.items()}
    return throughput_result(
        "reader rows/s",
        "rows/s",
        rates[SEGLOG],
        "Spark Parquet file source (snappy)",
        rates[PARQUET],
        1.0,
        rows=workload.rows,
        rows_per_trigger=workload.rows_per_trigger,
        rounds=workload.rounds,
        round_ratios=[p / s for s, p in zip(times[SEGLOG], times[PARQUET], strict=True)],
        rows_counted=counted,
        **{f"{side}_seconds": seconds for side, seconds in times.items()},
    )


def executors_scaling(work_dir: Path, workload: Workload) -> BenchResult:
    """The seglog query on one, then two executor JVMs (a fresh session each)."""
    from streaming.session import build_spark_session

    rates = {}
    for executors in (1, 2):
        master = f"local-cluster[{executors},1,1024]"
        spark = build_spark_session(master, f"seglog-bench-reader-{executors}")
        try:
            run_query(spark, work_dir, workload, SEGLOG, work_dir / "warmup-cluster")
            seconds = statistics.median(
                run_query(spark, work_dir, workload, SEGLOG, work_dir / f"cluster{executors}-{r}")[0]
                for r in range(workload.rounds)
            )
        finally:
            spark.stop()
        rates[executors] = workload.rows / seconds
    return throughput_result(
        "reader rows/s, 2 executors over 1",
        "rows/s",
        rates[2],
        "the same query on 1 executor",
        rates[1],
        None,
        records_per_second_added_by_second_executor=rates[2] - rates[1],
        rows=workload.rows,
    )


def run_suite(spark: SparkSession, workload: Workload, work_dir: Path) -> list[BenchResult]:
    """The side-by-side comparison in ``spark`` (inputs made under ``work_dir`` first)."""
    make_inputs(work_dir, workload)
    return [compare(spark, work_dir, workload)]


def run(args: argparse.Namespace) -> int:
    """Run the suite, print the table, optionally save JSON; 0 when it ran (goals are reported, not enforced)."""
    from streaming.session import build_spark_session

    workload = QUICK if args.quick else FULL
    with tempfile.TemporaryDirectory(prefix="seglog-bench-reader-", dir=args.work_dir) as tmp:
        work_dir = Path(tmp)
        spark = build_spark_session(args.master, "seglog-bench-reader")
        results = run_suite(spark, workload, work_dir)
        if not args.no_cluster:
            spark.stop()
            results.append(executors_scaling(work_dir, workload))
    publish(results, json_path=args.json, suite=SUITE, quick=args.quick)
    return 0
