"""snappy (codec id 2): xerial ``SnappyOutputStream`` framing, as Kafka's ``SnappyCompression`` writes it.

Layout, integers big-endian::

    offset  size  field
    0       8     magic      82 'S' 'N' 'A' 'P' 'P' 'Y' 00
    8       4     version    1
    12      4     compat     1 (minimum reader version)
    16      ...   blocks:    int32 compressed length | raw snappy block

Each block holds at most 32 KiB of input (xerial's default block size, which Kafka uses), so a
block boundary falls every 32768 uncompressed bytes; empty input is the 16-byte header alone.

Reading also accepts a plain raw snappy block (no header; what xerial's ``SnappyInputStream``
falls back to), a header repeated between blocks (concatenated xerial streams), and ignores the
version fields (some producers write them little-endian).
"""

from __future__ import annotations

import struct

import cramjam

from indexer.errors import CorruptRecordError
from indexer.records.codecs.codec import Codec

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_HEADER_SIZE = len(_XERIAL_HEADER)  # 16
XERIAL_BLOCK_SIZE = 32 * 1024  # SnappyOutputStream.DEFAULT_BLOCK_SIZE
_INT32 = struct.Struct(">i")


class SnappyCodec(Codec):
    """snappy in xerial block framing."""

    id = 2
    name = "snappy"

    def compress(self, data: bytes | memoryview) -> bytes:
        view = memoryview(data).cast("B")
        parts = [_XERIAL_HEADER]
        for start in range(0, len(view), XERIAL_BLOCK_SIZE):
            block = bytes(cramjam.snappy.compress_raw(view[start : start + XERIAL_BLOCK_SIZE]))
            parts.append(_INT32.pack(len(block)))
            parts.append(block)
        return b"".join(parts)

    def decompress(self, data: bytes | memoryview) -> bytes:
        view = memoryview(data).cast("B")
        if bytes(view[: len(XERIAL_MAGIC)]) != XERIAL_MAGIC:
            return _raw_decompress(view, 0)
        parts: list[bytes] = []
        position = XERIAL_HEADER_SIZE
        end = len(view)
        while position < end:
            if bytes(view[position : position + len(XERIAL_MAGIC)]) == XERIAL_MAGIC:
                position += XERIAL_HEADER_SIZE  # a concatenated stream starts here
                continue
            if position + 4 > end:
                raise CorruptRecordError(f"snappy stream is truncated: block length cut at byte {position}")
            (length,) = _INT32.unpack_from(view, position)
            position += 4
            if length < 0 or position + length > end:
                raise CorruptRecordError(
                    f"snappy block at byte {position - 4} declares {length} bytes but {end - position} remain"
                )
            parts.append(_raw_decompress(view[position : position + length], position))
            position += length
        return b"".join(parts)


def _raw_decompress(block: memoryview, position: int) -> bytes:
    try:
        return bytes(cramjam.snappy.decompress_raw(block))
    except cramjam.DecompressionError as e:
        raise CorruptRecordError(f"snappy block at byte {position} does not decode: {e}") from None
