"""The long-running main job: a Structured Streaming query from a source into seglog, exactly once.

Defaults come from the ``[streaming]`` section of ``conf/seglog.toml`` (Kafka-style dotted keys)::

    "log.dir" = "data/logs"                         "checkpoint.location" = "data/checkpoints/events"
    "topic" = "events"                              "num.partitions" = 4
    "source" = "rate"                               "rows.per.second" = 1000
    "trigger.interval" = "2 seconds"

plus, for the other sources, ``input.path``, ``input.format`` (json|csv|parquet),
``max.files.per.trigger``, ``key.column``, ``kafka.bootstrap.servers``, ``kafka.subscribe``,
``starting.offsets``, and ``writes`` (auto|driver|executors: where micro-batches are written, see
:func:`~streaming.sink.writes_on_executors`). When the driver writes, the job owns one
:class:`~indexer.log_manager.LogManager` (every partition's writer lock) shared by the sink and the
in-process maintenance scheduler the caller passes in; when the executors write, it holds no
partition and the scheduler borrows each in turn, as ``seglog maintain`` does (``seglog run`` passes
:func:`maintenance.scheduler.start_maintenance`; this package never imports ``maintenance``).

It stops when the stop event is set (the ``seglog run`` command sets it on Ctrl-C / SIGTERM), after
``duration_s``, or when the query ends (``available_now``). Stopping is clean: the query is stopped,
the sink finishes its batch, logs are flushed, closed and checkpointed, and Spark's checkpoint holds
every committed batch (a batch the sink committed but Spark did not is skipped on restart).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from indexer.commit_log import SinkCommitLog
from indexer.config import Settings
from indexer.errors import ConfigError, InvalidPartitionsError, InvalidTopicError, SeglogError, storage_errors
from indexer.file_names import is_log_file, partition_dir_name
from indexer.lock import FileLock
from indexer.log_manager import LogManager, check_log_dir, check_topic_request
from streaming import sources
from streaming.session import build_spark_session, local_log_dir, local_path, read_checkpoint_query_id
from streaming.sink import SegmentLogSink, check_writes, writes_on_executors

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

logger = logging.getLogger(__name__)

STOP_WAIT_S = 60.0  # longest wait for a running micro-batch before stopping the query anyway
SOURCE_RECORD = "seglog-run.json"  # in the checkpoint: the source the query reads (JobSpec.check_checkpoint_source)
RUN_LOCK = "seglog-run.lock"  # in the checkpoint: held by the run using it (JobSpec.checkpoint_lock)

# [streaming] key -> JobSpec attribute
_KEYS: dict[str, str] = {
    "log.dir": "log_dir",
    "checkpoint.location": "checkpoint_location",
    "topic": "topic",
    "num.partitions": "num_partitions",
    "source": "source",
    "rows.per.second": "rows_per_second",
    "trigger.interval": "trigger_interval",
    "input.path": "input_path",
    "input.format": "input_format",
    "max.files.per.trigger": "max_files_per_trigger",
    "key.column": "key_column",
    "kafka.bootstrap.servers": "kafka_bootstrap_servers",
    "kafka.subscribe": "kafka_subscribe",
    "starting.offsets": "starting_offsets",
    "writes": "writes",
}


_INTERVAL_UNITS_MS = {
    "week": 604_800_000.0,
    "day": 86_400_000.0,
    "hour": 3_600_000.0,
    "minute": 60_000.0,
    "second": 1000.0,
    "millisecond": 1.0,
    "microsecond": 0.001,
}
_INTERVAL_PART = re.compile(r"\s*(\d+(?:\.\d+)?)\s+(" + "|".join(_INTERVAL_UNITS_MS) + r")s?\b", re.IGNORECASE)


def trigger_interval_ms(text: str) -> float:
    """The length of a Spark processing-time trigger interval (``"2 seconds"``, ``"1 minute 30 seconds"``,
    ``"interval 500 milliseconds"``) in ms, checked before Spark starts (Spark's own check comes
    only after the JVM has started, as a Java stack).

    Raises:
        ConfigError: not an interval Spark's ``Trigger.ProcessingTime`` takes.
    """
    rest = re.sub(r"^\s*interval\b", "", text, flags=re.IGNORECASE)
    total, matched = 0.0, False
    while rest.strip():
        m = _INTERVAL_PART.match(rest)
        if m is None:
            raise ConfigError(
                f"trigger interval {text!r} is not an interval such as '2 seconds', '500 milliseconds' or "
                f"'1 minute 30 seconds' (units: {', '.join(_INTERVAL_UNITS_MS)})"
            )
        total += float(m.group(1)) * _INTERVAL_UNITS_MS[m.group(2).lower()]
        rest, matched = rest[m.end() :], True
    if not matched:
        raise ConfigError(f"trigger interval {text!r} is empty; e.g. '2 seconds'")
    return total


def streaming_keys() -> dict[str, str]:
    """Every ``[streaming]`` key with the :class:`JobSpec` attribute it sets (for ``--config``)."""
    return dict(_KEYS)


@dataclass(frozen=True)
class JobSpec:
    """What to run; see the module docstring for the matching ``[streaming]`` keys."""

    log_dir: Path = Path("data/logs")
    checkpoint_location: str = "data/checkpoints/events"
    topic: str = "events"
    num_partitions: int = 4
    source: str = "rate"
    rows_per_second: int = 1000
    trigger_interval: str = "2 seconds"
    available_now: bool = False
    input_path: str | None = None
    input_format: str = "json"
    max_files_per_trigger: int | None = None
    key_column: str | None = None
    kafka_bootstrap_servers: str | None = None
    kafka_subscribe: str | None = None
    starting_offsets: str = "latest"
    master: str = "local[2]"
    writes: str = "auto"
    spark_conf: Mapping[str, str] = field(default_factory=dict)
    progress_interval_s: float = 10.0

    def __post_init__(self) -> None:
        if self.source not in sources.SOURCES:
            raise ConfigError(f"source must be one of {sources.SOURCES}, got {self.source!r}")
        check_writes(self.writes)
        try:  # now: the job writes its checkpoint and log directory long before the sink would refuse them
            check_topic_request(self.topic, self.num_partitions)
        except (InvalidTopicError, InvalidPartitionsError) as e:
            raise ConfigError(f"{'topic' if isinstance(e, InvalidTopicError) else 'num.partitions'}: {e}") from None
        if self.source in ("files", "delta") and not self.input_path:
            raise ConfigError(f"the {self.source} source needs input.path (--input)")
        if self.source == "kafka" and not (self.kafka_bootstrap_servers and self.kafka_subscribe):
            raise ConfigError("the kafka source needs kafka.bootstrap.servers and kafka.subscribe")
        if not self.available_now:
            trigger_interval_ms(self.trigger_interval)

    def check_paths(self) -> None:
        """Check what can be checked before Spark starts: the input of the files/delta sources
        exists (local paths; a URL such as ``s3a://`` is left to Spark) and the log directory is
        not a partition directory.

        Raises:
            ConfigError: the input path does not exist, or is a file (both sources read a directory).
            NotALogDirectoryError: ``log_dir`` is a partition directory or a file.
        """
        check_log_dir(self.log_dir, must_exist=False)
        if self.source in ("files", "delta") and self.input_path and "://" not in self.input_path:
            what = f"the {self.source} source's input.path (--input) {self.input_path}"
            if not Path(self.input_path).exists():
                raise ConfigError(f"{what} does not exist")
            if not Path(self.input_path).is_dir():
                raise ConfigError(f"{what} is a file; give the directory that holds the input files")

    def check_partition_count(self, settings: Settings) -> None:
        """Check the topic's partition count as the job would create or find it, creating nothing: a
        refused count (another than the topic's, more new partitions than Kafka allows at once) writes
        neither the log directory nor the checkpoint.

        Raises:
            InvalidPartitionsError: the count the topic cannot have.
            InvalidTopicError: a topic name Kafka refuses.
        """
        with LogManager(self.log_dir, settings, read_only=True) as manager:
            manager.partition_count(self.topic, self.num_partitions)

    def source_identity(self) -> dict[str, str | None]:
        """What Spark cannot change under a checkpoint: the source, and the directory of a files or
        delta source (absolute, for local paths)."""
        path = self.input_path
        if self.source in ("files", "delta") and path and "://" not in path:
            path = str(Path(path).absolute())
        return {"source": self.source, "input.path": path if self.source in ("files", "delta") else None}

    def check_checkpoint_source(self) -> Callable[[], None] | None:
        """Refuse a checkpoint written by a query reading another source, before Spark starts.

        Spark does not allow a query to resume its checkpoint with another source (its guide, "Recovery
        Semantics after Changes in a Streaming Query"): it fails the query with the source's own parse or
        path error. The job keeps the source it started a checkpoint with in ``<checkpoint>/seglog-run.json``
        and compares. Returns what records the source (None: nothing to record): called before the query
        starts on a new checkpoint, after a run that ended cleanly on one made before the record existed
        (not before: a changed source there would be recorded as the checkpoint's own). Checkpoints that
        are not local paths are not checked.

        Raises:
            ConfigError: the checkpoint records another source or input directory.
            StorageError: the record cannot be read or written.
        """
        try:
            checkpoint = local_path(self.checkpoint_location)
        except ValueError:
            return None
        record, identity = checkpoint / SOURCE_RECORD, self.source_identity()
        recorded: Any = None
        with storage_errors(record, "read"):
            with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):  # a torn record: as if absent
                recorded = json.loads(record.read_text(encoding="utf-8"))
        if isinstance(recorded, dict) and recorded.get("source") is not None:
            if {k: recorded.get(k) for k in identity} != identity:
                raise ConfigError(
                    f"checkpoint {checkpoint} was written by a query reading {_source_text(recorded)}; this run "
                    f"reads {_source_text(identity)}: Spark cannot resume a query under another source. Run "
                    "with the checkpoint's source, or give a new --checkpoint-location (a new query reads "
                    "its source from the start: every file again, the rate source from 0, Kafka from "
                    "--starting-offsets)"
                )
            return None

        def write() -> None:
            with storage_errors(record, "write"):
                record.parent.mkdir(parents=True, exist_ok=True)
                record.write_text(json.dumps({"version": 1, **identity}) + "\n", encoding="utf-8")

        return write

    def checkpoint_lock(self) -> FileLock | None:
        """The lock a run holds on its checkpoint, ``<checkpoint>/seglog-run.lock`` (None for a checkpoint
        that is no local path). Spark refuses a second query on a checkpoint in its own JVM only: two
        runs in two processes both advanced one checkpoint, each writing the batches it ran to its own
        log directory only. The file stays in the checkpoint, empty, between runs."""
        try:
            checkpoint = local_path(self.checkpoint_location)
        except ValueError:
            return None
        return FileLock(checkpoint / RUN_LOCK, what=f"checkpoint {checkpoint}")

    @classmethod
    def from_settings(cls, settings: Settings, **overrides: Any) -> JobSpec:
        """The ``[streaming]`` section of ``settings``, then ``overrides`` that are not None."""
        values: dict[str, Any] = {}
        for key, value in settings.section("streaming").items():
            attr = _KEYS.get(key)
            if attr is None:
                raise ConfigError(
                    f"unknown [streaming] key {key!r} ({settings.section_source('streaming', key)}); "
                    f"known keys: {', '.join(_KEYS)}"
                )
            values[attr] = value
        values.update({k: v for k, v in overrides.items() if v is not None})
        if "log_dir" in values:
            values["log_dir"] = local_log_dir(values["log_dir"])  # as the sink reads it: file: URIs too
        for attr in ("num_partitions", "rows_per_second", "max_files_per_trigger"):
            if attr in values:
                try:
                    values[attr] = int(values[attr])
                except (TypeError, ValueError):
                    raise ConfigError(f"{attr.replace('_', '.')} must be an integer, got {values[attr]!r}") from None
        return cls(**values)


def _source_text(identity: Mapping[str, Any]) -> str:
    path = identity.get("input.path")
    return f"the {identity.get('source')} source" + (f" from {path}" if path else "")


@dataclass(frozen=True)
class JobSummary:
    """What a run did."""

    batches: int
    skipped_batches: int
    rows: int
    elapsed_s: float
    end_offsets: Mapping[tuple[str, int], int]


def build_source(spark: SparkSession, spec: JobSpec) -> DataFrame:
    """The streaming DataFrame of ``spec.source``, shaped for the sink."""
    if spec.source == "rate":
        return sources.rate_events(spark, spec.rows_per_second)
    if spec.source == "files":
        assert spec.input_path is not None  # checked by JobSpec
        return sources.file_events(
            spark,
            spec.input_path,
            spec.input_format,
            max_files_per_trigger=spec.max_files_per_trigger,
            key_column=spec.key_column,
        )
    if spec.source == "kafka":
        assert spec.kafka_bootstrap_servers is not None and spec.kafka_subscribe is not None
        return sources.kafka_events(
            spark, spec.kafka_bootstrap_servers, spec.kafka_subscribe, starting_offsets=spec.starting_offsets
        )
    assert spec.input_path is not None
    return sources.delta_events(spark, spec.input_path, key_column=spec.key_column)


class Stoppable(Protocol):
    """A background service the job stops when it ends (the maintenance scheduler's handle)."""

    def stop(self) -> None: ...


# Starts in-process maintenance, e.g. maintenance.scheduler.start_maintenance: on the job's LogManager
# (driver writes), or on the log directory, borrowing each partition in turn (executor writes).
MaintenanceStarter = Callable[[LogManager | Path, Settings], Stoppable]


class _Progress:
    """Logs one progress line per interval: rows the sink wrote (in all, and per second since the last
    line), the rate Spark reports for its last micro-batch (``processedRowsPerSecond``), the
    committed end offsets and the segments of each partition."""

    def __init__(self, sink: SegmentLogSink, spec: JobSpec) -> None:
        self.sink = sink
        self.spec = spec
        self.last_time = time.monotonic()
        self.last_rows = 0

    def report(self, query: Any) -> None:
        now = time.monotonic()
        rows = self.sink.rows_written
        elapsed = now - self.last_time
        rate = (rows - self.last_rows) / max(elapsed, 1e-9)
        self.last_time, self.last_rows = now, rows
        committed = self.sink.committed()
        offsets = " ".join(f"{t}-{p}@{o}" for (t, p), o in sorted(committed.end_offsets.items())) or "none"
        segments = "/".join(str(self._segments(t, p)) for t, p in sorted(committed.end_offsets)) or "0"
        progress = query.lastProgress or {}
        spark_rate = progress.get("processedRowsPerSecond")
        logger.info(
            "batch %d: %d rows written in all, %.0f rows/s over the last %.0f s; Spark's last micro-batch: %s "
            "rows/s processed; committed end offsets %s; segments per partition %s",
            committed.batch_id,
            rows,
            rate,
            elapsed,
            "-" if spark_rate is None else f"{spark_rate:.0f}",
            offsets,
            segments,
        )

    def _segments(self, topic: str, partition: int) -> int:
        directory = self.spec.log_dir / partition_dir_name(topic, partition)
        try:
            return sum(1 for entry in directory.iterdir() if is_log_file(entry))
        except FileNotFoundError:
            return 0


def run_job(
    spec: JobSpec,
    settings: Settings,
    *,
    duration_s: float | None = None,
    stop: threading.Event | None = None,
    spark: SparkSession | None = None,
    maintenance: MaintenanceStarter | None = None,
) -> JobSummary:
    """Run the streaming query until ``stop`` is set, ``duration_s`` passes or the query ends.

    ``spark`` runs the query in that session, whose master then decides ``writes=auto`` (None: a
    session on ``spec.master``). ``maintenance`` starts the in-process maintenance scheduler (None:
    none): on the job's ``LogManager`` when the driver writes; on the log directory when the
    executors write (``spec.writes``, see :func:`~streaming.sink.writes_on_executors`), since the job
    then holds no partition and each executor task takes its partition's lock.
    ``duration_s`` counts from this call (Spark's start-up included); at the deadline no new
    micro-batch is started and the running one is allowed to finish.

    Raises:
        SeglogError: the sink rejected a batch (bad input) or failed to write; the original error.
        pyspark.errors.StreamingQueryException: the query failed outside the sink.
    """
    stop = stop or threading.Event()
    started = time.monotonic()
    deadline = None if duration_s is None else started + duration_s
    spec.check_paths()
    spec.check_partition_count(settings)
    record_source = spec.check_checkpoint_source()
    fresh_checkpoint = record_source is not None and not _checkpoint_started(spec.checkpoint_location)
    checkpoint_lock = spec.checkpoint_lock()
    # A checkpoint another run uses is refused before anything is written; a new one is locked once the
    # source record has created its directory.
    with _holding(checkpoint_lock):
        on_executors = writes_on_executors(spec.writes, spark.sparkContext.master if spark else spec.master)
        # Before Spark starts (it takes seconds): the topic's partition count and, when the driver writes,
        # every partition's writer lock, held by the job (another `seglog run` on the same log directory
        # fails here, in one line). Executor writes take each partition's lock in its task instead.
        if on_executors:
            with LogManager(spec.log_dir, settings) as manager:
                manager.create_topic(spec.topic, spec.num_partitions, exist_ok=True)
        log_manager = None if on_executors else LogManager(spec.log_dir, settings)
        # closed last; if the query failed and the close fails too (a full disk), the query's error is raised
        with log_manager if log_manager is not None else contextlib.nullcontext():
            scheduler = None
            sink = None
            query = None
            try:
                if log_manager is not None:
                    count = log_manager.create_topic(spec.topic, spec.num_partitions, exist_ok=True)
                    for partition in range(count):
                        log_manager.get_or_create_log(spec.topic, partition)
                # Only now, the topic and the locks being the job's, is anything written to the checkpoint: a
                # refused run leaves the checkpoint location as it found it.
                if record_source is not None and fresh_checkpoint:
                    record_source()  # creates the checkpoint directory: the lock can be taken now
                    _hold(checkpoint_lock)
                    _warn_of_a_second_query(spec)
                else:
                    _warn_of_batches_elsewhere(spec)
                if spark is None:
                    spark = build_spark_session(spec.master, f"seglog-run-{spec.topic}", spec.spark_conf)
                    _quiet_spark_logs(spark)
                if maintenance is not None:
                    scheduler = maintenance(spec.log_dir if log_manager is None else log_manager, settings)
                sink = SegmentLogSink(
                    spec.log_dir,
                    topic=spec.topic,
                    num_partitions=spec.num_partitions,
                    settings=settings,
                    checkpoint_location=spec.checkpoint_location,
                    log_manager=log_manager,
                    writes="executors" if on_executors else "driver",
                )
                writer = (
                    build_source(spark, spec)
                    .writeStream.foreachBatch(sink)
                    .option("checkpointLocation", spec.checkpoint_location)
                    .queryName(f"seglog-{spec.topic}")
                )
                writer = (
                    writer.trigger(availableNow=True)
                    if spec.available_now
                    else writer.trigger(processingTime=spec.trigger_interval)
                )
                query = writer.start()
                logger.info(
                    "query %s (run %s) started: %s source -> %s in %s, written on the %s, checkpoint %s",
                    query.id,
                    query.runId,
                    spec.source,
                    spec.topic,
                    spec.log_dir,
                    "executors" if on_executors else "driver",
                    spec.checkpoint_location,
                )
                # The duration counts from the command's start: Spark's start-up is part of it.
                _wait(query, sink, spec, stop, deadline)
            finally:
                if query is not None and query.isActive:
                    _stop_between_batches(query)
                if sink is not None:
                    sink.close()
                if scheduler is not None:
                    scheduler.stop()
        assert sink is not None
        if record_source is not None and not fresh_checkpoint:
            record_source()  # a checkpoint from before the record: its source is the one that just ran
    history = list(sink.history)
    summary = JobSummary(
        batches=sum(1 for b in history if not b.skipped),
        skipped_batches=sum(1 for b in history if b.skipped),
        rows=sink.rows_written,
        elapsed_s=time.monotonic() - started,
        end_offsets=dict(sink.committed().end_offsets),
    )
    logger.info(
        "job stopped after %.1f s: %d batches, %d rows, %d replayed batches skipped",
        summary.elapsed_s,
        summary.batches,
        summary.rows,
        summary.skipped_batches,
    )
    return summary


@contextlib.contextmanager
def _holding(lock: FileLock | None) -> Iterator[None]:
    """Hold the checkpoint's ``lock`` inside, taken now if the checkpoint exists (else by :func:`_hold`
    once the source record has created it). Its file stays beside the source record; a run that never
    wrote the record (refused) removes it, leaving the checkpoint as it found it."""
    if lock is not None and lock.path.parent.is_dir():
        lock.acquire()
    try:
        yield
    finally:
        if lock is not None:
            lock.release(remove=not (lock.path.parent / SOURCE_RECORD).exists())


def _hold(lock: FileLock | None) -> None:
    """Take ``lock`` if :func:`_holding` could not yet (its directory did not exist then)."""
    if lock is not None and not lock.locked:
        lock.acquire()


def _warn_of_a_second_query(spec: JobSpec) -> None:
    """Warn, on a new checkpoint, that the sink already committed another query's batches in the log.

    The new query is another query (its batch 0 is new data, as with Spark's Kafka sink): it reads its
    source from the start and appends after what the sink holds, so rows the old query wrote (every
    file of a files source) are written again. Meant after a deleted checkpoint; said once, here.
    """
    committed = SinkCommitLog(spec.log_dir, spec.topic).read()
    if committed.query_id is None:
        return
    logger.warning(
        "checkpoint %s is new, but %s in %s already holds query %s's batches (up to batch %d): the new query "
        "reads its %s source from the start and appends after them: rows the old query already wrote from it "
        "are written again; to start over, use a new --log-dir or --topic too",
        spec.checkpoint_location,
        spec.topic,
        spec.log_dir,
        committed.query_id,
        committed.batch_id,
        spec.source,
    )


def _warn_of_batches_elsewhere(spec: JobSpec) -> None:
    """Warn when the checkpoint's query committed batches that the sink's commit record does not hold.

    Another ``--log-dir`` or ``--topic`` with the same checkpoint, or a log deleted (or restored from an
    older copy) while the checkpoint was kept: Spark goes on after its last committed batch, so the rows
    of the batches before it are not in this log. Said once, here; local checkpoints only.
    """
    try:
        commits = local_path(spec.checkpoint_location) / "commits"
        query_id = read_checkpoint_query_id(spec.checkpoint_location)
    except ValueError:
        return
    if query_id is None:
        return
    last = -1
    with storage_errors(commits, "list"), contextlib.suppress(FileNotFoundError):
        last = max((int(entry.name) for entry in commits.iterdir() if entry.name.isdigit()), default=-1)
    if last < 0:
        return
    committed = SinkCommitLog(spec.log_dir, spec.topic).read()
    held = committed.batch_id if committed.query_id == query_id else committed.earlier_queries.get(query_id, -1)
    if held >= last:
        return
    logger.warning(
        "query %s committed batches up to %d in checkpoint %s, but %s in %s has %s (another --log-dir or "
        "--topic, or a log deleted or restored from an older copy): the query goes on after batch %d, and "
        "the rows of the batches it lacks are not in %s",
        query_id,
        last,
        spec.checkpoint_location,
        spec.topic,
        spec.log_dir,
        "none of them" if held < 0 else f"them up to batch {held} only",
        last,
        spec.log_dir,
    )


def _checkpoint_started(location: str) -> bool:
    """Whether Spark has started a query in ``location`` (its ``metadata`` file exists)."""
    return (local_path(location) / "metadata").exists()


def _quiet_spark_logs(spark: SparkSession) -> None:
    """Silence, in the session the job built, the two logs that repeat a failed query's error with
    whole tracebacks, py4j's (the ``foreachBatch`` function's Python traceback) and Spark's
    ``MicroBatchExecution`` (the same inside a Java stack trace): the job raises that error itself,
    once (``_wait``), its traceback chained; on ``local`` masters also the executor's and the task
    scheduler's logs of a failed task (the same error with a Java stack trace). Spark's warnings are
    off in every session seglog builds (:data:`~streaming.session.LOG4J_CONF`)."""
    logging.getLogger("py4j.clientserver").setLevel(logging.CRITICAL)
    log4j = spark.sparkContext._jvm.org.apache.logging.log4j  # type: ignore[union-attr]
    log4j.core.config.Configurator.setLevel(
        "org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution", log4j.Level.FATAL
    )
    if re.fullmatch(r"local(\[[^],]*\])?", spark.sparkContext.master or ""):
        # Tasks run in this JVM, and with local[N]'s single attempt a task's failure fails the query, whose
        # error the job raises: the executor's and the task scheduler's logs of it repeated the error with
        # its Java stack trace (a malformed input line, bad rows with executor writes). Cluster masters keep
        # them: there they report retries on other machines.
        log4j.core.config.Configurator.setLevel("org.apache.spark.executor.Executor", log4j.Level.FATAL)
        log4j.core.config.Configurator.setLevel("org.apache.spark.scheduler.TaskSetManager", log4j.Level.FATAL)


def _stop_between_batches(query: Any, timeout_s: float = STOP_WAIT_S) -> None:
    """Stop ``query`` once the micro-batch it runs now (if any) has finished, waiting at most ``timeout_s``.

    Stopping in the middle of a batch is safe (the sink undoes or skips it on restart) but cancels
    Spark jobs noisily, so the running batch is let finish: its end is the progress Spark reports for
    it. Not a moment between two batches: when they run back to back (each longer than the trigger
    interval) the next starts as this one ends, so that moment hardly comes; the stop then ends the next
    one as it starts, and a restart runs it again.
    """
    logger.info("stopping query %s after its running micro-batch", query.id)
    deadline = time.monotonic() + timeout_s
    running = _last_progress_time(query)
    while (
        query.isActive
        and query.status.get("isTriggerActive")
        and _last_progress_time(query) == running
        and time.monotonic() < deadline
    ):
        time.sleep(0.1)
    query.stop()


def _last_progress_time(query: Any) -> str | None:
    """When the trigger of the query's last progress started (each progress has its own), None before any."""
    progress = query.lastProgress
    return None if progress is None else str(progress["timestamp"])


def _wait(query: Any, sink: SegmentLogSink, spec: JobSpec, stop: threading.Event, deadline: float | None) -> None:
    """Poll the query until it ends, ``stop`` is set or ``deadline`` passes, reporting progress."""
    from pyspark.errors import StreamingQueryException

    progress = _Progress(sink, spec)
    next_report = time.monotonic() + spec.progress_interval_s
    while not stop.is_set():
        try:
            if query.awaitTermination(0.5):
                break
        except StreamingQueryException as e:
            if isinstance(sink.last_error, SeglogError):
                raise sink.last_error from e
            malformed = sources.malformed_input_error(e)
            if malformed is not None:
                raise malformed from e
            raise
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            logger.info("duration reached")
            break
        if now >= next_report:
            progress.report(query)
            next_report = now + spec.progress_interval_s
