"""Columns to v2 record batches (Kafka's ``MemoryRecordsBuilder`` for magic 2).

Input is a table of :data:`indexer.records.columns.APPEND_SCHEMA`; output is the bytes a Kafka
broker would append to a ``.log`` file: batches back to back, each a 61-byte header (layout in
:mod:`indexer.records.batch_header`) followed by its records (layout in
:mod:`indexer.records._kernels`), with

* offsets consecutive from ``base_offset`` (offset deltas 0, 1, ... within each batch),
* ``baseTimestamp`` = the batch's first record timestamp, ``maxTimestamp`` = the largest record
  timestamp, or ``log_append_time_ms`` with LogAppendTime (attribute bit 3; records keep their own
  timestamps as deltas, which readers ignore for such batches, as Kafka's ``LogValidator`` does),
* CRC-32C over bytes 21 .. end of each batch.

Batching: records are packed greedily, in order, into as few batches as possible, each at most
``batch_size`` bytes (the target, Kafka producer's ``batch.size``; by default ``max_batch_bytes``);
a record too large for that alone gets a batch of its own of at most ``max_batch_bytes``
(``max.message.bytes``, which Kafka compares with the whole batch, 12-byte log overhead
included); a table of more than :data:`PLAN_BLOCK_ROWS` records also starts a
batch every ``PLAN_BLOCK_ROWS`` records, so that its blocks are planned on several threads. The
bound is checked on the *uncompressed* size; a compressed batch is only ever smaller, because a
batch that compression would make larger is written uncompressed (kafka-python's
``DefaultRecordBatchBuilder`` does the same; Kafka's ``MemoryRecordsBuilder`` would keep the
larger compressed one).

The per-record work (sizes, varints, copies out of the Arrow buffers) runs in the numba kernels
of :mod:`indexer.records._kernels`; Python only touches whole columns and whole batches.
:func:`encode_batches` is a pure function and thread-safe (its kernels release the GIL). It is
:func:`plan_batches` (cut and size every batch, check every record) followed by
:func:`encode_planned` (write a range of planned batches), which callers may also use separately to
encode ranges of one plan in parallel or into reused buffers.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypedDict, Unpack

import numpy as np
import pyarrow as pa

from indexer._workers import in_threads
from indexer.errors import RecordTooLargeError, SchemaError
from indexer.limits import INT32_MAX
from indexer.records import _kernels
from indexer.records._batch_scan import HARDWARE_CRC32C
from indexer.records.batch_header import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_IDS,
    CRC_OFFSET,
    CREATE_TIME,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    SIZE_OFFSET,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
    crc32c,
)
from indexer.records.columns import APPEND_SCHEMA

logger = logging.getLogger(__name__)

DEFAULT_MAX_BATCH_BYTES = 1048588  # max.message.bytes default: 1 MiB + LOG_OVERHEAD
# plan_batches: rows planned per task; each block starts a new batch, so blocks plan side by side on
# PLAN_WORKERS threads (at most one more batch per block than one greedy pass: 0.1% of 1 MiB batches
# of 100-byte records). Fixed, so a table's batches do not depend on the thread count.
PLAN_BLOCK_ROWS = 1 << 18
PLAN_WORKERS = min(2, os.cpu_count() or 1)
# encode_planned_to: chunks small enough to stay in the CPU cache from encoding to writing, large enough
# that the page cache takes each in big folios (measured on 1M x 100-byte records: 1-4 MiB alike, 256 KiB slower)
DEFAULT_CHUNK_BYTES = 2 << 20
_buffers = threading.local()  # per thread: the buffer of encode_planned_to and of compressed encodes
_NO_NULLS = np.zeros(0, np.bool_)
_NO_NULLS.setflags(write=False)
_NO_BYTES = np.zeros(0, np.uint8)
_NO_BYTES.setflags(write=False)


@dataclass(frozen=True, eq=False)
class EncodedBatches:
    """Batches encoded back to back in ``buffer``, with per-batch metadata (int64 arrays).

    ``offsets_of_max_timestamp`` holds each batch's last offset: for magic 2 Kafka reports the
    last offset of the batch as the "shallow offset of max timestamp". Frozen; the arrays are not
    copied, so treat them as read-only once shared between threads.
    """

    buffer: np.ndarray
    positions: np.ndarray
    sizes: np.ndarray
    base_offsets: np.ndarray
    last_offsets: np.ndarray
    max_timestamps: np.ndarray
    offsets_of_max_timestamp: np.ndarray
    record_counts: np.ndarray

    def __len__(self) -> int:
        return int(self.positions.shape[0])

    @property
    def total_bytes(self) -> int:
        """Bytes of all batches together."""
        return int(self.buffer.shape[0])

    @property
    def first_offset(self) -> int:
        """Offset of the first record; ``ValueError`` when there are no batches."""
        if not len(self):
            raise ValueError("no batches were encoded, so there is no first offset")
        return int(self.base_offsets[0])

    @property
    def last_offset(self) -> int:
        """Offset of the last record; ``ValueError`` when there are no batches."""
        if not len(self):
            raise ValueError("no batches were encoded, so there is no last offset")
        return int(self.last_offsets[-1])

    @property
    def max_timestamp(self) -> int:
        """Largest batch maxTimestamp, or ``NO_TIMESTAMP`` (-1) when there are no batches."""
        return int(self.max_timestamps.max()) if len(self) else NO_TIMESTAMP

    def batch(self, i: int) -> memoryview:
        """The bytes of batch ``i`` (a view into ``buffer``)."""
        position = int(self.positions[i])
        return self.buffer.data[position : position + int(self.sizes[i])]


# A binary column for the kernels: int32 offsets, null flags, null mode, data bytes.
_Binary = tuple[np.ndarray, np.ndarray, int, np.ndarray]


@dataclass(frozen=True, eq=False)
class _Columns:
    """A table's columns as the kernels read them: per binary column Arrow's int32 offsets (shifted
    to the array's slice), per-element null flags, a ``_kernels.NULLS_*`` mode and the data bytes,
    arrays read-only (views of the Arrow buffers where possible)."""

    timestamps: np.ndarray
    key: _Binary
    value: _Binary
    headers: _Binary  # list offsets, null flags, null mode; no data (it indexes the header columns)
    header_key: _Binary
    header_value: _Binary


@dataclass(frozen=True, eq=False)
class BatchPlan:
    """The batches :func:`encode_batches` makes of a table, cut and sized but not yet written.

    Planning is one cheap pass over the column lengths; it finds every record too large before a
    byte is encoded, and gives each batch's size and position, so ranges of batches can then be
    encoded independently (:func:`encode_planned`), in any order or thread, into buffers of known
    size. ``batch_starts`` holds the first row of each batch plus ``num_rows``; ``positions``,
    ``sizes`` and ``max_timestamps`` are per batch (int64), positions as in one whole encoding.
    """

    base_offset: int
    batch_starts: np.ndarray
    positions: np.ndarray
    sizes: np.ndarray
    max_timestamps: np.ndarray
    compression: str
    attributes: int
    partition_leader_epoch: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    columns: _Columns

    def __len__(self) -> int:
        return int(self.sizes.shape[0])

    @property
    def total_bytes(self) -> int:
        """Bytes of all batches, uncompressed."""
        return int(self.positions[-1] + self.sizes[-1]) if len(self) else 0

    def range_bytes(self, start: int, stop: int) -> int:
        """Uncompressed bytes of batches ``start .. stop-1``."""
        if stop <= start:
            return 0
        return int(self.positions[stop - 1] + self.sizes[stop - 1] - self.positions[start])

    def chunks(self, chunk_bytes: int, start: int = 0, stop: int | None = None) -> list[tuple[int, int]]:
        """Batches ``start .. stop-1`` cut into consecutive ``(start, stop)`` runs of at most
        ``chunk_bytes`` each, greedily (a batch larger than that makes a run of its own)."""
        stop = len(self) if stop is None else stop
        ends = self.positions + self.sizes
        ranges = []
        while start < stop:
            limit = int(self.positions[start]) + chunk_bytes
            end = min(stop, max(start + 1, int(np.searchsorted(ends, limit, side="right"))))
            ranges.append((start, end))
            start = end
        return ranges


class BatchOptions(TypedDict, total=False):
    """The keyword options of :func:`plan_batches` and :func:`encode_batches` (meaning: the latter's
    docstring; defaults: the former's signature, which mypy checks this against)."""

    max_batch_bytes: int
    batch_size: int | None
    compression: str
    timestamp_type: int
    log_append_time_ms: int | None
    partition_leader_epoch: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    is_transactional: bool


def plan_batches(
    table: pa.Table,
    base_offset: int,
    *,
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
    batch_size: int | None = None,
    compression: str = "none",
    timestamp_type: int = CREATE_TIME,
    log_append_time_ms: int | None = None,
    partition_leader_epoch: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
) -> BatchPlan:
    """Cut ``table`` into the batches :func:`encode_batches` would write, without writing them.

    Takes the arguments of :func:`encode_batches` and raises what it raises (every check happens
    here). The plan holds views of ``table``'s buffers: keep the table alive while encoding.
    """
    _check_arguments(
        base_offset, max_batch_bytes, compression, timestamp_type, log_append_time_ms, producer_id, is_transactional
    )
    if batch_size is not None and batch_size < 0:
        raise ValueError(f"batch_size must be >= 0, got {batch_size}")
    target = max_batch_bytes if batch_size is None else min(batch_size, max_batch_bytes)
    columns = _columns(table)
    key_offsets, key_nulls, key_mode, _ = columns.key
    value_offsets, value_nulls, value_mode, _ = columns.value
    header_offsets, header_nulls, header_mode, _ = columns.headers
    header_value_offsets, header_value_nulls, header_value_mode, _ = columns.header_value
    n = table.num_rows
    blocks = [(lo, min(n, lo + PLAN_BLOCK_ROWS)) for lo in range(0, n, PLAN_BLOCK_ROWS)] or [(0, 0)]
    planned: list[tuple[int, int, int, np.ndarray, np.ndarray, np.ndarray]] = [None] * len(blocks)  # type: ignore[list-item]

    def plan_block(k: int) -> None:
        planned[k] = _kernels.plan_batches(
            columns.timestamps, key_offsets, key_nulls, key_mode, value_offsets, value_nulls, value_mode,
            header_offsets, header_nulls, header_mode, columns.header_key[0],
            header_value_offsets, header_value_nulls, header_value_mode, max_batch_bytes, target, *blocks[k],
        )  # fmt: skip

    in_threads(len(blocks), plan_block, workers=PLAN_WORKERS)
    for _, error_index, error_size, _, _, _ in planned:
        if error_index >= 0:
            raise RecordTooLargeError(
                f"record {error_index} needs a batch of {error_size} bytes, more than the largest batch "
                f"of {max_batch_bytes} bytes",
                size=int(error_size),
                limit=max_batch_bytes,
                index=int(error_index),
            )
    # copies: the kernel's arrays have a slot per record
    sizes = np.concatenate([block_sizes[:count] for count, _, _, _, block_sizes, _ in planned])
    batch_starts = np.concatenate([starts[:count] for count, _, _, starts, _, _ in planned] + [np.array([n])])
    n_batches = sizes.shape[0]
    positions = np.zeros(n_batches, np.int64)
    np.cumsum(sizes[:-1], out=positions[1:])
    if timestamp_type == LOG_APPEND_TIME:
        max_timestamps = np.full(n_batches, log_append_time_ms, np.int64)
    else:
        max_timestamps = np.concatenate([block_max[:count] for count, _, _, _, _, block_max in planned])
    attributes = TIMESTAMP_TYPE_MASK if timestamp_type == LOG_APPEND_TIME else 0
    if is_transactional:
        attributes |= TRANSACTIONAL_FLAG_MASK
    return BatchPlan(
        base_offset=base_offset,
        batch_starts=batch_starts,
        positions=positions,
        sizes=sizes,
        max_timestamps=max_timestamps,
        compression=compression,
        attributes=attributes,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        columns=columns,
    )


def encode_planned(
    plan: BatchPlan, start: int = 0, stop: int | None = None, *, out: np.ndarray | None = None
) -> EncodedBatches:
    """Encode batches ``start .. stop-1`` of ``plan`` (all by default); thread-safe, releases the GIL.

    ``out`` (uncompressed plans only): a uint8 buffer of at least ``plan.range_bytes(start, stop)``
    bytes to encode into (reusing one saves the page faults of a fresh buffer); the result's
    ``buffer`` is then a view of it, valid until ``out`` is reused. A compressed plan's records are
    written chunk by chunk into this thread's recycled buffer before they are compressed, so only the
    compressed bytes take fresh memory. Positions in the result are relative to its buffer. CRCs are
    computed right after the range is written, while it is still in cache.
    """
    stop = len(plan) if stop is None else stop
    if not 0 <= start <= stop <= len(plan):
        raise ValueError(f"batch range {start}..{stop} is outside the plan's {len(plan)} batches")
    nbytes = plan.range_bytes(start, stop)
    if out is not None and plan.compression != "none":
        raise ValueError("out is for uncompressed plans: compressed batches are new bytes")
    if out is not None and (out.dtype != np.uint8 or out.ndim != 1 or out.shape[0] < nbytes):
        raise ValueError(f"out must be a 1-d uint8 buffer of at least {nbytes} bytes")
    if plan.compression != "none":
        buffer, positions, sizes = _encode_compressed(plan, start, stop)
    else:
        buffer = np.empty(nbytes, np.uint8) if out is None else out[:nbytes]
        _write_batches(plan, start, stop, buffer)
        positions = plan.positions[start:stop] - (plan.positions[start] if stop > start else 0)
        sizes = plan.sizes[start:stop].copy()
        if HARDWARE_CRC32C:
            _kernels.fill_crcs(buffer, positions, sizes)
        else:
            _fill_crcs(buffer, positions, sizes)
    base_offsets = plan.base_offset + plan.batch_starts[start:stop]
    last_offsets = plan.base_offset + plan.batch_starts[start + 1 : stop + 1] - 1
    return EncodedBatches(
        buffer=buffer,
        positions=positions,
        sizes=sizes,
        base_offsets=base_offsets,
        last_offsets=last_offsets,
        max_timestamps=plan.max_timestamps[start:stop],
        offsets_of_max_timestamp=last_offsets.copy(),
        record_counts=last_offsets - base_offsets + 1,
    )


def _write_batches(plan: BatchPlan, start: int, stop: int, buffer: np.ndarray) -> None:
    """Write batches ``start .. stop-1`` of ``plan``, uncompressed and without CRCs, from ``buffer[0]`` on."""
    c = plan.columns
    key_offsets, key_nulls, key_mode, key_data = c.key
    value_offsets, value_nulls, value_mode, value_data = c.value
    header_offsets, header_nulls, header_mode, _ = c.headers
    header_key_offsets, _, _, header_key_data = c.header_key
    header_value_offsets, header_value_nulls, header_value_mode, header_value_data = c.header_value
    _kernels.write_batches(
        buffer, start, stop, plan.batch_starts, plan.sizes, plan.max_timestamps, c.timestamps,
        key_offsets, key_nulls, key_mode, key_data, value_offsets, value_nulls, value_mode, value_data,
        header_offsets, header_nulls, header_mode, header_key_offsets, header_key_data,
        header_value_offsets, header_value_nulls, header_value_mode, header_value_data,
        plan.base_offset, plan.partition_leader_epoch, plan.attributes, plan.producer_id,
        plan.producer_epoch, plan.base_sequence,
    )  # fmt: skip


def _encode_compressed(plan: BatchPlan, start: int, stop: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Batches ``start .. stop-1`` of a compressed ``plan``: (buffer, positions, sizes).

    The records are written uncompressed chunk by chunk (:data:`DEFAULT_CHUNK_BYTES`) into this
    thread's recycled buffer, which stays in the CPU cache while its batches are re-framed compressed.
    """
    pieces: list[bytes | bytearray] = []
    sizes = np.empty(stop - start, np.int64)
    for a, b in plan.chunks(DEFAULT_CHUNK_BYTES, start, stop):
        nbytes = plan.range_bytes(a, b)
        buffer = _scratch(nbytes)[:nbytes]
        _write_batches(plan, a, b, buffer)
        positions = plan.positions[a:b] - plan.positions[a]
        sizes[a - start : b - start] = _compress(buffer, positions, plan.sizes[a:b], plan.compression, pieces)
    positions = np.zeros_like(sizes)
    np.cumsum(sizes[:-1], out=positions[1:])
    return np.frombuffer(bytearray().join(pieces), np.uint8), positions, sizes


def planned_batches(plan: BatchPlan) -> EncodedBatches:
    """The per-batch metadata :func:`encode_planned` would return for an uncompressed ``plan``, with
    no bytes yet (``buffer`` is empty): for writers that encode straight into the file with
    :func:`encode_planned_to`. Positions are those of one whole encoding."""
    if plan.compression != "none":
        raise ValueError("only an uncompressed plan knows its batch sizes before encoding")
    base_offsets = plan.base_offset + plan.batch_starts[:-1]
    last_offsets = plan.base_offset + plan.batch_starts[1:] - 1
    return EncodedBatches(
        buffer=np.empty(0, np.uint8),
        positions=plan.positions,
        sizes=plan.sizes,
        base_offsets=base_offsets,
        last_offsets=last_offsets,
        max_timestamps=plan.max_timestamps,
        offsets_of_max_timestamp=last_offsets.copy(),
        record_counts=last_offsets - base_offsets + 1,
    )


def _scratch(nbytes: int) -> np.ndarray:
    """This thread's encoding buffer of at least ``nbytes``, kept between calls up to
    ``2 * DEFAULT_CHUNK_BYTES`` (its pages are faulted once, not at every encode)."""
    buffer: np.ndarray | None = getattr(_buffers, "buffer", None)
    if buffer is not None and buffer.shape[0] >= nbytes:
        return buffer
    buffer = np.empty(max(nbytes, DEFAULT_CHUNK_BYTES), np.uint8)
    if buffer.shape[0] <= 2 * DEFAULT_CHUNK_BYTES:
        _buffers.buffer = buffer
    return buffer


def encode_planned_to(
    plan: BatchPlan,
    start: int,
    stop: int,
    write: Callable[[np.ndarray, int], None],
    *,
    workers: int = 2,
    chunk_bytes: int | None = None,
) -> None:
    """Encode batches ``start .. stop-1`` of ``plan`` chunk by chunk, handing each chunk to ``write``.

    ``write(data, position)`` receives whole batches, ``position`` relative to batch ``start`` (as in
    one whole encoding), in no particular order and from up to ``workers`` threads at once (the
    caller's included). Each thread encodes into its own recycled buffer of about ``chunk_bytes``:
    the buffer stays in the CPU cache between encoding and writing and its pages are faulted once
    (``chunk_bytes`` default: :data:`DEFAULT_CHUNK_BYTES`), and while one thread writes, the other
    encodes (threads of :func:`indexer._workers.in_threads`). The first error of any thread stops the others
    (after their current chunk) and is raised here; chunks handed to ``write`` before it are not
    taken back.
    """
    ranges = plan.chunks(chunk_bytes or DEFAULT_CHUNK_BYTES, start, stop)
    if not ranges:
        return
    origin = int(plan.positions[start])
    largest = max(plan.range_bytes(a, b) for a, b in ranges)

    def encode_chunk(k: int) -> None:
        a, b = ranges[k]
        write(encode_planned(plan, a, b, out=_scratch(largest)).buffer, int(plan.positions[a]) - origin)

    in_threads(len(ranges), encode_chunk, workers=workers)


def encode_batches(table: pa.Table, base_offset: int, **options: Unpack[BatchOptions]) -> EncodedBatches:
    """Encode ``table`` as v2 batches with offsets ``base_offset, base_offset + 1, ...``.

    The options are keywords (:class:`BatchOptions`) with the defaults of :func:`plan_batches`.

    Args:
        table: records in :data:`APPEND_SCHEMA` (see ``columns.to_append_table``), no null timestamps.
        base_offset: offset of the first record.
        max_batch_bytes: upper bound of every batch's size, log overhead included.
        batch_size: target batch size (``batch.size``): a batch takes no further record that would
            make it larger; default ``max_batch_bytes``.
        compression: codec name (``none``, ``gzip``, ``snappy``, ``lz4``, ``zstd``).
        timestamp_type: ``CREATE_TIME`` or ``LOG_APPEND_TIME`` (then ``log_append_time_ms`` is
            every batch's maxTimestamp).
        partition_leader_epoch, producer_id, producer_epoch: header fields, as given.
        base_sequence: sequence of the first record; later batches continue the sequence.
        is_transactional: sets attribute bit 4.

    Returns:
        The batches and their metadata.

    Raises:
        RecordTooLargeError: a record that does not fit a batch of ``max_batch_bytes`` on its own
            (``index`` is its row, ``size`` the size of that one-record batch); nothing is encoded.
        SchemaError: ``table`` does not have the append schema or has null timestamps.
        ValueError: inconsistent arguments.
    """
    encoded = encode_planned(plan_batches(table, base_offset, **options))
    logger.debug("encoded %d records into %d batches (%d bytes)", table.num_rows, len(encoded), encoded.total_bytes)
    return encoded


def _check_arguments(
    base_offset: int,
    max_batch_bytes: int,
    compression: str,
    timestamp_type: int,
    log_append_time_ms: int | None,
    producer_id: int,
    is_transactional: bool,
) -> None:
    if base_offset < 0:
        raise ValueError(f"base_offset must be >= 0, got {base_offset}")
    if not RECORD_BATCH_OVERHEAD <= max_batch_bytes <= INT32_MAX:
        raise ValueError(f"max_batch_bytes must be in [{RECORD_BATCH_OVERHEAD}, {INT32_MAX}], got {max_batch_bytes}")
    if compression not in COMPRESSION_IDS:
        raise ValueError(f"unknown compression {compression!r}; expected one of {sorted(COMPRESSION_IDS)}")
    if timestamp_type not in (CREATE_TIME, LOG_APPEND_TIME):
        raise ValueError(f"timestamp_type must be CREATE_TIME (0) or LOG_APPEND_TIME (1), got {timestamp_type}")
    if timestamp_type == LOG_APPEND_TIME and log_append_time_ms is None:
        raise ValueError("timestamp_type LOG_APPEND_TIME needs log_append_time_ms")
    if is_transactional and producer_id < 0:
        raise ValueError("a transactional batch needs a producer id >= 0")


def _columns(table: pa.Table) -> _Columns:
    """The four append columns of ``table`` as the kernels read them (see :class:`_Columns`)."""
    if not isinstance(table, pa.Table):
        raise SchemaError(f"encode_batches takes a pyarrow Table, not {type(table).__name__}; see to_append_table")
    extra = sorted(set(table.column_names) - set(APPEND_SCHEMA.names))
    if extra:
        raise SchemaError(f"unknown column(s) {extra}: records have only the columns {APPEND_SCHEMA.names}")
    for field in APPEND_SCHEMA:
        if field.name not in table.column_names or table.schema.field(field.name).type != field.type:
            found = table.schema.field(field.name).type if field.name in table.column_names else "no column"
            raise SchemaError(
                f"column {field.name!r}: found {found}, expected {field.type}; normalise input with to_append_table"
            )
    arrays: dict[str, pa.Array] = {}
    for name in APPEND_SCHEMA.names:
        chunked = table.column(name)
        arrays[name] = chunked.chunk(0) if chunked.num_chunks == 1 else chunked.combine_chunks()
    timestamps = arrays["timestamp"]
    if timestamps.null_count:
        raise SchemaError("column 'timestamp': has nulls; to_append_table replaces them with the log's clock")
    headers, header_key, header_value = _header_parts(arrays["headers"])
    return _Columns(
        timestamps=_readonly(timestamps.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)),
        key=_binary_parts(arrays["key"]),
        value=_binary_parts(arrays["value"]),
        headers=headers,
        header_key=header_key,
        header_value=header_value,
    )


def _readonly(array: np.ndarray) -> np.ndarray:
    """``array`` marked read-only, as views of Arrow buffers are: the kernels then see one type."""
    array.setflags(write=False)
    return array


def _offsets(array: pa.Array) -> np.ndarray:
    """The int32 offsets of a binary/string/list ``array`` (``len + 1`` of them), as a view."""
    offsets_buffer = array.buffers()[1]
    if offsets_buffer is None:  # an empty array may have no buffers
        return _readonly(np.zeros(len(array) + 1, np.int32))
    return _readonly(np.frombuffer(offsets_buffer, dtype=np.int32, count=len(array) + 1, offset=array.offset * 4))


def _binary_parts(array: pa.Array) -> _Binary:
    """(int32 offsets, null flags, null mode, data) of a binary, string or list array, honouring
    its slice (the data of a list array is left empty: its offsets index its child columns)."""
    n = len(array)
    if n == 0 or array.null_count == n:
        return _readonly(np.zeros(n + 1, np.int32)), _NO_NULLS, _kernels.NULLS_ALL, _NO_BYTES
    buffers = array.buffers()
    data = _NO_BYTES
    if pa.types.is_binary(array.type) or pa.types.is_string(array.type):
        if buffers[2] is not None:
            data = _readonly(np.frombuffer(buffers[2], dtype=np.uint8))
    if not array.null_count:
        return _offsets(array), _NO_NULLS, _kernels.NULLS_NONE, data
    nulls = _readonly(array.is_null().to_numpy(zero_copy_only=False))
    return _offsets(array), nulls, _kernels.NULLS_SOME, data


def _header_parts(array: pa.Array) -> tuple[_Binary, _Binary, _Binary]:
    """The parts of the headers column (list offsets and nulls) and of all header keys and values."""
    headers = _binary_parts(array)
    if headers[2] == _kernels.NULLS_ALL:
        empty = (_readonly(np.zeros(1, np.int32)), _NO_NULLS, _kernels.NULLS_NONE, _NO_BYTES)
        return headers, empty, empty
    struct = array.values
    keys = struct.field("key")
    if keys.null_count:
        raise SchemaError("column 'headers': a header has a null key (Kafka header keys are non-null strings)")
    return headers, _binary_parts(keys), _binary_parts(struct.field("value"))


def _fill_crcs(buffer: np.ndarray, positions: np.ndarray, sizes: np.ndarray) -> None:
    """Store each batch's CRC-32C (over bytes 21 .. end) at byte 17, big-endian."""
    view = buffer.data
    for position, size in zip(positions.tolist(), sizes.tolist(), strict=True):
        crc = crc32c(view[position + ATTRIBUTES_OFFSET : position + size])
        buffer[position + CRC_OFFSET : position + CRC_OFFSET + 4] = np.frombuffer(crc.to_bytes(4, "big"), np.uint8)


def _compress(
    buffer: np.ndarray,
    positions: np.ndarray,
    sizes: np.ndarray,
    compression: str,
    pieces: list[bytes | bytearray],
) -> np.ndarray:
    """Re-frame each batch of ``buffer`` with its records section compressed (kept raw if that is not
    smaller), appending header and body to ``pieces``; returns the new sizes."""
    from indexer.records.codecs import get_codec

    codec = get_codec(compression)
    new_sizes = np.empty_like(sizes)
    view = buffer.data
    for b, (position, size) in enumerate(zip(positions.tolist(), sizes.tolist(), strict=True)):
        header = bytearray(view[position : position + RECORD_BATCH_OVERHEAD])
        records = view[position + RECORD_BATCH_OVERHEAD : position + size]
        body = codec.compress(records)
        if RECORD_BATCH_OVERHEAD + len(body) < size:
            header[SIZE_OFFSET : SIZE_OFFSET + 4] = (RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + len(body)).to_bytes(
                4, "big"
            )
            header[ATTRIBUTES_OFFSET + 1] |= codec.id
        else:
            logger.debug("batch %d does not shrink with %s; stored uncompressed", b, codec.name)
            body = bytes(records)
        crc = crc32c(body, crc32c(memoryview(header)[ATTRIBUTES_OFFSET:]))
        header[CRC_OFFSET : CRC_OFFSET + 4] = crc.to_bytes(4, "big")
        pieces.append(header)
        pieces.append(body)
        new_sizes[b] = RECORD_BATCH_OVERHEAD + len(body)
    return new_sizes
