"""``SegmentLogSink``: an exactly-once ``foreachBatch`` sink from Spark Structured Streaming to seglog.

Spark runs micro-batch N, calls the sink, then writes ``<checkpoint>/commits/N``. After a crash it
re-runs every batch that has an ``offsets/N`` but no ``commits/N``, with the same id and the same
input. The sink makes that harmless with its own commit record (:mod:`indexer.commit_log`),
holding the query id (Spark's checkpoint identity), the last committed batch id and each
partition's committed end offset. For batch N of query Q:

1. If the record says Q already committed N (or later): skip. Nothing is read from Spark.
2. Collect the batch as Arrow record batches (:mod:`streaming.arrow_collect`); as each arrives, a
   thread pool validates it, splits it per partition and encodes it (:mod:`streaming.micro_batch`),
   while Spark still produces the others. Bad input raises here, before anything is written.
3. Recovery: every partition the record knows is truncated back to its committed end offset (the
   leftovers of an attempt that crashed half-way) and its high watermark is set to that end.
   Partitions the record does not know yet get their current end offset recorded first (a
   "baseline" write of the record), so a crash during their first append is also undone.
4. Append every partition's encoded batches (``Log.append_encoded`` gives them their offsets) and
   fsync it; partitions in parallel, so one's fsync overlaps another's appends.
5. Write the commit record: batch N of Q, with the new end offsets. **This is the commit point.**
6. Publish: advance each partition's high watermark to its new end and write
   ``replication-offset-checkpoint``. Readers stop at the high watermark, so the whole batch
   becomes visible at once. A crash between 5 and 6 delays visibility until the next start
   (step 3 republishes), it never loses or duplicates.

Nothing at or below a high watermark is ever truncated: the watermark only moves to committed
ends. A query on a fresh checkpoint has another id, so its batch 0 is a new batch, not a replay.

Where the rows are written (``writes``): ``"driver"`` collects each micro-batch to the driver as
above; ``"executors"`` writes each partition in one Spark task where the rows are
(:mod:`streaming.executor_writes`: the same steps 2-4 on the executors, fenced against stale task
attempts, and the driver only reads the commit record, commits and publishes); ``"auto"`` (default)
picks the executors when the sink has a ``topic`` and the Spark master spans machines (not
``local[...]`` nor ``local-cluster[...]``, where measurements favoured the driver: docs/streaming.md).

The sink's protocol runs on the driver (Spark calls ``foreachBatch`` functions there); with driver
writes it owns the partitions' write locks while open. It serialises batches: it is thread-safe, one
batch at a time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from indexer.commit_log import SinkCommit, SinkCommitLog, commit_file, sink_commits, sink_lock_file
from indexer.config import LogConfig, Settings, load_settings
from indexer.data_loss import missing_committed_records
from indexer.errors import ConfigError, SchemaError, StorageError, storage_errors
from indexer.file_names import REPLICATION_OFFSET_CHECKPOINT_FILE, TopicPartition, validate_topic
from indexer.lock import FileLock
from indexer.log_manager import LogManager, check_log_dir
from streaming.arrow_collect import (
    SPARK_QUERY_ID_PROPERTY,
    collect_arrow,
    empty_arrow_table,
    micro_batch_plan,
    temporary_checkpoint,
)
from streaming.executor_writes import WritePlan, checkpoint_partition, open_partition, run_write_job
from streaming.micro_batch import (
    SINK_COLUMNS,
    MicroBatchEncoder,
    PartitionBatches,
    TopicLayout,
    check_sink_columns_once,
    split_record_batch,
)
from streaming.session import local_log_dir, read_checkpoint_query_id, runs_on_one_machine

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

    from indexer.log import Log

logger = logging.getLogger(__name__)

HISTORY_LENGTH = 10000  # BatchStats kept for progress reports and benchmarks
WRITES = ("auto", "driver", "executors")
WRITE_BATCH_ROWS = 100_000  # write_batch cuts a table into record batches of this many rows, as Spark's
# Arrow collect does with build_spark_session's maxRecordsPerBatch, so the pool encodes them side by side


@dataclass(frozen=True)
class BatchStats:
    """What one call of the sink did; timings in milliseconds.

    ``collect_ms`` runs from the start of the call to the last record batch's arrival; ``split_ms`` is
    the pool's time validating, splitting and encoding record batches, mostly during the collect;
    ``prepare_ms`` what was left of it after the collect, plus recovery; ``append_ms`` runs until the
    last partition's appends ended and ``flush_ms`` from there until every fsync ended (fsyncs of
    partitions done earlier overlap the appends of others).
    """

    batch_id: int
    query_id: str
    skipped: bool
    rows: int = 0
    end_offsets: Mapping[TopicPartition, int] = field(default_factory=dict)
    truncated: Mapping[TopicPartition, int] = field(default_factory=dict)
    collect_ms: float = 0.0
    split_ms: float = 0.0
    prepare_ms: float = 0.0
    append_ms: float = 0.0
    flush_ms: float = 0.0
    commit_ms: float = 0.0
    publish_ms: float = 0.0

    @property
    def commit_overhead_ms(self) -> float:
        """Time spent on exactly-once bookkeeping: fsync, commit record, high watermarks."""
        return self.flush_ms + self.commit_ms + self.publish_ms


class SegmentLogSink:
    """Pass to ``df.writeStream.foreachBatch(sink)``; writes each micro-batch into seglog partitions.

    Columns and options follow Spark's Kafka sink (see :mod:`streaming.micro_batch`). Exactly once
    across crashes and restarts (see the module docstring for the protocol and its crash windows).

    Args:
        log_dir: the log directory (created if missing; a file or a partition directory raises
            :class:`~indexer.errors.NotALogDirectoryError` here), a path or a ``file:`` URI
            (:func:`~streaming.session.local_log_dir`); a relative path is the driver's, made absolute
            here (executor tasks run in other working directories).
        topic: default topic for every row (wins over a ``topic`` column, as in Spark).
        num_partitions: partitions of the topic; a new topic is created with all of them (default 1),
            an existing one must have exactly this many (default: its recorded count). Grow a topic
            explicitly (``LogManager.add_partitions``, ``seglog topic alter``), never by a sink.
        config: topic config overrides with Kafka's keys (``{"segment.bytes": 1048576}``).
        settings: settings to start from (default: ``conf/seglog.toml`` via ``load_settings``).
        sink_id: names the commit record; default the topic, or ``"default"``.
        query_id: the Spark query/checkpoint identity; default read from ``checkpoint_location``'s
            metadata, else from the running query (Spark's ``sql.streaming.queryId`` property).
        checkpoint_location: the query's checkpoint location (to read its identity).
        log_manager: an open :class:`LogManager` to share (the caller closes it); default: the sink
            opens its own on the first batch and closes it in :meth:`close`.
        max_workers: threads appending partitions in parallel (default: CPU count).
        writes: where micro-batches are written: ``"driver"``, ``"executors"`` (needs ``topic``, and no
            ``log_manager``: the executors take the partitions' locks) or ``"auto"`` (executors when
            both hold and the Spark master is neither ``local[...]`` nor ``local-cluster[...]``).
    """

    def __init__(
        self,
        log_dir: str | os.PathLike[str],
        *,
        topic: str | None = None,
        num_partitions: int | None = None,
        config: Mapping[str, Any] | None = None,
        settings: Settings | None = None,
        sink_id: str | None = None,
        query_id: str | None = None,
        checkpoint_location: str | None = None,
        log_manager: LogManager | None = None,
        max_workers: int | None = None,
        writes: str = "auto",
    ) -> None:
        if topic is not None:
            validate_topic(topic)
        check_writes(writes)
        if writes == "executors" and (topic is None or log_manager is not None):
            raise ConfigError(
                "writes='executors' needs the sink's topic option and no shared log_manager "
                "(the executors take the partitions' write locks)"
            )
        if num_partitions is not None and num_partitions < 1:
            raise ConfigError(f"num_partitions must be >= 1, got {num_partitions}")
        # Executor tasks run elsewhere: a relative path would be theirs. A file or a partition directory
        # fails here, before the query starts, not at its first micro-batch.
        self.log_dir = check_log_dir(local_log_dir(log_dir).absolute(), must_exist=False)
        self.topic = topic
        self.num_partitions = num_partitions
        self.writes = writes
        base = settings if settings is not None else load_settings()
        LogConfig().with_overrides(config or {}, source="the sink's config=")  # blame this option, not --config
        self.settings = dataclasses.replace(base, overrides={**base.overrides, **(config or {})})
        for name in {topic, *self.settings.topics} - {None}:
            self.settings.log_config(name)  # fail on a bad override now, not at the first batch
        self.sink_id = sink_id or topic or "default"
        self.commit_log = SinkCommitLog(self.log_dir, self.sink_id)
        self._sink_lock = FileLock(
            sink_lock_file(self.log_dir, self.sink_id), what=f"sink {self.sink_id} in {self.log_dir}"
        )
        self._query_id = query_id
        self._checkpoint_location = checkpoint_location
        self._checked_query: str | None = None  # the running query whose checkpoint check_query_checkpoint passed
        self._log_manager = log_manager
        self._owns_log_manager = log_manager is None
        self._max_workers = max_workers or os.cpu_count() or 1
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._recovered = False
        self._created_log_dir = False  # by this sink's first batch
        self._layouts: dict[str, TopicLayout] = {}
        self._layouts_lock = threading.Lock()  # the pool's threads ask for layouts
        self._created: set[str] = set()  # topics this sink has created (or found), all partitions there
        self.history: deque[BatchStats] = deque(maxlen=HISTORY_LENGTH)
        self.rows_written = 0
        self.last_error: BaseException | None = None

    # ----------------------------------------------------------------------------------- Spark side

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        """The ``foreachBatch`` entry point: skip a committed batch, else write it exactly once.

        The error of a failed batch is kept in :attr:`last_error` (Spark re-raises it wrapped in a
        ``StreamingQueryException`` that only has its text).
        """
        try:
            query_id = self._resolve_query_id(batch_df)
            if self._on_executors(batch_df):
                self._write_on_executors(batch_df, batch_id, query_id)
            else:
                self._write(lambda: collect_arrow(_to_collect(batch_df, self.topic)), batch_id, query_id)
        except BaseException as e:
            self.last_error = e
            raise

    def _on_executors(self, batch_df: DataFrame) -> bool:
        """Whether this micro-batch is written on the executors (see ``writes``)."""
        if self.topic is None or self._log_manager is not None:
            return False  # executor writes need both (__init__ refuses writes="executors" without them)
        return writes_on_executors(self.writes, batch_df.sparkSession.sparkContext.master)

    def _resolve_query_id(self, batch_df: DataFrame) -> str:
        """The id of the query this micro-batch belongs to: ``query_id=``, else the one recorded in
        ``checkpoint_location``, else the running query's.

        A ``checkpoint_location`` naming another query's checkpoint than the running query's is a
        :class:`ConfigError`: the sink would take this query's batch ids for the other query's and
        skip them as already committed, while Spark commits them (rows silently never written). So is a
        running query without a checkpoint of its own (:func:`check_query_checkpoint`).
        """
        running = batch_df.sparkSession.sparkContext.getLocalProperty(SPARK_QUERY_ID_PROPERTY)
        if running and running != self._checked_query:
            check_query_checkpoint(batch_df, running)
            self._checked_query = running
        if self._query_id is None and self._checkpoint_location is not None:
            recorded = read_checkpoint_query_id(self._checkpoint_location)
            if running and recorded != running:
                whose = "holds no Spark checkpoint" if recorded is None else f"is the checkpoint of query {recorded}"
                raise ConfigError(
                    f"checkpoint_location={str(self._checkpoint_location)!r} {whose}, "
                    f"but this micro-batch belongs to query {running}: give the sink the same checkpoint "
                    "as the query's checkpointLocation option, or leave checkpoint_location out (the sink "
                    "then takes the running query's id)"
                )
            self._query_id = recorded
        if self._query_id is not None:
            return self._query_id
        if not running:
            raise ConfigError(
                "cannot tell which Spark checkpoint this micro-batch belongs to: run the sink inside "
                "writeStream.foreachBatch, or, for a batch DataFrame, pass query_id= (a name for this write: "
                "calling the sink again with it and the same batch id is skipped)"
            )
        return str(running)

    # ------------------------------------------------------------------------------------ the protocol

    def write_batch(self, table: pa.Table, batch_id: int, *, query_id: str) -> BatchStats:
        """Write micro-batch ``batch_id`` of query ``query_id``, given as one Arrow table, exactly once.

        The table goes through the same path as a collected micro-batch, cut into record batches of
        :data:`WRITE_BATCH_ROWS` rows.

        Raises:
            SchemaError, InvalidTopicError, UnknownTopicOrPartitionError, RecordTooLargeError,
                RecordBatchTooLargeError: bad input, raised before anything is written.
            StorageError: an I/O failure; the batch is not committed and its next attempt is undone
                and redone.
            ValueError: the sink is closed.
        """
        return self._write(lambda: _as_collected(table), batch_id, query_id)

    def _write(
        self, collect: Callable[[], Iterable[pa.RecordBatch | list[int]]], batch_id: int, query_id: str
    ) -> BatchStats:
        """The protocol for one micro-batch; ``collect`` starts its record batches' stream (see
        :func:`~streaming.arrow_collect.collect_arrow`), only once the batch is known not to be committed."""
        with self._lock:
            self._check_open()
            committed = self.commit_log.read()
            skipped = self._skip_if_committed(committed, batch_id, query_id)
            if skipped is not None:
                return skipped
            t0 = time.perf_counter()
            encoder = MicroBatchEncoder(
                self._executor(),
                default_topic=self.topic,
                layout=self._layout,
                null_key_start=batch_id,
                now_ms=int(time.time() * 1000),
            )
            order: list[int] = []
            try:
                for item in collect():  # read to its end: the Spark job's errors come last
                    if isinstance(item, pa.RecordBatch):
                        encoder.submit(item)
                    else:
                        order = item
                t1 = time.perf_counter()
                parts = encoder.finish(order)
            finally:
                encoder.cancel()
            manager = self._manager()
            self._create_topics({part.topic for part in parts} | ({self.topic} if self.topic is not None else set()))
            if self.topic is not None:  # every partition of the sink's topic is open after a batch, rows or not
                for partition in range(self._layout(self.topic).num_partitions):
                    self._log(manager, (self.topic, partition))
            committed = self._record_baselines(committed, manager, parts)
            truncated = self._recover(committed, manager)
            t2 = time.perf_counter()
            logs, t3 = self._write_all(manager, parts)
            t4 = time.perf_counter()
            end_offsets = dict(committed.end_offsets)
            end_offsets.update({tp: log.log_end_offset for tp, log in logs.items()})
            self._commit(committed.successor(query_id, batch_id, end_offsets, int(time.time() * 1000)))
            t5 = time.perf_counter()
            self._publish(manager, {tp: end_offsets[tp] for tp in logs})
            t6 = time.perf_counter()
            rows = sum(part.num_rows for part in parts)
            stats = BatchStats(
                batch_id,
                query_id,
                skipped=False,
                rows=rows,
                end_offsets=end_offsets,
                truncated=truncated,
                collect_ms=(t1 - t0) * 1e3,
                split_ms=encoder.split_ms,
                prepare_ms=(t2 - t1) * 1e3,
                append_ms=(t3 - t2) * 1e3,
                flush_ms=(t4 - t3) * 1e3,
                commit_ms=(t5 - t4) * 1e3,
                publish_ms=(t6 - t5) * 1e3,
            )
            self._record(stats)
            logger.debug("sink %s: committed batch %d (%d rows) %s", self.sink_id, batch_id, rows, stats)
            return stats

    def _write_on_executors(self, batch_df: DataFrame, batch_id: int, query_id: str) -> BatchStats:
        """The protocol with each partition written by one Spark task (:mod:`streaming.executor_writes`);
        the driver reads the commit record, records baselines, runs the job, commits and publishes."""
        assert self.topic is not None
        with self._lock:
            self._check_open()
            if self._log_manager is not None:
                raise ConfigError("executor writes need a sink without a shared log_manager")
            committed = self.commit_log.read()
            if committed.is_committed(query_id, batch_id):
                if not self._recovered:  # a batch committed just before a crash: publish it
                    self._publish_unowned(committed.end_offsets)
                    self._recovered = True
                return self._skipped(batch_id, query_id)
            t0 = time.perf_counter()
            # The schema first: a micro-batch that cannot be written leaves the directory as it found it.
            selected = _sink_columns(batch_df, self.topic)
            topic, layout = self.topic, self._layout(self.topic)

            def prepare() -> dict[int, int]:
                """Once every row passed: create the topic, record baselines, publish a commit before a crash."""
                nonlocal committed
                self._create_topics({topic})
                committed = self._record_unowned_baselines(committed, topic, layout.num_partitions)
                if not self._recovered:
                    self._publish_unowned(committed.end_offsets)
                    self._recovered = True
                return {p: end for (t, p), end in committed.end_offsets.items() if t == topic}

            ready = (
                self._recovered
                and topic in self._created
                and all((topic, p) in committed.end_offsets for p in range(layout.num_partitions))
            )
            plan = WritePlan(
                str(self.log_dir),
                self.sink_id,
                self.topic,
                layout,
                self.settings.log_config(self.topic),
                query_id,
                batch_id,
                int(time.time() * 1000),
                uuid.uuid4().hex,
                prepare() if ready else {},
            )
            t1 = time.perf_counter()
            results = run_write_job(selected, plan, None if ready else prepare)
            t2 = time.perf_counter()
            end_offsets = dict(committed.end_offsets)
            for result in results:
                if result.start != end_offsets[(topic, result.partition)]:
                    raise StorageError(
                        f"batch {batch_id}: partition {topic}-{result.partition} was written from "
                        f"offset {result.start}, not its committed end {end_offsets[(topic, result.partition)]}",
                        path=self.log_dir,
                    )
                end_offsets[(topic, result.partition)] = result.end
            self._commit(committed.successor(query_id, batch_id, end_offsets, int(time.time() * 1000)))
            t3 = time.perf_counter()
            written = {(self.topic, result.partition): result.end for result in results}
            self._publish_unowned(written)
            t4 = time.perf_counter()
            stats = BatchStats(
                batch_id,
                query_id,
                skipped=False,
                rows=sum(result.end - result.start for result in results),
                end_offsets=end_offsets,
                collect_ms=(t2 - t1) * 1e3,
                prepare_ms=(t1 - t0) * 1e3,
                commit_ms=(t3 - t2) * 1e3,
                publish_ms=(t4 - t3) * 1e3,
            )
            self._record(stats)
            logger.debug("sink %s: committed batch %d on the executors %s", self.sink_id, batch_id, stats)
            return stats

    def _record_unowned_baselines(self, committed: SinkCommit, topic: str, num_partitions: int) -> SinkCommit:
        """Executor writes: record the current end of the topic's partitions the commit record does not
        know (creating them), each opened only for that, before any task writes to them."""
        new = [(topic, p) for p in range(num_partitions) if (topic, p) not in committed.end_offsets]
        if not new:
            return committed
        self._check_sole_sink(new)
        offsets = dict(committed.end_offsets)
        config = self.settings.log_config(topic)
        for tp in new:
            log = open_partition(self.log_dir, tp, config)
            try:
                offsets[tp] = log.log_end_offset
            finally:
                log.close()
        checkpoint_partition(self.log_dir, REPLICATION_OFFSET_CHECKPOINT_FILE, {tp: offsets[tp] for tp in new})
        baseline = dataclasses.replace(committed, end_offsets=offsets)
        self.commit_log.write(baseline)
        logger.info(
            "sink %s: recorded starting offsets of %s",
            self.sink_id,
            ", ".join(f"{t}-{p}@{offsets[(t, p)]}" for t, p in new),
        )
        return baseline

    def _publish_unowned(self, end_offsets: Mapping[TopicPartition, int]) -> None:
        """Executor writes: publish committed ends as high watermarks in ``replication-offset-checkpoint``
        (the driver holds no partition; each task's log reads its high watermark from there)."""
        if end_offsets:
            checkpoint_partition(self.log_dir, REPLICATION_OFFSET_CHECKPOINT_FILE, end_offsets)

    def _check_open(self) -> None:
        """Raises ``ValueError`` once closed; else holds the sink's lock (taken at the first batch, kept
        until :meth:`close`), so that no other open sink writes the same commit record.

        Raises:
            LogLockedError: another sink of this id (another query, or this process) is open.
        """
        if self._closed:
            raise ValueError(f"sink {self.sink_id} on {self.log_dir} is closed")
        if not self._sink_lock.locked:
            with storage_errors(self.log_dir, "create log directory"):
                with contextlib.suppress(FileExistsError):
                    self.log_dir.mkdir(parents=True)
                    self._created_log_dir = True
            self._sink_lock.acquire()

    def _skip_if_committed(self, committed: SinkCommit, batch_id: int, query_id: str) -> BatchStats | None:
        """Stats of a skipped replay if ``committed`` (the commit record) says ``batch_id`` of ``query_id``
        committed, else None. Caller holds the lock.

        The first call of this sink object also runs recovery, so a batch that committed just before a
        crash is published (high watermarks) even when Spark's replay of it is skipped.
        """
        if not committed.is_committed(query_id, batch_id):
            return None
        if not self._recovered:
            self._recover(committed, self._manager())
        return self._skipped(batch_id, query_id)

    def _skipped(self, batch_id: int, query_id: str) -> BatchStats:
        stats = BatchStats(batch_id, query_id, skipped=True)
        self._record(stats)
        logger.info("sink %s: batch %d of query %s already committed, skipping", self.sink_id, batch_id, query_id)
        return stats

    def _record(self, stats: BatchStats) -> None:
        self.history.append(stats)
        self.rows_written += stats.rows

    def _layout(self, topic: str) -> TopicLayout:
        """Partitions, size limits and encoding of ``topic``; fixes its partition count on first use."""
        with self._layouts_lock:
            return self._layouts.get(topic) or self._new_layout(topic)

    def _new_layout(self, topic: str) -> TopicLayout:
        # The engine's count for the topic (the one it recorded, which num_partitions must equal), creating
        # nothing: the topic is created once the micro-batch's rows passed (_create_topics). Without an
        # open manager (the first batch, executor writes), a short-lived read-only one.
        if self._log_manager is not None:
            wanted = self._log_manager.partition_count(topic, self.num_partitions)
        else:
            with LogManager(self.log_dir, self.settings, read_only=True) as manager:
                wanted = manager.partition_count(topic, self.num_partitions)
        config = self.settings.log_config(topic)
        # Batches are stored as encoded: in the topic's stored codec (a broker would recompress to
        # it), stamped with the append time for LogAppendTime topics.
        layout = TopicLayout(
            wanted,
            config.max_message_bytes,
            config.segment_bytes,
            config.stored_codec(),
            config.is_log_append_time,
            config.batch_size,
        )
        self._layouts[topic] = layout
        return layout

    def _create_topics(self, topics: Iterable[str]) -> None:
        """Create the ``topics`` of a micro-batch that passed its checks, each with all the partitions of
        its layout and its count recorded (:meth:`LogManager.create_topic`), once per sink: a refused
        micro-batch creates nothing. Without an open manager (executor writes hold none), a short-lived
        one that leaves no partition open."""
        new = sorted(set(topics) - self._created)
        if not new:
            return
        with contextlib.ExitStack() as stack:
            manager = self._log_manager or stack.enter_context(LogManager(self.log_dir, self.settings))
            for topic in new:
                manager.create_topic(topic, self._layout(topic).num_partitions, exist_ok=True)
        self._created.update(new)

    def _manager(self) -> LogManager:
        if self._log_manager is None:
            self._log_manager = LogManager(self.log_dir, self.settings)
        return self._log_manager

    def _log(self, manager: LogManager, tp: TopicPartition) -> Log:
        return manager.get_or_create_log(tp[0], tp[1])

    def _record_baselines(
        self, committed: SinkCommit, manager: LogManager, parts: list[PartitionBatches]
    ) -> SinkCommit:
        """Record the current end of partitions the commit record does not know, before writing to them."""
        new = {(part.topic, part.partition) for part in parts} - set(committed.end_offsets)
        if not new:
            return committed
        self._check_sole_sink(new)
        offsets = dict(committed.end_offsets)
        for tp in sorted(new):
            log = self._log(manager, tp)
            offsets[tp] = log.log_end_offset
            log.update_high_watermark(log.log_end_offset)
        baseline = dataclasses.replace(committed, end_offsets=offsets)
        self.commit_log.write(baseline)
        logger.info(
            "sink %s: recorded starting offsets of %s",
            self.sink_id,
            ", ".join(f"{t}-{p}@{offsets[(t, p)]}" for t, p in sorted(new)),
        )
        return baseline

    def _check_sole_sink(self, new: Iterable[TopicPartition]) -> None:
        """Refuse partitions another sink's commit record holds, before this sink records them: a sink
        undoes whatever lies above its own committed end and stops at a high watermark above it, so two
        sinks writing one partition would break each other.

        Raises:
            ConfigError: a commit record of another sink id names one of ``new``.
        """
        wanted = set(new)
        for other, commit in sink_commits(self.log_dir).items():
            taken = sorted(wanted & set(commit.end_offsets))
            if other != self.sink_id and taken:
                raise ConfigError(
                    f"{', '.join(f'{t}-{p}' for t, p in taken)} in {self.log_dir} belong to sink {other!r} "
                    f"({commit_file(self.log_dir, other).name}, query {commit.query_id}): a partition takes one "
                    f"sink. Write this query into another topic, or give its sink sink_id={other!r} if it "
                    "replaces that sink's query"
                )

    def _recover(self, committed: SinkCommit, manager: LogManager) -> dict[TopicPartition, int]:
        """Undo uncommitted appends and republish committed ends; returns {partition: records removed}.

        Raises:
            StorageError: a partition holds less than the record says was committed, or its high
                watermark is above the committed end (another writer published to it).
        """
        truncated: dict[TopicPartition, int] = {}
        republished = False
        for tp, end in sorted(committed.end_offsets.items()):
            log = self._log(manager, tp)
            leo = log.log_end_offset
            if log.high_watermark > end:
                raise StorageError(
                    f"partition {tp[0]}-{tp[1]} in {self.log_dir} has high watermark {log.high_watermark} above "
                    f"the sink's committed end offset {end}: another writer published to it",
                    path=self.log_dir,
                )
            if leo < end:
                raise missing_committed_records(log.directory, leo, end, "the sink's committed end offset")
            if leo > end:
                logger.warning(
                    "sink %s: removing %d uncommitted records from %s-%d (offsets %d..%d)",
                    self.sink_id,
                    leo - end,
                    tp[0],
                    tp[1],
                    end,
                    leo - 1,
                )
                log.truncate_to(end)
                truncated[tp] = leo - end
            if log.high_watermark != end:
                log.update_high_watermark(end)
                republished = True
        if truncated:
            manager.checkpoint_recovery_points()
        if republished or not self._recovered:
            manager.checkpoint_high_watermarks()
        self._recovered = True
        return truncated

    def _write_all(self, manager: LogManager, parts: list[PartitionBatches]) -> tuple[dict[TopicPartition, Log], float]:
        """Append every partition's encoded pieces in order, then fsync it; partitions in parallel, so one's
        fsync overlaps another's appends. Returns the logs and when the last append ended (perf_counter).

        Every written partition is fsynced before this returns: the commit record may then name its new end.
        """
        logs = {(part.topic, part.partition): self._log(manager, (part.topic, part.partition)) for part in parts}
        appended = [time.perf_counter()]  # when each partition's appends ended (list.append is atomic)

        def write(part: PartitionBatches) -> None:
            log = logs[(part.topic, part.partition)]
            for piece in part.pieces:
                log.append_encoded(piece)
            appended.append(time.perf_counter())
            log.flush()

        if len(parts) <= 1:
            for part in parts:
                write(part)
        else:
            futures = [self._executor().submit(write, part) for part in parts]
            wait(futures)  # all of them, even after a failure: none may still write once the sink lock is free
            for future in futures:
                future.result()
        return logs, max(appended)

    def _commit(self, commit: SinkCommit) -> None:
        """The commit point: atomically replace the commit record."""
        self.commit_log.write(commit)

    def _publish(self, manager: LogManager, end_offsets: Mapping[TopicPartition, int]) -> None:
        """Make the committed batch visible: high watermarks, then their checkpoint file."""
        for tp, end in end_offsets.items():
            self._log(manager, tp).update_high_watermark(end)
        manager.checkpoint_high_watermarks()

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self._max_workers, thread_name_prefix=f"sink-{self.sink_id}")
        return self._pool

    # ----------------------------------------------------------------------------------- lifecycle

    def committed(self) -> SinkCommit:
        """The current commit record (last committed batch and end offsets)."""
        return self.commit_log.read()

    def close(self) -> None:
        """Wait for a running batch, then close: threads stopped, logs flushed, closed and checkpointed.

        A log manager passed in by the caller is left open. Idempotent.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._pool is not None:
                self._pool.shutdown(wait=True)
            if self._owns_log_manager and self._log_manager is not None:
                self._log_manager.close()
            self._release_sink_lock()
            logger.info("sink %s on %s closed", self.sink_id, self.log_dir)

    def _release_sink_lock(self) -> None:
        """Give the sink's lock up. A sink that never wrote its commit record (every batch refused) owned
        nothing: it removes its lock file, and the log directory it created if that is left empty, so a
        refused sink leaves the log directory as it found it. Once the record exists the lock file stays
        beside it, as Kafka keeps a log directory's ``.lock``."""
        if not self._sink_lock.locked:
            return
        owned = self.commit_log.path.exists()
        self._sink_lock.release(remove=not owned)
        if not owned and self._created_log_dir:
            with contextlib.suppress(OSError):  # not empty: another writer's files came meanwhile
                self.log_dir.rmdir()

    def __enter__(self) -> SegmentLogSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_query_checkpoint(batch_df: DataFrame, query_id: str) -> None:
    """Refuse a micro-batch of streaming query ``query_id`` that runs on a temporary checkpoint, the one Spark
    makes up for a ``foreachBatch`` query without ``checkpointLocation`` and deletes when the query stops
    (:func:`~streaming.arrow_collect.temporary_checkpoint`): a restart would be a new query, re-reading its
    source, whose rows the sink would write again (or, under a fixed ``query_id``, skip as committed). Spark's
    Kafka sink refuses to start without a checkpoint location.

    Raises:
        ConfigError: one line naming the query and its temporary checkpoint.
    """
    temporary = temporary_checkpoint(batch_df)
    if temporary is not None:
        raise ConfigError(
            f"query {query_id} has no checkpointLocation: Spark runs it on a temporary checkpoint ({temporary}) "
            "that it deletes when the query stops, so a restart would be a new query and its rows would be "
            "written again; start it with .option('checkpointLocation', ...), as Spark's Kafka sink requires"
        )


