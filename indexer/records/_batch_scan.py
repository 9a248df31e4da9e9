"""The numba kernel behind ``FileRecords.scan``: walk the entry headers of a ``.log`` buffer.

The kernel follows ``FileLogInputStream.nextBatch`` (spec 3.7) over ``buf[start:end]``: stop when
fewer than 18 bytes remain; read offset (int64 @0), size (int32 @8) and magic (int8 @16); a size
below 14 is corrupt; an entry that does not fit before ``end`` ends the walk silently. For each
entry it records what recovery needs without touching the records: position, size, base and last
offset, max timestamp, magic, attributes and the stored CRC. The header fields come from the v2
header (spec 3.2) or the legacy message header (spec 3.8: crc @12, magic @16, attributes @17,
v1 timestamp @18). It checks nothing the CRC covers; the caller verifies CRCs batch by batch.

It returns the per-entry columns, where it stopped, why (one of the ``STOP_*`` codes) and the
offending value for the error codes.

``hop_v2_headers`` walks v2 batches straight from the file, reading each 61-byte header with
``pread`` (libc's, called from the compiled loop): without the CRC pass nothing past a v2 header is
needed, so large batches are walked without reading their records.

CRC-32C of v2 batches: ``first_bad_v2_crc`` checks every batch in one compiled loop by calling the
hardware (SSE4.2, three interleaved streams) routine of the ``crc32c`` package directly, so small
batches cost no Python call each. That routine is the package's exported C symbol
``_crc32c_hw_adler``; when it is missing or the CPU lacks SSE4.2, ``HARDWARE_CRC32C`` is False and
the caller loops in Python over ``crc32c.crc32c`` instead (same results, slower on small batches).
"""

from __future__ import annotations

import ctypes
import logging

import crc32c
import llvmlite.binding as llvm
import numpy as np
from numba import njit, types

logger = logging.getLogger(__name__)

STOP_END = 0  # fewer than 18 bytes left (spec 3.7 step 1)
STOP_PARTIAL = 1  # a trailing entry that does not fit (spec 3.7 step 4): not an error
STOP_SIZE_TOO_SMALL = 2  # size field < 14; detail = size
STOP_V2_TOO_SMALL = 3  # magic 2 entry smaller than the 61-byte header; detail = entry size
STOP_V1_TOO_SMALL = 4  # magic 1 entry smaller than the 22-byte v1 message overhead; detail = size field
STOP_BAD_MAGIC = 5  # magic outside 0..2; detail = magic

_LOG_OVERHEAD = 12
_HEADER_SIZE_UP_TO_MAGIC = 17
_MIN_RECORD_SIZE = 14
_V1_RECORD_OVERHEAD = 22
_V2_BATCH_OVERHEAD = 61


@njit(cache=True, inline="always")
def _be_i64(buf: np.ndarray, p: np.int64) -> np.int64:
    v = np.int64(0)
    for i in range(8):
        v = (v << np.int64(8)) | np.int64(buf[p + i])  # wraps to the signed value, as Java's getLong
    return v


@njit(cache=True, inline="always")
def _be_u32(buf: np.ndarray, p: np.int64) -> np.int64:
    # every operand int64: numba promotes mixed signed/unsigned 64-bit arithmetic to float64
    return (
        (np.int64(buf[p]) << np.int64(24))
        | (np.int64(buf[p + 1]) << np.int64(16))
        | (np.int64(buf[p + 2]) << np.int64(8))
        | np.int64(buf[p + 3])
    )


@njit(cache=True, inline="always")
def _be_i32(buf: np.ndarray, p: np.int64) -> np.int64:
    v = _be_u32(buf, p)
    return v - np.int64(1 << 32) if v >= np.int64(1 << 31) else v


