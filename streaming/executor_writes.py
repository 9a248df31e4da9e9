"""The sink's executor-side path: each partition of a micro-batch written by one Spark task, where the rows are.

One Spark job per micro-batch, two stages, both vectorised over Arrow record batches in Spark's
Python workers (``mapInArrow``), never a Python loop per row:

1. **Encode** (where the micro-batch's rows are): each record batch is validated, split per Kafka
   partition (Kafka's partitioner, :mod:`streaming.partitioner`) and encoded as Kafka v2 batches
   with offsets from 0 (:func:`streaming.micro_batch.split_record_batch`, the driver path's code).
   Each piece leaves the stage as one row ``(partition, task, seq, rows, meta, data)``: the encoded
   (compressed, when the topic compresses) bytes and their per-batch metadata.
2. **Write**: ``repartitionById`` sends every piece of Kafka partition ``p`` to Spark partition
   ``p % n``, ``n`` the Kafka partitions or the executors' cores if fewer (:func:`write_tasks`), so
   one task writes each Kafka partition, and a task writes its Kafka partitions one after the other.
   Each Python task costs Spark ~100 ms of its own whatever it does (measured on local-cluster: more
   than the writing), so tasks beyond the cores would only queue in further waves. The shuffle moves
   a few rows of encoded bytes per record batch, not the rows. The task orders each partition's
   pieces by ``(task, seq)``, which is the micro-batch's row order, and appends them
   (:func:`write_partition`, the fenced protocol below); it returns one small row per partition: the
   partition, the offsets it starts and ends at, the rows written.

The driver (:class:`streaming.sink.SegmentLogSink`) only handles metadata: it reads the commit
record, passes the committed end offsets to the tasks in the :class:`WritePlan`, collects the
accepted attempts' result rows and writes the commit record and the high watermarks.

Fenced protocol of one task attempt for partition ``p`` of batch N (under the partition's writer lock):

a. If the commit record on disk says batch N committed, or names another end for ``p`` than the
   plan (a later batch committed since): the attempt is stale; it writes nothing.
b. If the fence (:mod:`streaming.fence`) names a later batch: stale, :class:`FencedError`.
c. If the fence says an attempt of the same batch finished writing the same range (``done``, same
   start, the end this attempt would reach: the range maintenance keeps for it,
   :meth:`~indexer.sink_fence.FenceToken.kept_end`) and the log still ends there: nothing to do, the
   result is that range (a speculative duplicate, or a retry after the result was lost). A range no
   longer in the log (cut by a recovery) is written again (d).
d. Claim the fence; truncate the log back to the committed end (only above the high watermark, and
   only what earlier attempts of this batch, or of a batch that never committed, left); append each
   piece, checking the fence before each; fsync; mark the fence ``done``.

Every attempt of a micro-batch encodes the same bytes: same input, same record batch boundaries, the
same ``now_ms`` (null timestamps, LogAppendTime) chosen by the driver once per micro-batch, the same
null-key round robin (per Spark partition, from ``batch_id + task``). So even a zombie that passed
its last fence check before a newer attempt claimed the partition can only rewrite the bytes that
are already there.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from indexer import errors
from indexer.checkpoint import read_checkpoint, update_checkpoint
from indexer.commit_log import SinkCommitLog
from indexer.config import LogConfig
from indexer.data_loss import missing_committed_records
from indexer.errors import FencedError, LogLockedError, SeglogError, StorageError
from indexer.file_names import (
    LOG_DIR_LOCK_FILE,
    LOG_START_OFFSET_CHECKPOINT_FILE,
    PARTITION_LOCK_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
    TopicPartition,
    partition_dir_name,
)
from indexer.lock import FileLock
from indexer.log import Log
from indexer.log_loader import died_holding_reason
from indexer.records.encoder import EncodedBatches
from indexer.sink_fence import DONE, FenceToken
from streaming.fence import PartitionFence, same_batch
from streaming.micro_batch import TopicLayout, split_record_batch

logger = logging.getLogger(__name__)

PIECES_DDL = "partition int, task int, seq int, rows long, meta binary, data binary"
RESULTS_DDL = "partition int, start long, `end` long, rows long, attempt string, wrote boolean"
PIECES_SCHEMA = pa.schema(
    [
        ("partition", pa.int32()),
        ("task", pa.int32()),
        ("seq", pa.int32()),
        ("rows", pa.int64()),
        ("meta", pa.binary()),
        ("data", pa.binary()),
    ]
)
RESULTS_SCHEMA = pa.schema(
    [
        ("partition", pa.int32()),
        ("start", pa.int64()),
        ("end", pa.int64()),
        ("rows", pa.int64()),
        ("attempt", pa.string()),
        ("wrote", pa.bool_()),
    ]
)
LOCK_WAIT_S = 120.0  # a task waits this long for a partition an earlier attempt still holds
_META_FIELDS = (
    "positions",
    "sizes",
    "base_offsets",
    "last_offsets",
    "max_timestamps",
    "offsets_of_max_timestamp",
    "record_counts",
)


@dataclass(frozen=True)
class WritePlan:
    """What every task of one micro-batch needs to know (pickled into the Spark job's closures).

    ``write_id`` is unique per sink call: with the task's attempt id it makes the fencing token.
    ``committed_ends`` holds each partition's committed end offset when the driver started the job.
    """

    log_dir: str
    sink_id: str
    topic: str
    layout: TopicLayout
    config: LogConfig
    query_id: str
    batch_id: int
    now_ms: int
    write_id: str
    committed_ends: Mapping[int, int]


@dataclass(frozen=True)
class PartitionResult:
    """What one task attempt did to one partition: ``[start, end)`` holds the micro-batch's rows."""

    partition: int
    start: int
    end: int
    rows: int
    attempt: str
    wrote: bool


# --------------------------------------------------------------------------------------- stage 1: encode


def encode_pieces(plan: WritePlan, task: int, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Stage 1 of Spark partition ``task``: each record batch split per Kafka partition and encoded;
    one output row per encoded piece (see :data:`PIECES_SCHEMA`)."""
    before: Counter[str] = Counter()
    first_row = 0
    seq = 0
    for batch in batches:
        split = split_record_batch(
            batch,
            default_topic=plan.topic,
            layout=lambda _topic: plan.layout,
            null_key_start=plan.batch_id + task,
            now_ms=plan.now_ms,
            first_row=first_row,
            round_robin_before=before,
        )
        before.update(split.round_robin_rows)
        first_row += batch.num_rows
        pieces = [(part.partition, piece) for part in split.parts for piece in part.pieces]
        if not pieces:
            continue
        yield pa.RecordBatch.from_arrays(
            [
                pa.array([p for p, _ in pieces], pa.int32()),
                pa.array([task] * len(pieces), pa.int32()),
                pa.array(range(seq, seq + len(pieces)), pa.int32()),
                pa.array([int(piece.record_counts.sum()) for _, piece in pieces], pa.int64()),
                pa.array([_pack_meta(piece) for _, piece in pieces], pa.binary()),
                pa.array([piece.buffer.data for _, piece in pieces], pa.binary()),
            ],
            schema=PIECES_SCHEMA,
        )
        seq += len(pieces)


def _pack_meta(encoded: EncodedBatches) -> bytes:
    return np.stack([getattr(encoded, name).astype(np.int64, copy=False) for name in _META_FIELDS]).tobytes()


# ---------------------------------------------------------------------------------------- stage 2: write


def write_pieces(plan: WritePlan, attempt: str, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Stage 2: append the pieces this task received, per Kafka partition in ``(task, seq)`` order.

    Only the small columns are sorted; each piece's bytes are taken where they arrived, never
    concatenated: a task may receive more than 2 GiB of pieces in a micro-batch, past what one Arrow
    ``binary`` array (32-bit offsets) can hold."""
    received = [batch for batch in batches if batch.num_rows]
    if not received:
        return
    keys = pa.table(
        {
            "partition": pa.concat_arrays([batch.column("partition") for batch in received]),
            "task": pa.concat_arrays([batch.column("task") for batch in received]),
            "seq": pa.concat_arrays([batch.column("seq") for batch in received]),
            "batch": np.repeat(np.arange(len(received)), [batch.num_rows for batch in received]),
            "row": np.concatenate([np.arange(batch.num_rows) for batch in received]),
        }
    )
    keys = keys.take(pc.sort_indices(keys, [("partition", "ascending"), ("task", "ascending"), ("seq", "ascending")]))
    partitions = keys.column("partition").to_numpy()
    where = list(zip(keys.column("batch").to_pylist(), keys.column("row").to_pylist(), strict=True))
    bounds = np.concatenate(([0], np.flatnonzero(np.diff(partitions)) + 1, [len(partitions)])).tolist()
    for start, end in zip(bounds[:-1], bounds[1:], strict=True):
        pieces = [_received_piece(received[batch], row) for batch, row in where[start:end]]
        result = write_partition(plan, int(partitions[start]), pieces, attempt=attempt)
        yield pa.RecordBatch.from_pylist([result.__dict__], schema=RESULTS_SCHEMA)


def _received_piece(batch: pa.RecordBatch, row: int) -> EncodedBatches:
    """Piece ``row`` of a received record batch (:data:`PIECES_SCHEMA`) as :meth:`Log.append_encoded`
    takes it: its bytes copied out of the batch once (offsets are set in place), its metadata unpacked."""
    data = batch.column("data")[row].as_buffer()
    buffer = np.frombuffer(data, dtype=np.uint8).copy() if data is not None else np.zeros(0, np.uint8)
    arrays = np.frombuffer(batch.column("meta")[row].as_py(), dtype=np.int64).reshape(len(_META_FIELDS), -1)
    return EncodedBatches(buffer, *(arrays[i] for i in range(len(_META_FIELDS))))


def open_partition(
    log_dir: str | Path, tp: TopicPartition, config: LogConfig, *, clean: bool = False, lock_wait_s: float = LOCK_WAIT_S
) -> Log:
    """Open one partition for writing without a :class:`LogManager` (which would own the whole log dir):
    its recovery point, log start offset and high watermark from the log dir's checkpoints; waits up to
    ``lock_wait_s`` for its writer lock (an earlier attempt may still be letting go of it). ``clean``:
    the last writer closed it cleanly (see :func:`left_clean`), so the loader need not recover it.

    Raises:
        LogLockedError: the lock stayed taken.
        StorageError: the partition cannot be loaded, or a checkpoint of the log dir cannot be read
            (:func:`indexer.checkpoint.read_checkpoint`; the partition is left as it was).
    """
    log_dir = Path(log_dir)

    def checkpointed(name: str) -> int | None:
        return read_checkpoint(log_dir, name).get(tp)  # strict: this task writes them back

    deadline = time.monotonic() + lock_wait_s
    directory = log_dir / partition_dir_name(*tp)
    while True:
        try:
            return Log.open(
                directory,
                config,
                recovery_point=checkpointed(RECOVERY_POINT_CHECKPOINT_FILE) or 0,
                log_start_offset=checkpointed(LOG_START_OFFSET_CHECKPOINT_FILE) or 0,
                high_watermark=checkpointed(REPLICATION_OFFSET_CHECKPOINT_FILE),
                had_clean_shutdown=clean,
                recovery_reason=died_holding_reason(FileLock(directory / PARTITION_LOCK_FILE).holder()),
            )
        except LogLockedError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


def left_clean(partition_dir: Path, fence: PartitionFence) -> bool:
    """Whether the partition's last writer closed it: its lock file names no holder (a writer that died
    or abandoned the partition leaves its line) and no attempt is mid-write by its fence. Then opening
    it skips recovery, which would otherwise re-read its whole active segment at every micro-batch."""
    if FileLock(partition_dir / PARTITION_LOCK_FILE).holder():
        return False
    token = fence.read()
    return token is None or token.state == DONE


def checkpoint_partition(log_dir: str | Path, name: str, updates: Mapping[TopicPartition, int]) -> None:
    """Merge ``updates`` into the log dir's checkpoint ``name`` under the directory lock."""
    log_dir = Path(log_dir)
    update_checkpoint(log_dir / name, updates, lock_path=log_dir / LOG_DIR_LOCK_FILE)


def write_partition(plan: WritePlan, partition: int, pieces: list[EncodedBatches], *, attempt: str) -> PartitionResult:
    """The fenced protocol of one task attempt for one partition (module docstring, a-d).

    Raises:
        FencedError: the attempt is stale (a later batch wrote the partition, or a newer attempt of this
            batch claimed it while this one wrote); what it wrote is the newer attempt's to undo.
        StorageError: the partition holds less than the committed end, or its high watermark is above it.
    """
    tp = (plan.topic, partition)
    start = plan.committed_ends[partition]
    rows = sum(int(piece.record_counts.sum()) for piece in pieces)
    token = FenceToken(plan.query_id, plan.batch_id, attempt, start)
    fence = PartitionFence(Path(plan.log_dir) / partition_dir_name(*tp), plan.sink_id)
    clean = left_clean(fence.path.parent, fence)
    log = open_partition(plan.log_dir, tp, plan.config, clean=clean)
    abandon = False  # once this attempt claimed the partition, only its own success lets it close the log
    try:
        current = fence.read()
        if clean and current is not None and current.state != DONE:  # an attempt got in between: recover it
            log.abandon()
            log = open_partition(plan.log_dir, tp, plan.config)
            current = fence.read()
        committed = SinkCommitLog(plan.log_dir, plan.sink_id).read()
        if committed.is_committed(plan.query_id, plan.batch_id):  # (a) a duplicate of a committed batch
            end = committed.end_offsets.get(tp, start)
            logger.info("%s-%d: batch %d already committed; attempt %s writes nothing", *tp, plan.batch_id, attempt)
            return PartitionResult(partition, start, end, rows, attempt, wrote=False)
        if committed.end_offsets.get(tp, start) != start:
            raise FencedError(
                f"{log.directory}: the commit record says {committed.end_offsets.get(tp)}, the plan of "
                f"batch {plan.batch_id} {start}: a later batch committed",
                path=log.directory,
            )
        if current is not None and current.query_id == plan.query_id and current.batch_id > plan.batch_id:  # (b)
            raise FencedError(
                f"{log.directory}: batch {current.batch_id} wrote the partition after batch "
                f"{plan.batch_id}; attempt {attempt} is stale",
                path=log.directory,
            )
        if (  # (c) what maintenance keeps for this batch (kept_end) is this attempt's range, still in the log
            same_batch(token, current)
            and current is not None
            and current.start == start
            and current.kept_end(committed, tp) == start + rows
            and log.log_end_offset == current.end
        ):
            return PartitionResult(partition, start, current.end, rows, attempt, wrote=False)
        abandon = True
        fence.write(token)  # (d)
        if log.high_watermark > start:
            raise StorageError(
                f"partition {tp[0]}-{tp[1]} in {plan.log_dir} has high watermark {log.high_watermark} "
                f"above the sink's committed end offset {start}",
                path=log.directory,
            )
        if log.log_end_offset < start:
            raise missing_committed_records(log.directory, log.log_end_offset, start, "the sink's committed end offset")
        if log.log_end_offset > start:
            fence.check(token)
            logger.warning(
                "%s-%d: removing %d uncommitted records (offsets %d..%d) before batch %d",
                *tp,
                log.log_end_offset - start,
                start,
                log.log_end_offset - 1,
                plan.batch_id,
            )
            log.truncate_to(start)
        for piece in pieces:
            fence.check(token)
            log.append_encoded(piece, now_ms=plan.now_ms)
        log.flush()
        fence.check(token)
        end = log.log_end_offset
        fence.write(replace(token, end=end, state=DONE))
        checkpoint_partition(plan.log_dir, RECOVERY_POINT_CHECKPOINT_FILE, {tp: log.recovery_point})
        abandon = False
        return PartitionResult(partition, start, end, rows, attempt, wrote=True)
    finally:
        if abandon:  # fenced off or failed while writing: leave the files as a crash would, for the next attempt
            log.abandon()
        else:
            log.close()


# ------------------------------------------------------------------------------------- the driver's side


def write_tasks(num_partitions: int, cores: int) -> int:
    """How many write tasks share ``num_partitions`` Kafka partitions on executors with ``cores`` task
    slots in all: one wave of tasks, never more tasks than partitions."""
    return max(1, min(num_partitions, cores))


def run_write_job(
    batch_df: object, plan: WritePlan, prepare: Callable[[], Mapping[int, int]] | None = None
) -> list[PartitionResult]:
    """Run the micro-batch's two stages on the executors; the accepted attempts' results, one per
    written partition.

    ``prepare`` is the driver's set-up of partitions it has not written yet (create the topic, record
    their baselines): it runs once stage 1 has encoded, and so checked, every row, before any task
    writes, and returns the committed end offsets the tasks write from (replacing the plan's). Stage
    1 then runs as a job of its own whose pieces are kept (persisted) for stage 2: a micro-batch
    refused for its values leaves the log directory as it found it, for one Spark job more, which
    only a topic's first micro-batch of a sink pays.

    Raises:
        SeglogError: the one a task raised (bad input found while encoding, a fenced attempt), after
            Spark's retries: its class and message, as the driver path raises it; or ``prepare``'s.
        StorageError: two results for one partition (Spark accepted two attempts: cannot happen).
        Exception: any other error of the Spark job.
    """
    from pyspark import StorageLevel
    from pyspark.sql import DataFrame

    assert isinstance(batch_df, DataFrame)
    encode, _ = _task_functions(plan)
    cores = batch_df.sparkSession.sparkContext.defaultParallelism  # the executors' task slots in all
    pieces = batch_df.mapInArrow(encode, PIECES_DDL)
    try:
        if prepare is not None:
            pieces = pieces.persist(StorageLevel.MEMORY_AND_DISK)
            with _task_errors():
                pieces.count()  # stage 1 alone: every row encoded (checked) before anything is created
            plan = replace(plan, committed_ends=prepare())
        _, write = _task_functions(plan)
        with _task_errors():
            results = (
                pieces.repartitionById(write_tasks(plan.layout.num_partitions, cores), "partition")
                .mapInArrow(write, RESULTS_DDL)
                .collect()
            )
    finally:
        if prepare is not None:
            pieces.unpersist()
    out = [PartitionResult(r["partition"], r["start"], r["end"], r["rows"], r["attempt"], r["wrote"]) for r in results]
    seen = Counter(result.partition for result in out)
    if any(count > 1 for count in seen.values()):
        raise StorageError(f"batch {plan.batch_id}: several results for one partition: {out}", path=plan.log_dir)
    return out


@contextlib.contextmanager
def _task_errors() -> Iterator[None]:
    """A Spark job's failure raised as the :class:`SeglogError` its task raised (:func:`task_seglog_error`)."""
    try:
        yield
    except Exception as e:
        task_error = task_seglog_error(e)
        if task_error is None:
            raise
        raise task_error from e


_ATTRIBUTES_NOTE = "seglog error attributes: "
_TASK_ERROR = re.compile(
    r"^indexer\.errors\.(\w+): (.*)$(?:\n" + re.escape(_ATTRIBUTES_NOTE) + r"(.*)$)?", re.MULTILINE
)


def _noting_attributes(rows: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``rows``, with a :class:`SeglogError` raised by them given a note (printed in the traceback, the
    text Spark hands the driver, on the line after the error's) holding its attributes as JSON, for
    :func:`task_seglog_error`."""
    try:
        yield from rows
    except SeglogError as e:
        attributes = {name: value for name, value in vars(e).items() if not name.startswith("__")}
        e.add_note(_ATTRIBUTES_NOTE + json.dumps(attributes, default=_json_value))
        raise


def _json_value(value: object) -> object:
    """An attribute JSON has no type for: a numpy integer as an int, anything else as its text."""
    return int(value) if isinstance(value, np.integer) else str(value)


def task_seglog_error(error: BaseException) -> SeglogError | None:
    """The :class:`SeglogError` a Spark task raised, rebuilt from ``error`` (Spark hands the driver a
    task's Python exception as text only, in a ``PythonException``): the same class, message and
    attributes (the offending row, value, limit: from the task's note), so bad input found on the
    executors reaches the user (and ``sink.last_error``) as on the driver path; None when the text
    names none."""
    found = _TASK_ERROR.findall(str(error))
    if not found:
        return None
    name, message, attributes = found[-1]
    kind = getattr(errors, name, None)
    if not (isinstance(kind, type) and issubclass(kind, SeglogError)):
        return None
    rebuilt = kind.__new__(kind, message)  # its __init__ may want keyword arguments: they are set below
    BaseException.__init__(rebuilt, message)
    rebuilt.__dict__.update(json.loads(attributes) if attributes else {})
    return rebuilt


def _task_functions(
    plan: WritePlan,
) -> tuple[
    Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]],
    Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]],
]:
    """The two ``mapInArrow`` functions, closing over ``plan`` only (they are pickled to the executors)."""

    def encode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        context = TaskContext.get()
        assert context is not None
        yield from _noting_attributes(encode_pieces(plan, context.partitionId(), batches))

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        context = TaskContext.get()
        assert context is not None
        yield from _noting_attributes(write_pieces(plan, f"{plan.write_id}/{context.taskAttemptId()}", batches))

    return encode, write
