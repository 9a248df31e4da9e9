"""Codecs: round trips, Kafka framing, cross-decoding with kafka-python, corruption -> CorruptRecordError."""

from __future__ import annotations

import gzip as stdlib_gzip
import random
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from indexer.errors import CorruptRecordError, InvalidRecordError
from indexer.records.batch_header import COMPRESSION_NAMES, RECORD_BATCH_OVERHEAD
from indexer.records.codecs import Codec, get_codec
from indexer.records.codecs.lz4 import xxh32
from indexer.records.codecs.snappy import XERIAL_BLOCK_SIZE, XERIAL_HEADER_SIZE
from tests.kafka_python import kafka_codec

CODEC_IDS = sorted(COMPRESSION_NAMES)
COMPRESSED_IDS = [cid for cid in CODEC_IDS if cid]
# Compressible and incompressible content, crossing the snappy (32 KiB) and lz4 (64 KiB) block sizes.
PAYLOADS = [
    b"",
    b"a",
    b"hello kafka " * 10,
    bytes(range(256)) * 300,
    struct.pack(">50000I", *range(50000)),
    bytes((i * 7919 + (i >> 3) * 104729) % 251 for i in range(70000)),
]


@pytest.mark.parametrize("cid", CODEC_IDS)
def test_registry_by_id_and_name(cid: int) -> None:
    codec = get_codec(cid)
    assert isinstance(codec, Codec)
    assert (codec.id, codec.name) == (cid, COMPRESSION_NAMES[cid])
    assert get_codec(codec.name) is codec
    assert get_codec(codec.name.upper()) is codec


def test_unknown_codec_id_is_an_invalid_record() -> None:
    with pytest.raises(InvalidRecordError, match="Unknown compression type id: 5"):
        get_codec(5)


def test_unknown_codec_name_is_caller_misuse() -> None:
    with pytest.raises(ValueError, match="Unknown compression name 'brotli'"):
        get_codec("brotli")


@pytest.mark.parametrize("cid", CODEC_IDS)
@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: f"{len(p)}B")
def test_round_trip_fixed(cid: int, payload: bytes) -> None:
    codec = get_codec(cid)
    assert codec.decompress(codec.compress(payload)) == payload
    assert codec.decompress(memoryview(codec.compress(memoryview(payload)))) == payload


@settings(max_examples=60, deadline=None)
@given(cid=st.sampled_from(CODEC_IDS), payload=st.binary(max_size=5000))
def test_round_trip_property(cid: int, payload: bytes) -> None:
    codec = get_codec(cid)
    assert codec.decompress(codec.compress(payload)) == payload


_KAFKA_PYTHON = {
    1: (kafka_codec.gzip_encode, kafka_codec.gzip_decode),
    2: (kafka_codec.snappy_encode, kafka_codec.snappy_decode),
    3: (kafka_codec.lz4_encode, kafka_codec.lz4_decode),
    4: (kafka_codec.zstd_encode, kafka_codec.zstd_decode),
}


@pytest.mark.parametrize("cid", COMPRESSED_IDS)
@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: f"{len(p)}B")
def test_cross_decode_with_kafka_python(cid: int, payload: bytes) -> None:
    encode, decode = _KAFKA_PYTHON[cid]
    codec = get_codec(cid)
    if cid != 2 or payload:  # kafka-python takes a bare 16-byte xerial header for raw snappy
        assert decode(codec.compress(payload)) == payload
    assert codec.decompress(encode(payload)) == payload


def test_gzip_writes_the_java_header_and_reads_concatenated_members() -> None:
    codec = get_codec("gzip")
    out = codec.compress(b"abc")
    assert out[:10] == bytes.fromhex("1f8b08000000000000ff")  # mtime 0, OS 255: JDK 16+ GZIPOutputStream
    assert stdlib_gzip.decompress(out) == b"abc"
    assert codec.decompress(stdlib_gzip.compress(b"ab") + stdlib_gzip.compress(b"cd") + b"\x00junk") == b"abcd"


def test_gzip_is_byte_identical_to_a_broker_written_batch(vectors_dir: Path) -> None:
    """Two batches of mixed-codecs-epochs were gzipped by a Java client: recompressing reproduces them."""
    data = (vectors_dir / "mixed-codecs-epochs/lsx1-0/00000000000000000000.log").read_bytes()
    codec = get_codec("gzip")
    java_written = 0
    position = 0
    while position < len(data):
        size = 12 + struct.unpack_from(">i", data, position + 8)[0]
        body = data[position + RECORD_BATCH_OVERHEAD : position + size]
        if data[position + 22] & 7 == 1 and body[:10] == bytes.fromhex("1f8b08000000000000ff"):
            assert codec.compress(codec.decompress(body)) == body
            java_written += 1
        position += size
    assert java_written == 2


def test_snappy_uses_xerial_framing_with_32k_blocks() -> None:
    codec = get_codec("snappy")
    payload = bytes(range(256)) * 300  # 76800 bytes -> 3 blocks
    out = codec.compress(payload)
    assert out[:XERIAL_HEADER_SIZE] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    assert out == kafka_codec.snappy_encode(payload, xerial_blocksize=XERIAL_BLOCK_SIZE)
    blocks, position = 0, XERIAL_HEADER_SIZE
    while position < len(out):
        position += 4 + struct.unpack_from(">i", out, position)[0]
        blocks += 1
    assert blocks == 3
    assert codec.compress(b"") == out[:XERIAL_HEADER_SIZE]


