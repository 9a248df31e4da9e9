"""Record batches of any magic and codec to columns (Kafka's ``DefaultRecordBatch`` /
``DefaultRecord`` read path, and ``AbstractLegacyRecordBatch`` for magic 0/1 via
:mod:`indexer.records.legacy`).

Input is a buffer of whole log entries back to back (a ``.log`` file or a slice of one starting at
a batch boundary); framing is ``Records``' (int64 offset, int32 size of what follows, magic byte at
16), the v2 header is laid out in :mod:`indexer.records.batch_header` and the v2 record layout in
:mod:`indexer.records._kernels`. Like Kafka's ``ByteBufferLogInputStream``, a partial entry at the
end of the buffer is ignored.

Checks, with Kafka's rules: an entry size field below 14, a v2 batch below 61 bytes, an unknown
magic or (with ``verify_crc``) a CRC-32C mismatch raise :class:`CorruptRecordError`; records that
do not parse (over-long varints, lengths past the end of a record, a record whose fields do not
fill its declared length exactly, a batch with bytes after its declared record count, a negative
record count) raise :class:`InvalidRecordError`. Both carry ``path`` and ``position``, the file
position of the offending batch (``base_position`` + its offset in the buffer).

Output columns are :data:`indexer.records.columns.READ_SCHEMA`. With LogAppendTime every record's
timestamp is the batch's maxTimestamp. ``headers`` is null for a record without headers, as in
Spark's Kafka source. Record parsing and byte gathering run in numba kernels; Arrow arrays are built
from their outputs with ``pa.Array.from_buffers``. Both functions are pure and thread-safe (the kernels
release the GIL); they never modify ``buf``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from indexer.errors import CorruptRecordError, InvalidRecordError
from indexer.limits import INT32_MAX
from indexer.records import _kernels as K
from indexer.records.batch_header import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    CREATE_TIME,
    LOG_APPEND_TIME,
    MAGIC_V2,
    MIN_LEGACY_RECORD_SIZE,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    crc32c,
)
from indexer.records.columns import HEADER_TYPE, HEADERS_TYPE, READ_SCHEMA
from indexer.records.isolation import aborted_batch_mask
from indexer.transaction_index import AbortedTxn

logger = logging.getLogger(__name__)

PathLike = str | os.PathLike[str] | None
BytesLike = bytes | bytearray | memoryview | np.ndarray

_MIN_RECORD_SIZE = 7  # length, attributes, timestampDelta, offsetDelta, keyLength, valueLength, headerCount

_ERRORS = {
    K.ERR_VARINT_TOO_LONG: "a varint is longer than 5 bytes",
    K.ERR_VARLONG_TOO_LONG: "a varlong is longer than 10 bytes",
    K.ERR_VARINT_TRUNCATED: "a varint runs past the end of its record",
    K.ERR_RECORD_LENGTH: "a record declares {a} bytes but only {b} remain in the batch",
    K.ERR_RECORD_SIZE_MISMATCH: (
        "Invalid record size: expected to read {a} bytes in record payload, but instead read {b}"
    ),
    K.ERR_KEY_LENGTH: "a key length of {a} exceeds the {b} bytes left in its record",
    K.ERR_VALUE_LENGTH: "a value length of {a} exceeds the {b} bytes left in its record",
    K.ERR_HEADER_COUNT: "Found invalid number of record headers {a} ({b} bytes left in the record)",
    K.ERR_HEADER_KEY_NEGATIVE: "Invalid negative header key size {a}",
    K.ERR_HEADER_KEY_LENGTH: "a header key length of {a} exceeds the {b} bytes left in its record",
    K.ERR_HEADER_VALUE_LENGTH: "a header value length of {a} exceeds the {b} bytes left in its record",
    K.ERR_TRAILING_BYTES: "Incorrect declared batch size, {a} bytes remain after the declared number of records",
}


@dataclass(frozen=True, eq=False)
class DecodedBatch:
    """The records of one v2 batch, for ``seglog dump --deep-iteration``.

    Per-record int64 arrays: ``offsets``, ``timestamps`` (effective: the batch maxTimestamp with
    LogAppendTime), ``key_sizes`` / ``value_sizes`` (-1 for null) and ``sequences`` (-1 without a
    base sequence); Arrow columns ``key``, ``value`` and ``headers`` as in READ_SCHEMA.
    """

    header: BatchHeader
    offsets: np.ndarray
    timestamps: np.ndarray
    key_sizes: np.ndarray
    value_sizes: np.ndarray
    sequences: np.ndarray
    key: pa.Array
    value: pa.Array
    headers: pa.Array

    def __len__(self) -> int:
        return int(self.offsets.shape[0])


@dataclass(frozen=True)
class _Context:
    """Where the buffer came from, for error messages."""

    path: PathLike
    base_position: int

    def where(self, position: int) -> str:
        return (
            f"batch at position {self.base_position + position} of {self.path if self.path is not None else '<buffer>'}"
        )

    def error(
        self, cls: type[CorruptRecordError], message: str, position: int, offset: int | None = None
    ) -> CorruptRecordError:
        return cls(
            f"{message} ({self.where(position)})", path=self.path, position=self.base_position + position, offset=offset
        )


def decode_records(
    buf: BytesLike,
    *,
    base_position: int = 0,
    path: PathLike = None,
    verify_crc: bool = True,
    include_control: bool = False,
    start_offset: int | None = None,
    max_offset: int | None = None,
    aborted: Sequence[AbortedTxn] = (),
) -> pa.Table:
    """Every record of the log entries in ``buf``, in file order, as a READ_SCHEMA table.

    Args:
        buf: whole log entries back to back (a partial trailing entry is ignored).
        base_position: file position of ``buf[0]``, for error positions.
        path: the file, for error messages.
        verify_crc: check the CRC of every batch whose records are decoded.
        include_control: also return the records of control batches (transaction markers).
        start_offset: drop records with a smaller offset (reads start at batch boundaries).
        max_offset: drop records with this offset or a larger one.
        aborted: aborted transactions whose batches are dropped (``read_committed``, see
            :mod:`indexer.records.isolation`).

    Raises:
        CorruptRecordError: bad framing, size, magic, CRC or compressed stream.
        InvalidRecordError: records that do not parse.
    """
    data = _as_uint8(buf)
    context = _Context(path, base_position)
    entries = _scan(data, context)
    magics = entries[:, K.COL_MAGIC]
    legacy = magics < MAGIC_V2
    if not legacy.any():
        return _decode_v2(data, entries, context, verify_crc, include_control, start_offset, max_offset, aborted)
    pieces = []
    boundaries = np.flatnonzero(np.diff(legacy.astype(np.int8))) + 1
    for run in np.split(np.arange(entries.shape[0]), boundaries):
        if legacy[run[0]]:
            pieces.append(_decode_legacy(data, entries[run], context, verify_crc, start_offset, max_offset))
        else:
            pieces.append(
                _decode_v2(data, entries[run], context, verify_crc, include_control, start_offset, max_offset, aborted)
            )
    return pa.concat_tables(pieces)


def decode_batch(buf: BytesLike, header: BatchHeader, *, path: PathLike = None) -> DecodedBatch:
    """The records of the v2 batch whose bytes start at ``buf[0]`` (``header`` is its parsed header).

    The CRC is not checked (``dump`` reports validity separately and still shows the records);
    ``header.position`` is used as the file position in errors.

    Raises:
        CorruptRecordError: ``buf`` is shorter than the batch, or its compressed stream is corrupt.
        InvalidRecordError: records that do not parse.
    """
    data = _as_uint8(buf)
    context = _Context(path, header.position)
    size = header.size_in_bytes
    if data.shape[0] < size or size < RECORD_BATCH_OVERHEAD:
        raise context.error(
            CorruptRecordError,
            f"batch of {size} bytes does not fit the {data.shape[0]} bytes given",
            0,
            header.base_offset,
        )
    entry = np.zeros((1, K.ENTRY_COLUMNS), np.int64)
    entry[0, K.COL_SIZE] = size
    entry[0, K.COL_BASE_OFFSET] = header.base_offset
    entry[0, K.COL_ATTRIBUTES] = header.attributes
    entry[0, K.COL_BASE_TIMESTAMP] = header.base_timestamp
    entry[0, K.COL_MAX_TIMESTAMP] = header.max_timestamp
    entry[0, K.COL_RECORDS_COUNT] = header.records_count
    arena, records = _parse(data, entry, context)
    offsets = records[K.REC_OFFSET]
    if header.base_sequence >= 0:
        sequences = header.base_sequence + (offsets - header.base_offset)
        sequences = np.where(sequences > INT32_MAX, sequences - INT32_MAX - 1, sequences)
    else:
        sequences = np.full(offsets.shape[0], -1, np.int64)
    return DecodedBatch(
        header=header,
        offsets=offsets,
        timestamps=records[K.REC_TIMESTAMP],
        key_sizes=records[K.REC_KEY_LEN],
        value_sizes=records[K.REC_VALUE_LEN],
        sequences=sequences,
        key=_binary_array(arena, records[K.REC_KEY_START], records[K.REC_KEY_LEN], pa.binary()),
        value=_binary_array(arena, records[K.REC_VALUE_START], records[K.REC_VALUE_LEN], pa.binary()),
        headers=_headers_array(arena, records[K.REC_HEADER_POSITION], records[K.REC_HEADER_COUNT]),
    )


def _as_uint8(buf: BytesLike) -> np.ndarray:
    """A read-only uint8 view of ``buf`` (one array type for the kernels: one compiled version)."""
    array = buf if isinstance(buf, np.ndarray) else np.frombuffer(buf, np.uint8)
    if array.dtype != np.uint8 or array.ndim != 1:
        raise TypeError(f"expected a 1-d uint8 array or a bytes-like object, got {array.dtype} x {array.shape}")
    if array.flags.writeable:
        array = array.view()
        array.flags.writeable = False
    return array


def _scan(data: np.ndarray, context: _Context) -> np.ndarray:
    """The entry table of ``data``; raises on an impossible size field or magic."""
    entries, reason, stop = K.scan_batches(data, 0, data.shape[0])
    if reason == K.SCAN_TOO_SMALL:
        size = int.from_bytes(data[stop + 8 : stop + 12].tobytes(), "big", signed=True)
        raise context.error(
            CorruptRecordError,
            f"Found record size {size} smaller than minimum record overhead ({MIN_LEGACY_RECORD_SIZE})",
            int(stop),
        )
    if reason == K.SCAN_PARTIAL:
        logger.debug(
            "ignoring %d bytes of a partial entry at the end (%s)", data.shape[0] - stop, context.where(int(stop))
        )
    magics = entries[:, K.COL_MAGIC]
    bad = np.flatnonzero((magics < 0) | (magics > MAGIC_V2))
    if bad.size:
        row = entries[bad[0]]
        raise context.error(
            CorruptRecordError, f"Invalid magic found in record: {row[K.COL_MAGIC]}", int(row[K.COL_POSITION])
        )
    return entries


def _decode_legacy(
    data: np.ndarray,
    entries: np.ndarray,
    context: _Context,
    verify_crc: bool,
    start_offset: int | None,
    max_offset: int | None,
) -> pa.Table:
    """Records of a run of v0/v1 entries, through :func:`indexer.records.legacy.decode_legacy_records`."""
    from indexer.records.legacy import decode_legacy_records

    start = int(entries[0, K.COL_POSITION])
    end = int(entries[-1, K.COL_POSITION] + entries[-1, K.COL_SIZE])
    table = decode_legacy_records(
        data.data[start:end],
        base_position=context.base_position + start,
        path=context.path,
        verify_crc=verify_crc,
    )
    offsets = table.column("offset").to_numpy()
    keep = _offset_mask(offsets, start_offset, max_offset)
    if keep is not None:
        table = table.filter(pa.array(keep))
    return table.set_column(5, READ_SCHEMA.field("headers"), pa.nulls(table.num_rows, HEADERS_TYPE))


def _decode_v2(
    data: np.ndarray,
    entries: np.ndarray,
    context: _Context,
    verify_crc: bool,
    include_control: bool,
    start_offset: int | None,
    max_offset: int | None,
    aborted: Sequence[AbortedTxn],
) -> pa.Table:
    """Records of a run of v2 batches.

    Every batch below ``max_offset`` is checked, those left out too (control batches, aborted
    transactions, batches before ``start_offset``), as a consumer checks them: a damaged
    attributes byte or last offset delta (both CRC-covered) can make any batch look like one.
    """
    if max_offset is not None:
        entries = entries[entries[:, K.COL_BASE_OFFSET] < max_offset]
    _check_sizes(entries, context)
    if verify_crc:
        _verify_crcs(data, entries, context)
    keep = np.ones(entries.shape[0], bool)
    if start_offset is not None:
        keep &= entries[:, K.COL_BASE_OFFSET] + entries[:, K.COL_LAST_OFFSET_DELTA] >= start_offset
    if not include_control:
        keep &= (entries[:, K.COL_ATTRIBUTES] & CONTROL_FLAG_MASK) == 0
    if aborted:
        keep &= ~aborted_batch_mask(
            entries[:, K.COL_BASE_OFFSET], entries[:, K.COL_PRODUCER_ID], entries[:, K.COL_ATTRIBUTES], aborted
        )
    if not keep.all():
        entries = entries[keep]
    arena, records = _parse(data, entries, context)
    log_append = (entries[:, K.COL_ATTRIBUTES] & TIMESTAMP_TYPE_MASK) != 0
    timestamp_types = np.repeat(
        np.where(log_append, LOG_APPEND_TIME, CREATE_TIME).astype(np.int32), entries[:, K.COL_RECORDS_COUNT]
    )
    selected = _offset_mask(records[K.REC_OFFSET], start_offset, max_offset)
    if selected is not None:
        records, timestamp_types = records[:, selected], timestamp_types[selected]
    return pa.Table.from_arrays(
        [
            pa.array(records[K.REC_OFFSET], pa.int64()),
            pa.array(records[K.REC_TIMESTAMP], pa.int64()),
            pa.array(timestamp_types, pa.int32()),
            _binary_array(arena, records[K.REC_KEY_START], records[K.REC_KEY_LEN], pa.binary()),
            _binary_array(arena, records[K.REC_VALUE_START], records[K.REC_VALUE_LEN], pa.binary()),
            _headers_array(arena, records[K.REC_HEADER_POSITION], records[K.REC_HEADER_COUNT]),
        ],
        schema=READ_SCHEMA,
    )


def _offset_mask(offsets: np.ndarray, start_offset: int | None, max_offset: int | None) -> np.ndarray | None:
    """Records to keep, or None when every record is kept."""
    keep = np.ones(offsets.shape[0], bool)
    if start_offset is not None:
        keep &= offsets >= start_offset
    if max_offset is not None:
        keep &= offsets < max_offset
    return None if keep.all() else keep


def _check_sizes(entries: np.ndarray, context: _Context) -> None:
    """Kafka's size check that precedes the CRC check (``DefaultRecordBatch.ensureValid``)."""
    sizes = entries[:, K.COL_SIZE]
    small = np.flatnonzero(sizes < RECORD_BATCH_OVERHEAD)
    if small.size:
        row = entries[small[0]]
        raise context.error(
            CorruptRecordError,
            f"Record batch is corrupt (the size {row[K.COL_SIZE]} is smaller than the minimum allowed overhead "
            f"{RECORD_BATCH_OVERHEAD})",
            int(row[K.COL_POSITION]),
            int(row[K.COL_BASE_OFFSET]),
        )


