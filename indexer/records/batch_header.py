"""The 61-byte header of a v2 record batch (Kafka's ``DefaultRecordBatch``), and the common
log-entry framing shared by every magic (Kafka's ``Records``).

Layout, all integers big-endian::

    offset  size  field
    0       8     baseOffset            offset of the first record
    8       4     batchLength           bytes that follow this field (= sizeInBytes - 12)
    12      4     partitionLeaderEpoch  -1 = none; NOT covered by the CRC
    16      1     magic                 2
    17      4     crc                   CRC-32C of bytes 21 .. end
    21      2     attributes            bits 0-2 codec, 3 LogAppendTime, 4 transactional, 5 control,
                                        6 delete horizon set
    23      4     lastOffsetDelta
    27      8     baseTimestamp
    35      8     maxTimestamp
    43      8     producerId            -1 = none
    51      2     producerEpoch         -1 = none
    53      4     baseSequence          -1 = none
    57      4     recordsCount
    61      ...   records (compressed as one stream when the codec is not none)

Every magic shares the first 17 bytes: an int64 offset, an int32 length of what follows, and the
magic byte at position 16.
"""

from __future__ import annotations

import os
import struct
from typing import NamedTuple

import crc32c as _crc32c

from indexer.errors import CorruptRecordError
from indexer.limits import INT32_MAX

OFFSET_OFFSET = 0
SIZE_OFFSET = 8
LOG_OVERHEAD = 12
MAGIC_OFFSET = 16
HEADER_SIZE_UP_TO_MAGIC = 17
RECORD_BATCH_OVERHEAD = 61
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
PARTITION_LEADER_EPOCH_OFFSET = 12
PRODUCER_ID_OFFSET = 43
MIN_LEGACY_RECORD_SIZE = 14  # LegacyRecord.RECORD_OVERHEAD_V0: smallest legal value of the size field

MAGIC_V0 = 0
MAGIC_V1 = 1
MAGIC_V2 = 2

COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG_MASK = 0x10
CONTROL_FLAG_MASK = 0x20
DELETE_HORIZON_FLAG_MASK = 0x40

NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

# Kafka's TimestampType names, as printed by kafka-dump-log and Spark's `timestampType` column (int).
NO_TIMESTAMP_TYPE = -1
CREATE_TIME = 0
LOG_APPEND_TIME = 1
TIMESTAMP_TYPE_NAMES = {
    NO_TIMESTAMP_TYPE: "NoTimestampType",
    CREATE_TIME: "CreateTime",
    LOG_APPEND_TIME: "LogAppendTime",
}

COMPRESSION_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
COMPRESSION_IDS = {name: cid for cid, name in COMPRESSION_NAMES.items()}

_HEADER = struct.Struct(">qiibIhiqqqhii")
assert _HEADER.size == RECORD_BATCH_OVERHEAD


def compression_name(attributes: int) -> str:
    """The codec name of a batch's or legacy message's ``attributes`` (bits 0-2), as
    ``kafka-dump-log`` prints it; ``unknown(<id>)`` for an id Kafka does not know."""
    cid = attributes & COMPRESSION_CODEC_MASK
    return COMPRESSION_NAMES.get(cid, f"unknown({cid})")


def crc_mismatch_error(
    stored: int, computed: int, *, path: str | os.PathLike[str] | None, position: int, offset: int
) -> CorruptRecordError:
    """Kafka's error for a v2 batch or legacy message whose stored CRC is not the computed one."""
    return CorruptRecordError(
        f"Record is corrupt (stored crc = {stored}, computed crc = {computed}) in file {path} at position {position}",
        path=path,
        position=position,
        offset=offset,
    )


def crc32c(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """CRC-32C (Castagnoli) as an unsigned int; hardware accelerated where the CPU has it."""
    return _crc32c.crc32c(data, value)


class BatchHeader(NamedTuple):
    """The decoded 61-byte header of a v2 batch, plus where it sits in its file."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int
    position: int = 0

    @property
    def size_in_bytes(self) -> int:
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def compression_id(self) -> int:
        return self.attributes & COMPRESSION_CODEC_MASK

    @property
    def timestamp_type(self) -> int:
        return LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_FLAG_MASK)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return increment_sequence(self.base_sequence, self.last_offset_delta)


def parse_batch_header(
    buf: bytes | bytearray | memoryview, offset: int = 0, *, position: int | None = None
) -> BatchHeader:
    """Decode the v2 header at ``buf[offset:offset+61]`` (no validation beyond the length)."""
    fields = _HEADER.unpack_from(buf, offset)
    # attributes: Kafka narrows the int16 to its low byte; keep the low byte only.
    return BatchHeader._make((*fields[:5], fields[5] & 0xFF, *fields[6:], offset if position is None else position))


def pack_batch_header(header: BatchHeader) -> bytes:
    """The 61 header bytes of ``header`` (its ``crc`` field is written as given)."""
    return _HEADER.pack(*header[:13])


def compute_batch_crc(batch: bytes | bytearray | memoryview) -> int:
    """The CRC-32C a v2 batch must store: over bytes 21 .. end of the batch."""
    return crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:])


def increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's ``DefaultRecordBatch.incrementSequence``: add with wrap-around at INT_MAX."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


def decrement_sequence(sequence: int, decrement: int) -> int:
    """Kafka's ``DefaultRecordBatch.decrementSequence``: subtract with wrap-around below 0 to INT_MAX."""
    if sequence < decrement:
        return INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement
