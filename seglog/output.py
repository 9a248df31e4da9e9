"""How seglog commands print: one renderer for text or ``--json``, and JSON lines of records.

Commands build plain data (dicts, lists) and hand it to :class:`Output`, which prints either a
JSON document or the command's text rendering (pyiceberg's ``cli/output.py`` pattern).

``seglog read`` prints records as JSON lines, one object per record::

    {"offset":0,"timestamp":1700000000000,"timestampType":0,"key":"k","value":"v","headers":[["h","x"]]}

``key``, ``value`` and header values are JSON strings (UTF-8 text, or base64 with
``encoding="base64"``) or ``null``; header keys are always text. The objects are rendered in one
compiled pass over the Arrow buffers (no Python loop per record): a first pass sizes the output,
a second fills it.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable, Iterable, Sequence
from types import FrameType
from typing import Any, TextIO

import numpy as np
import pyarrow as pa
from numba import njit

from indexer.errors import SchemaError

ENCODINGS = ("utf8", "base64")


class Output:
    """Prints command results to ``stream``: JSON when ``json_mode``, else the command's text."""

    def __init__(self, stream: TextIO | None = None, *, json_mode: bool = False) -> None:
        self.stream = stream if stream is not None else sys.stdout
        self.json_mode = json_mode

    def emit(self, data: Any, text: Callable[[Any], Iterable[str]]) -> None:
        """Print ``data`` as one JSON document, or the lines ``text(data)`` yields."""
        if self.json_mode:
            self.stream.write(json.dumps(data, indent=2) + "\n")
        else:
            for line in text(data):
                self.stream.write(line + "\n")
        self.stream.flush()

    def write_bytes(self, data: bytes) -> None:
        """Write already-rendered UTF-8 lines (JSON lines): to the stream's file descriptor when it has
        one (no decoding), else as text.

        Output ends with whole lines: a Ctrl-C (SIGINT) during the write lets the line being written
        finish, then raises ``KeyboardInterrupt`` (a second Ctrl-C raises at once). Call from the main
        thread (it holds SIGINT meanwhile).

        Raises:
            KeyboardInterrupt: SIGINT arrived during the write.
        """
        self.stream.flush()
        try:
            fd = self.stream.fileno()
        except (AttributeError, OSError, ValueError):  # a stream in memory (io.UnsupportedOperation is both)
            self.stream.write(data.decode("utf-8"))
            self.stream.flush()
            return
        interrupted = False

        def on_sigint(signum: int, frame: FrameType | None) -> None:
            nonlocal interrupted
            if interrupted:
                raise KeyboardInterrupt
            interrupted = True

        view, done, end, stopping = memoryview(data), 0, len(data), False
        previous = signal.signal(signal.SIGINT, on_sigint)
        try:
            while done < end:
                if interrupted and not stopping:  # finish the line being written, then stop
                    stopping = True
                    end = data.find(b"\n", done) + 1 if done and data[done - 1] != 0x0A else done
                    continue
                done += os.write(fd, view[done:end])
        finally:
            signal.signal(signal.SIGINT, previous)
        if interrupted:
            raise KeyboardInterrupt


