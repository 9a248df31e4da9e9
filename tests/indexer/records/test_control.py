"""Control records: key parsing, end-transaction markers, and the 78-byte marker batch."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest

from indexer.errors import InvalidRecordError
from indexer.records.batch_header import compute_batch_crc, parse_batch_header
from indexer.records.control import (
    END_TXN_MARKER_BATCH_SIZE,
    ControlRecordType,
    EndTransactionMarker,
    encode_end_txn_marker_batch,
    parse_control_record_key,
)
from tests.kafka_python import MemoryRecords

# spec Appendix B: COMMIT marker, baseOffset 5, producerId 1, epoch 0, coordinatorEpoch 0, ts 1700000000000
COMMIT_VECTOR = bytes.fromhex(
    "0000000000000005 00000042 00000000 02 2f9f220c 0030 00000000 0000018bcfe56800 0000018bcfe56800"
    " 0000000000000001 0000 ffffffff 00000001 20 00 00 00 08 00000001 0c 000000000000 00".replace(" ", "")
)


# (marker, its control type): the COMMIT marker of COMMIT_VECTOR, and an ABORT one with every field set
MARKERS = [
    (
        {"base_offset": 5, "producer_id": 1, "producer_epoch": 0, "coordinator_epoch": 0, "commit": True},
        ControlRecordType.COMMIT,
    ),
    (
        {"base_offset": 1234, "producer_id": 98765, "producer_epoch": 3, "coordinator_epoch": 17, "commit": False},
        ControlRecordType.ABORT,
    ),
]


def test_commit_marker_batch_matches_the_spec_vector() -> None:
    batch = encode_end_txn_marker_batch(**MARKERS[0][0], timestamp_ms=1700000000000)  # type: ignore[arg-type]
    assert batch == COMMIT_VECTOR
    assert len(batch) == END_TXN_MARKER_BATCH_SIZE


@pytest.mark.parametrize(("marker", "control_type"), MARKERS, ids=["commit", "abort"])
def test_marker_batch_decodes_with_kafka_python(marker: dict[str, Any], control_type: ControlRecordType) -> None:
    batch = encode_end_txn_marker_batch(**marker, timestamp_ms=1700000000123, partition_leader_epoch=9)
    assert len(batch) == END_TXN_MARKER_BATCH_SIZE
    header = parse_batch_header(batch)
    assert header.crc == compute_batch_crc(batch)
    assert (header.is_control, header.is_transactional, header.partition_leader_epoch) == (True, True, 9)
    decoded = MemoryRecords(batch).next_batch()
    assert decoded.validate_crc()
    assert (decoded.base_offset, decoded.producer_id, decoded.producer_epoch) == (
        marker["base_offset"],
        marker["producer_id"],
        marker["producer_epoch"],
    )
    (record,) = list(decoded)
    assert parse_control_record_key(record.key) == (0, control_type)
    marker_record = EndTransactionMarker(control_type, marker["coordinator_epoch"])
    assert EndTransactionMarker.parse(record.key, record.value) == marker_record


@pytest.mark.parametrize("control_type", [t for t in ControlRecordType if t is not ControlRecordType.UNKNOWN])
def test_key_round_trip(control_type: ControlRecordType) -> None:
    assert parse_control_record_key(control_type.record_key()) == (0, control_type)


def test_unknown_type_and_newer_version_parse() -> None:
    assert parse_control_record_key(struct.pack(">hh", 0, 42)) == (0, ControlRecordType.UNKNOWN)
    assert parse_control_record_key(struct.pack(">hh", 3, 1) + b"extra") == (3, ControlRecordType.COMMIT)
    with pytest.raises(ValueError, match="UNKNOWN"):
        ControlRecordType.UNKNOWN.record_key()


@pytest.mark.parametrize(
    ("key", "message"),
    [(b"\x00\x00\x00", "at least 4 bytes, but found only 3"), (struct.pack(">hh", -1, 0), "Invalid version")],
)
def test_bad_keys_are_invalid(key: bytes, message: str) -> None:
    with pytest.raises(InvalidRecordError, match=message):
        parse_control_record_key(key)


def test_marker_value_round_trip_and_errors() -> None:
    marker = EndTransactionMarker(ControlRecordType.COMMIT, 2**31 - 1)
    key, value = marker.serialize()
    assert (key, value) == (bytes.fromhex("00000001"), bytes.fromhex("00007fffffff"))
    assert EndTransactionMarker.parse(key, value) == marker
    with pytest.raises(InvalidRecordError, match="at least 6 bytes, but found only 5"):
        EndTransactionMarker.parse(key, value[:5])
    with pytest.raises(InvalidRecordError, match="Invalid version"):
        EndTransactionMarker.parse(key, struct.pack(">hi", -2, 0))
    with pytest.raises(InvalidRecordError, match="LEADER_CHANGE"):
        EndTransactionMarker.parse(ControlRecordType.LEADER_CHANGE.record_key(), value)
    with pytest.raises(ValueError, match="SNAPSHOT_HEADER"):
        EndTransactionMarker(ControlRecordType.SNAPSHOT_HEADER, 0)


def _uvarint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[position]
        value |= (byte & 0x7F) << shift
        position += 1
        if byte < 0x80:
            return value, position
        shift += 7


def _varint(data: bytes, position: int) -> tuple[int, int]:
    raw, position = _uvarint(data, position)
    return (raw >> 1) ^ -(raw & 1), position


def _control_record(batch: bytes) -> tuple[bytes, bytes]:
    """(key, value) of the single record of an uncompressed control batch."""
    position = 61
    _, position = _varint(batch, position)  # length
    position += 1  # attributes
    _, position = _varint(batch, position)  # timestamp delta
    _, position = _varint(batch, position)  # offset delta
    key_length, position = _varint(batch, position)
    key = batch[position : position + key_length]
    position += key_length
    value_length, position = _varint(batch, position)
    return key, batch[position : position + value_length]


def test_broker_written_control_batches(vectors_dir: Path) -> None:
    """Every COMMIT/ABORT marker a broker wrote re-encodes byte for byte; KRaft control records parse."""
    markers = kraft = 0
    for log in sorted((vectors_dir / "transactions-commit").glob("*/*.log")):
        data = log.read_bytes()
        position = 0
        while position < len(data):
            size = 12 + struct.unpack_from(">i", data, position + 8)[0]
            batch = data[position : position + size]
            header = parse_batch_header(batch)
            if header.is_control:
                key, value = _control_record(batch)
                _, control_type = parse_control_record_key(key)
                if control_type.is_end_txn_marker:
                    marker = EndTransactionMarker.parse(key, value)
                    rebuilt = encode_end_txn_marker_batch(
                        base_offset=header.base_offset,
                        producer_id=header.producer_id,
                        producer_epoch=header.producer_epoch,
                        coordinator_epoch=marker.coordinator_epoch,
                        commit=control_type is ControlRecordType.COMMIT,
                        timestamp_ms=header.base_timestamp,
                        partition_leader_epoch=header.partition_leader_epoch,
                    )
                    assert rebuilt == batch, f"{log} at {position}"
                    markers += 1
                else:
                    assert control_type is not ControlRecordType.UNKNOWN, f"{log} at {position}"
                    kraft += 1
            position += size
    assert markers > 0
    assert kraft > 0
