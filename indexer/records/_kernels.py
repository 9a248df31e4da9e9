"""Numba kernels of the record format: varints, v2 record layout, batch walking, byte gathers.

These are the per-record loops of the engine; everything here is compiled (``@njit(cache=True)``)
and works on numpy arrays only: ``uint8`` byte buffers, ``int64`` index arrays and, for encoding,
Arrow's own ``int32`` offsets and null flags (views of the Arrow buffers, no conversion). Callers
(:mod:`indexer.records.encoder`, :mod:`indexer.records.decoder`) turn Arrow buffers into such
arrays and turn the results back into Arrow, and translate the status codes returned here into
``SeglogError`` exceptions (kernels cannot raise with context).

The public kernels release the GIL (``nogil=True``): they touch no Python object, so threads (Spark's
``foreachBatch`` writers, readers) encode and decode in parallel.

Varints follow Kafka's ``ByteUtils``: zig-zag, then 7 bits per byte, least significant group
first, high bit = "more". A varint (int32) may take at most 5 bytes and a varlong (int64) at most
10; a longer one is invalid. As in Java, bits beyond 32 (resp. 64) of the last byte are dropped.

v2 record layout (Kafka ``DefaultRecord``), inside a batch after its 61-byte header::

    length          varint   bytes of the body that follows
    attributes      int8     0
    timestampDelta  varlong  timestamp - batch baseTimestamp
    offsetDelta     varint   offset - batch baseOffset
    keyLength       varint   -1 = null key
    key             bytes
    valueLength     varint   -1 = null value
    value           bytes
    headerCount     varint   >= 0
    headers         headerKeyLength varint (>= 0), key (UTF-8), headerValueLength varint (-1 = null), value
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.core.base import BaseContext
from numba.core.typing.context import Context
from numba.core.typing.templates import Signature
from numba.cpython.unsafe.numbers import leading_zeros
from numba.extending import intrinsic

from indexer._bytes import get_be, put_be
from indexer.limits import INT32_MAX
from indexer.records._batch_scan import _crc32c_hw

# Columns of the entry table returned by scan_batches (one row per log entry, any magic).
COL_POSITION = 0
COL_SIZE = 1  # whole entry, LOG_OVERHEAD included
COL_MAGIC = 2
COL_BASE_OFFSET = 3  # the int64 at byte 0: base offset (v2) or the entry's (last) offset (v0/v1)
COL_PARTITION_LEADER_EPOCH = 4
COL_CRC = 5
COL_ATTRIBUTES = 6
COL_LAST_OFFSET_DELTA = 7
COL_BASE_TIMESTAMP = 8
COL_MAX_TIMESTAMP = 9
COL_PRODUCER_ID = 10
COL_PRODUCER_EPOCH = 11
COL_BASE_SEQUENCE = 12
COL_RECORDS_COUNT = 13
ENTRY_COLUMNS = 14

# scan_batches stop reasons.
SCAN_END = 0  # the walk ended exactly at `end`
SCAN_PARTIAL = 1  # fewer bytes than the next entry needs remain (Kafka stops silently)
SCAN_TOO_SMALL = 2  # an entry's size field is below LegacyRecord.RECORD_OVERHEAD_V0 (14)

# Rows of the per-record table filled by parse_records (each *_LEN row right after its *_START row).
REC_OFFSET = 0
REC_TIMESTAMP = 1
REC_KEY_START = 2
REC_KEY_LEN = 3
REC_VALUE_START = 4
REC_VALUE_LEN = 5
REC_HEADER_POSITION = 6
REC_HEADER_COUNT = 7
REC_FIELDS = 8
NO_LOG_APPEND_TIME = -(2**63)  # parse_records: the batch is CreateTime

# parse_records status codes (0 = fine); decoder.py holds the messages.
ERR_VARINT_TOO_LONG = 1
ERR_VARLONG_TOO_LONG = 2
ERR_VARINT_TRUNCATED = 3
ERR_RECORD_LENGTH = 4
ERR_RECORD_SIZE_MISMATCH = 5
ERR_KEY_LENGTH = 6
ERR_VALUE_LENGTH = 7
ERR_HEADER_COUNT = 8
ERR_HEADER_KEY_NEGATIVE = 9
ERR_HEADER_KEY_LENGTH = 10
ERR_HEADER_VALUE_LENGTH = 11
ERR_TRAILING_BYTES = 12

_HEADER_SIZE = 61
_PLAN_BLOCK = 2048  # plan_batches: records whose batch-independent sizes are computed together
_LOG_OVERHEAD = 12
_MIN_ENTRY_SIZE_FIELD = 14
_U7F = np.uint64(0x7F)
_U80 = np.uint64(0x80)
_U7 = np.uint64(7)
_U1 = np.uint64(1)
_U32MASK = np.uint64(0xFFFFFFFF)


# --- varints ------------------------------------------------------------------------------------


@njit(cache=True, inline="always")
def _zigzag(v: int) -> np.uint64:
    """Zig-zag of a signed 64-bit value as uint64, without a branch: ``(v << 1) ^ (v >> 63)``."""
    w = np.int64(v)
    return np.uint64(w << np.int64(1)) ^ np.uint64(w >> np.int64(63))


@njit(cache=True, inline="always")
def _uvarint_size(u: np.uint64) -> int:
    """Bytes of the varint of ``u``: ceil(bit length / 7), at least 1, without a loop or branch."""
    bits = 64 - int(leading_zeros(u | _U1))  # type: ignore[call-arg]  # a numba intrinsic
    return (bits * 9 + 64) >> 6


@njit(cache=True, inline="always")
def _write_uvarint(out: np.ndarray, pos: int, u: np.uint64) -> int:
    while u >= _U80:
        out[pos] = np.uint8((u & _U7F) | _U80)
        u >>= _U7
        pos += 1
    out[pos] = np.uint8(u)
    return pos + 1


@njit(cache=True, inline="always")
def _read_varint(buf: np.ndarray, pos: int, end: int, max_bytes: int) -> tuple[int, int, int]:
    """(status, value, next position) of the zig-zag varint at ``pos``; ``max_bytes`` 5 or 10."""
    raw = np.uint64(0)
    shift = np.uint64(0)
    for i in range(max_bytes):
        if pos + i >= end:
            return ERR_VARINT_TRUNCATED, 0, pos
        b = np.uint64(buf[pos + i])
        raw |= (b & _U7F) << shift
        if b < _U80:
            if max_bytes == 5:
                raw &= _U32MASK
            half = np.int64(raw >> _U1)
            return 0, int(~half if raw & _U1 else half), pos + i + 1
        shift += _U7
    return (ERR_VARINT_TOO_LONG if max_bytes == 5 else ERR_VARLONG_TOO_LONG), 0, pos


# --- encoding -----------------------------------------------------------------------------------


# Null modes of a column passed to the encoding kernels with its per-element null flags. Testing a
# loop-invariant mode first, rather than the flag of every element, keeps the per-record loops
# fast on the common columns without nulls or with nothing but nulls (null keys).
NULLS_NONE = 0
NULLS_ALL = 1
NULLS_SOME = 2

# The per-record loop of write_batches repeats the null tests and the "copy if the length is > 0"
# in its own body on purpose: the same code in an inline="always" helper (numba's IR inliner) gives
# control flow LLVM optimises ~2.5x worse (measured on 1M records: 41 vs 16 ms), and a plain call to
# a helper returning the length or -1 is worse still (~6x: 78 vs 12 ms). plan_batches instead
# sizes blocks of records column by column (_add_lengths: one simple loop per column and null mode,
# which LLVM vectorises) before its greedy loop: 9 -> 5.7 ms on 1M records. The small helpers
# (_zigzag, _uvarint_size, _write_uvarint, _copy) are fine; the rare header loops are separate,
# non-inlined functions.


@njit(cache=True)
def _headers_size(
    key_offsets: np.ndarray, value_offsets: np.ndarray, value_nulls: np.ndarray, value_mode: int, first: int, count: int
) -> int:
    """Bytes of headers ``first .. first+count-1`` in a record (length varints and bytes)."""
    size = 0
    for h in range(first, first + count):
        hk = int(key_offsets[h + 1]) - int(key_offsets[h])
        hv = int(value_offsets[h + 1]) - int(value_offsets[h])
        if value_mode == NULLS_ALL:
            hv = -1
        elif value_mode == NULLS_SOME:
            if value_nulls[h]:
                hv = -1
        size += _uvarint_size(_zigzag(hk)) + hk + _uvarint_size(_zigzag(hv)) + max(hv, 0)
    return size


@njit(cache=True, inline="always")
def _add_lengths(tails: np.ndarray, lo: int, m: int, offsets: np.ndarray, nulls: np.ndarray, mode: int) -> None:
    """Add to ``tails[:m]`` the bytes of elements ``lo .. lo+m-1`` of a binary column in a record:
    the length varint and the bytes (a null: varint -1, one byte)."""
    if mode == NULLS_ALL:
        for j in range(m):  # not tails[:m] += 1: see _grown
            tails[j] += 1
        return
    for j in range(m):
        length = int(offsets[lo + j + 1]) - int(offsets[lo + j])
        tails[j] += _uvarint_size(np.uint64(2 * length)) + length
    if mode == NULLS_SOME:
        for j in range(m):
            if nulls[lo + j]:
                length = int(offsets[lo + j + 1]) - int(offsets[lo + j])
                tails[j] += 1 - _uvarint_size(np.uint64(2 * length)) - length


@njit(cache=True, inline="always")
def _grown(array: np.ndarray, capacity: int) -> np.ndarray:
    """A copy of ``array`` with ``capacity`` slots. Element by element: a slice assignment from an
    array (``a[:n] = b``, and ``a[:n] += 1``, which assigns the sum back) makes numba compile its
    shape-mismatch message (string formatting, ~2 s on 2 cores at the first append)."""
    grown = np.empty(capacity, array.dtype)
    for i in range(array.shape[0]):
        grown[i] = array[i]
    return grown


@njit(cache=True, nogil=True)
def plan_batches(
    timestamps: np.ndarray,
    key_offsets: np.ndarray,
    key_nulls: np.ndarray,
    key_mode: int,
    value_offsets: np.ndarray,
    value_nulls: np.ndarray,
    value_mode: int,
    header_offsets: np.ndarray,
    header_nulls: np.ndarray,
    header_mode: int,
    header_key_offsets: np.ndarray,
    header_value_offsets: np.ndarray,
    header_value_nulls: np.ndarray,
    header_value_mode: int,
    max_batch_bytes: int,
    target_batch_bytes: int,
    first_row: int,
    stop_row: int,
) -> tuple[int, int, int, np.ndarray, np.ndarray, np.ndarray]:
    """Greedy split of records ``first_row .. stop_row-1`` into as few batches of at most
    ``target_batch_bytes`` as possible; a record that does not fit that alone gets a batch of its
    own of at most ``max_batch_bytes`` (Kafka's producer: a batch takes its first record whatever
    ``batch.size`` says).

    Columns come as Arrow lays them out: int32 offsets (already shifted to the array's slice),
    per-element null flags and a ``NULLS_*`` mode; the header lists index the header key/value
    columns. A record's size depends on its deltas to the first record of its batch, so sizes and
    batch boundaries are computed in one pass. Returns ``(n_batches, error_index, error_size,
    batch_starts, batch_sizes, max_timestamps)``; ``error_index >= 0`` names a record whose batch
    alone (``error_size`` bytes) exceeds the limit. ``batch_starts`` (rows of the whole columns) has
    ``n_batches + 1`` valid entries, the two others ``n_batches`` (the arrays may be longer).
    """
    # Grown by doubling: arrays of a slot per record would be mapped and unmapped at every call (on
    # two threads, each unmap interrupts the other core to flush its TLB).
    capacity = 64
    batch_starts = np.empty(capacity, np.int64)
    batch_sizes = np.empty(capacity, np.int64)
    max_timestamps = np.empty(capacity, np.int64)
    tails = np.empty(_PLAN_BLOCK, np.int64)
    n_batches = 0
    batch_size = 0
    start = first_row
    base_ts = np.int64(0)
    max_ts = np.int64(0)
    for lo in range(first_row, stop_row, _PLAN_BLOCK):
        m = min(_PLAN_BLOCK, stop_row - lo)
        # The bytes of each record that do not depend on its batch: key, value and headers with their
        # length varints, column by column in loops LLVM vectorises (a null length is varint -1).
        tails[:m] = 0
        _add_lengths(tails, lo, m, key_offsets, key_nulls, key_mode)
        _add_lengths(tails, lo, m, value_offsets, value_nulls, value_mode)
        if header_mode == NULLS_ALL:
            for j in range(m):  # headerCount 0
                tails[j] += 1
        else:
            for j in range(m):
                hfirst = int(header_offsets[lo + j])
                hcount = int(header_offsets[lo + j + 1]) - hfirst
                if header_mode == NULLS_SOME and header_nulls[lo + j]:
                    hcount = 0
                tails[j] += _uvarint_size(np.uint64(2 * hcount))
                if hcount:
                    tails[j] += _headers_size(
                        header_key_offsets, header_value_offsets, header_value_nulls, header_value_mode, hfirst, hcount
                    )
        for j in range(m):
            i = lo + j
            tail = tails[j]
            ts = timestamps[i]
            if batch_size > 0:
                # zig-zag of a value >= 0 is twice the value
                body = 1 + _uvarint_size(_zigzag(ts - base_ts)) + _uvarint_size(np.uint64(2 * (i - start))) + tail
                record = _uvarint_size(np.uint64(2 * body)) + body
                if batch_size + record <= target_batch_bytes:
                    batch_size += record
                    max_ts = max(max_ts, ts)
                    continue
                batch_sizes[n_batches] = batch_size
                max_timestamps[n_batches] = max_ts
                n_batches += 1
            start = i
            base_ts = ts
            max_ts = ts
            if n_batches + 1 >= capacity:  # room for this batch and the end row
                capacity *= 2
                batch_starts = _grown(batch_starts, capacity)
                batch_sizes = _grown(batch_sizes, capacity)
                max_timestamps = _grown(max_timestamps, capacity)
            batch_starts[n_batches] = i
            body = 3 + tail  # attributes, timestampDelta 0, offsetDelta 0: one byte each
            record = _uvarint_size(np.uint64(2 * body)) + body
            if _HEADER_SIZE + record > max_batch_bytes:
                return n_batches, i, _HEADER_SIZE + record, batch_starts, batch_sizes, max_timestamps
            batch_size = _HEADER_SIZE + record
    if batch_size > 0:
        batch_sizes[n_batches] = batch_size
        max_timestamps[n_batches] = max_ts
        n_batches += 1
    batch_starts[n_batches] = stop_row
    return n_batches, -1, 0, batch_starts, batch_sizes, max_timestamps


@intrinsic
def _memcpy(
    typingctx: Context,
    dst: types.Array,
    dst_pos: types.Integer,
    src: types.Array,
    src_pos: types.Integer,
    length: types.Integer,
) -> tuple[Signature, Callable[[BaseContext, ir.IRBuilder, Signature, list[ir.Value]], ir.Value]]:
    """``dst[dst_pos:dst_pos+length] = src[src_pos:src_pos+length]`` as one ``llvm.memcpy``.

    A byte loop over variable lengths is not vectorised by LLVM and runs ~10x slower; numba slice
    assignment is ~4x slower. No bounds checks: callers pass ranges they validated.
    """
    signature = types.void(dst, types.int64, src, types.int64, types.int64)

    def codegen(context: BaseContext, builder: ir.IRBuilder, sig: Signature, args: list[ir.Value]) -> ir.Value:
        # numba's lowering API (make_array, raw_memcpy, get_dummy_value) is unannotated
        dst_array = context.make_array(sig.args[0])(context, builder, args[0])  # type: ignore[no-untyped-call]
        src_array = context.make_array(sig.args[2])(context, builder, args[2])  # type: ignore[no-untyped-call]
        dst_ptr = builder.gep(dst_array.data, [args[1]])
        src_ptr = builder.gep(src_array.data, [args[3]])
        cgutils.raw_memcpy(builder, dst_ptr, src_ptr, args[4], 1)  # type: ignore[no-untyped-call]
        return context.get_dummy_value()  # type: ignore[no-untyped-call]

    return signature, codegen


@njit(cache=True, inline="always")
def _copy(out: np.ndarray, pos: int, data: np.ndarray, start: int, length: int) -> int:
    """Copy ``length`` bytes of ``data`` from ``start`` to ``out`` at ``pos``; the next position."""
    # mypy sees the typing-time signature (numba adds typingctx, and types stand for values)
    _memcpy(out, pos, data, start, length)  # type: ignore[call-arg, arg-type]
    return pos + length


@njit(cache=True)
def _write_headers(
    out: np.ndarray,
    pos: int,
    key_offsets: np.ndarray,
    key_data: np.ndarray,
    value_offsets: np.ndarray,
    value_nulls: np.ndarray,
    value_mode: int,
    value_data: np.ndarray,
    first: int,
    count: int,
) -> int:
    """Write headers ``first .. first+count-1`` of a record at ``pos``; the next position."""
    for h in range(first, first + count):
        hk = int(key_offsets[h + 1]) - int(key_offsets[h])
        pos = _write_uvarint(out, pos, _zigzag(hk))
        pos = _copy(out, pos, key_data, int(key_offsets[h]), hk)
        hv = int(value_offsets[h + 1]) - int(value_offsets[h])
        if value_mode == NULLS_ALL:
            hv = -1
        elif value_mode == NULLS_SOME:
            if value_nulls[h]:
                hv = -1
        pos = _write_uvarint(out, pos, _zigzag(hv))
        if hv > 0:
            pos = _copy(out, pos, value_data, int(value_offsets[h]), hv)
    return pos


@njit(cache=True, nogil=True)
def write_batches(
    out: np.ndarray,
    batch_first: int,
    batch_stop: int,
    batch_starts: np.ndarray,
    batch_sizes: np.ndarray,
    max_timestamps: np.ndarray,
    timestamps: np.ndarray,
    key_offsets: np.ndarray,
    key_nulls: np.ndarray,
    key_mode: int,
    key_data: np.ndarray,
    value_offsets: np.ndarray,
    value_nulls: np.ndarray,
    value_mode: int,
    value_data: np.ndarray,
    header_offsets: np.ndarray,
    header_nulls: np.ndarray,
    header_mode: int,
    header_key_offsets: np.ndarray,
    header_key_data: np.ndarray,
    header_value_offsets: np.ndarray,
    header_value_nulls: np.ndarray,
    header_value_mode: int,
    header_value_data: np.ndarray,
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
) -> None:
    """Write batches ``batch_first .. batch_stop-1`` planned by :func:`plan_batches` back to back
    from ``out[0]``, CRC fields left zero (see :func:`fill_crcs`). Columns as for ``plan_batches``
    plus their data bytes. One pass: each record's size is recomputed from its lengths rather than
    stored by the plan."""
    p = 0
    for b in range(batch_first, batch_stop):
        first = batch_starts[b]
        last = batch_starts[b + 1]
        put_be(out, p, base_offset + first, 8)
        put_be(out, p + 8, batch_sizes[b] - _LOG_OVERHEAD, 4)
        put_be(out, p + 12, partition_leader_epoch, 4)
        out[p + 16] = 2
        put_be(out, p + 17, 0, 4)
        put_be(out, p + 21, attributes, 2)
        put_be(out, p + 23, last - first - 1, 4)
        put_be(out, p + 27, timestamps[first], 8)
        put_be(out, p + 35, max_timestamps[b], 8)
        put_be(out, p + 43, producer_id, 8)
        put_be(out, p + 51, producer_epoch, 2)
        sequence = base_sequence
        if base_sequence >= 0:  # DefaultRecordBatch.incrementSequence: wrap at INT_MAX
            sequence = base_sequence + first
            if sequence > INT32_MAX:
                sequence -= INT32_MAX + 1
        put_be(out, p + 53, sequence, 4)
        put_be(out, p + 57, last - first, 4)
        pos = p + _HEADER_SIZE
        base_ts = timestamps[first]
        for i in range(first, last):
            klen = int(key_offsets[i + 1]) - int(key_offsets[i])
            if key_mode == NULLS_ALL:
                klen = -1
            elif key_mode == NULLS_SOME:
                if key_nulls[i]:
                    klen = -1
            vlen = int(value_offsets[i + 1]) - int(value_offsets[i])
            if value_mode == NULLS_ALL:
                vlen = -1
            elif value_mode == NULLS_SOME:
                if value_nulls[i]:
                    vlen = -1
            hfirst = int(header_offsets[i])
            hcount = int(header_offsets[i + 1]) - hfirst
            if header_mode == NULLS_ALL:
                hcount = 0
            elif header_mode == NULLS_SOME:
                if header_nulls[i]:
                    hcount = 0
            ts_delta = _zigzag(timestamps[i] - base_ts)
            offset_delta = np.uint64(2 * (i - first))  # zig-zag of a value >= 0
            body = 1 + _uvarint_size(ts_delta) + _uvarint_size(offset_delta)
            body += _uvarint_size(_zigzag(klen)) + max(klen, 0) + _uvarint_size(_zigzag(vlen)) + max(vlen, 0)
            body += _uvarint_size(np.uint64(2 * hcount))
            if hcount:
                body += _headers_size(
                    header_key_offsets, header_value_offsets, header_value_nulls, header_value_mode, hfirst, hcount
                )
            pos = _write_uvarint(out, pos, np.uint64(2 * body))
            out[pos] = 0
            pos = _write_uvarint(out, pos + 1, ts_delta)
            pos = _write_uvarint(out, pos, offset_delta)
            pos = _write_uvarint(out, pos, _zigzag(klen))
            if klen > 0:
                pos = _copy(out, pos, key_data, int(key_offsets[i]), klen)
            pos = _write_uvarint(out, pos, _zigzag(vlen))
            if vlen > 0:
                pos = _copy(out, pos, value_data, int(value_offsets[i]), vlen)
            pos = _write_uvarint(out, pos, np.uint64(2 * hcount))
            if hcount:
                pos = _write_headers(
                    out, pos, header_key_offsets, header_key_data, header_value_offsets, header_value_nulls,
                    header_value_mode, header_value_data, hfirst, hcount,
                )  # fmt: skip
        p += batch_sizes[b]


@njit(cache=True, nogil=True)
def fill_crcs(out: np.ndarray, positions: np.ndarray, sizes: np.ndarray) -> None:
    """Store each batch's CRC-32C (bytes 21 .. end) at byte 17, computed by the ``crc32c``
    package's hardware routine (see :mod:`indexer.records._batch_scan`): one compiled loop, no
    Python call per batch. Only call when ``HARDWARE_CRC32C`` is True."""
    base = out.ctypes.data
    for b in range(positions.shape[0]):
        p = positions[b]
        crc = _crc32c_hw(np.uint32(0xFFFFFFFF), base + np.uint64(p + 21), np.uint64(sizes[b] - 21))  # type: ignore[call-overload]
        put_be(out, p + 17, int(crc ^ np.uint32(0xFFFFFFFF)), 4)


# --- decoding -----------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def scan_batches(buf: np.ndarray, start: int, end: int) -> tuple[np.ndarray, int, int]:
    """Walk the log entries in ``buf[start:end]`` (Kafka ``FileLogInputStream.nextBatch``).

    Returns ``(entries, stop_reason, stop_position)``: one row per complete entry (``COL_*``;
    the v2 header columns are filled only for magic >= 2 entries of at least 61 bytes), why the
    walk stopped (``SCAN_*``) and where.
    """
    count = 0
    pos = start
    reason = SCAN_END
    while True:
        if pos >= end:
            break
        if pos + 17 > end:
            reason = SCAN_PARTIAL
            break
        size = get_be(buf, pos + 8, 4)
        if size < _MIN_ENTRY_SIZE_FIELD:
            reason = SCAN_TOO_SMALL
            break
        if pos + _LOG_OVERHEAD + size > end:
            reason = SCAN_PARTIAL
            break
        count += 1
        pos += _LOG_OVERHEAD + size
    entries = np.zeros((count, ENTRY_COLUMNS), np.int64)
    pos = start
    for k in range(count):
        size = _LOG_OVERHEAD + get_be(buf, pos + 8, 4)
        magic = get_be(buf, pos + 16, 1)
        row = entries[k]
        row[COL_POSITION] = pos
        row[COL_SIZE] = size
        row[COL_MAGIC] = magic
        row[COL_BASE_OFFSET] = get_be(buf, pos, 8)
        if magic >= 2 and size >= _HEADER_SIZE:
            row[COL_PARTITION_LEADER_EPOCH] = get_be(buf, pos + 12, 4)
            row[COL_CRC] = get_be(buf, pos + 17, 4) & 0xFFFFFFFF
            row[COL_ATTRIBUTES] = buf[pos + 22]  # Kafka narrows the int16 to its low byte
            row[COL_LAST_OFFSET_DELTA] = get_be(buf, pos + 23, 4)
            row[COL_BASE_TIMESTAMP] = get_be(buf, pos + 27, 8)
            row[COL_MAX_TIMESTAMP] = get_be(buf, pos + 35, 8)
            row[COL_PRODUCER_ID] = get_be(buf, pos + 43, 8)
            row[COL_PRODUCER_EPOCH] = get_be(buf, pos + 51, 2)
            row[COL_BASE_SEQUENCE] = get_be(buf, pos + 53, 4)
            row[COL_RECORDS_COUNT] = get_be(buf, pos + 57, 4)
        pos += size
    return entries, reason, pos


# What parse_records passes to _read_bytes_field, as int64 values: numba compiles a called kernel once
# per literal argument value (and once more per literal it meets while inferring types).
_KEY_START: int = np.int64(REC_KEY_START)  # type: ignore[assignment]
_KEY_TOO_LONG: int = np.int64(ERR_KEY_LENGTH)  # type: ignore[assignment]
_VALUE_START: int = np.int64(REC_VALUE_START)  # type: ignore[assignment]
_VALUE_TOO_LONG: int = np.int64(ERR_VALUE_LENGTH)  # type: ignore[assignment]


@njit(cache=True)
def _read_bytes_field(
    arena: np.ndarray, p: int, end: int, records: np.ndarray, start_row: int, r: int, too_long: int
) -> tuple[int, int, int, int]:
    """Read the key or the value of record ``r`` at ``p`` (a length varint, -1 = null, then the
    bytes) into rows ``start_row`` (start) and ``start_row + 1`` (length) of ``records``.

    Returns ``(status, detail_a, detail_b, position)``: status 0 and the position after the field,
    or a varint error, or ``too_long`` with the length and the bytes left. A plain call, not
    ``inline="always"`` (see the note above ``_headers_size``): measured as fast as the code written
    out twice in :func:`parse_records`.
    """
    status, n, p = _read_varint(arena, p, end, 5)
    if status:
        return status, 0, 0, p
    if n > end - p:
        return too_long, n, end - p, p
    records[start_row, r] = p
    records[start_row + 1, r] = max(n, -1)
    return 0, 0, 0, p + max(n, 0)


@njit(cache=True, nogil=True)
def parse_records(
    arena: np.ndarray,
    section_starts: np.ndarray,
    section_ends: np.ndarray,
    section_counts: np.ndarray,
    base_offsets: np.ndarray,
    base_timestamps: np.ndarray,
    log_append_times: np.ndarray,
    records: np.ndarray,
) -> tuple[int, int, int, int, int]:
    """Parse the records of every section (the records of one v2 batch) of ``arena`` into ``records``.

    ``records`` is an int64 array ``(REC_FIELDS, sum(section_counts))`` filled row by row (``REC_*``:
    offset, effective timestamp, key start/length, value start/length, first header position, header
    count; lengths are -1 for nulls). ``log_append_times[s]`` is the batch maxTimestamp for LogAppendTime
    batches (every record gets it) and ``NO_LOG_APPEND_TIME`` otherwise. Returns ``(status, section,
    position, detail_a, detail_b)``: ``status`` 0, or an ``ERR_*`` code with the failing section, the
    arena position where parsing failed and the values involved.
    """
    r: int = np.int64(0)  # type: ignore[assignment]  # not a literal 0: see _read_bytes_field
    for s in range(section_counts.shape[0]):
        pos = section_starts[s]
        end = section_ends[s]
        for _ in range(section_counts[s]):
            status, length, body = _read_varint(arena, pos, end, 5)
            if status:
                return status, s, pos, 0, 0
            if length < 0 or length > end - body:
                return ERR_RECORD_LENGTH, s, pos, length, end - body
            record_end = body + length
            p = body + 1  # attributes: unused
            if p > record_end:
                return ERR_VARINT_TRUNCATED, s, body, 0, 0
            status, ts_delta, p = _read_varint(arena, p, record_end, 10)
            if status:
                return status, s, p, 0, 0
            status, offset_delta, p = _read_varint(arena, p, record_end, 5)
            if status:
                return status, s, p, 0, 0
            status, a, b, p = _read_bytes_field(arena, p, record_end, records, _KEY_START, r, _KEY_TOO_LONG)
            if status:
                return status, s, p, a, b
            status, a, b, p = _read_bytes_field(arena, p, record_end, records, _VALUE_START, r, _VALUE_TOO_LONG)
            if status:
                return status, s, p, a, b
            status, hcount, p = _read_varint(arena, p, record_end, 5)
            if status:
                return status, s, p, 0, 0
            if hcount < 0 or hcount > record_end - p:
                return ERR_HEADER_COUNT, s, p, hcount, record_end - p
            records[REC_HEADER_POSITION, r] = p
            records[REC_HEADER_COUNT, r] = hcount
            for _h in range(hcount):
                status, hk, p = _read_varint(arena, p, record_end, 5)
                if status:
                    return status, s, p, 0, 0
                if hk < 0:
                    return ERR_HEADER_KEY_NEGATIVE, s, p, hk, 0
                if hk > record_end - p:
                    return ERR_HEADER_KEY_LENGTH, s, p, hk, record_end - p
                p += hk
                status, hv, p = _read_varint(arena, p, record_end, 5)
                if status:
                    return status, s, p, 0, 0
                if hv > record_end - p:
                    return ERR_HEADER_VALUE_LENGTH, s, p, hv, record_end - p
                p += max(hv, 0)
            if p != record_end:
                return ERR_RECORD_SIZE_MISMATCH, s, body, length, p - body
            records[REC_OFFSET, r] = base_offsets[s] + offset_delta
            if log_append_times[s] != NO_LOG_APPEND_TIME:
                records[REC_TIMESTAMP, r] = log_append_times[s]
            else:
                records[REC_TIMESTAMP, r] = base_timestamps[s] + ts_delta
            r += 1
            pos = record_end
        if pos != end:
            return ERR_TRAILING_BYTES, s, pos, end - pos, 0
    return 0, -1, 0, 0, 0


@njit(cache=True, nogil=True)
def parse_headers(
    arena: np.ndarray, header_positions: np.ndarray, header_counts: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Key and value (start, length) of every header of records already validated by
    :func:`parse_records`, record after record; value length -1 = null."""
    total = 0
    for r in range(header_counts.shape[0]):
        total += header_counts[r]
    key_starts = np.empty(total, np.int64)
    key_lens = np.empty(total, np.int64)
    value_starts = np.empty(total, np.int64)
    value_lens = np.empty(total, np.int64)
    h = 0
    end = arena.shape[0]
    for r in range(header_counts.shape[0]):
        p = header_positions[r]
        for _ in range(header_counts[r]):
            _status, hk, p = _read_varint(arena, p, end, 5)
            key_starts[h] = p
            key_lens[h] = hk
            p += hk
            _status, hv, p = _read_varint(arena, p, end, 5)
            value_starts[h] = p
            value_lens[h] = max(hv, -1)
            p += max(hv, 0)
            h += 1
    return key_starts, key_lens, value_starts, value_lens


@njit(cache=True, nogil=True)
def gather(arena: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Arrow binary layout of the slices ``arena[start:start+len]``: int32 offsets and the bytes
    back to back (a length of -1, a null, contributes no bytes). The caller bounds the total below
    2**31."""
    n = starts.shape[0]
    offsets = np.empty(n + 1, np.int32)
    total = 0
    offsets[0] = 0
    for i in range(n):
        total += max(lens[i], 0)
        offsets[i + 1] = total
    data = np.empty(total, np.uint8)
    pos = 0
    for i in range(n):
        pos = _copy(data, pos, arena, starts[i], max(lens[i], 0))
    return offsets, data