def _verify_crcs(data: np.ndarray, entries: np.ndarray, context: _Context) -> None:
    """Compare each batch's stored CRC-32C with the one computed over bytes 21 .. end."""
    view = data.data
    for position, size, stored, base_offset in entries[
        :, [K.COL_POSITION, K.COL_SIZE, K.COL_CRC, K.COL_BASE_OFFSET]
    ].tolist():
        computed = crc32c(view[position + ATTRIBUTES_OFFSET : position + size])
        if computed != stored:
            raise context.error(
                CorruptRecordError,
                f"Record is corrupt (stored crc = {stored}, computed crc = {computed})",
                position,
                base_offset,
            )


def _parse(data: np.ndarray, entries: np.ndarray, context: _Context) -> tuple[np.ndarray, np.ndarray]:
    """Run the record kernel over the batches in ``entries`` (decompressing where needed).

    Returns ``(arena, records)``: the bytes the records were parsed from (``data`` and/or the
    decompressed sections, back to back) and the ``(REC_FIELDS, n)`` per-record table of
    :func:`indexer.records._kernels.parse_records`, whose positions index ``arena``.
    """
    positions = entries[:, K.COL_POSITION]
    starts = positions + RECORD_BATCH_OVERHEAD
    ends = positions + entries[:, K.COL_SIZE]
    codec_ids = entries[:, K.COL_ATTRIBUTES] & COMPRESSION_CODEC_MASK
    compressed = np.flatnonzero(codec_ids)
    arena = data
    if compressed.size:
        from indexer.records.codecs import get_codec

        view = data.data
        # The arena keeps ``data`` only when some batches are read from it in place.
        pieces = [] if compressed.size == entries.shape[0] else [data]
        cursor = sum(piece.shape[0] for piece in pieces)
        for k in compressed.tolist():
            row = entries[k]
            try:
                decompressed = get_codec(int(codec_ids[k])).decompress(view[starts[k] : ends[k]])
            except CorruptRecordError as exc:
                raise context.error(type(exc), str(exc), int(row[K.COL_POSITION]), int(row[K.COL_BASE_OFFSET])) from exc
            pieces.append(np.frombuffer(decompressed, np.uint8))
            starts[k], ends[k] = cursor, cursor + len(decompressed)
            cursor += len(decompressed)
        arena = _as_uint8(np.concatenate(pieces))
    counts = np.ascontiguousarray(entries[:, K.COL_RECORDS_COUNT])
    impossible = np.flatnonzero((counts < 0) | (counts * _MIN_RECORD_SIZE > ends - starts))
    if impossible.size:
        k = impossible[0]
        raise context.error(
            InvalidRecordError,
            f"Found invalid record count {counts[k]} for a records section of {ends[k] - starts[k]} bytes",
            int(positions[k]),
            int(entries[k, K.COL_BASE_OFFSET]),
        )
    log_append_times = np.where(
        (entries[:, K.COL_ATTRIBUTES] & TIMESTAMP_TYPE_MASK) != 0, entries[:, K.COL_MAX_TIMESTAMP], K.NO_LOG_APPEND_TIME
    )
    records = np.empty((K.REC_FIELDS, int(counts.sum())), np.int64)
    status, section, error_position, a, b = K.parse_records(
        arena,
        starts,
        ends,
        counts,
        np.ascontiguousarray(entries[:, K.COL_BASE_OFFSET]),
        np.ascontiguousarray(entries[:, K.COL_BASE_TIMESTAMP]),
        log_append_times,
        records,
    )
    if status:
        where = "decompressed records" if codec_ids[section] else "records"
        message = _ERRORS[status].format(a=a, b=b)
        raise context.error(
            InvalidRecordError,
            f"{message} at byte {error_position - starts[section]} of the batch's {where}",
            int(positions[section]),
            int(entries[section, K.COL_BASE_OFFSET]),
        )
    return arena, records


