"""lz4 (codec id 3): the LZ4 frame format as Kafka's ``Lz4BlockOutputStream`` writes it.

Layout (LZ4 frame format v1.5.1; integers little-endian)::

    offset  size  field
    0       4     magic 0x184D2204
    4       1     FLG   version 01, block independence 1, no block/content checksum, no content size
                        (0x60 as written by Kafka)
    5       1     BD    block maximum size 64 KiB (0x40)
    [6      8     content size, only when FLG bit 3 is set]
    6       1     HC    (xxh32(descriptor bytes FLG..) >> 8) & 0xFF
    7       ...   blocks: uint32 size (bit 31 set = stored uncompressed) | data [| uint32 block xxh32]
    ...     4     end mark 0 [| uint32 content xxh32]

Kafka compresses each 64 KiB of input as one independent LZ4 block with lz4-java's fast
compressor (the default level), storing a block raw when compression does not shrink it. We write
the same frame with liblz4's frame compressor (python-lz4) in one call per batch, which releases the
GIL once rather than once per block; reading uses cramjam's block decoder.

Magic v0 message sets were written by Kafka 0.8/0.9 with a broken HC: the hash was taken over the
magic *and* the descriptor (KAFKA-3160). Kafka ignores HC for v0 input; we accept either the
correct or the broken value, for every magic, because the codec is not told the magic (the batch
CRC protects the bytes in any case). Block and content checksums, which Kafka never writes, are
skipped rather than verified, for the same reason. Dependent blocks are refused, as in Kafka.
"""

from __future__ import annotations

import struct

import cramjam
import lz4.frame

from indexer.errors import CorruptRecordError
from indexer.records.codecs.codec import Codec

LZ4_FRAME_MAGIC = 0x184D2204
INCOMPRESSIBLE_MASK = 0x80000000
_FLG_BLOCK_INDEPENDENCE = 0x20
_FLG_BLOCK_CHECKSUM = 0x10
_FLG_CONTENT_SIZE = 0x08
_FLG_CONTENT_CHECKSUM = 0x04
_UINT32 = struct.Struct("<I")

_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: bytes | memoryview, seed: int = 0) -> int:
    """XXH32 of ``data`` (only ever run on the few bytes of a frame descriptor, so pure Python)."""
    data = bytes(data)
    n = len(data)
    i = 0
    if n >= 16:
        v = [(seed + _P1 + _P2) & _M32, (seed + _P2) & _M32, seed & _M32, (seed - _P1) & _M32]
        while i + 16 <= n:
            for lane in range(4):
                (word,) = _UINT32.unpack_from(data, i + 4 * lane)
                v[lane] = (_rotl((v[lane] + word * _P2) & _M32, 13) * _P1) & _M32
            i += 16
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while i + 4 <= n:
        (word,) = _UINT32.unpack_from(data, i)
        h = (_rotl((h + word * _P3) & _M32, 17) * _P4) & _M32
        i += 4
    while i < n:
        h = (_rotl((h + data[i] * _P5) & _M32, 11) * _P1) & _M32
        i += 1
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    return h ^ (h >> 16)


def _header_checksum(descriptor: bytes | memoryview) -> int:
    return (xxh32(descriptor) >> 8) & 0xFF


class Lz4Codec(Codec):
    """LZ4 in Kafka's frame (independent 64 KiB blocks, no checksums beyond the header's)."""

    id = 3
    name = "lz4"

    def compress(self, data: bytes | memoryview) -> bytes:
        # FLG 0x60, BD 0x40: independent 64 KiB blocks, no checksums beyond the header's, no content size
        frame: bytes = lz4.frame.compress(
            data,
            compression_level=0,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            block_checksum=False,
            store_size=False,
        )
        return frame

    def decompress(self, data: bytes | memoryview) -> bytes:
        view = memoryview(data).cast("B")
        end = len(view)
        if end < 7:
            raise CorruptRecordError(f"lz4 frame is truncated: {end} bytes, the header alone needs 7")
        (magic,) = _UINT32.unpack_from(view, 0)
        if magic != LZ4_FRAME_MAGIC:
            raise CorruptRecordError(f"lz4 frame has magic 0x{magic:08X}, expected 0x{LZ4_FRAME_MAGIC:08X}")
        flg, bd = view[4], view[5]
        if flg >> 6 != 1 or flg & 0x03 or not flg & _FLG_BLOCK_INDEPENDENCE:
            raise CorruptRecordError(
                f"lz4 frame descriptor FLG 0x{flg:02X} is unsupported (Kafka needs "
                f"version 1, independent blocks, reserved bits 0)"
            )
        code = (bd >> 4) & 0x07
        if bd & 0x8F or not 4 <= code <= 7:
            raise CorruptRecordError(f"lz4 frame descriptor BD 0x{bd:02X} is invalid")
        max_block = 1 << (2 * code + 8)
        hc_position = 6 + (8 if flg & _FLG_CONTENT_SIZE else 0)
        if hc_position >= end:
            raise CorruptRecordError("lz4 frame is truncated inside its descriptor")
        hc = view[hc_position]
        if hc != _header_checksum(view[4:hc_position]) and hc != _header_checksum(view[0:hc_position]):
            raise CorruptRecordError("lz4 frame descriptor checksum mismatch (Stream frame descriptor corrupted)")
        block_checksum = 4 if flg & _FLG_BLOCK_CHECKSUM else 0
        position = hc_position + 1
        parts: list[bytes] = []
        scratch = bytearray(max_block)
        while True:
            if position + 4 > end:
                raise CorruptRecordError(f"lz4 frame ended prematurely at byte {position} (no end mark)")
            (size,) = _UINT32.unpack_from(view, position)
            position += 4
            if size == 0:
                if flg & _FLG_CONTENT_CHECKSUM and position + 4 > end:
                    raise CorruptRecordError("lz4 frame ended prematurely: content checksum missing")
                return b"".join(parts)
            stored = bool(size & INCOMPRESSIBLE_MASK)
            size &= ~INCOMPRESSIBLE_MASK
            if size > max_block:
                raise CorruptRecordError(f"lz4 block size {size} at byte {position - 4} exceeds max {max_block}")
            if position + size + block_checksum > end:
                raise CorruptRecordError(f"lz4 block at byte {position - 4} is truncated")
            block = view[position : position + size]
            if stored:
                parts.append(bytes(block))
            else:
                try:
                    n = cramjam.lz4.decompress_block_into(block, scratch)
                except cramjam.DecompressionError as e:
                    raise CorruptRecordError(f"lz4 block at byte {position - 4} does not decode: {e}") from None
                parts.append(bytes(scratch[:n]))
            position += size + block_checksum