def check_writes(writes: str) -> None:
    """Raises :class:`ConfigError` unless ``writes`` is one of :data:`WRITES`."""
    if writes not in WRITES:
        raise ConfigError(f"writes must be one of {', '.join(WRITES)}, got {writes!r}")


def writes_on_executors(writes: str, master: str | None) -> bool:
    """Where ``writes`` (:data:`WRITES`) puts the micro-batches on Spark master ``master``: ``auto``
    writes on the executors only where they run on other machines than the driver (not ``local``,
    ``local[...]`` or ``local-cluster[...]``, where collecting to the driver measured faster; None is
    Spark's default, ``local``)."""
    if writes != "auto":
        return writes == "executors"
    return not runs_on_one_machine(master)


def _to_collect(batch_df: DataFrame, topic: str | None) -> DataFrame:
    """What to collect of the micro-batch ``batch_df``: only the columns the sink reads
    (:data:`~streaming.micro_batch.SINK_COLUMNS`; the others are ignored, as Spark's Kafka sink ignores
    them, so they need not travel to the driver); when those are all its columns, from the micro-batch's
    own plan where possible (:func:`~streaming.arrow_collect.micro_batch_plan`). ``topic``: the sink's
    ``topic`` option.

    Raises:
        SchemaError, InvalidTopicError: as :func:`_sink_columns`.
    """
    selected = _sink_columns(batch_df, topic)
    if selected is not batch_df:
        return selected
    return micro_batch_plan(batch_df) or batch_df