def _binary_array(arena: np.ndarray, starts: np.ndarray, lens: np.ndarray, arrow_type: pa.DataType) -> pa.Array:
    """A binary (or string) array of the slices of ``arena``; length -1 = null."""
    n = starts.shape[0]
    valid = lens >= 0
    null_count = n - int(np.count_nonzero(valid))
    if null_count == n:
        return pa.nulls(n, arrow_type)
    total = int(lens[valid].sum())
    if total > INT32_MAX:
        raise ValueError(f"{total} bytes of {arrow_type} data exceed one Arrow array; decode fewer batches at a time")
    offsets, data = K.gather(arena, starts, lens)
    validity = pa.py_buffer(np.packbits(valid, bitorder="little")) if null_count else None
    return pa.Array.from_buffers(
        arrow_type, n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)], null_count=null_count
    )


def _headers_array(arena: np.ndarray, header_positions: np.ndarray, header_counts: np.ndarray) -> pa.Array:
    """``list<struct<key, value>>`` per record; null for records without headers (as Spark)."""
    n = header_counts.shape[0]
    with_headers = header_counts > 0
    if not with_headers.any():
        return pa.nulls(n, HEADERS_TYPE)
    key_starts, key_lens, value_starts, value_lens = K.parse_headers(arena, header_positions, header_counts)
    keys = _binary_array(arena, key_starts, key_lens, pa.string())
    try:
        keys.validate(full=True)
    except pa.ArrowInvalid:
        # Java decodes header keys with replacement of malformed UTF-8; do the same (rare path).
        raw = _binary_array(arena, key_starts, key_lens, pa.binary()).to_pylist()
        keys = pa.array([key.decode("utf-8", "replace") for key in raw], pa.string())
    values = _binary_array(arena, value_starts, value_lens, pa.binary())
    struct = pa.StructArray.from_arrays([keys, values], fields=list(HEADER_TYPE))
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(header_counts, out=offsets[1:])
    null_count = n - int(np.count_nonzero(with_headers))
    validity = pa.py_buffer(np.packbits(with_headers, bitorder="little")) if null_count else None
    return pa.Array.from_buffers(
        HEADERS_TYPE, n, [validity, pa.py_buffer(offsets)], null_count=null_count, children=[struct]
    )
