"""zstd (codec id 4): a standard Zstandard frame (RFC 8878), as Kafka's ``ZstdCompression`` writes it.

Kafka streams the records through zstd-jni's ``ZstdOutputStreamNoFinalizer`` at level 3 (the
default of ``compression.zstd.level``): one frame, no content-size field (the size is not known
up front), no content checksum. We compress the same way, in streaming mode, so the frame header
has the same shape; the compressed blocks may differ between zstd versions. Reading accepts any
sequence of complete frames.
"""

from __future__ import annotations

import cramjam

from indexer.errors import CorruptRecordError
from indexer.records.codecs.codec import Codec

DEFAULT_LEVEL = 3  # ZstdCompression default level (zstd's own default)


class ZstdCodec(Codec):
    """Zstandard frames."""

    id = 4
    name = "zstd"

    def __init__(self, level: int = DEFAULT_LEVEL):
        self.level = level

    def compress(self, data: bytes | memoryview) -> bytes:
        compressor = cramjam.zstd.Compressor(level=self.level)
        # the streaming API takes bytes only
        compressor.compress(data if isinstance(data, bytes) else bytes(data))
        return bytes(compressor.finish())

    def decompress(self, data: bytes | memoryview) -> bytes:
        try:
            return bytes(cramjam.zstd.decompress(data))
        except cramjam.DecompressionError as e:
            raise CorruptRecordError(f"zstd stream does not decode: {e}") from None