def test_snappy_reads_raw_blocks_and_concatenated_streams() -> None:
    codec = get_codec("snappy")
    raw = kafka_codec.snappy_encode(b"raw block", xerial_compatible=False)
    assert codec.decompress(raw) == b"raw block"
    assert codec.decompress(codec.compress(b"one") + codec.compress(b"two")) == b"onetwo"


def test_lz4_writes_kafkas_frame_header() -> None:
    out = get_codec("lz4").compress(b"abc")
    # magic 0x184D2204 LE, FLG 0x60 (v1, independent blocks), BD 0x40 (64 KiB), HC 0x82
    assert out[:7] == bytes.fromhex("04224d18604082")
    assert out[7:11] == struct.pack("<I", 0x80000003)  # incompressible: stored raw
    assert out.endswith(b"\x00\x00\x00\x00")


def test_lz4_frames_independent_64k_blocks_raw_when_they_do_not_shrink() -> None:
    """Kafka's block layout: each 64 KiB of input one block, stored raw (size | 0x80000000) when
    compressing does not shrink it, then the end mark and no content checksum."""
    noise = random.Random(7).randbytes(1 << 16)
    payload = b"k" * (1 << 16) + noise + b"tail"
    out = get_codec("lz4").compress(payload)
    blocks, position = [], 7
    while (size := struct.unpack_from("<I", out, position)[0]) != 0:
        stored = size & 0x80000000
        blocks.append((bool(stored), size & 0x7FFFFFFF))
        position += 4 + (size & 0x7FFFFFFF)
    assert position + 4 == len(out)
    assert [stored for stored, _ in blocks] == [False, True, True]
    assert blocks[0][1] < 1 << 16 and blocks[1][1] == 1 << 16 and blocks[2][1] == 4
    assert out[7 + 4 + blocks[0][1] + 4 :][: 1 << 16] == noise


def test_lz4_reads_the_broken_v0_header_checksum() -> None:
    codec = get_codec("lz4")
    payload = b"old kafka " * 500
    broken = kafka_codec.lz4_encode_old_kafka(payload)  # HC over magic + descriptor (KAFKA-3160)
    assert codec.decompress(broken) == payload
    good = codec.compress(payload)
    assert kafka_codec.lz4_decode_old_kafka(good[:6] + bytes([(xxh32(good[:6]) >> 8) & 0xFF]) + good[7:]) == payload


def test_lz4_rejects_a_wrong_header_checksum() -> None:
    out = bytearray(get_codec("lz4").compress(b"payload"))
    out[6] ^= 0x55
    with pytest.raises(CorruptRecordError, match="descriptor checksum"):
        get_codec("lz4").decompress(bytes(out))


def test_xxh32_matches_reference() -> None:
    xxhash = pytest.importorskip("xxhash")
    for n in (0, 1, 3, 4, 7, 15, 16, 17, 31, 64, 100):
        data = bytes(range(n))
        assert xxh32(data) == xxhash.xxh32(data).intdigest()


@pytest.mark.parametrize("cid", COMPRESSED_IDS)
def test_truncated_stream_is_corrupt(cid: int) -> None:
    codec = get_codec(cid)
    out = codec.compress(struct.pack(">50000I", *range(50000)))
    with pytest.raises(CorruptRecordError):
        codec.decompress(out[: len(out) // 2])


@pytest.mark.parametrize("cid", COMPRESSED_IDS)
def test_garbage_is_corrupt(cid: int) -> None:
    codec = get_codec(cid)
    garbage = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00\x00\x09garbage!!" if cid == 2 else b"garbage" * 9
    with pytest.raises(CorruptRecordError):
        codec.decompress(garbage)


@pytest.mark.parametrize("cid", [2, 3])
def test_block_length_beyond_the_stream_is_corrupt(cid: int) -> None:
    codec = get_codec(cid)
    out = bytearray(codec.compress(b"x" * 1000))
    if cid == 2:
        out[16:20] = struct.pack(">i", 10_000)
    else:
        out[7:11] = struct.pack("<I", 60_000)
    with pytest.raises(CorruptRecordError, match="block"):
        codec.decompress(bytes(out))


@pytest.mark.parametrize("vector", ["gzip-large-records", "snappy-headers"])
def test_broker_written_batches_decompress(vectors_dir: Path, vector: str) -> None:
    """Every compressed batch of the gzip and snappy vectors inflates to records filling the batch."""
    expected_codec = 1 if vector.startswith("gzip") else 2
    found = 0
    for log in sorted((vectors_dir / vector).glob("*/*.log")):
        data = log.read_bytes()
        position = 0
        while position < len(data):
            size = 12 + struct.unpack_from(">i", data, position + 8)[0]
            cid = data[position + 22] & 7
            if cid:
                assert cid == expected_codec
                records = get_codec(cid).decompress(data[position + RECORD_BATCH_OVERHEAD : position + size])
                count = struct.unpack_from(">i", data, position + 57)[0]
                assert len(records) >= count * 7  # every record is at least 7 bytes
                found += 1
            position += size
    assert found > 0
