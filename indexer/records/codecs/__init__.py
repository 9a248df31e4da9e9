"""Compression codecs of Kafka record batches: ``get_codec(id or name) -> Codec``."""

from indexer.records.codecs.codec import Codec, get_codec

__all__ = ["Codec", "get_codec"]