def _sink_columns(batch_df: DataFrame, topic: str | None) -> DataFrame:
    """``batch_df`` with only the columns the sink reads (itself when it has no others), their types
    checked before a Spark job runs: the micro-batch's schema, without rows, through the same
    validation as its record batches (:func:`~streaming.micro_batch.split_record_batch`), so a column
    of the wrong type fails here, not after the whole micro-batch was collected (driver writes) or in
    every attempt of every encoding task (executor writes), and an empty micro-batch fails as one with
    rows would, as Spark's Kafka sink checks the schema when a query starts. ``topic``: the sink's
    ``topic`` option.

    Raises:
        SchemaError: there is no ``value`` column, a column the sink reads appears twice
            (:func:`~streaming.micro_batch.check_sink_columns_once`), or a column has a type the sink cannot
            take (:func:`check_kafka_sink_types`).
        InvalidTopicError: no ``topic`` column and no ``topic`` option.
    """
    check_sink_columns_once(batch_df.columns)
    names = [name for name in batch_df.columns if name in SINK_COLUMNS]
    if "value" not in names:
        raise SchemaError(f"the micro-batch has no 'value' column (columns: {batch_df.columns})")
    check_kafka_sink_types(batch_df.schema, topic)
    selected = batch_df.select(*names) if len(names) < len(batch_df.columns) else batch_df
    empty = empty_arrow_table(selected)
    if empty is not None:
        split_record_batch(empty, default_topic=topic, layout=_no_layout, null_key_start=0, now_ms=0)
    return selected


