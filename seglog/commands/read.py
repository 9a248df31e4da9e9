"""Read a partition's records as JSON lines, up to its high watermark (what a consumer may see).

One object per record, with the column names of Spark's Kafka source::

    {"offset":0,"timestamp":1700000000000,"timestampType":0,"key":"k","value":"v","headers":[["h","x"]]}

``timestampType`` is 0 (CreateTime), 1 (LogAppendTime) or -1 (none, magic v0). Keys, values and
header values are UTF-8 text, or base64 with ``--encoding base64`` (use it for binary data; a
record that is not valid UTF-8 stops the read with its offset). Control records (transaction
markers) are not returned, as a consumer does not see them.

The partition is opened read-only: no lock is taken and nothing is written, so this works while a
writer is appending and on read-only copies of broker directories. The high watermark comes from
the log directory's ``replication-offset-checkpoint``.

examples:
  seglog read --log-dir data/logs --topic events --partition 0 --from-beginning
  seglog read --log-dir data/logs --topic events --partition 0 --from-offset 1000 --max-records 10
  seglog read --log-dir data/logs --topic events --partition 0 --from-timestamp 1700000000000 --max-records 5
  seglog read --log-dir ../shared/vectors/kafka/snappy-headers --topic some-topic --partition 0 \\
      --from-offset 0 --encoding base64
"""

from __future__ import annotations

import argparse
import logging
import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from indexer.errors import CorruptRecordError, OffsetOutOfRangeError, SchemaError, UnknownTopicOrPartitionError
from indexer.log import Log
from indexer.log_manager import LogManager
from seglog.cli import (
    add_log_config_arguments,
    add_partition_arguments,
    log_dir_from_args,
    non_negative_int,
    settings_from_args,
)
from seglog.output import ENCODINGS, Output, first_invalid_utf8, render_records_jsonl

logger = logging.getLogger(__name__)

# Records decoded and printed per step: bounds memory while streaming a large partition.
READ_CHUNK_RECORDS = 50_000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``seglog read``."""
    add_partition_arguments(parser)
    start = parser.add_mutually_exclusive_group(required=True)
    start.add_argument(
        "--from-beginning",
        action="store_true",
        help="start at the log start offset (the oldest record retention kept), as kafka-console-consumer",
    )
    start.add_argument("--from-offset", type=non_negative_int, metavar="N", help="first offset to read")
    start.add_argument(
        "--from-timestamp",
        type=int,
        metavar="MS",
        help="start at the earliest offset whose timestamp is >= MS (ms since the epoch)",
    )
    parser.add_argument("--max-records", type=non_negative_int, metavar="N", help="stop after N records")
    parser.add_argument(
        "--encoding", choices=ENCODINGS, default="utf8", help="how keys, values and header values are printed"
    )
    add_log_config_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Stream the records as JSON lines to stdout; exit 0 even when there is nothing to read.

    Records are printed up to the first one that cannot be shown (a damaged batch, or text that is
    not UTF-8); then the command fails naming that record's file and offset.
    """
    log_dir = log_dir_from_args(args)
    manager = LogManager(log_dir, settings_from_args(args), read_only=True)
    try:
        log = open_partition(manager, args.topic, args.partition)
        high_watermark = min(log.high_watermark, log.log_end_offset)
        if args.from_timestamp is not None:
            start = log.offset_for_timestamp(args.from_timestamp)
            logger.info("first offset with timestamp >= %d: %s", args.from_timestamp, start)
            if start is None:
                return 0
        elif args.from_beginning:
            start = log.log_start_offset
        else:
            start = args.from_offset
            if not log.log_start_offset <= start <= log.log_end_offset:
                raise OffsetOutOfRangeError(
                    f"offset {start} is outside {args.topic}-{args.partition}, which holds offsets "
                    f"{log.log_start_offset}..{log.log_end_offset - 1} (log end offset {log.log_end_offset})",
                    offset=start, path=log.directory,
                )
        remaining = args.max_records
        out = Output()
        bound, damage = high_watermark, None
        while start < bound and (remaining is None or remaining > 0):
            step = READ_CHUNK_RECORDS if remaining is None else min(remaining, READ_CHUNK_RECORDS)
            try:
                table = log.read_records(start, step, max_offset=bound)
            except CorruptRecordError as e:
                # Print what lies before the damaged batch, then report it.
                bad = _damaged_batch_offset(log, start, e)
                bound = bad if bad < bound else start
                damage = CorruptRecordError(
                    f"cannot read offset {bad} of {args.topic}-{args.partition}: {e}",
                    path=e.path, position=e.position, offset=bad,
                )
                continue
            hole = _unreadable_range(log, start, bound, step, table)
            if hole is not None:  # the engine stopped at bytes that are not a whole batch
                bad, path, position = hole
                bound = bad if bad < bound else start
                damage = CorruptRecordError(
                    f"cannot read offset {bad} of {args.topic}-{args.partition}: the data at position {position} "
                    f"of {path} is not a whole record batch (damaged or cut)",
                    path=path, position=position, offset=bad,
                )
                table = table.filter(pc.less(table.column("offset"), bad))
            if table.num_rows == 0:
                if damage is not None and bound > start:
                    continue
                break
            problem = None if args.encoding == "base64" else first_invalid_utf8(table)
            if problem is not None:
                row, what = problem
                out.write_bytes(render_records_jsonl(table.slice(0, row), args.encoding))
                offset = int(table.column("offset")[row].as_py())
                raise SchemaError(
                    f"{what} of the record at offset {offset} of {args.topic}-{args.partition} "
                    f"({_segment_file(log, offset)}) is not valid UTF-8; use --encoding base64"
                )
            out.write_bytes(render_records_jsonl(table, args.encoding))
            start = int(table.column("offset")[-1].as_py()) + 1
            if remaining is not None:
                remaining -= table.num_rows
        if damage is not None and (remaining is None or remaining > 0):
            raise damage
    finally:
        manager.close()
    return 0


