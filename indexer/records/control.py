"""Control records (Kafka's ``ControlRecordType``, ``EndTransactionMarker``).

A control batch has attribute bit 5 set (transaction markers also bit 4), no compression,
baseSequence -1 and exactly one record whose key and value are, big-endian::

    key    (4 bytes)  version int16 (0) | type int16
                      0 ABORT, 1 COMMIT, 2 LEADER_CHANGE, 3 SNAPSHOT_HEADER, 4 SNAPSHOT_FOOTER,
                      5 KRAFT_VERSION, 6 KRAFT_VOTERS; any other type reads as UNKNOWN (-1)
    value  (6 bytes)  version int16 (0) | coordinatorEpoch int32      (COMMIT / ABORT markers)

A COMMIT or ABORT marker record is 17 bytes (length varint 16 + 16 body bytes), so a marker batch
is 61 + 17 = 78 bytes. Newer key or value versions are read as version 0 (Kafka logs and does the
same); negative versions and short buffers are corrupt.
"""

from __future__ import annotations

import enum
import logging
import struct
from dataclasses import dataclass

from indexer.errors import InvalidRecordError
from indexer.records.batch_header import (
    CONTROL_FLAG_MASK,
    CRC_OFFSET,
    CREATE_TIME,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_SEQUENCE,
    RECORD_BATCH_OVERHEAD,
    TRANSACTIONAL_FLAG_MASK,
    BatchHeader,
    compute_batch_crc,
    pack_batch_header,
)

logger = logging.getLogger(__name__)

CURRENT_CONTROL_RECORD_KEY_VERSION = 0
CURRENT_END_TXN_MARKER_VERSION = 0
END_TXN_MARKER_BATCH_SIZE = 78

_KEY = struct.Struct(">hh")
_MARKER_VALUE = struct.Struct(">hi")


class ControlRecordType(enum.IntEnum):
    """The type field of a control record key."""

    UNKNOWN = -1
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6

    @classmethod
    def from_type_id(cls, type_id: int) -> ControlRecordType:
        """The type with id ``type_id``, or ``UNKNOWN`` for ids this version does not know."""
        try:
            return cls(type_id)
        except ValueError:
            return cls.UNKNOWN

    @property
    def is_end_txn_marker(self) -> bool:
        return self in (ControlRecordType.ABORT, ControlRecordType.COMMIT)

    def record_key(self) -> bytes:
        """The 4-byte key of a control record of this type."""
        if self is ControlRecordType.UNKNOWN:
            raise ValueError("Cannot serialize UNKNOWN control record type")
        return _KEY.pack(CURRENT_CONTROL_RECORD_KEY_VERSION, self.value)


def parse_control_record_key(key: bytes | memoryview) -> tuple[int, ControlRecordType]:
    """``(version, type)`` of a control record key.

    Raises:
        InvalidRecordError: the key has fewer than 4 bytes or a negative version.
    """
    version, type_id = _unpack_versioned(_KEY, key, "control record key", CURRENT_CONTROL_RECORD_KEY_VERSION)
    return version, ControlRecordType.from_type_id(type_id)


def _unpack_versioned(
    layout: struct.Struct, data: bytes | memoryview, what: str, current_version: int
) -> tuple[int, int]:
    """``(version, field)`` of a control record key or marker value (``what``), Kafka's checks.

    Both start with an int16 version: fewer than ``layout.size`` bytes or a negative version is
    corrupt; a version other than ``current_version`` is read as that version (and logged).
    """
    if len(data) < layout.size:
        raise InvalidRecordError(
            f"Invalid value size found for {what}. Must have at least {layout.size} bytes, but found only {len(data)}"
        )
    version, field = layout.unpack_from(data, 0)
    if version < 0:
        raise InvalidRecordError(f"Invalid version found for {what}: {version}. May indicate data corruption")
    if version != current_version:
        logger.debug("Received %s version %d. Parsing as version %d.", what, version, current_version)
    return version, field


@dataclass(frozen=True, slots=True)
class EndTransactionMarker:
    """The value of a COMMIT or ABORT control record."""

    control_type: ControlRecordType
    coordinator_epoch: int

    def __post_init__(self) -> None:
        if not self.control_type.is_end_txn_marker:
            raise ValueError(f"Invalid control record type for end transaction marker: {self.control_type.name}")

    @classmethod
    def parse(cls, key: bytes | memoryview, value: bytes | memoryview) -> EndTransactionMarker:
        """The marker held by a control record with ``key`` and ``value``.

        Raises:
            InvalidRecordError: the key is not a COMMIT/ABORT key, the value is shorter than 6 bytes,
                or a version is negative.
        """
        _, control_type = parse_control_record_key(key)
        if not control_type.is_end_txn_marker:
            raise InvalidRecordError(f"Invalid type for end transaction marker control record: {control_type.name}")
        _, coordinator_epoch = _unpack_versioned(
            _MARKER_VALUE, value, "end transaction marker", CURRENT_END_TXN_MARKER_VERSION
        )
        return cls(control_type, coordinator_epoch)

    def serialize_key(self) -> bytes:
        return self.control_type.record_key()

    def serialize_value(self) -> bytes:
        return _MARKER_VALUE.pack(CURRENT_END_TXN_MARKER_VERSION, self.coordinator_epoch)

    def serialize(self) -> tuple[bytes, bytes]:
        """``(key, value)`` of the control record carrying this marker."""
        return self.serialize_key(), self.serialize_value()


# The marker record with every delta 0 and no headers:
# length 16 (zig-zag 0x20), attributes 0, timestampDelta 0, offsetDelta 0, keyLength 4 (0x08), key,
# valueLength 6 (0x0c), value, headerCount 0.
_MARKER_RECORD_PREFIX = bytes((0x20, 0x00, 0x00, 0x00, 0x08))
_MARKER_VALUE_LENGTH = bytes((0x0C,))
_NO_HEADERS = bytes((0x00,))


def encode_end_txn_marker_batch(
    *,
    base_offset: int,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    commit: bool,
    timestamp_ms: int,
    partition_leader_epoch: int = 0,
) -> bytes:
    """The 78-byte v2 control batch holding one COMMIT (``commit=True``) or ABORT marker.

    Matches Kafka's ``MemoryRecords.withEndTransactionMarker``: transactional + control attributes,
    CreateTime, base and max timestamp ``timestamp_ms``, baseSequence -1, one record.
    """
    marker = EndTransactionMarker(ControlRecordType.COMMIT if commit else ControlRecordType.ABORT, coordinator_epoch)
    key, value = marker.serialize()
    record = b"".join((_MARKER_RECORD_PREFIX, key, _MARKER_VALUE_LENGTH, value, _NO_HEADERS))
    attributes = TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK | (CREATE_TIME << 3)
    header = BatchHeader(
        base_offset=base_offset,
        batch_length=RECORD_BATCH_OVERHEAD + len(record) - LOG_OVERHEAD,
        partition_leader_epoch=partition_leader_epoch,
        magic=MAGIC_V2,
        crc=0,
        attributes=attributes,
        last_offset_delta=0,
        base_timestamp=timestamp_ms,
        max_timestamp=timestamp_ms,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=NO_SEQUENCE,
        records_count=1,
    )
    batch = bytearray(pack_batch_header(header) + record)
    batch[CRC_OFFSET : CRC_OFFSET + 4] = compute_batch_crc(batch).to_bytes(4, "big")
    assert len(batch) == END_TXN_MARKER_BATCH_SIZE
    return bytes(batch)
