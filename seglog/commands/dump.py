"""Print segment files the way Kafka's ``kafka-dump-log.sh`` (``DumpLogSegments``) does, line for line.

Files are dispatched on the text after the last ``.`` of their name: ``.log`` (and KRaft
``.checkpoint`` snapshots) -> batches, ``.index`` -> offset index, ``.timeindex`` -> time index,
``.txnindex`` -> aborted transactions, ``.snapshot`` -> producer state; anything else is skipped
with ``Ignoring unknown file <file>`` on stderr. Every file starts with ``Dumping <file>``.

Index entries are verified against the ``.log`` beside them: problems are summarised on stderr
after all files (Kafka's wording). Everything is opened read-only: files and directories without
write permission work, and nothing is ever created.

Exit status: 0, or 1 when a problem summary was printed (index mismatches, non-consecutive
offsets) - Kafka always exits 0; a non-zero status makes ``--verify-index-only`` scriptable.

Producer snapshot (``<offset>.snapshot``, Kafka's ``ProducerStateManager``), big-endian::

    offset  size  field
    0       2     version             1
    2       4     crc                 CRC-32C of bytes 6 .. end
    6       4     entry count
    10      46*n  entries: producerId int64, producerEpoch int16, lastSequence int32,
                  lastOffset int64, offsetDelta int32, timestamp int64, coordinatorEpoch int32,
                  currentTxnFirstOffset int64 (-1 = none)

examples:
  seglog dump data/logs/events-0/00000000000000000000.log
  seglog dump --deep-iteration --print-data-log data/logs/events-0/00000000000000000000.log
  seglog dump --verify-index-only data/logs/events-0/*.index data/logs/events-0/*.timeindex
  seglog dump --files data/logs/events-0/00000000000000000000.index,data/logs/events-0/00000000000000000000.timeindex
  seglog dump --index-sanity-check data/logs/events-0/*.index
"""

from __future__ import annotations

import argparse
import functools
import re
import struct
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TextIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from indexer.errors import CorruptIndexError, InvalidRecordError, check_input_file
from indexer.file_names import (
    INDEX_FILE_SUFFIX,
    LOG_FILE_SUFFIX,
    PRODUCER_SNAPSHOT_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX,
    TXN_INDEX_FILE_SUFFIX,
    offset_from_file_name,
)
from indexer.index_check import offset_entries_agree, scan_headers, time_entries_agree
from indexer.limits import INT32_MAX
from indexer.offset_index import OffsetIndex
from indexer.records.batch_header import (
    MAGIC_V2,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_NAMES,
    BatchHeader,
    crc32c,
    decrement_sequence,
)
from indexer.records.control import ControlRecordType, EndTransactionMarker, parse_control_record_key
from indexer.records.decoder import decode_records
from indexer.records.file_records import BatchScan, FileBatch, FileRecords
from indexer.records.legacy import iter_legacy_entries
from indexer.time_index import TimeIndex
from indexer.transaction_index import TransactionIndex
from seglog.cli import positive_int

DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024
KRAFT_SNAPSHOT_SUFFIX = ".checkpoint"
BOOTSTRAP_SNAPSHOT_NAME = "bootstrap.checkpoint"
RECORD_INDENT = "|"
_KRAFT_SNAPSHOT_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")