@njit(cache=True)
def _walk(buf: np.ndarray, start: int, end: int) -> tuple[int, np.int64, int, np.int64 | int]:
    """First pass: ``(count, stop position, status, detail)`` of the entries in ``buf[start:end]``."""
    n = 0
    p = np.int64(start)
    while p < end - _HEADER_SIZE_UP_TO_MAGIC:
        size = _be_i32(buf, p + 8)
        magic = np.int64(buf[p + 16])
        if magic >= 128:
            magic -= 256
        if size < _MIN_RECORD_SIZE:
            return n, p, STOP_SIZE_TOO_SMALL, size
        if p > end - _LOG_OVERHEAD - size:
            return n, p, STOP_PARTIAL, 0
        total = size + _LOG_OVERHEAD
        if magic == 2:
            if total < _V2_BATCH_OVERHEAD:
                return n, p, STOP_V2_TOO_SMALL, total
        elif magic == 1:
            if size < _V1_RECORD_OVERHEAD:
                return n, p, STOP_V1_TOO_SMALL, size
        elif magic != 0:
            return n, p, STOP_BAD_MAGIC, magic
        n += 1
        p += total
    return n, p, STOP_END, 0


@njit(cache=True)
def scan_entries(buf: np.ndarray, start: int, end: int) -> tuple[np.ndarray, np.int64, int, np.int64 | int]:
    """Walk ``buf[start:end]``; see the module docstring.

    Returns ``(columns, stop position, status, detail)`` where ``columns`` is an int64 array of
    shape (8, count): positions, sizes, base offsets, last offsets, max timestamps, magics,
    attributes, stored CRCs. Two passes, so the output is allocated once at its exact size.
    """
    n, stop, status, detail = _walk(buf, start, end)
    columns = np.empty((8, n), dtype=np.int64)
    p = np.int64(start)
    for i in range(n):
        offset = _be_i64(buf, p)
        total = _be_i32(buf, p + 8) + _LOG_OVERHEAD
        magic = np.int64(buf[p + 16])
        columns[0, i] = p
        columns[1, i] = total
        if magic == 2:
            columns[2, i] = offset
            columns[3, i] = offset + _be_i32(buf, p + 23)
            columns[4, i] = _be_i64(buf, p + 35)
            columns[6, i] = buf[p + 22]
            columns[7, i] = _be_u32(buf, p + 17)
        else:
            # The legacy offset field is the last offset; the caller fixes base offsets of
            # compressed wrappers (an uncompressed entry holds exactly one message).
            columns[2, i] = offset
            columns[3, i] = offset
            columns[4, i] = _be_i64(buf, p + 18) if magic == 1 else -1
            columns[6, i] = buf[p + 17]
            columns[7, i] = _be_u32(buf, p + 12)
        columns[5, i] = magic
        p += total
    return columns, stop, status, detail


_PREAD_SYMBOL = "seglog_pread"


def _register_pread() -> None:
    """Expose libc's ``pread`` to numba under :data:`_PREAD_SYMBOL`."""
    function = ctypes.CDLL(None, use_errno=True).pread
    llvm.add_symbol(_PREAD_SYMBOL, ctypes.cast(function, ctypes.c_void_p).value)


_register_pread()

# ssize_t pread(int fd, void *buf, size_t count, off_t offset); the pointer is passed as a uintp.
_pread = types.ExternalFunction(_PREAD_SYMBOL, types.intp(types.intc, types.uintp, types.uintp, types.int64))


@njit(cache=True, inline="always")
def _widened(columns: np.ndarray, width: int) -> np.ndarray:
    """A copy of the ``(8, n)`` ``columns`` with ``width`` columns. Element by element: a slice
    assignment from an array makes numba compile its shape-mismatch message (string formatting,
    ~3 s on 2 cores at the first start of every command that reads)."""
    grown = np.empty((columns.shape[0], width), np.int64)
    for row in range(columns.shape[0]):
        for col in range(columns.shape[1]):
            grown[row, col] = columns[row, col]
    return grown


