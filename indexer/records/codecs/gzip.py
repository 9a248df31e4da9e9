"""gzip (codec id 1): one RFC 1952 gzip stream, as Kafka's ``GzipCompression`` writes it.

Kafka wraps a ``java.util.zip.GZIPOutputStream`` at level ``Deflater.DEFAULT_COMPRESSION`` (6).
Its 10-byte member header is constant -- ``1f 8b 08 00 | mtime 00000000 | xfl 00 | os ff``
(JDK 16+; older JDKs wrote os 00) -- followed by a raw deflate stream and the little-endian
CRC-32 and length of the input. We write the same header and deflate parameters (window 15,
memLevel 8, default strategy), so the output is byte-identical when the zlib versions agree.

Reading accepts any gzip stream, including several concatenated members (as
``GZIPInputStream`` does); bytes after the last member that do not start a new member are
ignored, as in Java.
"""

from __future__ import annotations

import struct
import zlib

from indexer.errors import CorruptRecordError
from indexer.records.codecs.codec import Codec

_GZIP_MAGIC = b"\x1f\x8b"
# ID1 ID2 CM=deflate FLG=0 MTIME=0 XFL=0 OS=255 (what GZIPOutputStream writes since JDK 16)
_JAVA_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
_TRAILER = struct.Struct("<II")
DEFAULT_LEVEL = 6  # Deflater.DEFAULT_COMPRESSION
_GZIP_WBITS = 16 + zlib.MAX_WBITS  # accept gzip framing only


class GzipCodec(Codec):
    """gzip as written by Kafka's producer and broker."""

    id = 1
    name = "gzip"

    def __init__(self, level: int = DEFAULT_LEVEL):
        self.level = level

    def compress(self, data: bytes | memoryview) -> bytes:
        deflater = zlib.compressobj(self.level, zlib.DEFLATED, -zlib.MAX_WBITS, 8, zlib.Z_DEFAULT_STRATEGY)
        body = deflater.compress(data) + deflater.flush()
        return b"".join((_JAVA_GZIP_HEADER, body, _TRAILER.pack(zlib.crc32(data), len(data) & 0xFFFFFFFF)))

    def decompress(self, data: bytes | memoryview) -> bytes:
        parts: list[bytes] = []
        remaining: bytes | memoryview = data
        while True:
            inflater = zlib.decompressobj(_GZIP_WBITS)
            try:
                parts.append(inflater.decompress(remaining))
            except zlib.error as e:
                raise CorruptRecordError(f"gzip stream does not decode: {e}") from None
            if not inflater.eof:
                raise CorruptRecordError(f"gzip stream is truncated (ends after {len(data)} compressed bytes)")
            remaining = inflater.unused_data
            if not remaining.startswith(_GZIP_MAGIC):
                return b"".join(parts)