_SNAPSHOT_VERSION = 1
_SNAPSHOT_HEAD = struct.Struct(">hIi")
_SNAPSHOT_ENTRIES_OFFSET = 6
_SNAPSHOT_ENTRY = np.dtype(
    [
        ("producer_id", ">i8"),
        ("producer_epoch", ">i2"),
        ("last_sequence", ">i4"),
        ("last_offset", ">i8"),
        ("offset_delta", ">i4"),
        ("timestamp", ">i8"),
        ("coordinator_epoch", ">i4"),
        ("current_txn_first_offset", ">i8"),
    ]
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``seglog dump`` (Kafka's option names)."""
    parser.add_argument("paths", nargs="*", metavar="FILE", help="files to dump")
    parser.add_argument(
        "--files", action="append", default=[], metavar="f1,f2,...", help="comma separated files (Kafka's spelling)"
    )
    parser.add_argument(
        "--print-data-log", action="store_true", help="print record keys and payloads (implies --deep-iteration)"
    )
    parser.add_argument("--deep-iteration", action="store_true", help="print every record, not just batches")
    parser.add_argument(
        "--verify-index-only", action="store_true", help="check .index/.timeindex entries without printing them"
    )
    parser.add_argument("--index-sanity-check", action="store_true", help="run the index sanity check only")
    parser.add_argument(
        "--max-message-size",
        type=positive_int,
        default=DEFAULT_MAX_MESSAGE_SIZE,
        metavar="SIZE",
        help=f"largest batch when verifying an offset index entry (default {DEFAULT_MAX_MESSAGE_SIZE})",
    )
    parser.add_argument(
        "--max-bytes",
        type=positive_int,
        default=INT32_MAX,
        metavar="SIZE",
        help="only read the first SIZE bytes of each .log file",
    )
    parser.add_argument(
        "--skip-record-metadata", action="store_true", help="omit per-record metadata in deep iteration"
    )


@dataclass(frozen=True, slots=True)
class DumpOptions:
    """What to print; the defaults are ``kafka-dump-log.sh``'s."""

    print_data_log: bool = False
    deep_iteration: bool = False
    verify_index_only: bool = False
    index_sanity_check: bool = False
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    max_bytes: int = INT32_MAX
    skip_record_metadata: bool = False

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> DumpOptions:
        """The options given on ``seglog dump``'s command line: each field is the flag of its name."""
        return cls(**{option.name: getattr(args, option.name) for option in fields(cls)})

    @property
    def is_deep_iteration(self) -> bool:
        return self.deep_iteration or self.print_data_log


@dataclass
class DumpProblems:
    """Problems found while dumping, keyed by absolute file path, printed after all files."""

    failed_sanity_checks: dict[str, str] = field(default_factory=dict)  # an index Kafka would refuse to load
    index_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    timestamp_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    out_of_order_timestamps: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    shallow_offsets_not_found: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    non_consecutive_offsets: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    invalid_logs: dict[str, str] = field(default_factory=dict)  # a batch with isvalid: false, or trailing bytes

    def __bool__(self) -> bool:
        return any(
            (
                self.failed_sanity_checks,
                self.index_mismatches,
                self.timestamp_mismatches,
                self.out_of_order_timestamps,
                self.shallow_offsets_not_found,
                self.non_consecutive_offsets,
                self.invalid_logs,
            )
        )

    def summary_lines(self) -> list[str]:
        """Kafka's stderr summary (spec 7.6); prepended lists print newest first, as Kafka's do.

        At most :data:`MAX_PROBLEM_LINES` lines per file and kind (a garbage index would otherwise
        print one line per entry), then how many more there are; then our own line per ``.log``
        with invalid data.
        """
        lines = [f"Index sanity check failed for :{path}: {what}" for path, what in self.failed_sanity_checks.items()]
        for path, pairs in self.index_mismatches.items():
            lines.append(f"Mismatches in :{path}")
            lines += _capped([f"  Index offset: {a}, log offset: {b}" for a, b in reversed(pairs)])
        for path, pairs in self.timestamp_mismatches.items():
            lines.append(f"Found timestamp mismatch in :{path}")
            lines += _capped([f"  Index timestamp: {a}, log timestamp: {b}" for a, b in pairs])
        for path, pairs in self.out_of_order_timestamps.items():
            lines.append(f"Found out of order timestamp in :{path}")
            lines += _capped([f"  Index timestamp: {a}, Previously indexed timestamp: {b}" for a, b in pairs])
        for pairs in self.shallow_offsets_not_found.values():
            lines.append("The following indexed offsets are not found in the log.")
            lines += _capped([f"Indexed offset: {a}, found log offset: {b}" for a, b in pairs])
        for path, pairs in self.non_consecutive_offsets.items():
            lines.append(f"Non-consecutive offsets in {path}")
            lines += _capped([f"  {a} is followed by {b}" for a, b in reversed(pairs)])
        for path, what in self.invalid_logs.items():
            lines.append(f"Invalid data in :{path}: {what}")
        return lines


MAX_PROBLEM_LINES = 20  # per file and kind of problem in the summary


def _capped(lines: list[str]) -> list[str]:
    if len(lines) <= MAX_PROBLEM_LINES:
        return lines
    return lines[:MAX_PROBLEM_LINES] + [f"  ... and {len(lines) - MAX_PROBLEM_LINES} more ({len(lines)} in all)"]


def run(args: argparse.Namespace) -> int:
    """Dump every file named, then print the problem summary on stderr."""
    files = list(args.paths) + [f for group in args.files for f in group.split(",") if f]
    if not files:
        raise ValueError("no files to dump: name them as arguments or with --files f1,f2")
    problems = dump_files(files, DumpOptions.from_args(args), sys.stdout, sys.stderr)
    return 1 if problems else 0


def dump_files(files: Iterable[str], options: DumpOptions, out: TextIO, err: TextIO) -> DumpProblems:
    """Dump ``files`` to ``out`` (unknown ones noted on ``err``), then the summary on ``err``."""
    problems = DumpProblems()
    files = list(files)
    for name in files:  # all of them before anything is printed
        check_input_file(name, "file to dump", "seglog dump FILE")
    for name in files:
        path = Path(name)
        out.write(f"Dumping {name}\n")
        suffix = path.suffix
        if suffix in (LOG_FILE_SUFFIX, KRAFT_SNAPSHOT_SUFFIX):
            dump_log(path, options, out, problems)
        elif suffix == INDEX_FILE_SUFFIX:
            dump_offset_index(path, name, options, out, problems)
        elif suffix == TIME_INDEX_FILE_SUFFIX:
            dump_time_index(path, name, options, out, problems)
        elif suffix == PRODUCER_SNAPSHOT_FILE_SUFFIX:
            dump_producer_snapshot(path, out, err)
        elif suffix == TXN_INDEX_FILE_SUFFIX:
            dump_txn_index(path, out)
        else:
            err.write(f"Ignoring unknown file {name}\n")
        out.flush()
    for line in problems.summary_lines():
        err.write(line + "\n")
    err.flush()
    return problems


# --- .log ------------------------------------------------------------------------------------


def dump_log(path: Path, options: DumpOptions, out: TextIO, problems: DumpProblems) -> None:
    """Batches of a ``.log`` (or KRaft ``.checkpoint``) file, optionally every record (spec 7.2)."""
    if path.suffix == LOG_FILE_SUFFIX:
        out.write(f"Log starting offset: {offset_from_file_name(path.name)}\n")
    elif path.name == BOOTSTRAP_SNAPSHOT_NAME:
        out.write("KRaft bootstrap snapshot\n")
    else:
        match = _KRAFT_SNAPSHOT_NAME.match(path.name)
        if match is None:
            raise ValueError(f"{path}: not a KRaft snapshot name (<20-digit offset>-<10-digit epoch>.checkpoint)")
        out.write(f"Snapshot end offset: {int(match.group(1))}, epoch: {int(match.group(2))}\n")
    records = FileRecords.open(path, mutable=False)
    try:
        end = min(options.max_bytes, records.size_in_bytes())
        deep = _DeepIteration(path, records, options, out)
        valid_bytes = 0
        for batch in records.batches(0, end):
            if not options.is_deep_iteration:
                out.write(_batch_line(batch, valid_bytes) + "\n")
            elif batch.magic >= MAGIC_V2:
                deep.add(batch, valid_bytes)
            else:
                deep.flush()
                out.write(_batch_line(batch, valid_bytes) + "\n")
                deep.add_legacy(batch)
            valid_bytes += batch.size_in_bytes
        deep.flush()
        if deep.gaps:
            problems.non_consecutive_offsets.setdefault(str(path.absolute()), []).extend(deep.gaps)
        trailing = end - valid_bytes
        if trailing > 0 and options.max_bytes == INT32_MAX:
            out.write(f"Found {trailing} invalid bytes at the end of {path.name}\n")
            problems.invalid_logs[str(path.absolute())] = f"{trailing} invalid bytes at the end"
        # One compiled pass over every CRC, read with pread: a writer may cut a live segment meanwhile.
        crc_error = records.scan(0, valid_bytes, verify_crc=True).error
        if crc_error is not None:
            problems.invalid_logs[str(path.absolute())] = str(crc_error)
    finally:
        records.close_handlers()


def _java_bool(value: bool) -> str:
    return "true" if value else "false"


def _batch_line(b: FileBatch, position: int) -> str:
    """One shallow line (``printBatchLevel``)."""
    if b.magic >= MAGIC_V2:
        header = b.header
        assert header is not None
        horizon = f"OptionalLong[{header.base_timestamp}]" if header.has_delete_horizon else "OptionalLong.empty"
        head = (
            f"baseOffset: {header.base_offset} lastOffset: {header.last_offset} count: {header.records_count} "
            f"baseSequence: {header.base_sequence} lastSequence: {header.last_sequence} "
            f"producerId: {header.producer_id} producerEpoch: {header.producer_epoch} "
            f"partitionLeaderEpoch: {header.partition_leader_epoch} "
            f"isTransactional: {_java_bool(header.is_transactional)} isControl: {_java_bool(header.is_control)} "
            f"deleteHorizonMs: {horizon}"
        )
    else:
        head = f"offset: {b.last_offset}"
    return (
        f"{head} position: {position} {TIMESTAMP_TYPE_NAMES[b.timestamp_type]}: {b.max_timestamp} "
        f"size: {b.size_in_bytes} magic: {b.magic} compresscodec: {b.compression_name} "
        f"crc: {b.crc} isvalid: {_java_bool(b.is_valid())}"
    )


class _DeepIteration:
    """Deep-iteration output of one ``.log``: v2 batches are collected into windows of adjacent
    batches, decoded together and turned into record lines column-wise (no Python loop per
    record); the offset sequence is checked on the way (Kafka: each offset is the previous + 1)."""

    WINDOW_BYTES = 8 << 20
    WINDOW_BATCHES = 4096

    def __init__(self, path: Path, records: FileRecords, options: DumpOptions, out: TextIO) -> None:
        self.path = path
        self.records = records
        self.options = options
        self.out = out
        self.window: list[tuple[FileBatch, int]] = []
        self.window_bytes = 0
        self.last_offset = -1
        self.gaps: list[tuple[int, int]] = []

    def add(self, batch: FileBatch, position: int) -> None:
        self.window.append((batch, position))
        self.window_bytes += batch.size_in_bytes
        if self.window_bytes >= self.WINDOW_BYTES or len(self.window) >= self.WINDOW_BATCHES:
            self.flush()

    def add_legacy(self, batch: FileBatch) -> None:
        offsets, text = _legacy_record_lines(batch, self.path, self.options)
        self._check_offsets(offsets)
        self.out.write(text)

    def _check_offsets(self, offsets: np.ndarray) -> None:
        if offsets.size == 0:
            return
        previous = np.concatenate(([self.last_offset], offsets[:-1]))
        broken = np.flatnonzero((offsets != previous + 1) & (previous != -1))
        self.gaps += [(int(previous[i]), int(offsets[i])) for i in broken]
        self.last_offset = int(offsets[-1])

    def flush(self) -> None:
        if not self.window:
            return
        batches = [b for b, _ in self.window]
        headers = [h for h in (b.header for b in batches) if h is not None]
        first = batches[0].position
        buf = self.records.read(first, self.window_bytes)
        table = decode_records(buf, base_position=first, path=self.path, verify_crc=False, include_control=True)
        counts = np.asarray([h.records_count for h in headers], dtype=np.int64)
        if int(counts.sum()) != table.num_rows:
            raise InvalidRecordError(
                f"batches at positions {first}..{first + self.window_bytes} of {self.path} declare "
                f"{int(counts.sum())} records but hold {table.num_rows}",
                path=self.path,
                position=first,
            )
        offsets = table.column("offset").to_numpy()
        self._check_offsets(offsets)
        text = _record_lines(table, headers, counts, self.path, self.options)
        ends = np.concatenate(([0], np.cumsum(text.line_ends_per_batch(counts))))
        parts = []
        for i, (batch, position) in enumerate(self.window):
            parts.append(_batch_line(batch, position) + "\n")
            parts.append(text.data[ends[i] : ends[i + 1]])
        self.out.write("".join(parts))
        self.window = []
        self.window_bytes = 0


class _Lines:
    """Record lines as one string, with the end of every line (as character offsets)."""

    def __init__(self, data: str, line_ends: np.ndarray) -> None:
        self.data = data
        self.line_ends = line_ends

    def line_ends_per_batch(self, counts: np.ndarray) -> np.ndarray:
        """Characters taken by each batch's lines (from the cumulative line ends)."""
        bounds = np.concatenate(([0], self.line_ends))[np.concatenate(([0], np.cumsum(counts)))]
        return np.diff(bounds)


def _as_text(values: pa.Array) -> pa.Array:
    """Binary -> text as Kafka's ``StringDecoder`` (UTF-8, malformed bytes become U+FFFD)."""
    try:
        return values.cast(pa.string())
    except pa.ArrowInvalid:
        # Only windows holding non-UTF-8 data get here; the replacement needs Python's codec.
        return pa.array(
            [None if v is None else v.decode("utf-8", errors="replace") for v in values.to_pylist()], pa.string()
        )


def _sizes(values: pa.Array) -> pa.Array:
    """Byte length of each value, -1 for null (Kafka's keySize/valueSize)."""
    return pc.cast(pc.fill_null(pc.binary_length(values), -1), pa.string())


def _sequences(headers: list[BatchHeader], counts: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Each record's sequence: the batch's base sequence + offset delta, wrapping at INT_MAX; -1 without."""
    base_sequence = np.repeat(np.asarray([h.base_sequence for h in headers], dtype=np.int64), counts)
    delta = offsets - np.repeat(np.asarray([h.base_offset for h in headers], dtype=np.int64), counts)
    wraps = base_sequence > INT32_MAX - delta
    wrapped = np.where(wraps, delta - (INT32_MAX - base_sequence) - 1, base_sequence + delta)
    return np.where(base_sequence < 0, -1, wrapped)


def _record_lines(
    table: pa.Table, headers: list[BatchHeader], counts: np.ndarray, path: Path, options: DumpOptions
) -> _Lines:
    """The deep-iteration line of every record of a window of v2 batches, built column-wise."""
    n = table.num_rows
    offsets = table.column("offset").to_numpy()
    control = np.repeat(np.asarray([h.is_control for h in headers], dtype=bool), counts)
    keys = table.column("key").combine_chunks()
    values = table.column("value").combine_chunks()
    parts: list[pa.Array | pa.Scalar] = []
    prefix = f"{RECORD_INDENT} "
    if not options.skip_record_metadata:
        ts_names = pa.array([TIMESTAMP_TYPE_NAMES[t] for t in range(-1, 2)]).take(
            pa.array(np.repeat(np.asarray([h.timestamp_type for h in headers], dtype=np.int64), counts) + 1)
        )
        parts += [
            _lit(f"{prefix}offset: "),
            pc.cast(table.column("offset").combine_chunks(), pa.string()),
            _lit(" "),
            ts_names,
            _lit(": "),
            pc.cast(table.column("timestamp").combine_chunks(), pa.string()),
            _lit(" keySize: "),
            _sizes(keys),
            _lit(" valueSize: "),
            _sizes(values),
            _lit(" sequence: "),
            pc.cast(pa.array(_sequences(headers, counts, offsets)), pa.string()),
            _lit(" headerKeys: ["),
            _header_keys_text(table.column("headers").combine_chunks()),
            _lit("]"),
        ]
        prefix = " "
        if control.any():
            parts.append(_control_suffixes(keys, values, control, path))
    if options.print_data_log:
        data_rows = pa.array(~control)
        keys_text = _as_text(keys)
        values_text = _as_text(values)
        empty = _lit("")
        parts.append(
            pc.if_else(
                pc.and_(data_rows, pc.is_valid(keys_text)),
                pc.binary_join_element_wise(_lit(prefix + "key: "), keys_text, empty),
                empty,
            )
        )
        parts.append(
            pc.if_else(
                pc.and_(data_rows, pc.is_valid(values_text)),
                pc.binary_join_element_wise(_lit(" payload: "), values_text, empty),
                empty,
            )
        )
    if not parts:  # --skip-record-metadata without data: Kafka prints an empty line per record
        return _Lines("\n" * n, np.arange(1, n + 1, dtype=np.int64))
    parts.append(_lit("\n"))
    lines = pc.binary_join_element_wise(*parts, _lit(""))
    if isinstance(lines, pa.ChunkedArray):
        lines = lines.combine_chunks()
    lines = lines.cast(pa.large_string())
    byte_ends = np.frombuffer(lines.buffers()[1], dtype=np.int64, count=n + 1, offset=lines.offset * 8)
    raw = lines.buffers()[2].to_pybytes()[byte_ends[0] : byte_ends[-1]] if n else b""
    # Character offsets of the line ends: bytes minus UTF-8 continuation bytes before each end.
    continuation = np.concatenate(([0], np.cumsum((np.frombuffer(raw, dtype=np.uint8) & 0xC0) == 0x80)))
    ends = byte_ends[1:] - byte_ends[0]
    return _Lines(raw.decode("utf-8"), ends - continuation[ends])


@functools.lru_cache(maxsize=64)
def _lit(text: str) -> pa.Scalar:
    """A string scalar, made once (converting Python strings per call is slow in pyarrow)."""
    return pa.scalar(text, pa.string())


def _header_keys_text(headers: pa.Array) -> pa.Array:
    """``k1,k2`` per record (empty for no headers)."""
    keys = pc.struct_field(pc.list_flatten(headers), "key") if len(headers) else pa.array([], pa.string())
    lists = pa.ListArray.from_arrays(pa.array(_rebased_list_offsets(headers), pa.int32()), keys.cast(pa.string()))
    return pc.binary_join(lists, _lit(","))


def _rebased_list_offsets(lists: pa.Array) -> np.ndarray:
    """List offsets starting at 0, with null lists as empty ones (lengths taken from the array)."""
    lengths = pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    return np.concatenate(([0], np.cumsum(lengths)))


def _control_suffixes(keys: pa.Array, values: pa.Array, control: np.ndarray, path: Path) -> pa.Array:
    """The control-record suffix of every record: empty except for the records of control batches."""
    rows = np.flatnonzero(control)
    texts = [_control_text(keys[int(i)].as_py(), values[int(i)].as_py(), path) for i in rows]
    pick = np.zeros(control.size, dtype=np.int64)
    pick[rows] = np.arange(1, rows.size + 1)
    return pa.array([""] + texts, pa.string()).take(pa.array(pick))


def _control_text(key: bytes | None, value: bytes | None, path: Path) -> str:
    """Kafka's text for one control record (one per control batch)."""
    if key is None:
        raise InvalidRecordError(f"a control record without a key in {path}", path=path)
    _, control_type = parse_control_record_key(key)
    if control_type.is_end_txn_marker:
        marker = EndTransactionMarker.parse(key, value or b"")
        return f" endTxnMarker: {marker.control_type.name} coordinatorEpoch: {marker.coordinator_epoch}"
    if control_type is ControlRecordType.SNAPSHOT_HEADER and value is not None and len(value) >= 10:
        version, last_ts = struct.unpack_from(">hq", value, 0)
        return f' SnapshotHeader {{"version":{version},"lastContainedLogTimestamp":{last_ts}}}'
    if control_type is ControlRecordType.SNAPSHOT_FOOTER and value is not None and len(value) >= 2:
        return f' SnapshotFooter {{"version":{struct.unpack_from(">h", value, 0)[0]}}}'
    return f" controlType: {control_type.name}({struct.unpack_from('>h', key, 2)[0]})"


def _legacy_record_lines(batch: FileBatch, path: Path, options: DumpOptions) -> tuple[np.ndarray, str]:
    """Record lines of one v0/v1 entry (legacy data is rare: one Python step per message)."""
    wrapper = next(iter_legacy_entries(batch.raw(), base_position=batch.position, path=path))
    lines = []
    offsets = []
    for record in wrapper.inner_entries(path=path):
        offsets.append(record.offset)
        prefix = f"{RECORD_INDENT} "
        line = ""
        if not options.skip_record_metadata:
            line = (
                f"{prefix}offset: {record.offset} {TIMESTAMP_TYPE_NAMES[batch.timestamp_type]}: "
                f"{record.timestamp} keySize: {record.key_size} valueSize: {record.value_size}"
                f" isValid: {_java_bool(record.is_valid)} crc: {record.crc}}}"
            )
            prefix = " "
        if options.print_data_log:
            if record.key is not None:
                line += f"{prefix}key: {record.key.decode('utf-8', errors='replace')}"
            if record.value is not None:
                line += f" payload: {record.value.decode('utf-8', errors='replace')}"
        lines.append(line + "\n")
    return np.asarray(offsets, dtype=np.int64), "".join(lines)


# --- .index / .timeindex -------------------------------------------------------------------------


def _sibling(path: Path, suffix: str) -> Path:
    return path.absolute().parent / (path.name.split(".", 1)[0] + suffix)


def _entries_until_zero_slot(offsets: np.ndarray, base_offset: int) -> int:
    """Entries before the first slot (after the first) whose offset is the base offset: the zero
    tail of an un-trimmed index after a crash, where Kafka stops."""
    repeats = np.flatnonzero(offsets[1:] == base_offset)
    return int(repeats[0]) + 1 if repeats.size else len(offsets)


def _index_entries(
    index: OffsetIndex | TimeIndex, path: Path, name: str, options: DumpOptions, out: TextIO, problems: DumpProblems
) -> tuple[np.ndarray, np.ndarray] | None:
    """The entries of ``index`` Kafka dumps, those before its zero tail, as ``(offsets, positions)`` of a
    ``.index`` or ``(offsets, timestamps)`` of a ``.timeindex``; None when ``--index-sanity-check`` asked
    for Kafka's sanity check alone (run here: a failure raises, a pass is printed).

    Otherwise a failed sanity check (size, last entry) is a reported problem: the entries are still
    dumped and checked, but a file a broker would refuse to load is said so up front."""
    if options.index_sanity_check:
        index.sanity_check()
        out.write(f"{name} passed sanity check.\n")
        return None
    try:
        index.sanity_check()
    except CorruptIndexError as e:
        problems.failed_sanity_checks[str(path.absolute())] = str(e)
    keys, values = index.to_arrays()
    offsets, other = (values, keys) if isinstance(index, TimeIndex) else (keys, values)
    count = _entries_until_zero_slot(offsets, index.base_offset)
    return offsets[:count], other[:count]


def dump_offset_index(path: Path, name: str, options: DumpOptions, out: TextIO, problems: DumpProblems) -> None:
    """Entries of a ``.index`` file, each checked against the ``.log`` batch it points at (spec 7.3)."""
    base_offset = offset_from_file_name(path.name)
    log_path = _sibling(path, LOG_FILE_SUFFIX)
    with OffsetIndex(path, base_offset, -1, writable=False) as index:
        if index.entries == 0:
            out.write(f"{name} is empty.\n")
            return
        entries = _index_entries(index, path, name, options, out, problems)
    if entries is None:
        return
    index_offsets, positions = entries
    scan = scan_headers(log_path)
    consistent, log_offsets = offset_entries_agree(scan, index_offsets, positions, options.max_message_size)
    bad = np.flatnonzero(~consistent)
    if bad.size:
        problems.index_mismatches.setdefault(str(path.absolute()), []).extend(
            (int(index_offsets[i]), int(log_offsets[i])) for i in bad
        )
    if not options.verify_index_only:
        pairs = zip(index_offsets.tolist(), positions.tolist(), strict=True)
        out.write("".join(f"offset: {o} position: {p}\n" for o, p in pairs))


def dump_time_index(path: Path, name: str, options: DumpOptions, out: TextIO, problems: DumpProblems) -> None:
    """Entries of a ``.timeindex`` file, each checked against the batch holding its offset (spec 7.4)."""
    base_offset = offset_from_file_name(path.name)
    log_path = _sibling(path, LOG_FILE_SUFFIX)
    with (
        OffsetIndex(_sibling(path, INDEX_FILE_SUFFIX), base_offset, -1, writable=False) as index,
        TimeIndex(path, base_offset, -1, writable=False) as time_index,
    ):
        entries = _index_entries(time_index, path, name, options, out, problems)
        if entries is None:
            return
        entry_offsets, entry_timestamps = entries
        _, start_positions = index.lookup_many(entry_offsets)
    if entry_offsets.size:
        scan = scan_headers(log_path)
        _check_time_entries(str(path.absolute()), entry_offsets, entry_timestamps, start_positions, scan, problems)
    if not options.verify_index_only:
        pairs = zip(entry_timestamps.tolist(), entry_offsets.tolist(), strict=True)
        out.write("".join(f"timestamp: {t} offset: {o}\n" for t, o in pairs))


def _check_time_entries(
    key: str,
    entry_offsets: np.ndarray,
    entry_timestamps: np.ndarray,
    start_positions: np.ndarray,
    scan: BatchScan,
    problems: DumpProblems,
) -> None:
    """Kafka's checks of each time-index entry, vectorised over all entries.

    From the offset-index position of the entry's offset, the first batch whose last offset is >=
    the entry's offset must hold that offset (Kafka: end exactly at it, see below) and have the
    entry's timestamp as its maximum timestamp (the batch header's, which is the maximum of its
    records' timestamps); timestamps must increase from entry to entry.
    """
    exact, log_offsets, log_timestamps = time_entries_agree(scan, entry_offsets, start_positions)
    for i in np.flatnonzero(~exact):
        problems.shallow_offsets_not_found.setdefault(key, []).append((int(entry_offsets[i]), int(log_offsets[i])))
    previous = np.concatenate(([NO_TIMESTAMP], entry_timestamps[:-1]))
    for i in np.flatnonzero(exact):
        if log_timestamps[i] != entry_timestamps[i]:
            problems.timestamp_mismatches.setdefault(key, []).append((int(entry_timestamps[i]), int(log_timestamps[i])))
        if previous[i] >= entry_timestamps[i]:
            problems.out_of_order_timestamps.setdefault(key, []).append((int(entry_timestamps[i]), int(previous[i])))


# --- .txnindex / .snapshot -------------------------------------------------------------------------


def dump_txn_index(path: Path, out: TextIO) -> None:
    """One line per aborted transaction of a ``.txnindex`` file (spec 7.5)."""
    index = TransactionIndex(path, offset_from_file_name(path.name), writable=False)
    try:
        for txn in index.all_aborted_txns():
            out.write(
                f"version: {txn.version} producerId: {txn.producer_id} firstOffset: {txn.first_offset} "
                f"lastOffset: {txn.last_offset} lastStableOffset: {txn.last_stable_offset}\n"
            )
    finally:
        index.close()


def dump_producer_snapshot(path: Path, out: TextIO, err: TextIO) -> None:
    """Producer entries of a ``.snapshot`` file; a corrupt snapshot prints its error on ``err``."""
    data = path.read_bytes()
    if len(data) < _SNAPSHOT_HEAD.size:
        err.write(f"Snapshot failed schema validation: {path} has {len(data)} bytes, fewer than the header\n")
        return
    version, crc, count = _SNAPSHOT_HEAD.unpack_from(data, 0)
    if version != _SNAPSHOT_VERSION:
        err.write(f"Snapshot contained an unknown file version {version}\n")
        return
    computed = crc32c(memoryview(data)[_SNAPSHOT_ENTRIES_OFFSET:])
    if crc != computed:
        err.write(f"Snapshot is corrupt (CRC is no longer valid). Stored crc: {crc}. Computed crc: {computed}\n")
        return
    body = len(data) - _SNAPSHOT_HEAD.size
    if count < 0 or body != count * _SNAPSHOT_ENTRY.itemsize:
        err.write(f"Snapshot failed schema validation: {count} entries do not fill the {body} bytes of {path}\n")
        return
    entries = np.frombuffer(data, dtype=_SNAPSHOT_ENTRY, count=count, offset=_SNAPSHOT_HEAD.size)
    for e in entries.tolist():
        pid, epoch, last_seq, last_offset, offset_delta, timestamp, coordinator_epoch, txn_first = e
        txn = f"OptionalLong[{txn_first}]" if txn_first >= 0 else "OptionalLong.empty"
        line = (
            f"producerId: {pid} producerEpoch: {epoch} coordinatorEpoch: {coordinator_epoch} "
            f"currentTxnFirstOffset: {txn} lastTimestamp: {timestamp} "
        )
        if last_offset >= 0:
            line += (
                f"firstSequence: {decrement_sequence(last_seq, offset_delta)} lastSequence: {last_seq} "
                f"lastOffset: {last_offset} offsetDelta: {offset_delta} timestamp: {timestamp}"
            )
        out.write(line + "\n")