def format_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *, indent: str = "") -> list[str]:
    """Columns separated by two spaces: left-aligned, or right-aligned when every cell is an
    integer (``-`` and empty cells, meaning "none", do not count)."""
    cells = [[str(h) for h in headers]] + [["" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    numeric = [
        len(cells) > 1 and all(r[i].lstrip("-").isdigit() for r in cells[1:] if r[i] not in ("", "-"))
        for i in range(len(headers))
    ]
    lines = []
    for r in cells:
        parts = [c.rjust(w) if num else c.ljust(w) for c, w, num in zip(r, widths, numeric, strict=True)]
        lines.append((indent + "  ".join(parts)).rstrip())
    return lines


def offset_range_text(r: dict[str, Any]) -> str:
    """``first..last`` of a ``{"first", "last"}`` offset range (``last`` inclusive; None: unknown), as
    every command prints one."""
    return f"{r['first']}..{r['last']}" if r["last"] is not None else f"{r['first']}.. (how many: unknown)"


# --- JSON lines of records ---------------------------------------------------------------------

_B64_ALPHABET = np.frombuffer(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", dtype=np.uint8)
_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
_INT64_MIN_TEXT = np.frombuffer(b"-9223372036854775808", dtype=np.uint8)
_NULL = np.frombuffer(b"null", dtype=np.uint8)
_L_OFFSET = np.frombuffer(b'{"offset":', dtype=np.uint8)
_L_TIMESTAMP = np.frombuffer(b',"timestamp":', dtype=np.uint8)
_L_TSTYPE = np.frombuffer(b',"timestampType":', dtype=np.uint8)
_L_KEY = np.frombuffer(b',"key":', dtype=np.uint8)
_L_VALUE = np.frombuffer(b',"value":', dtype=np.uint8)
_L_HEADERS = np.frombuffer(b',"headers":[', dtype=np.uint8)
_L_END = np.frombuffer(b"]}\n", dtype=np.uint8)


# The two smallest helpers are inlined: called with constants, a plain call would be compiled once
# per distinct constant (numba specialises on literal arguments), a dozen compilations at the first
# `seglog read`. _put_literal copies element by element: a slice assignment from an array makes numba
# compile its shape-mismatch message (string formatting, seconds on 2 cores).
@njit(cache=True, inline="always")
def _put_literal(out: np.ndarray, pos: int, lit: np.ndarray, write: bool) -> int:
    if write:
        for i in range(lit.size):
            out[pos + i] = lit[i]
    return pos + lit.size


@njit(cache=True, inline="always")
def _put_byte(out: np.ndarray, pos: int, b: int, write: bool) -> int:
    if write:
        out[pos] = b
    return pos + 1


@njit(cache=True)
def _put_int(out: np.ndarray, pos: int, value: int, write: bool) -> int:
    if value == -9223372036854775807 - 1:
        return _put_literal(out, pos, _INT64_MIN_TEXT, write)
    negative = value < 0
    mag = -value if negative else value
    digits = 1
    probe = mag // 10
    while probe > 0:
        digits += 1
        probe //= 10
    total = digits + (1 if negative else 0)
    if write:
        p = pos + total - 1
        for _ in range(digits):
            out[p] = 48 + mag % 10
            mag //= 10
            p -= 1
        if negative:
            out[pos] = 45
    return pos + total


@njit(cache=True)
def _put_text(out: np.ndarray, pos: int, data: np.ndarray, start: int, end: int, write: bool) -> int:
    """``data[start:end]`` (valid UTF-8) as a JSON string with RFC 8259 escapes."""
    pos = _put_byte(out, pos, 34, write)
    for j in range(start, end):
        b = data[j]
        if b == 34 or b == 92:
            pos = _put_byte(out, pos, 92, write)
            pos = _put_byte(out, pos, b, write)
        elif b < 32:
            pos = _put_byte(out, pos, 92, write)
            if b == 10:
                pos = _put_byte(out, pos, 110, write)
            elif b == 13:
                pos = _put_byte(out, pos, 114, write)
            elif b == 9:
                pos = _put_byte(out, pos, 116, write)
            elif b == 8:
                pos = _put_byte(out, pos, 98, write)
            elif b == 12:
                pos = _put_byte(out, pos, 102, write)
            else:
                pos = _put_byte(out, pos, 117, write)
                pos = _put_byte(out, pos, 48, write)
                pos = _put_byte(out, pos, 48, write)
                pos = _put_byte(out, pos, _HEX[b >> 4], write)
                pos = _put_byte(out, pos, _HEX[b & 15], write)
        else:
            pos = _put_byte(out, pos, b, write)
    return _put_byte(out, pos, 34, write)


@njit(cache=True)
def _put_base64(out: np.ndarray, pos: int, data: np.ndarray, start: int, end: int, write: bool) -> int:
    """``data[start:end]`` as a quoted standard base64 string with ``=`` padding."""
    n = end - start
    total = 2 + 4 * ((n + 2) // 3)
    if not write:
        return pos + total
    out[pos] = 34
    p = pos + 1
    j = start
    while j + 3 <= end:
        v = (np.int64(data[j]) << 16) | (np.int64(data[j + 1]) << 8) | np.int64(data[j + 2])
        out[p] = _B64_ALPHABET[(v >> 18) & 63]
        out[p + 1] = _B64_ALPHABET[(v >> 12) & 63]
        out[p + 2] = _B64_ALPHABET[(v >> 6) & 63]
        out[p + 3] = _B64_ALPHABET[v & 63]
        p += 4
        j += 3
    rest = end - j
    if rest == 1:
        v = np.int64(data[j]) << 16
        out[p] = _B64_ALPHABET[(v >> 18) & 63]
        out[p + 1] = _B64_ALPHABET[(v >> 12) & 63]
        out[p + 2] = 61
        out[p + 3] = 61
        p += 4
    elif rest == 2:
        v = (np.int64(data[j]) << 16) | (np.int64(data[j + 1]) << 8)
        out[p] = _B64_ALPHABET[(v >> 18) & 63]
        out[p + 1] = _B64_ALPHABET[(v >> 12) & 63]
        out[p + 2] = _B64_ALPHABET[(v >> 6) & 63]
        out[p + 3] = 61
        p += 4
    out[p] = 34
    return p + 1


@njit(cache=True)
def _put_bytes(out: np.ndarray, pos: int, data: np.ndarray, start: int, end: int, base64: bool, write: bool) -> int:
    if base64:
        return _put_base64(out, pos, data, start, end, write)
    return _put_text(out, pos, data, start, end, write)


@njit(cache=True)
def _render_jsonl(
    offsets: np.ndarray,
    timestamps: np.ndarray,
    timestamp_types: np.ndarray,
    k_off: np.ndarray,
    k_data: np.ndarray,
    k_null: np.ndarray,
    v_off: np.ndarray,
    v_data: np.ndarray,
    v_null: np.ndarray,
    h_off: np.ndarray,
    h_null: np.ndarray,
    hk_off: np.ndarray,
    hk_data: np.ndarray,
    hv_off: np.ndarray,
    hv_data: np.ndarray,
    hv_null: np.ndarray,
    base64: bool,
    out: np.ndarray,
    write: bool,
) -> int:
    """Render every row; with ``write=False`` only measure. Returns the number of bytes."""
    pos = 0
    for i in range(offsets.size):
        pos = _put_literal(out, pos, _L_OFFSET, write)
        pos = _put_int(out, pos, offsets[i], write)
        pos = _put_literal(out, pos, _L_TIMESTAMP, write)
        pos = _put_int(out, pos, timestamps[i], write)
        pos = _put_literal(out, pos, _L_TSTYPE, write)
        pos = _put_int(out, pos, timestamp_types[i], write)
        pos = _put_literal(out, pos, _L_KEY, write)
        if k_null[i]:
            pos = _put_literal(out, pos, _NULL, write)
        else:
            pos = _put_bytes(out, pos, k_data, k_off[i], k_off[i + 1], base64, write)
        pos = _put_literal(out, pos, _L_VALUE, write)
        if v_null[i]:
            pos = _put_literal(out, pos, _NULL, write)
        else:
            pos = _put_bytes(out, pos, v_data, v_off[i], v_off[i + 1], base64, write)
        pos = _put_literal(out, pos, _L_HEADERS, write)
        if not h_null[i]:
            for h in range(h_off[i], h_off[i + 1]):
                if h > h_off[i]:
                    pos = _put_byte(out, pos, 44, write)
                pos = _put_byte(out, pos, 91, write)
                pos = _put_text(out, pos, hk_data, hk_off[h], hk_off[h + 1], write)
                pos = _put_byte(out, pos, 44, write)
                if hv_null[h]:
                    pos = _put_literal(out, pos, _NULL, write)
                else:
                    pos = _put_bytes(out, pos, hv_data, hv_off[h], hv_off[h + 1], base64, write)
                pos = _put_byte(out, pos, 93, write)
        pos = _put_literal(out, pos, _L_END, write)
    return pos


def _combined(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        return column.combine_chunks()
    return column


_NO_BYTES = np.zeros(0, dtype=np.uint8)
_NO_BYTES.setflags(write=False)


def binary_parts(array: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Views of a (large) binary/string array: int64 offsets (n+1), data bytes, null mask.

    The data is a zero-copy, read-only view; offsets and mask are fresh writable arrays. Keeping
    these flags fixed matters: numba compiles one specialisation per combination.
    """
    n = len(array)
    buffers = array.buffers()
    wide = pa.types.is_large_binary(array.type) or pa.types.is_large_string(array.type)
    offset_dtype = np.int64 if wide else np.int32
    if buffers[1] is None:
        offsets = np.zeros(n + 1, dtype=np.int64)
    else:
        start = array.offset * np.dtype(offset_dtype).itemsize
        offsets = np.frombuffer(buffers[1], dtype=offset_dtype, count=n + 1, offset=start)
        offsets = offsets.astype(np.int64)
    data = np.frombuffer(buffers[2], dtype=np.uint8) if buffers[2] is not None else _NO_BYTES
    return offsets, data, null_mask(array)


def null_mask(array: pa.Array) -> np.ndarray:
    """A writable bool array, True where ``array`` is null."""
    if not array.null_count:
        return np.zeros(len(array), dtype=np.bool_)
    return np.array(array.is_null().to_numpy(zero_copy_only=False), dtype=np.bool_)


def _first_invalid_utf8(array: pa.Array) -> int | None:
    """Index of the first element of a binary array that is not valid UTF-8, None if all are.

    Arrow's cast validates a whole array in one compiled pass; the culprit is found by halving the
    range that fails (each cast covers half the previous one: linear in total).
    """

    def valid(part: pa.Array) -> bool:
        try:
            part.cast(pa.string())
        except pa.ArrowInvalid:
            return False
        return True

    if valid(array):
        return None
    lo, hi = 0, len(array)  # [0, lo) is valid, the first bad element is in [lo, hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if valid(array.slice(lo, mid - lo)):
            lo = mid
        else:
            hi = mid
    return lo


def first_invalid_utf8(table: pa.Table) -> tuple[int, str] | None:
    """The first row of a ``READ_SCHEMA`` table that cannot be printed as UTF-8 text, and what of it
    (``"the key"``, ``"the value"``, ``"a header value"``); None when every row can."""
    found: list[tuple[int, str]] = []
    for name, what in (("key", "the key"), ("value", "the value")):
        bad = _first_invalid_utf8(_combined(table.column(name)))
        if bad is not None:
            found.append((bad, what))
    headers = _combined(table.column("headers"))
    values = headers.flatten().field("value")
    bad = _first_invalid_utf8(values) if len(values) else None
    if bad is not None:
        h_off = headers.offsets.to_numpy().astype(np.int64)
        rows = np.repeat(np.arange(len(headers)), np.diff(h_off))
        found.append((int(rows[bad]), "a header value"))
    return min(found) if found else None


def render_records_jsonl(table: pa.Table, encoding: str = "utf8") -> bytes:
    """A ``READ_SCHEMA`` table as JSON lines (see the module docstring); ``encoding`` utf8|base64.

    Raises:
        SchemaError: with ``utf8``, a key, value or header value that is not valid UTF-8 (render
            the rows before :func:`first_invalid_utf8` to print what can be printed).
    """
    if encoding not in ENCODINGS:
        raise ValueError(f"encoding must be one of {ENCODINGS}, got {encoding!r}")
    if table.num_rows == 0:
        return b""
    offsets = _combined(table.column("offset")).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    timestamps = _combined(table.column("timestamp")).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    ts_types = _combined(table.column("timestampType")).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    key = _combined(table.column("key"))
    value = _combined(table.column("value"))
    headers = _combined(table.column("headers"))
    base64 = encoding == "base64"

    k_off, k_data, k_null = binary_parts(key)
    v_off, v_data, v_null = binary_parts(value)
    h_off = headers.offsets.to_numpy().astype(np.int64)
    h_null = null_mask(headers)
    # Header structs are addressed through absolute list offsets: take the fields of the whole child.
    header_structs = headers.values
    header_keys = header_structs.field("key")
    header_values = header_structs.field("value")
    hk_off, hk_data, _ = binary_parts(header_keys)
    hv_off, hv_data, hv_null = binary_parts(header_values)
    if not base64:
        problem = first_invalid_utf8(table)
        if problem is not None:
            row, what = problem
            raise SchemaError(
                f"{what} of the record at offset {offsets[row]} is not valid UTF-8; use --encoding base64"
            )

    args = (
        offsets,
        timestamps,
        ts_types,
        k_off,
        k_data,
        k_null,
        v_off,
        v_data,
        v_null,
        h_off,
        h_null,
        hk_off,
        hk_data,
        hv_off,
        hv_data,
        hv_null,
        base64,
    )
    size = _render_jsonl(*args, np.zeros(0, dtype=np.uint8), False)
    out = np.empty(size, dtype=np.uint8)
    written = _render_jsonl(*args, out, True)
    assert written == size
    return out.tobytes()
