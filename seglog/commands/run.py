"""Run the Spark Structured Streaming job that feeds seglog, exactly once, until stopped.

Defaults come from the [streaming] section of conf/seglog.toml: a local Spark, Spark's rate
source shaped into keyed JSON events, topic "events" with 4 partitions in data/logs, checkpoint
data/checkpoints/events, a micro-batch every 2 seconds; the maintenance scheduler runs in-process.
A progress line is logged every --progress-interval seconds: the rows written in all and per
second since the previous line (what the sink wrote), Spark's processedRowsPerSecond of its last
micro-batch, the committed end offset and the segment count of each partition. --duration counts
from the command's start (Spark's start-up included); at the deadline no new micro-batch starts.
Options, paths, the topic's partition count, the partitions' writer locks, the checkpoint's lock (one
run per checkpoint) and its source (Spark cannot resume a checkpoint under another source) are
checked before Spark starts: a mistake is one line, exit 1, and nothing is written to the
checkpoint. Ctrl-C, SIGTERM or SIGHUP stops cleanly (query stopped, logs flushed and closed,
checkpoints written); a second Ctrl-C aborts. Restarting with the same checkpoint resumes exactly
where the last committed micro-batch ended.

The kafka source needs Spark's Kafka package (spark-sql-kafka-0-10) and the delta source
delta-spark's jars on Spark's classpath; they are not installed by default.

examples:
  seglog run                                   # embedded default, until Ctrl-C
  seglog run --duration 60 --rows-per-second 5000
  seglog run --source files --input data/in --format json --available-now
  seglog run --source kafka --kafka-bootstrap-servers localhost:9092 --kafka-subscribe clicks
  seglog run --master spark://host:7077 --log-dir /shared/logs --checkpoint-location /shared/cp

On a cluster (--writes auto picks the executors there) each partition of a micro-batch is written by
one Spark task where its rows are, and the driver handles only offsets and the commit record; the
log directory must then be shared by the executors (docs/streaming.md says which filesystems).
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from indexer.stop_signals import handling_stop_signals
from seglog.cli import add_log_config_arguments, partition_count, positive_int, positive_seconds, settings_from_args

logger = logging.getLogger(__name__)

PROGRESS_LOGGER = "streaming.job"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``seglog run``; each overrides its [streaming] key."""
    where = parser.add_argument_group("where")
    where.add_argument("--log-dir", metavar="DIR", help="log directory [log.dir]")
    where.add_argument("--checkpoint-location", metavar="DIR", help="Spark checkpoint [checkpoint.location]")
    where.add_argument("--topic", metavar="T", help="topic [topic]")
    where.add_argument(
        "--partitions", type=partition_count, metavar="N", help="partitions of the topic [num.partitions]"
    )
    source = parser.add_argument_group("source")
    source.add_argument("--source", choices=("rate", "files", "kafka", "delta"), help="input [source]")
    source.add_argument("--rows-per-second", type=positive_int, metavar="N", help="rate source speed [rows.per.second]")
    source.add_argument("--input", metavar="DIR", help="files or delta source directory [input.path]")
    source.add_argument("--format", choices=("json", "csv", "parquet"), help="file format [input.format]")
    source.add_argument(
        "--max-files-per-trigger",
        type=positive_int,
        metavar="N",
        help="files source: files per micro-batch [max.files.per.trigger]",
    )
    source.add_argument("--key-column", metavar="COL", help="record key for rows without a value column [key.column]")
    source.add_argument(
        "--kafka-bootstrap-servers",
        metavar="HOSTS",
        help="kafka source: the brokers, host:port[,host:port...] [kafka.bootstrap.servers]",
    )
    source.add_argument(
        "--kafka-subscribe", metavar="TOPICS", help="kafka source: the topics, comma-separated [kafka.subscribe]"
    )
    source.add_argument(
        "--starting-offsets",
        metavar="SPEC",
        help="kafka source: Spark's startingOffsets (earliest, latest or JSON) [starting.offsets]",
    )
    run = parser.add_argument_group("run")
    run.add_argument("--trigger", metavar="INTERVAL", help="micro-batch interval, e.g. '2 seconds' [trigger.interval]")
    run.add_argument("--available-now", action="store_true", help="process what the source has now, then stop")
    run.add_argument(
        "--duration",
        type=positive_seconds,
        metavar="SECONDS",
        help="stop cleanly this many seconds after the command started",
    )
    run.add_argument("--master", default="local[2]", help="Spark master (default: local[2])")
    run.add_argument(
        "--writes",
        choices=("auto", "driver", "executors"),
        help="where micro-batches are written: the driver collects them, or each partition is written by "
        "a task on the executors; auto: executors unless the master is local[...] or local-cluster[...] "
        "[writes]",
    )
    run.add_argument(
        "--progress-interval",
        type=positive_seconds,
        default=10.0,
        metavar="SECONDS",
        help="seconds between progress lines (default: 10)",
    )
    run.add_argument("--no-maintenance", action="store_true", help="do not run the maintenance scheduler in-process")
    add_log_config_arguments(parser, sections=("streaming", "maintenance"))


@contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """SIGINT/SIGTERM/SIGHUP set ``stop``; a second SIGINT raises KeyboardInterrupt. Handlers restored after."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        if stop.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt
        logger.warning("%s received: stopping cleanly (Ctrl-C again to abort)", signal.Signals(signum).name)
        stop.set()

    with handling_stop_signals(handler):
        yield


def run(args: argparse.Namespace) -> int:
    """Run the job; 0 after a clean stop."""
    from maintenance.scheduler import start_maintenance
    from maintenance.settings import MaintenanceSettings
    from streaming.job import JobSpec, run_job

    settings = settings_from_args(args)
    MaintenanceSettings.from_settings(settings)  # a bad [maintenance] value fails now, not after Spark's start
    spec = JobSpec.from_settings(
        settings,
        log_dir=args.log_dir,
        checkpoint_location=args.checkpoint_location,
        topic=args.topic,
        num_partitions=args.partitions,
        source=args.source,
        rows_per_second=args.rows_per_second,
        input_path=args.input,
        input_format=args.format,
        max_files_per_trigger=args.max_files_per_trigger,
        key_column=args.key_column,
        kafka_bootstrap_servers=args.kafka_bootstrap_servers,
        kafka_subscribe=args.kafka_subscribe,
        starting_offsets=args.starting_offsets,
        trigger_interval=args.trigger,
        available_now=args.available_now or None,
        master=args.master,
        writes=args.writes,
        progress_interval_s=args.progress_interval,
    )
    progress = logging.getLogger(PROGRESS_LOGGER)
    if progress.getEffectiveLevel() > logging.INFO:
        progress.setLevel(logging.INFO)  # live progress is the point of this command, even without -v
    stop = threading.Event()
    with _stop_on_signals(stop):
        summary = run_job(
            spec,
            settings,
            duration_s=args.duration,
            stop=stop,
            maintenance=None if args.no_maintenance else start_maintenance,
        )
    offsets = ", ".join(f"{t}-{p}: {o}" for (t, p), o in sorted(summary.end_offsets.items())) or "none"
    print(
        f"{summary.batches} micro-batches, {summary.rows} rows in {summary.elapsed_s:.1f} s; "
        f"committed end offsets: {offsets}"
    )
    return 0
