"""Append JSON-lines records to one partition, then make them visible (advance the high watermark).

Input: one JSON object per line, every field optional::

    {"key": "k1", "value": "hello", "timestamp": 1700000000000, "headers": [["source", "web"]]}

``key``, ``value`` and header values are text (stored as UTF-8) or, with ``--encoding base64``,
base64 of arbitrary bytes; ``null`` (or a missing field) is a null key / null value (tombstone) /
"now" for the timestamp, which is ms since the epoch or an ISO-8601 text such as
``"2024-05-01T12:00:00Z"`` (without a zone, UTC; one input gives all its timestamps one way; a
negative one is refused, as Kafka's producer does). The input is
UTF-8 (a byte order mark at its start is skipped; bytes that are not UTF-8 are refused: binary data
goes base64-encoded); lines end with LF, CRLF or CR, and the last one needs no line end. ``offset``,
``timestampType``, ``topic`` and ``partition`` are accepted and
ignored, so the output of ``seglog read`` can be appended to another partition. Blank lines are
skipped. The whole input is parsed into Arrow columns before anything is written: a bad line (also
one holding a record larger than ``max.message.bytes``) stops the command with its line number and
nothing is appended, nor any log directory, topic or partition created; nor by an input without
records. Read from a terminal, the input ends with Ctrl-D.

A topic that does not exist yet is created with one partition, as a Kafka broker auto-creates a
topic (``num.partitions`` = 1; the count is recorded in the log directory), so only ``--partition 0``
creates one: a topic of more partitions is created first with ``seglog topic create --partitions N``.
A partition beyond an existing topic's count is an error too (grow the topic with ``seglog topic
alter``); neither creates anything.

On success the records are appended (offsets assigned from the log end offset), the log is
flushed, then the high watermark is advanced to the new log end offset (readers never see records
that are not on disk: a failed flush fails the command; a failed or interrupted append cuts its
records off again, so a later append does not commit them) and the log
directory's checkpoint files are written. What a writer that died holding the partition left above
its committed offset is cut first, with a warning, as the maintenance daemon cuts it. The assigned
offsets are printed as ``<topic>-<partition> <first>..<last>`` (``--json``: one object with
``first_offset``, ``last_offset``, ``records``, ``high_watermark``).

examples:
  seglog append --log-dir data/logs --topic events --partition 0 records.jsonl
  printf '{"key":"a","value":"1"}\\n' | seglog append --log-dir data/logs --topic events --partition 0 -
  seglog append --log-dir data/logs --topic blobs --partition 0 --encoding base64 --json blobs.jsonl
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json
from numba import njit

from indexer.errors import InvalidTimestampError, RecordTooLargeError, SchemaError, SeglogError, check_input_file
from indexer.file_names import PARTITION_LOCK_FILE, TopicPartition, partition_dir_name
from indexer.limits import INT32_MAX
from indexer.lock import FileLock, left_by_writer
from indexer.log import Log, check_append
from indexer.log_manager import LogManager
from indexer.records.columns import HEADERS_TYPE, check_timestamps
from maintenance.committed import cut_dead_writers_tail
from seglog.cli import (
    add_log_config_arguments,
    add_partition_arguments,
    iso_timestamp_ms,
    log_dir_from_args,
    settings_from_args,
)
from seglog.output import ENCODINGS, Output, binary_parts

logger = logging.getLogger(__name__)

# Fields of an input line; the last four are what `seglog read` adds, accepted and dropped.
_INPUT_SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("value", pa.string()),
        ("timestamp", pa.int64()),
        ("headers", pa.list_(pa.list_(pa.string()))),
        ("offset", pa.int64()),
        ("timestampType", pa.int32()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
    ]
)
_IGNORED_FIELDS = ("offset", "timestampType", "topic", "partition")
# The same fields with ISO-8601 text timestamps (Arrow takes one type per field: a second read, only
# when the first failed).
_TEXT_TIMESTAMPS_SCHEMA = _INPUT_SCHEMA.set(
    _INPUT_SCHEMA.get_field_index("timestamp"), pa.field("timestamp", pa.string())
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``seglog append``."""
    add_partition_arguments(parser)
    parser.add_argument("input", nargs="?", default="-", metavar="FILE|-", help="JSON-lines input (default: stdin)")
    parser.add_argument(
        "--encoding", choices=ENCODINGS, default="utf8", help="how keys, values and header values are given"
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    add_log_config_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Parse everything, append, flush, advance the high watermark, write the checkpoints."""
    if args.input != "-":
        check_input_file(args.input, "JSON-lines input", "seglog append FILE")
    settings = settings_from_args(args)
    log_dir = log_dir_from_args(args, must_exist=False)
    with LogManager(log_dir, settings, read_only=True) as reader:  # a partition that cannot be written: say so first
        reader.partition_count_for_write(args.topic, args.partition)
    source = "<stdin>" if args.input == "-" else args.input
    if args.input == "-" and sys.stdin.isatty():
        print(
            "seglog append: reading JSON lines from the terminal; end them with Ctrl-D (Ctrl-C: nothing is appended)",
            file=sys.stderr,
            flush=True,
        )
    data = sys.stdin.buffer.read() if args.input == "-" else Path(args.input).read_bytes()
    table = parse_json_lines(data, encoding=args.encoding, source=source)
    name = f"{args.topic}-{args.partition}"
    if not table.num_rows:
        Output(json_mode=args.json).emit(_nothing_to_append(args, log_dir, settings), _text)
        return 0
    try:  # before the log directory, topic or partition is created: a refused append leaves nothing behind
        check_append(table, settings.log_config(args.topic), now_ms=time.time_ns() // 1_000_000, where=name)
    except RecordTooLargeError as e:
        raise RecordTooLargeError(
            f"{source}: line {_line_of_row(data, e.index or 0)}: the record, alone in a batch of {e.size} "
            f"bytes, is larger than max.message.bytes = {e.limit} of {name}",
            size=e.size,
            limit=e.limit,
            index=e.index,
        ) from None
    tp: TopicPartition = (args.topic, args.partition)
    # Read before the open writes this process's line: a writer that died holding the partition left its own.
    holder = FileLock(log_dir / partition_dir_name(*tp) / PARTITION_LOCK_FILE).holder()
    with LogManager(log_dir, settings) as manager:
        if manager.topic_partitions(args.topic) is None:
            manager.create_topic(args.topic, manager.partition_count_for_write(args.topic, args.partition))
        log = manager.get_or_create_log(args.topic, args.partition)
        if left_by_writer(holder):  # its uncommitted tail must not be committed with these records
            cut_dead_writers_tail(log_dir, tp, log)
        start = log.log_end_offset
        try:
            info = log.append(table)
            log.flush()  # on disk before readers may see it: flush, then high watermark, as the sink commits
            log.update_high_watermark(log.log_end_offset)
        except BaseException:  # a failure or Ctrl-C: what was written is uncommitted, and must stay so
            _undo_append(log, start)
            raise
        result: dict[str, Any] = {
            "topic": args.topic,
            "partition": args.partition,
            "records": table.num_rows,
            "first_offset": info.first_offset,
            "last_offset": info.last_offset,
            "log_end_offset": log.log_end_offset,
            "high_watermark": log.high_watermark,
        }
    logger.info("appended %d records from %s to %s-%d", table.num_rows, source, args.topic, args.partition)
    Output(json_mode=args.json).emit(result, _text)
    return 0


def _nothing_to_append(args: argparse.Namespace, log_dir: Path, settings: Any) -> dict[str, Any]:
    """The result of an input without records: the partition as it is, read-only. Nothing is created
    (log directory, topic, partition) nor committed (the high watermark stays)."""
    with LogManager(log_dir, settings, read_only=True) as reader:
        log = reader.get_log(args.topic, args.partition)
        return {
            "topic": args.topic,
            "partition": args.partition,
            "records": 0,
            "first_offset": None,
            "last_offset": None,
            "log_end_offset": None if log is None else log.log_end_offset,
            "high_watermark": None if log is None else log.high_watermark,
        }


def _undo_append(log: Log, start: int) -> None:
    """Cut what a failed or interrupted append wrote from ``start`` on: above the high watermark no reader
    sees it, but the next append's high watermark would commit it after its own records' offsets."""
    try:
        log.truncate_to(start)
    except SeglogError as e:
        logger.error("%s: could not remove the failed append's records from offset %d: %s", log.directory, start, e)


def _text(result: dict[str, Any]) -> list[str]:
    name = f"{result['topic']}-{result['partition']}"
    if not result["records"]:
        where = "nothing created" if result["log_end_offset"] is None else f"log end offset {result['log_end_offset']}"
        return [f"{name} nothing appended: the input holds no records ({where})"]
    return [f"{name} {result['first_offset']}..{result['last_offset']}"]


def parse_json_lines(data: bytes, *, encoding: str = "utf8", source: str = "<input>") -> pa.Table:
    """JSON lines -> an append table (key, value binary; timestamp int64; headers list<struct>).

    Raises :class:`SchemaError` naming ``source`` and the 1-based line number of the first bad line.
    """
    if encoding not in ENCODINGS:
        raise ValueError(f"encoding must be one of {ENCODINGS}, got {encoding!r}")
    if not data.strip(_JSON_SPACE):
        return pa.table(
            {
                "key": pa.array([], pa.large_binary()),
                "value": pa.array([], pa.large_binary()),
                "timestamp": pa.array([], pa.int64()),
                "headers": pa.array([], HEADERS_TYPE),
            }
        )
    raw = None
    for schema in (_INPUT_SCHEMA, _TEXT_TIMESTAMPS_SCHEMA):
        options = pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="error")
        try:
            raw = _read_json(data, options)
            raw.validate(full=True)  # Arrow's parser keeps bytes that are not UTF-8 in its strings; this finds them
            break
        except pa.ArrowInvalid as e:
            error, raw = e, None
    if raw is None:
        line, reason = _locate_bad_line(data, encoding)
        if line is None:
            raise SchemaError(f"{source}: cannot parse the JSON lines: {error}") from None
        raise SchemaError(f"{source}: line {line}: {reason}") from None
    raw = raw.drop_columns(list(_IGNORED_FIELDS))

    def fail(row: int, reason: str) -> SchemaError:
        return SchemaError(f"{source}: line {_line_of_row(data, row)}: {reason}")

    if pa.types.is_string(raw.schema.field("timestamp").type):
        raw = raw.set_column(
            raw.schema.get_field_index("timestamp"), "timestamp", _iso_timestamps(raw.column("timestamp"), fail)
        )
    try:
        check_timestamps(raw.column("timestamp").combine_chunks())
    except InvalidTimestampError as e:
        assert e.index is not None
        raise fail(e.index, f"timestamp must be >= 0 (ms since the epoch) or null for now, got {e.timestamp}") from None
    key = _to_binary(raw.column("key").combine_chunks(), encoding, "key", fail)
    value = _to_binary(raw.column("value").combine_chunks(), encoding, "value", fail)
    headers = _to_headers(raw.column("headers").combine_chunks(), encoding, fail)
    return pa.table({"key": key, "value": value, "timestamp": raw.column("timestamp"), "headers": headers})


def _iso_timestamps(texts: pa.ChunkedArray, fail: Any) -> pa.Array:
    """ISO-8601 text timestamps -> ms since the epoch, read by :func:`seglog.cli.iso_timestamp_ms`."""
    values: list[int | None] = []
    for row, text in enumerate(texts.to_pylist()):
        try:
            values.append(None if text is None else iso_timestamp_ms(text))
        except ValueError:
            raise fail(
                row,
                f"timestamp {text!r} is not an ISO-8601 time at or after the epoch (such as 2024-05-01T12:00:00Z)",
            ) from None
    return pa.array(values, pa.int64())


def _to_binary(strings: pa.Array, encoding: str, field: str, fail: Any, rows: np.ndarray | None = None) -> pa.Array:
    """Text -> UTF-8 bytes (a zero-copy cast) or base64 text -> bytes (compiled, one pass)."""
    if encoding == "utf8":
        return strings.cast(pa.large_binary())
    offsets, data, nulls = binary_parts(strings)
    out_offsets = np.empty(len(strings) + 1, dtype=np.int64)
    bad = _base64_sizes(offsets, data, nulls, out_offsets)
    if bad < 0:
        out = np.empty(out_offsets[-1], dtype=np.uint8)
        bad = _base64_decode(offsets, data, nulls, out_offsets, out)
    if bad >= 0:
        row = bad if rows is None else int(rows[bad])
        raise fail(row, f"{field} is not valid base64")
    decoded = pa.Array.from_buffers(
        pa.large_binary(), len(strings), [None, pa.py_buffer(out_offsets), pa.py_buffer(out)]
    )
    if strings.null_count:
        decoded = pc.if_else(strings.is_null(), pa.scalar(None, pa.large_binary()), decoded)
    return decoded


def _to_headers(lists: pa.ListArray, encoding: str, fail: Any) -> pa.Array:
    """``[[k, v], ...]`` per record -> list<struct<key: string, value: binary>>."""
    outer_offsets = lists.offsets.to_numpy().astype(np.int64)
    pairs = lists.flatten()
    rows = np.repeat(np.arange(len(lists)), np.diff(outer_offsets))
    if len(pairs):
        lengths = pc.fill_null(pc.list_value_length(pairs), 0).to_numpy()
        bad = np.flatnonzero(lengths != 2)
        if bad.size:
            raise fail(int(rows[bad[0]]), "each header must be a [key, value] pair")
        keys = pc.list_element(pairs, 0)
        if keys.null_count:
            raise fail(
                int(rows[np.flatnonzero(keys.is_null().to_numpy(zero_copy_only=False))[0]]), "a header key is null"
            )
        values = _to_binary(pc.list_element(pairs, 1), encoding, "a header value", fail, rows)
        values = values.cast(pa.binary())
    else:
        keys, values = pa.array([], pa.string()), pa.array([], pa.binary())
    structs = pa.StructArray.from_arrays([keys, values], fields=list(HEADERS_TYPE.value_type))
    rebased = pa.array(outer_offsets - outer_offsets[0], pa.int32())
    mask = lists.is_null() if lists.null_count else None
    return pa.ListArray.from_arrays(rebased, structs, type=HEADERS_TYPE, mask=mask)


def _read_json(data: bytes, options: pa_json.ParseOptions) -> pa.Table:
    """Arrow's JSON read of ``data``. Arrow parses blocks of 1 MiB and refuses a line that straddles two
    block boundaries, so a failed read is tried again with blocks longer than the longest line (measured
    only then: it costs a third of a read)."""
    try:
        return pa_json.read_json(io.BytesIO(data), parse_options=options)
    except pa.ArrowInvalid:
        ends = np.flatnonzero(np.frombuffer(data, np.uint8) == 10)
        block_size = int(np.diff(ends, prepend=-1, append=len(data)).max()) + 2
        if block_size <= pa_json.ReadOptions().block_size:
            raise
        read_options = pa_json.ReadOptions(block_size=min(block_size, INT32_MAX))
        return pa_json.read_json(io.BytesIO(data), read_options=read_options, parse_options=options)


def _line_of_row(data: bytes, row: int) -> int:
    """1-based line number of the ``row``-th non-blank line (error path only)."""
    seen = -1
    for number, line in enumerate(data.splitlines(), 1):
        if line.strip(_JSON_SPACE):
            seen += 1
            if seen == row:
                return number
    return seen + 1


def _locate_bad_line(data: bytes, encoding: str) -> tuple[int | None, str]:
    """Find the first line Arrow refused and say why, in plain Python (error path only)."""
    allowed = set(_INPUT_SCHEMA.names)
    first_timestamp: tuple[int, bool] | None = None  # (line, is text) of the first timestamp given
    for number, line in enumerate(data.splitlines(), 1):
        if number == 1:
            if line.startswith(_UTF16_BOMS):
                return number, "the input is UTF-16, not UTF-8 (convert it: iconv -f UTF-16 -t UTF-8)"
            line = line.removeprefix(_BOM)
        elif line.startswith(_BOM):
            return number, "a byte order mark is allowed only at the start of the input"
        if not line.strip(_JSON_SPACE):
            continue
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as e:
            return number, (
                f"not valid UTF-8 (byte 0x{line[e.start]:02x} at column {e.start + 1}); "
                "give binary data base64-encoded with --encoding base64"
            )
        try:
            obj = json.loads(text, object_pairs_hook=_object_without_repeats)
        except _RepeatedFieldError as e:
            return number, f"field {e.field} is given twice"
        except ValueError as e:
            return number, f"not valid JSON ({e})"
        if not isinstance(obj, dict):
            return number, f"expected a JSON object, got {type(obj).__name__}"
        surrogate = _field_with_lone_surrogate(obj)
        if surrogate is not None:
            return number, f"{surrogate} holds a lone surrogate (a \\ud800-\\udfff escape outside a pair): not text"
        unknown = sorted(set(obj) - allowed)
        if unknown:
            return number, f"unknown field(s) {', '.join(unknown)}; expected key, value, timestamp, headers"
        for field in ("key", "value"):
            if obj.get(field) is not None and not isinstance(obj[field], str):
                return number, f"{field} must be a string or null, got {type(obj[field]).__name__}"
        ts = obj.get("timestamp")
        if (
            ts is not None
            and not isinstance(ts, str)
            and (isinstance(ts, bool) or not isinstance(ts, int) or not -(2**63) <= ts < 2**63)
        ):
            return number, f"timestamp must be an integer (ms since the epoch), an ISO-8601 text or null, got {ts!r}"
        if ts is not None and first_timestamp is None:
            first_timestamp = (number, isinstance(ts, str))
        elif ts is not None and first_timestamp is not None and isinstance(ts, str) != first_timestamp[1]:
            return number, (
                f"timestamp is {'text' if isinstance(ts, str) else 'a number'} here but "
                f"{'text' if first_timestamp[1] else 'a number'} on line {first_timestamp[0]}: give every "
                "timestamp of the input the same way, as ms since the epoch or as ISO-8601 text"
            )
        headers = obj.get("headers")
        if headers is not None and not (
            isinstance(headers, list)
            and all(isinstance(h, list) and all(x is None or isinstance(x, str) for x in h) for h in headers)
        ):
            return number, 'headers must be a list of [key, value] string pairs, e.g. [["k", "v"]]'
        for field, kind in (("offset", int), ("timestampType", int), ("topic", str), ("partition", int)):
            if obj.get(field) is not None and not isinstance(obj[field], kind):
                return number, f"{field} must be {kind.__name__} or null"
    return None, ""


_BOM = b"\xef\xbb\xbf"
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
_JSON_SPACE = b" \t\r\n"  # JSON's whitespace (RFC 8259): a line of these alone is blank


class _RepeatedFieldError(ValueError):
    """A JSON object naming a field twice (Arrow refuses it without saying where)."""

    def __init__(self, field: str):
        super().__init__(field)
        self.field = field


def _object_without_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``' object hook: a dict, or :class:`_RepeatedFieldError` for a field given twice."""
    obj: dict[str, Any] = {}
    for field, value in pairs:
        if field in obj:
            raise _RepeatedFieldError(field)
        obj[field] = value
    return obj


def _field_with_lone_surrogate(obj: dict[str, Any]) -> str | None:
    """The first of key, value, header key, header value whose text cannot be UTF-8 (a lone surrogate)."""
    headers = obj.get("headers")
    pairs = headers if isinstance(headers, list) else []
    texts = [("key", obj.get("key")), ("value", obj.get("value"))]
    for pair in pairs:
        if isinstance(pair, list):
            texts += zip(("a header key", "a header value"), pair, strict=False)
    for field, text in texts:
        if isinstance(text, str):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                return field
    return None


_B64_VALUES = np.full(256, 255, dtype=np.uint8)
_B64_VALUES[np.frombuffer(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", np.uint8)] = np.arange(
    64, dtype=np.uint8
)


@njit(cache=True)
def _base64_sizes(offsets: np.ndarray, data: np.ndarray, nulls: np.ndarray, out_offsets: np.ndarray) -> int:
    """Decoded sizes as cumulative offsets; returns the first row with a bad length/padding, or -1."""
    out_offsets[0] = 0
    for i in range(offsets.size - 1):
        n = offsets[i + 1] - offsets[i]
        size = 0
        if not nulls[i] and n > 0:
            if n % 4 != 0:
                return i
            pad = 0
            if data[offsets[i + 1] - 1] == 61:
                pad = 2 if data[offsets[i + 1] - 2] == 61 else 1
            size = n // 4 * 3 - pad
        out_offsets[i + 1] = out_offsets[i] + size
    return -1


@njit(cache=True)
def _base64_decode(
    offsets: np.ndarray, data: np.ndarray, nulls: np.ndarray, out_offsets: np.ndarray, out: np.ndarray
) -> int:
    """Decode every row into ``out``; returns the first row with a character outside base64, or -1."""
    for i in range(offsets.size - 1):
        if nulls[i]:
            continue
        start = offsets[i]
        end = offsets[i + 1]
        p = out_offsets[i]
        stop = out_offsets[i + 1]
        for g in range(start, end, 4):
            acc = 0
            for j in range(4):
                c = data[g + j]
                if c == 61 and g + 4 == end and (j == 3 or (j == 2 and data[g + 3] == 61)):
                    v = 0
                else:
                    v = _B64_VALUES[c]
                    if v == 255:
                        return i
                acc = (acc << 6) | v
            for j in range(3):
                if p < stop:
                    out[p] = (acc >> (16 - 8 * j)) & 255
                    p += 1
    return -1