@njit(cache=True, nogil=True)
def hop_v2_headers(fd: int, start: int, end: int, min_size: int) -> tuple[np.ndarray, np.int64]:
    """Walk the v2 batches of the file bytes ``[start, end)`` of descriptor ``fd`` header by header.

    Returns the columns of :func:`scan_entries` (shape (8, count)) and the position where the walk
    stopped: at ``end``, or at the first entry it does not take from its header alone, for the
    caller to read whole and walk with :func:`scan_entries` (which tells its errors): a short or
    failed read, another magic, a size below the v2 header or not fitting before ``end``, or a batch
    smaller than ``min_size`` bytes (cheaper to read whole than with a call each). Releases the GIL.
    """
    head = np.empty(_V2_BATCH_OVERHEAD, np.uint8)
    address = head.ctypes.data
    columns = np.empty((8, 64), np.int64)
    n = 0
    p = np.int64(start)
    while end - p > _HEADER_SIZE_UP_TO_MAGIC:
        if _pread(np.intc(fd), address, _V2_BATCH_OVERHEAD, p) != _V2_BATCH_OVERHEAD:  # type: ignore[call-overload]
            break
        total = _be_i32(head, np.int64(8)) + _LOG_OVERHEAD
        if head[16] != 2 or total < _V2_BATCH_OVERHEAD or total < min_size or p > end - total:
            break
        if n == columns.shape[1]:
            columns = _widened(columns, 2 * n)
        offset = _be_i64(head, np.int64(0))
        columns[0, n] = p
        columns[1, n] = total
        columns[2, n] = offset
        columns[3, n] = offset + _be_i32(head, np.int64(23))
        columns[4, n] = _be_i64(head, np.int64(35))
        columns[5, n] = 2
        columns[6, n] = head[22]
        columns[7, n] = _be_u32(head, np.int64(17))
        n += 1
        p += total
    return columns[:, :n].copy(), p


@njit(cache=True, nogil=True)
def pread_i64_fields(fd: int, positions: np.ndarray, field_offset: int) -> np.ndarray:
    """The big-endian int64 at ``position + field_offset`` of the file for each of ``positions``,
    one 8-byte ``pread`` each from the compiled loop (e.g. the producer ids of chosen v2 batches);
    shorter than ``positions`` when a read comes back short. Releases the GIL."""
    field = np.empty(8, np.uint8)
    address = field.ctypes.data
    out = np.empty(positions.size, np.int64)
    for i in range(positions.size):
        if _pread(np.intc(fd), address, 8, positions[i] + field_offset) != 8:  # type: ignore[call-overload]
            return out[:i].copy()
        out[i] = _be_i64(field, np.int64(0))
    return out


_HW_SYMBOL = "seglog_crc32c_hw_adler"
_CHECK_VALUE = 0xE3069283  # crc32c(b"123456789")


def _register_hardware_crc32c() -> bool:
    """Expose the crc32c package's hardware routine to numba; False if it is not usable here."""
    if not getattr(crc32c, "hardware_based", False):
        return False
    try:
        from crc32c import _crc32c as extension

        function = ctypes.CDLL(extension.__file__)._crc32c_hw_adler
    except (ImportError, OSError, AttributeError) as e:
        logger.info("hardware CRC-32C symbol unavailable (%s); scans check CRCs batch by batch in Python", e)
        return False
    function.restype = ctypes.c_uint32
    function.argtypes = [ctypes.c_uint32, ctypes.c_char_p, ctypes.c_size_t]
    if function(0xFFFFFFFF, b"123456789", 9) ^ 0xFFFFFFFF != _CHECK_VALUE:
        logger.warning("crc32c's _crc32c_hw_adler gave a wrong check value; not using it")
        return False
    llvm.add_symbol(_HW_SYMBOL, ctypes.cast(function, ctypes.c_void_p).value)
    return True


HARDWARE_CRC32C = _register_hardware_crc32c()

# uint32 f(uint32 crc, const uint8 *buf, size_t len); the pointer is passed as a uintp (same ABI).
_crc32c_hw = types.ExternalFunction(_HW_SYMBOL, types.uint32(types.uint32, types.uintp, types.uintp))


@njit(cache=True, nogil=True)
def first_bad_v2_crc(
    buf: np.ndarray,
    positions: np.ndarray,
    sizes: np.ndarray,
    magics: np.ndarray,
    crcs: np.ndarray,
    start: int,
    stop: int,
) -> int:
    """Index of the first magic-2 entry of ``start .. stop-1`` whose CRC-32C (bytes 21..end) differs
    from ``crcs``, or -1. Releases the GIL.

    Only call when ``HARDWARE_CRC32C`` is True.
    """
    base = buf.ctypes.data
    for i in range(start, stop):
        if magics[i] != 2:
            continue
        p = positions[i] + 21
        n = sizes[i] - 21
        computed = _crc32c_hw(np.uint32(0xFFFFFFFF), base + p, n) ^ np.uint32(0xFFFFFFFF)  # type: ignore[call-overload]
        if computed != crcs[i]:
            return i
    return -1
