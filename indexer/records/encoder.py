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
``max_batch_bytes`` bytes (``max.message.bytes``, which Kafka compares with the whole batch,
12-byte log overhead included). The bound is checked on the *uncompressed* size; a compressed
batch is only ever smaller, because a batch that compression would make larger is written
uncompressed (kafka-python's ``DefaultRecordBatchBuilder`` does the same; Kafka's
``MemoryRecordsBuilder`` would keep the larger compressed one).

The per-record work (sizes, varints, copies out of the Arrow buffers) runs in the numba kernels
of :mod:`indexer.records._kernels`; Python only touches whole columns and whole batches.
:func:`encode_batches` is a pure function and thread-safe (its kernels release the GIL).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from indexer.errors import RecordTooLargeError, SchemaError
from indexer.records import _kernels
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
_INT32_MAX = 2**31 - 1


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


def encode_batches(
    table: pa.Table,
    base_offset: int,
    *,
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
    compression: str = "none",
    timestamp_type: int = CREATE_TIME,
    log_append_time_ms: int | None = None,
    partition_leader_epoch: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
) -> EncodedBatches:
    """Encode ``table`` as v2 batches with offsets ``base_offset, base_offset + 1, ...``.

    Args:
        table: records in :data:`APPEND_SCHEMA` (see ``columns.to_append_table``), no null timestamps.
        base_offset: offset of the first record.
        max_batch_bytes: upper bound of every batch's size, log overhead included.
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
    _check_arguments(
        base_offset, max_batch_bytes, compression, timestamp_type, log_append_time_ms, producer_id, is_transactional
    )
    columns = _columns(table)
    timestamps = columns["timestamp"]
    key_starts, key_lens, key_data = _binary_parts(columns["key"])
    value_starts, value_lens, value_data = _binary_parts(columns["value"])
    header_firsts, header_counts, header_keys, header_values = _header_parts(columns["headers"])
    header_key_starts, header_key_lens, header_key_data = header_keys
    header_value_starts, header_value_lens, header_value_data = header_values

    n_batches, error_index, error_size, body_sizes, batch_starts, batch_sizes = _kernels.plan_batches(
        timestamps,
        key_lens,
        value_lens,
        header_firsts,
        header_counts,
        header_key_lens,
        header_value_lens,
        max_batch_bytes,
    )
    if error_index >= 0:
        raise RecordTooLargeError(
            f"record {error_index} needs a batch of {error_size} bytes, more than max.message.bytes {max_batch_bytes}",
            size=int(error_size),
            limit=max_batch_bytes,
            index=int(error_index),
        )
    batch_starts = batch_starts[: n_batches + 1]
    sizes = batch_sizes[:n_batches].copy()
    positions = np.zeros(n_batches, np.int64)
    np.cumsum(sizes[:-1], out=positions[1:])
    record_counts = np.diff(batch_starts)
    if timestamp_type == LOG_APPEND_TIME:
        max_timestamps = np.full(n_batches, log_append_time_ms, np.int64)
    else:
        max_timestamps = np.maximum.reduceat(timestamps, batch_starts[:-1]) if n_batches else np.empty(0, np.int64)
    attributes = TIMESTAMP_TYPE_MASK if timestamp_type == LOG_APPEND_TIME else 0
    if is_transactional:
        attributes |= TRANSACTIONAL_FLAG_MASK

    buffer = np.empty(int(sizes.sum()), np.uint8)
    _kernels.write_batches(
        buffer, batch_starts, positions, sizes, max_timestamps, body_sizes, timestamps,
        key_starts, key_lens, key_data, value_starts, value_lens, value_data,
        header_firsts, header_counts, header_key_starts, header_key_lens, header_key_data,
        header_value_starts, header_value_lens, header_value_data,
        base_offset, partition_leader_epoch, attributes, producer_id, producer_epoch, base_sequence,
    )  # fmt: skip
    if compression != "none":
        buffer, positions, sizes = _compress(buffer, positions, sizes, compression)
    else:
        _fill_crcs(buffer, positions, sizes)
    base_offsets = base_offset + batch_starts[:-1]
    last_offsets = base_offsets + record_counts - 1
    logger.debug("encoded %d records into %d batches (%d bytes)", table.num_rows, n_batches, buffer.shape[0])
    return EncodedBatches(
        buffer=buffer,
        positions=positions,
        sizes=sizes,
        base_offsets=base_offsets,
        last_offsets=last_offsets,
        max_timestamps=max_timestamps,
        offsets_of_max_timestamp=last_offsets.copy(),
        record_counts=record_counts,
    )


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
    if not RECORD_BATCH_OVERHEAD <= max_batch_bytes <= _INT32_MAX:
        raise ValueError(f"max_batch_bytes must be in [{RECORD_BATCH_OVERHEAD}, {_INT32_MAX}], got {max_batch_bytes}")
    if compression not in COMPRESSION_IDS:
        raise ValueError(f"unknown compression {compression!r}; expected one of {sorted(COMPRESSION_IDS)}")
    if timestamp_type not in (CREATE_TIME, LOG_APPEND_TIME):
        raise ValueError(f"timestamp_type must be CREATE_TIME (0) or LOG_APPEND_TIME (1), got {timestamp_type}")
    if timestamp_type == LOG_APPEND_TIME and log_append_time_ms is None:
        raise ValueError("timestamp_type LOG_APPEND_TIME needs log_append_time_ms")
    if is_transactional and producer_id < 0:
        raise ValueError("a transactional batch needs a producer id >= 0")


def _columns(table: pa.Table) -> dict[str, pa.Array]:
    """The four append columns of ``table`` as contiguous arrays; timestamps as an int64 ndarray."""
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
    columns: dict[str, pa.Array] = {}
    for name in APPEND_SCHEMA.names:
        chunked = table.column(name)
        columns[name] = chunked.chunk(0) if chunked.num_chunks == 1 else chunked.combine_chunks()
    timestamps = columns["timestamp"]
    if timestamps.null_count:
        raise SchemaError("column 'timestamp': has nulls; to_append_table replaces them with the log's clock")
    columns["timestamp"] = timestamps.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    return columns


def _binary_parts(array: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(starts, lengths with -1 for null, data) of a binary or string array, honouring its slice."""
    n = len(array)
    if n == 0 or array.null_count == n:
        return np.zeros(n, np.int64), np.full(n, -1, np.int64), np.empty(0, np.uint8)
    _validity, offsets_buffer, data_buffer = array.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype=np.int32, count=n + 1, offset=array.offset * 4)
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.empty(0, np.uint8)
    starts = offsets[:-1].astype(np.int64)
    lens = np.diff(offsets).astype(np.int64)
    if array.null_count:
        lens[array.is_null().to_numpy(zero_copy_only=False)] = -1
    return starts, lens, data


