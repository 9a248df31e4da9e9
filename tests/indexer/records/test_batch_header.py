from __future__ import annotations

from indexer.records import batch_header as bh

# Appendix B of the spec: a 69-byte batch with value "a", verified against kafka-python.
VALUE_A = bytes.fromhex(
    "0000000000000000"
    "00000039"
    "00000000"
    "02"
    "965a94b1"
    "0000"
    "00000000"
    "0000018bcfe56800"
    "0000018bcfe56800"
    "ffffffffffffffff"
    "ffff"
    "ffffffff"
    "00000001"
    "0e"
    "00"
    "00"
    "00"
    "01"
    "02"
    "61"
    "00"
)


def test_crc32c_check_value() -> None:
    assert bh.crc32c(b"123456789") == 0xE3069283


def test_parse_appendix_b_header() -> None:
    h = bh.parse_batch_header(VALUE_A)
    assert h.size_in_bytes == len(VALUE_A) == 69
    assert (h.base_offset, h.last_offset, h.records_count, h.magic) == (0, 0, 1, 2)
    assert h.crc == 2522518705 == bh.compute_batch_crc(VALUE_A)
    assert h.max_timestamp == 1700000000000 and h.timestamp_type == bh.CREATE_TIME
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence) == (-1, -1, -1, -1)
    assert not h.is_control and not h.is_transactional and bh.compression_name(h.attributes) == "none"
    assert bh.pack_batch_header(h) == VALUE_A[:61]


def test_compression_name_of_attributes() -> None:
    names = ["none", "gzip", "snappy", "lz4", "zstd", "unknown(5)", "unknown(7)"]
    assert [bh.compression_name(attributes) for attributes in (0, 1, 0x12, 3, 0x34, 5, 7)] == names


def test_increment_sequence_wraps() -> None:
    assert bh.increment_sequence(5, 3) == 8
    assert bh.increment_sequence(2**31 - 1, 1) == 0
    assert bh.increment_sequence(2**31 - 2, 3) == 1


def test_decrement_sequence_undoes_increment() -> None:
    assert bh.decrement_sequence(8, 3) == 5
    assert bh.decrement_sequence(0, 1) == 2**31 - 1
    for sequence, step in ((5, 3), (2**31 - 1, 1), (2**31 - 2, 3), (0, 0)):
        assert bh.decrement_sequence(bh.increment_sequence(sequence, step), step) == sequence
