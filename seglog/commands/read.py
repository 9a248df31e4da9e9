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

from indexer.data_loss import missing_checkpointed_records
from indexer.errors import OffsetOutOfRangeError, SchemaError, UnknownTopicOrPartitionError
from indexer.log import Log
from indexer.log_manager import LogManager
from seglog.cli import (
    add_log_config_arguments,
    add_partition_arguments,
    log_dir_from_args,
    non_negative_int,
    settings_from_args,
    timestamp_ms,
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
        type=timestamp_ms,
        metavar="MS",
        help="start at the earliest offset whose timestamp is >= MS (ms since the epoch, or an ISO-8601 time"
        " such as 2024-05-01T12:00:00Z; without a zone, UTC)",
    )
    parser.add_argument("--max-records", type=non_negative_int, metavar="N", help="stop after N records")
    parser.add_argument(
        "--encoding", choices=ENCODINGS, default="utf8", help="how keys, values and header values are printed"
    )
    add_log_config_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Stream the records as JSON lines to stdout; exit 0 even when there is nothing to read (which
    a warning on stderr says, so that an empty result is never mistaken for an empty range).

    Records are printed up to the first one that cannot be shown (a damaged batch, or text that is
    not UTF-8); then the command fails naming that record's file and offset.
    """
    log_dir = log_dir_from_args(args)
    manager = LogManager(log_dir, settings_from_args(args), read_only=True)
    try:
        # Read before the open: a live writer's log never ends below what it checkpointed.
        must_reach = manager.checkpointed_end(args.topic, args.partition)
        log = open_partition(manager, args.topic, args.partition)
        loss = missing_checkpointed_records(log.directory, log.log_end_offset, must_reach)
        if loss is not None:
            logger.warning("%s; reading up to its log end", loss)
        high_watermark = min(log.high_watermark, log.log_end_offset)
        if args.from_timestamp is not None:
            start = log.offset_for_timestamp(args.from_timestamp)
            logger.info("first offset with timestamp >= %d: %s", args.from_timestamp, start)
            if start is None:
                logger.warning(
                    "nothing to read: no record of %s-%d has a timestamp >= %d",
                    args.topic,
                    args.partition,
                    args.from_timestamp,
                )
                return 0
        elif args.from_beginning:
            start = log.log_start_offset
        else:
            start = args.from_offset
            if not log.log_start_offset <= start <= log.log_end_offset:
                raise OffsetOutOfRangeError(
                    f"offset {start} is outside {args.topic}-{args.partition}, which holds offsets "
                    f"{log.log_start_offset}..{log.log_end_offset - 1} (log end offset {log.log_end_offset})",
                    offset=start,
                    path=log.directory,
                )
        remaining = args.max_records
        if start >= high_watermark and remaining != 0:
            logger.warning(
                "nothing to read: %s-%d has no committed records from offset %d (high watermark %d)",
                args.topic,
                args.partition,
                start,
                high_watermark,
            )
        out = Output()
        while start < high_watermark and (remaining is None or remaining > 0):
            step = READ_CHUNK_RECORDS if remaining is None else min(remaining, READ_CHUNK_RECORDS)
            # Returns the records before damage; a read starting at damage raises, naming it.
            table = log.read_records(start, step, max_offset=high_watermark)
            if table.num_rows == 0:
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
    if partition < count:  # recorded, its directory not yet made: the topic's creation was interrupted
        raise UnknownTopicOrPartitionError(
            f"partition {partition} of topic {topic!r} has no directory in {manager.log_dir} although the topic "
            f"is recorded with {count} partitions (its creation was interrupted): run `seglog topic create "
            f"--log-dir {manager.log_dir} --topic {topic} --partitions {count}` again to create them"
        )
    raise UnknownTopicOrPartitionError(
        f"partition {partition} of topic {topic!r} does not exist in {manager.log_dir}; "
        f"the topic has partitions 0..{count - 1}"
    )


def _segment_file(log: Log, offset: int) -> str:
    segment = log.segments.floor_segment(offset)
    return str(segment.log.path) if segment is not None else str(log.directory)