def _header_parts(
    array: pa.Array,
) -> tuple[
    np.ndarray,
    np.ndarray,
    tuple[np.ndarray, np.ndarray, np.ndarray],
    tuple[np.ndarray, np.ndarray, np.ndarray],
]:
    """(first header index, header count) per record plus key and value parts of all headers."""
    n = len(array)
    if n == 0 or array.null_count == n:
        empty = (np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.uint8))
        return np.zeros(n, np.int64), np.zeros(n, np.int64), empty, empty
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int32, count=n + 1, offset=array.offset * 4)
    firsts = offsets[:-1].astype(np.int64)
    counts = np.diff(offsets).astype(np.int64)
    if array.null_count:
        counts[array.is_null().to_numpy(zero_copy_only=False)] = 0
    struct = array.values
    return firsts, counts, _binary_parts(struct.field("key")), _binary_parts(struct.field("value"))


def _fill_crcs(buffer: np.ndarray, positions: np.ndarray, sizes: np.ndarray) -> None:
    """Store each batch's CRC-32C (over bytes 21 .. end) at byte 17, big-endian."""
    view = buffer.data
    for position, size in zip(positions.tolist(), sizes.tolist(), strict=True):
        crc = crc32c(view[position + ATTRIBUTES_OFFSET : position + size])
        buffer[position + CRC_OFFSET : position + CRC_OFFSET + 4] = np.frombuffer(crc.to_bytes(4, "big"), np.uint8)


def _compress(
    buffer: np.ndarray, positions: np.ndarray, sizes: np.ndarray, compression: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Re-frame each batch with its records section compressed (kept raw if that is not smaller)."""
    from indexer.records.codecs import get_codec

    codec = get_codec(compression)
    pieces: list[bytes | bytearray] = []
    new_sizes = np.empty_like(sizes)
    view = buffer.data
    for b, (position, size) in enumerate(zip(positions.tolist(), sizes.tolist(), strict=True)):
        header = bytearray(view[position : position + RECORD_BATCH_OVERHEAD])
        records = view[position + RECORD_BATCH_OVERHEAD : position + size].tobytes()
        body = codec.compress(records)
        if RECORD_BATCH_OVERHEAD + len(body) < size:
            header[SIZE_OFFSET : SIZE_OFFSET + 4] = (RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + len(body)).to_bytes(
                4, "big"
            )
            header[ATTRIBUTES_OFFSET + 1] |= codec.id
        else:
            logger.debug("batch %d does not shrink with %s; stored uncompressed", b, codec.name)
            body = records
        crc = crc32c(body, crc32c(memoryview(header)[ATTRIBUTES_OFFSET:]))
        header[CRC_OFFSET : CRC_OFFSET + 4] = crc.to_bytes(4, "big")
        pieces.append(header)
        pieces.append(body)
        new_sizes[b] = RECORD_BATCH_OVERHEAD + len(body)
    new_positions = np.zeros_like(positions)
    np.cumsum(new_sizes[:-1], out=new_positions[1:])
    return np.frombuffer(bytearray().join(pieces), np.uint8), new_positions, new_sizes