KAFKA_SINK_TYPES = {
    "topic": ("string",),
    "key": ("string", "binary"),
    "value": ("string", "binary"),
    "headers": ("array<struct<key:string,value:binary>>",),
    "partition": ("int",),
}
"""The Spark types Spark's Kafka sink takes for each column it checks (``KafkaWriter.validateQuery``), as
Spark's ``simpleString`` spells them (which leaves out nullability, as its ``sameType`` does)."""


SINK_TIMESTAMP_TYPES = ("timestamp", "tinyint", "smallint", "int", "bigint", "void")
"""The Spark types the sink takes for ``timestamp``: Spark's ``timestamp`` (an instant), or an integer of
milliseconds since the epoch (null, or ``void``: now). Not ``timestamp_ntz``, a wall-clock time without a
zone, which Spark turns into an instant only through the session's time zone (its Arrow form, a timestamp
without a zone, would otherwise be read as UTC: hours off), nor ``double``, ``date`` or ``string``."""


def check_kafka_sink_types(schema: StructType, topic: str | None) -> None:
    """Refuse the column types Spark's Kafka sink refuses from a query's schema (``KafkaWriter.validateQuery``:
    :data:`KAFKA_SINK_TYPES`; ``topic``'s only without the ``topic`` option, whose topic wins), so that a
    DataFrame the sink takes is one Spark's Kafka sink takes too: e.g. a ``bigint`` partition or string
    header values (which the Arrow record batches could carry) are refused, not converted. ``timestamp``,
    which the sink also takes as an integer of milliseconds, is checked against :data:`SINK_TIMESTAMP_TYPES`.
    Other columns are not checked here.

    Raises:
        SchemaError: one line naming the column, the type found and the types expected.
    """
    for column in schema.fields:
        found = column.dataType.simpleString()
        if column.name == "timestamp":
            if found not in SINK_TIMESTAMP_TYPES:
                raise SchemaError(
                    f"column 'timestamp': found type {found}, expected timestamp or an integer type "
                    f"(milliseconds since the epoch){_sink_type_hint(column.name, found)}"
                )
            continue
        expected = KAFKA_SINK_TYPES.get(column.name)
        if expected is None or (column.name == "topic" and topic is not None):
            continue
        if found not in expected:
            raise SchemaError(
                f"column '{column.name}': found type {found}, expected {' or '.join(expected)}, as Spark's "
                f"Kafka sink takes it{_sink_type_hint(column.name, found)}"
            )