def open_partition(manager: LogManager, topic: str, partition: int) -> Log:
    """The partition's log, or :class:`UnknownTopicOrPartitionError` saying which topics or
    partitions the log directory does have (Kafka's UNKNOWN_TOPIC_OR_PARTITION)."""
    log = manager.get_log(topic, partition)
    if log is not None:
        return log
    topics = manager.topics()
    count = topics.get(topic)
    if count is None:
        known = ", ".join(f"{t} ({n} partition{'s' if n > 1 else ''})" for t, n in sorted(topics.items())) or "none"
        raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist in {manager.log_dir}; its topics: {known}")
    raise UnknownTopicOrPartitionError(
        f"partition {partition} of topic {topic!r} does not exist in {manager.log_dir}; "
        f"the topic has partitions 0..{count - 1}"
    )


def _unreadable_range(log: Log, start: int, bound: int, step: int, table: pa.Table) -> tuple[int, str, int] | None:
    """Damage that made the engine skip offsets below ``bound`` without an error: where (first
    offset missing, file, position), or None.

    A read stops silently at bytes that are not a whole batch (a cut or damaged size field) and goes
    on with the next segment. So the ranges of offsets a read of up to ``step`` records from
    ``start`` did not return are checked when they reach a segment's base offset or the end of the
    read (a walk over a few batch headers); ranges inside a segment are gaps the log really has
    (compaction, control records) and cost nothing.
    """
    offsets = table.column("offset").to_numpy().astype(np.int64)
    los = np.concatenate(([start], offsets + 1))  # missing ranges [lo, hi): before, between, after the rows
    his = np.concatenate((offsets, [bound]))
    if table.num_rows == step:
        los, his = los[:-1], his[:-1]  # a full chunk ends where the next read starts
    missing = np.flatnonzero(his > los)
    bases = np.array(log.segments.base_offsets(), dtype=np.int64)
    ends_read = missing == offsets.size
    crosses = np.searchsorted(bases, los[missing], "right") != np.searchsorted(bases, his[missing], "right")
    for i in missing[crosses | ends_read]:
        found = _damage_between(log, int(los[i]), int(his[i]))
        if found is not None:
            return found
    return None


def _damage_between(log: Log, lo: int, hi: int) -> tuple[int, str, int] | None:
    """Walk the batch headers that should hold offsets ``[lo, hi)``: the first place where the bytes
    are not a whole batch before those offsets are covered, or None when the offsets are really absent."""
    for segment in log.segments.values(lo, hi):
        found = segment.translate_offset(max(lo, segment.base_offset))
        position = 0 if found is None else found.position
        covered = segment.base_offset
        try:
            for batch in segment.log.batches(position):
                position = batch.position + batch.size_in_bytes
                covered = batch.last_offset + 1
                if covered >= hi:
                    return None
        except CorruptRecordError as e:
            return max(lo, covered), str(segment.log.path), e.position if e.position is not None else position
        if position < segment.size:
            return max(lo, covered), str(segment.log.path), position
    return None


def _damaged_batch_offset(log: Log, start: int, error: CorruptRecordError) -> int:
    """The first offset of the damaged batch ``error`` names: 1 + the last offset of the batch
    before it in its segment (error path only: a walk over that segment's batch headers)."""
    segment = next((s for s in log.segments.values() if os.fspath(s.log.path) == error.path), None)
    if segment is None or error.position is None:
        return start
    last = None
    for batch in segment.log.batches(0, error.position):
        last = batch
    return max(start, segment.base_offset if last is None else last.last_offset + 1)


def _segment_file(log: Log, offset: int) -> str:
    segment = log.segments.floor_segment(offset)
    return str(segment.log.path) if segment is not None else str(log.directory)
