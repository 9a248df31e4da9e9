"""``seglog bench reader``: ``readStream.format("seglog")`` against Spark's Parquet file source.

Workload: the same records (``key`` a user id out of 10,000, ``value`` a ~200-byte JSON event, and the
Kafka source's other columns) stored twice: in a seglog topic of 4 partitions (written by the sink, as
lz4 batches: the usual Kafka producer codec) and as Parquet files (snappy, Spark's default) holding
exactly the rows the seglog source returns. Each side is a streaming query with the same trigger
(``availableNow``) and the same micro-batch size (``maxOffsetsPerTrigger`` = ``maxFilesPerTrigger`` x
rows per file, 4 tasks per micro-batch on both sides) into Spark's no-op sink, one after the other in
one Spark session, each side leading a round in turn, after an unmeasured round of each.

Results (the shape of every ``seglog bench`` suite, :mod:`seglog.bench.report`):

* ``reader rows/s``: rows / wall time of the whole query (median of the rounds), seglog over Parquet
  (goal >= 1.0x); the details give each round's own ratio and the rows each query counted;
* ``floor: a Python streaming source that only hands over prebuilt batches``: the same rows, micro-
  batches and tasks through :class:`FloorSource`, a Python data source whose tasks only hand Spark
  memory-mapped Arrow batches: Spark's own cost for any Python source, so the most the seglog source
  could reach (no goal);
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
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadMaxRows, SupportsTriggerAvailableNow

from indexer.config import Settings
from indexer.log_manager import LogManager
from indexer.records.isolation import IsolationLevel
from seglog.bench.report import BenchResult, add_suite_arguments, publish, throughput_result
from streaming.reader import KAFKA_SCHEMA, RangeToRead, read_range
from streaming.sink import SegmentLogSink

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.datasource import ReadLimit
    from pyspark.sql.types import StructType

logger = logging.getLogger(__name__)

SUITE = "reader"
TOPIC = "bench"
NUM_PARTITIONS = 4
NUM_USERS = 10_000
FILES_PER_TRIGGER = NUM_PARTITIONS  # 4 tasks per micro-batch on both sides
SEGLOG, PARQUET, FLOOR = "seglog", "parquet", "floor"
SIDES = (SEGLOG, PARQUET, FLOOR)


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
    with LogManager(work_dir / "logs", Settings(), read_only=True) as manager:
        ends = [
            log.high_watermark if (log := manager.get_log(TOPIC, p)) is not None else 0 for p in range(NUM_PARTITIONS)
        ]
    batches = [
        batch
        for p, end in enumerate(ends)
        for batch in read_range(
            RangeToRead(str(work_dir / "logs"), TOPIC, p, 0, end, False, IsolationLevel.READ_UNCOMMITTED, True)
        )
    ]
    table = pa.Table.from_batches(batches)
    floor = work_dir / FLOOR
    floor.mkdir(parents=True, exist_ok=True)
    for f, start in enumerate(range(0, table.num_rows, workload.rows_per_file)):
        path = parquet / f"part-{f:05d}.parquet"
        pq.write_table(table.slice(start, workload.rows_per_file), path)
        os.utime(path, (f, f))  # oldest first: Spark's file source takes files in modification order
        with pa.OSFile(str(floor / f"part-{f:05d}.arrow"), "wb") as sink, pa.ipc.new_file(sink, table.schema) as ipc:
            ipc.write_table(table.slice(start, workload.rows_per_file))


class FloorSource(DataSource):
    """``format("seglog_bench_floor")``: Spark's path for a Python streaming source with no work in it,
    the floor under the seglog source. Each task hands Spark one file of the seglog source's rows as
    prebuilt Arrow batches (memory-mapped, uncompressed Arrow IPC), :data:`FILES_PER_TRIGGER` tasks per
    micro-batch as the other sides read them."""

    @classmethod
    def name(cls) -> str:
        return "seglog_bench_floor"

    def schema(self) -> StructType:
        return KAFKA_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return _FloorStreamReader(sorted(str(p) for p in Path(self.options["path"]).glob("*.arrow")))


class _FloorStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets count files; each micro-batch takes the next :data:`FILES_PER_TRIGGER`."""

    def __init__(self, files: list[str]) -> None:
        self.files = files

    def initialOffset(self) -> dict[str, int]:
        return {"file": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(FILES_PER_TRIGGER)  # only says "limited": latestOffset takes whole files

    def prepareForTriggerAvailableNow(self) -> None:
        pass  # the files do not change

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        return {"file": min(start["file"] + FILES_PER_TRIGGER, len(self.files))}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        return [InputPartition(path) for path in self.files[start["file"] : end["file"]]]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        with pa.memory_map(partition.value) as source:
            yield from pa.ipc.open_file(source).read_all().to_batches()


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
    elif side == FLOOR:
        spark.dataSource.register(FloorSource)
        df = spark.readStream.format(FloorSource.name()).load(str(work_dir / FLOOR))
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


def compare(spark: SparkSession, work_dir: Path, workload: Workload) -> list[BenchResult]:
    """The seglog source and the Python source floor against the Parquet file source, side by side in
    ``spark``."""
    for side in SIDES:  # an unmeasured round: JIT, numba, the Python workers, the page cache
        run_query(spark, work_dir, workload, side, work_dir / f"warmup-{side}")
    times: dict[str, list[float]] = {side: [] for side in SIDES}
    counted: dict[str, list[int]] = {side: [] for side in SIDES}
    for r in range(workload.rounds):
        for side in SIDES[r % len(SIDES) :] + SIDES[: r % len(SIDES)]:  # each side leads a round in turn
            seconds, rows = run_query(spark, work_dir, workload, side, work_dir / f"round{r}-{side}")
            times[side].append(seconds)
            counted[side].append(rows)
            logger.info("round %d %s: %.2f s, %d rows", r, side, seconds, rows)
    rates = {side: workload.rows / statistics.median(seconds) for side, seconds in times.items()}
    details = {
        "rows": workload.rows,
        "rows_per_trigger": workload.rows_per_trigger,
        "rounds": workload.rounds,
        "rows_counted": counted,
        **{f"{side}_seconds": seconds for side, seconds in times.items()},
    }
    return [
        throughput_result(
            name,
            "rows/s",
            rates[side],
            "Spark Parquet file source (snappy)",
            rates[PARQUET],
            goal,
            round_ratios=[p / s for s, p in zip(times[side], times[PARQUET], strict=True)],
            **details,
        )
        for side, name, goal in (
            (SEGLOG, "reader rows/s", 1.0),
            (FLOOR, "floor: a Python streaming source that only hands over prebuilt batches", None),
        )
    ]


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
    return compare(spark, work_dir, workload)


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
