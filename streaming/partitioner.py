"""Kafka's default partitioner, vectorised over an Arrow column of keys.

A keyed record goes to ``toPositive(murmur2(key)) % numPartitions``, exactly as Kafka's Java
producer (``org.apache.kafka.clients.producer.internals.BuiltInPartitioner.partitionForKey``,
hash ``org.apache.kafka.common.utils.Utils.murmur2``) and kafka-python's ``DefaultPartitioner``
send it, so a topic written by seglog is partitioned like one written by any Kafka client.

murmur2 here is the 32-bit MurmurHash2 with seed ``0x9747b28c``: little-endian 4-byte blocks,
then the 1-3 tail bytes, then the final avalanche; ``toPositive`` is ``h & 0x7fffffff``.

Null keys have no hash. Kafka's producers spread them with a "sticky" partition per batch; a
Spark micro-batch is a single producer batch, so we spread null-key rows round robin from a start
partition the caller chooses (the sink derives it from the batch id, so a replayed batch lands
exactly where its first attempt did).
"""

from __future__ import annotations

import numba
import numpy as np
import pyarrow as pa

from indexer.errors import SchemaError


@numba.njit(cache=True, nogil=True)
def _murmur2_kernel(offsets: np.ndarray, data: np.ndarray, valid: np.ndarray, out: np.ndarray) -> None:
    """Hash key ``i`` = ``data[offsets[i]:offsets[i+1]]`` into ``out[i]`` (uint32) where ``valid[i]``.

    Numba widens 32-bit integer products to 64 bits, so every step is done in uint64 and masked
    back to 32 bits, which is Java's wrapping ``int`` arithmetic.
    """
    mask = np.uint64(0xFFFFFFFF)
    m = np.uint64(0x5BD1E995)
    for i in range(out.shape[0]):
        if not valid[i]:
            out[i] = 0
            continue
        start = offsets[i]
        length = offsets[i + 1] - start
        h = (np.uint64(0x9747B28C) ^ np.uint64(length)) & mask
        blocks = length // 4
        for b in range(blocks):
            p = start + 4 * b
            k = (
                np.uint64(data[p])
                | (np.uint64(data[p + 1]) << np.uint64(8))
                | (np.uint64(data[p + 2]) << np.uint64(16))
                | (np.uint64(data[p + 3]) << np.uint64(24))
            )
            k = (k * m) & mask
            k ^= k >> np.uint64(24)
            k = (k * m) & mask
            h = ((h * m) & mask) ^ k
        tail = start + 4 * blocks
        rem = length % 4
        if rem == 3:
            h ^= np.uint64(data[tail + 2]) << np.uint64(16)
        if rem >= 2:
            h ^= np.uint64(data[tail + 1]) << np.uint64(8)
        if rem >= 1:
            h ^= np.uint64(data[tail])
            h = (h * m) & mask
        h ^= h >> np.uint64(13)
        h = (h * m) & mask
        h ^= h >> np.uint64(15)
        out[i] = np.uint32(h)


def _binary_buffers(keys: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Offsets (int64), data (uint8) and validity (bool) of a binary/string column, zero-copy where possible."""
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks() if keys.num_chunks != 1 else keys.chunk(0)
    if pa.types.is_string(keys.type) or pa.types.is_large_string(keys.type):
        keys = keys.cast(pa.large_binary() if pa.types.is_large_string(keys.type) else pa.binary())
    if not (pa.types.is_binary(keys.type) or pa.types.is_large_binary(keys.type)):
        raise SchemaError(f"key column must be binary or string, got {keys.type}")
    n = len(keys)
    _validity, offsets_buf, data_buf = keys.buffers()
    offset_type = np.int64 if pa.types.is_large_binary(keys.type) else np.int32
    offsets = np.frombuffer(offsets_buf, dtype=offset_type, count=n + 1, offset=keys.offset * offset_type().itemsize)
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, dtype=np.uint8)
    valid = keys.is_valid().to_numpy(zero_copy_only=False)
    return offsets.astype(np.int64, copy=False), data, valid


def murmur2(keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Kafka's ``Utils.murmur2`` of every key, as int32 (Java's ``int``); 0 where the key is null."""
    offsets, data, valid = _binary_buffers(keys)
    out = np.empty(len(valid), dtype=np.uint32)
    _murmur2_kernel(offsets, data, valid, out)
    return out.view(np.int32)


def partition_for_keys(keys: pa.Array | pa.ChunkedArray, num_partitions: int, *, null_key_start: int = 0) -> np.ndarray:
    """The partition (int32) Kafka's default partitioner picks for each key.

    Keyed rows: ``(murmur2(key) & 0x7fffffff) % num_partitions``. Null-key rows: round robin in
    row order starting at ``null_key_start % num_partitions``.
    """
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be >= 1, got {num_partitions}")
    offsets, data, valid = _binary_buffers(keys)
    hashes = np.empty(len(valid), dtype=np.uint32)
    _murmur2_kernel(offsets, data, valid, hashes)
    parts = ((hashes & np.uint32(0x7FFFFFFF)) % np.uint32(num_partitions)).astype(np.int32)
    null_rows = np.flatnonzero(~valid)
    if null_rows.size:
        spread = (np.arange(null_rows.size, dtype=np.int64) + null_key_start) % num_partitions
        parts[null_rows] = spread.astype(np.int32)
    return parts
