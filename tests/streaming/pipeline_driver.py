"""A user's Spark driver: ``readStream.format("seglog")`` -> transform -> ``SegmentLogSink``, killable mid-batch.

Run as ``python -m tests.streaming.pipeline_driver --help`` (from the repository root). It builds its
SparkSession the way a user does (``SparkSession.builder``, no ``PYSPARK_PYTHON``, no registration call:
Spark finds the source through the installed ``pyspark_seglog`` module), reads topic ``src`` of the log
directory from the earliest offset, upper-cases each value and writes topic ``dst`` of the same
directory with the exactly-once sink, ``maxOffsetsPerTrigger`` records per micro-batch, until the
backlog is read (``Trigger.AvailableNow``). ``--kill-batch``/``--kill-phase`` SIGKILL it inside a
micro-batch, as :mod:`tests.streaming.crash_driver` does; every batch start is printed ``BATCH <id>``.
"""

from __future__ import annotations

from tests.streaming.crash_driver import PHASES, arm, driver_parser, start_available_now


def main(argv: list[str] | None = None) -> int:
    parser = driver_parser(__doc__, PHASES, json_input=False)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=150)
    args = parser.parse_args(argv)

    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from streaming.sink import SegmentLogSink
    from tests.spark_session import TEST_JVM_OPTIONS

    arm(args.kill_batch, args.kill_phase)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("seglog-pipeline")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.extraJavaOptions", TEST_JVM_OPTIONS)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    source = (
        spark.readStream.format("seglog")
        .option("subscribe", "src")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", args.max_offsets_per_trigger)
        .load(args.log_dir)
    )
    transformed = source.select("key", F.upper(F.col("value").cast("string")).cast("binary").alias("value"))
    with SegmentLogSink(args.log_dir, topic="dst", num_partitions=3, checkpoint_location=args.checkpoint) as sink:
        query = start_available_now(transformed, sink, args.checkpoint)
        query.awaitTermination()
    print(f"DONE rows={sink.rows_written}", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
