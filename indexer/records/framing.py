"""The 12-byte framing of log entries: ``baseOffset`` (int64) and ``batchLength`` (int32) before each batch.

Both fields lie outside the CRC (which covers bytes 21 on), so a broker assigns offsets to a
producer's batches by rewriting ``baseOffset`` in place, and a reader can walk a buffer from one
entry to the next by the length fields alone, without parsing the batches.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from indexer.records.batch_header import (
    LAST_OFFSET_DELTA_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V2,
    MIN_LEGACY_RECORD_SIZE,
    OFFSET_OFFSET,
    SIZE_OFFSET,
)
from indexer.records.encoder import EncodedBatches


def whole_entries(buf: bytes) -> tuple[int, int, bool]:
    """Length of the prefix of ``buf`` made of whole log entries (a per-batch walk of the framing),
    the offset after the last of them (-1 when there is none), and whether their offsets increase
    from entry to entry (each one's first offset above the last offset of the one before).

    The order is taken from the headers, not from decoded records: an entry whose records a read
    leaves out (all past its bound, or below its start) still shows a base offset damaged in place.
    An entry whose size field is impossible is included, so the decoder reports it as corrupt.
    """
    position, n, before, ordered = 0, len(buf), None, True
    while position + LOG_OVERHEAD <= n:
        size = int.from_bytes(buf[position + SIZE_OFFSET : position + LOG_OVERHEAD], "big", signed=True)
        if size < MIN_LEGACY_RECORD_SIZE:
            return n, -1, ordered
        if position + LOG_OVERHEAD + size > n:
            break
        first = int.from_bytes(buf[position + OFFSET_OFFSET : position + OFFSET_OFFSET + 8], "big", signed=True)
        ordered = ordered and (before is None or first > before)
        before = entry_last_offset(buf, position)
        position += LOG_OVERHEAD + size
    return position, (-1 if before is None else before + 1), ordered


def misplaced_entry(buf: bytes, floor: int, ceiling: int | None = None) -> tuple[int, int, int] | None:
    """The first entry of ``buf`` (whole entries back to back) whose first offset is not above
    ``floor`` nor the last offset of every entry before it, or whose last offset reaches ``ceiling``
    (the next segment's base offset): ``(its position, its first offset, the largest offset before
    it)``; None when offsets only increase below ``ceiling``. Offsets of a log never go back and a
    segment's stop below the next one's, so such an entry (a batch written twice, batches swapped, a
    base offset damaged in place) is damage, wherever its CRC is valid. The caller tells the two
    apart: the first offset of an entry going back is not above the largest offset before it."""
    position, n, before = 0, len(buf), floor
    while position + LOG_OVERHEAD <= n:
        first = int.from_bytes(buf[position + OFFSET_OFFSET : position + OFFSET_OFFSET + 8], "big", signed=True)
        last = entry_last_offset(buf, position)
        if first <= before or (ceiling is not None and last >= ceiling):
            return position, first, before
        before = last
        position += LOG_OVERHEAD + int.from_bytes(buf[position + SIZE_OFFSET : position + LOG_OVERHEAD], "big")
    return None


def entry_last_offset(buf: bytes, position: int) -> int:
    """The last offset of the whole entry at ``buf[position]``: ``baseOffset + lastOffsetDelta`` for
    a v2 batch, the offset field for a legacy entry (a compressed wrapper carries its last offset)."""
    offset = int.from_bytes(buf[position + OFFSET_OFFSET : position + OFFSET_OFFSET + 8], "big", signed=True)
    if buf[position + MAGIC_OFFSET] < MAGIC_V2:
        return offset
    delta = buf[position + LAST_OFFSET_DELTA_OFFSET : position + LAST_OFFSET_DELTA_OFFSET + 4]
    return offset + int.from_bytes(delta, "big", signed=True)


def is_contiguous(encoded: EncodedBatches) -> bool:
    """Whether ``encoded``'s batches lie back to back in its buffer with consecutive offsets."""
    positions = encoded.positions
    ends = positions + encoded.sizes
    return bool(
        positions[0] >= 0
        and int(ends[-1]) <= encoded.total_bytes
        and np.array_equal(positions[1:], ends[:-1])
        and np.array_equal(encoded.base_offsets[1:], encoded.last_offsets[:-1] + 1)
        and not (encoded.last_offsets < encoded.base_offsets).any()
    )


def assign_offsets(encoded: EncodedBatches, first_offset: int) -> EncodedBatches:
    """``encoded`` with offsets from ``first_offset``: each batch's ``baseOffset`` rewritten in its
    buffer, in place (big-endian, bytes 0-7), the metadata arrays shifted alike (a new value)."""
    shift = first_offset - int(encoded.base_offsets[0])
    base_offsets = encoded.base_offsets + shift
    fields = encoded.positions[:, None] + np.arange(OFFSET_OFFSET, OFFSET_OFFSET + 8)
    encoded.buffer[fields] = base_offsets.astype(">i8").view(np.uint8).reshape(-1, 8)
    return dataclasses.replace(
        encoded,
        base_offsets=base_offsets,
        last_offsets=encoded.last_offsets + shift,
        offsets_of_max_timestamp=encoded.offsets_of_max_timestamp + shift,
    )