def _sink_type_hint(column: str, found: str) -> str:
    """What to do about a sink column of a refused type, as the error's last words: a cast where Spark's
    cast means what the user wants (a number or text to ``string``, a ``bigint`` to ``int``, a zoneless
    or text time to ``timestamp``, read in the session's time zone), ``to_json`` for a nested key or
    value; nothing where a cast would change the meaning (a ``double`` timestamp, which Spark's cast reads
    as seconds, not milliseconds) or none applies."""
    nested = found.startswith(("struct<", "array<", "map<"))
    if column == "partition":
        return " (cast it: col('partition').cast('int'))"
    if column in ("key", "value") and nested:
        return f" (serialize it, e.g. F.to_json(col('{column}')))"
    if column in ("key", "value", "topic") and not nested:
        return f" (cast it: col('{column}').cast('string'))"
    if column == "timestamp" and found in ("timestamp_ntz", "string"):
        return " (cast it: col('timestamp').cast('timestamp'))"
    return ""


def _no_layout(topic: str) -> TopicLayout:
    """The layout callback of the schema check, which has no rows and so never asks for one."""
    raise AssertionError(f"a micro-batch without rows asked for the layout of {topic!r}")


def _as_collected(table: pa.Table) -> Iterator[pa.RecordBatch | list[int]]:
    """``table`` as :func:`~streaming.arrow_collect.collect_arrow` hands a micro-batch over: record
    batches of at most :data:`WRITE_BATCH_ROWS` rows (at least one, maybe empty), then their order."""
    batches = table.to_batches(max_chunksize=WRITE_BATCH_ROWS) or [pa.RecordBatch.from_pylist([], schema=table.schema)]
    yield from batches
    yield list(range(len(batches)))
