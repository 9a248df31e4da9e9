"""The ``Codec`` interface and the registry of Kafka's compression codecs (Kafka's ``CompressionType``).

A codec turns the records section of a batch (bytes 61.. of a v2 batch, or the value of a legacy
wrapper message) into the stream Kafka writes and back. Ids are the values of attribute bits 0-2:
0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd; names are those of ``batch_header.COMPRESSION_NAMES``
(the ``compression.type`` config values). Codecs are stateless and thread-safe.

Every codec raises :class:`~indexer.errors.CorruptRecordError` when its input does not decompress;
the message names the codec and what was wrong, callers add the file and position.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod

from indexer.errors import InvalidRecordError
from indexer.records.batch_header import COMPRESSION_IDS, COMPRESSION_NAMES


class Codec(ABC):
    """One compression codec: its Kafka id and name, and whole-buffer compress / decompress."""

    id: int
    name: str

    @abstractmethod
    def compress(self, data: bytes | memoryview) -> bytes:
        """``data`` framed and compressed exactly as Kafka's producer writes it for this codec."""

    @abstractmethod
    def decompress(self, data: bytes | memoryview) -> bytes:
        """The uncompressed bytes of one complete compressed stream.

        Raises:
            CorruptRecordError: the stream is truncated, has a bad checksum or does not decode.
        """

    def __repr__(self) -> str:
        return f"{type(self).__name__}(id={self.id}, name={self.name!r})"


class NoneCodec(Codec):
    """Compression type ``none``: the bytes as they are."""

    id = 0
    name = "none"

    def compress(self, data: bytes | memoryview) -> bytes:
        return bytes(data)

    def decompress(self, data: bytes | memoryview) -> bytes:
        return bytes(data)


@functools.cache
def _registry() -> dict[int, Codec]:
    """Id -> codec instance; built on first use so importing this module loads no codec library."""
    from indexer.records.codecs.gzip import GzipCodec
    from indexer.records.codecs.lz4 import Lz4Codec
    from indexer.records.codecs.snappy import SnappyCodec
    from indexer.records.codecs.zstd import ZstdCodec

    codecs: list[Codec] = [NoneCodec(), GzipCodec(), SnappyCodec(), Lz4Codec(), ZstdCodec()]
    registry = {codec.id: codec for codec in codecs}
    assert {cid: c.name for cid, c in registry.items()} == COMPRESSION_NAMES
    return registry


def get_codec(id_or_name: int | str) -> Codec:
    """The codec with Kafka compression id ``id_or_name`` (0-4) or name (``"none"``, ``"gzip"``, ...).

    Raises:
        InvalidRecordError: an unknown id (ids come from a batch's attribute bits, so an unknown
            one means the batch is corrupt; Kafka throws ``IllegalArgumentException`` there).
        ValueError: an unknown name (names come from configuration, so this is caller misuse).
    """
    registry = _registry()
    if isinstance(id_or_name, str):
        cid = COMPRESSION_IDS.get(id_or_name.lower())
        if cid is None:
            raise ValueError(f"Unknown compression name {id_or_name!r}; expected one of {sorted(COMPRESSION_IDS)}")
        return registry[cid]
    codec = registry.get(id_or_name)
    if codec is None:
        raise InvalidRecordError(f"Unknown compression type id: {id_or_name} (Kafka knows 0-4)")
    return codec
