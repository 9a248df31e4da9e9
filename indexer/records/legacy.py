"""Magic v0 / v1 message sets, read only (Kafka's ``LegacyRecord`` and ``AbstractLegacyRecordBatch``).

Each log entry is one message, integers big-endian::

    offset  size  field
    0       8     offset       the message's offset; for a compressed wrapper, its LAST inner offset
    8       4     size         bytes that follow this field (>= 14 for v0, >= 22 for v1)
    12      4     crc          CRC-32 (IEEE, zlib) of bytes 16 .. end of the entry
    16      1     magic        0 or 1
    17      1     attributes   bits 0-2 codec, bit 3 timestamp type (v1: 0 CreateTime, 1 LogAppendTime)
    18      8     timestamp    v1 only
    18|26   4     keyLength    -1 = null key
    ...           key
    ...     4     valueLength  -1 = null value
    ...           value        for a compressed wrapper: the compressed inner message set

A compressed wrapper's value decompresses to a message set of uncompressed inner messages of the
same magic. v0 inner offsets are absolute. v1 inner offsets are relative (0..n-1 as written by
producers): ``absolute = wrapper.offset - last_inner_relative + inner_relative``. With a
LogAppendTime wrapper, every inner message takes the wrapper's timestamp.

Legacy data is rare (Kafka stopped writing it in 0.11) and never on a hot path, so this module
walks messages with a Python loop per message, unlike the v2 code.
"""

from __future__ import annotations

import dataclasses
import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from indexer.errors import CorruptRecordError, InvalidRecordError
from indexer.records.batch_header import (
    COMPRESSION_CODEC_MASK,
    CREATE_TIME,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V0,
    MAGIC_V1,
    NO_TIMESTAMP,
    NO_TIMESTAMP_TYPE,
    TIMESTAMP_TYPE_MASK,
    crc_mismatch_error,
)
from indexer.records.codecs import get_codec
from indexer.records.columns import READ_SCHEMA

RECORD_OVERHEAD_V0 = 14  # crc 4 + magic 1 + attributes 1 + keyLength 4 + valueLength 4
RECORD_OVERHEAD_V1 = 22  # + timestamp 8
LEGACY_CRC_OFFSET = 12
LEGACY_ATTRIBUTES_OFFSET = 17
LEGACY_TIMESTAMP_OFFSET = 18

_OFFSET_SIZE = struct.Struct(">qi")
_CRC_MAGIC_ATTRIBUTES = struct.Struct(">IbB")
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")

PathLike = str | os.PathLike[str] | None


@dataclass(frozen=True, slots=True)
class LegacyEntry:
    """One v0/v1 message: a shallow log entry, or an inner message of a compressed wrapper.

    ``position`` is the file position of the log entry (for inner messages: of their wrapper);
    ``size_in_bytes`` includes the 12-byte offset/size prefix. ``crc`` is the stored CRC and
    ``computed_crc`` the CRC-32 of the bytes, so ``is_valid`` needs no second pass.
    """

    offset: int
    position: int
    size_in_bytes: int
    magic: int
    attributes: int
    crc: int
    computed_crc: int
    timestamp_type: int
    timestamp: int
    key: bytes | None
    value: bytes | None

    @property
    def compression_id(self) -> int:
        return self.attributes & COMPRESSION_CODEC_MASK

    @property
    def is_compressed(self) -> bool:
        return self.compression_id != 0

    @property
    def is_valid(self) -> bool:
        return self.crc == self.computed_crc

    @property
    def key_size(self) -> int:
        return -1 if self.key is None else len(self.key)

    @property
    def value_size(self) -> int:
        return -1 if self.value is None else len(self.value)

    def ensure_valid(self, path: PathLike = None) -> None:
        """Raises CorruptRecordError (naming ``path`` and the position) if the CRC does not match."""
        if not self.is_valid:
            raise crc_mismatch_error(self.crc, self.computed_crc, path=path, position=self.position, offset=self.offset)

    def inner_entries(self, *, path: PathLike = None) -> list[LegacyEntry]:
        """The messages this entry holds, with absolute offsets: itself when uncompressed.

        Raises:
            CorruptRecordError: the wrapper's value does not decompress or an inner message is cut.
            InvalidRecordError: a null wrapper value, an empty or nested-compressed inner set, a
                magic that differs from the wrapper's, or a negative absolute base offset.
        """
        if not self.is_compressed:
            return [self]
        return _deep_entries(self, path)


def _corrupt(
    message: str, path: PathLike, position: int, cls: type[CorruptRecordError] = CorruptRecordError
) -> CorruptRecordError:
    return cls(f"{message} in file {path} at position {position}", path=path, position=position)


def _parse_entry(view: memoryview, q: int, end: int, file_position: int, path: PathLike) -> LegacyEntry:
    """The message whose log entry starts at ``view[q]``; ``file_position`` is reported in errors."""
    if q + LOG_OVERHEAD > end:
        raise _corrupt(f"Legacy message header is truncated ({end - q} bytes left)", path, file_position)
    offset, size = _OFFSET_SIZE.unpack_from(view, q)
    if size < RECORD_OVERHEAD_V0:
        raise _corrupt(
            f"Found record size {size} smaller than minimum record overhead ({RECORD_OVERHEAD_V0})",
            path,
            file_position,
        )
    entry_end = q + LOG_OVERHEAD + size
    if entry_end > end:
        raise _corrupt(f"Legacy message of size {size} is truncated ({end - q} bytes left)", path, file_position)
    crc, magic, attributes = _CRC_MAGIC_ATTRIBUTES.unpack_from(view, q + LEGACY_CRC_OFFSET)
    if magic == MAGIC_V0:
        timestamp_type, timestamp, cursor = NO_TIMESTAMP_TYPE, NO_TIMESTAMP, q + LEGACY_TIMESTAMP_OFFSET
    elif magic == MAGIC_V1:
        if size < RECORD_OVERHEAD_V1:
            raise _corrupt(
                f"Record is corrupt (size {size} is smaller than the v1 overhead {RECORD_OVERHEAD_V1})",
                path,
                file_position,
            )
        (timestamp,) = _INT64.unpack_from(view, q + LEGACY_TIMESTAMP_OFFSET)
        timestamp_type = LOG_APPEND_TIME if attributes & TIMESTAMP_TYPE_MASK else CREATE_TIME
        cursor = q + LEGACY_TIMESTAMP_OFFSET + 8
    else:
        raise _corrupt(f"Invalid magic {magic} for a legacy message", path, file_position, InvalidRecordError)
    key, cursor = _sized_bytes(view, cursor, entry_end, "key", path, file_position)
    value, cursor = _sized_bytes(view, cursor, entry_end, "value", path, file_position)
    if cursor != entry_end:
        raise _corrupt(
            f"Legacy message declares size {size} but its key and value end {entry_end - cursor} bytes early",
            path,
            file_position,
            InvalidRecordError,
        )
    return LegacyEntry(
        offset=offset,
        position=file_position,
        size_in_bytes=LOG_OVERHEAD + size,
        magic=magic,
        attributes=attributes,
        crc=crc,
        computed_crc=zlib.crc32(view[q + MAGIC_OFFSET : entry_end]),
        timestamp_type=timestamp_type,
        timestamp=timestamp,
        key=key,
        value=value,
    )


def _sized_bytes(
    view: memoryview, cursor: int, entry_end: int, what: str, path: PathLike, file_position: int
) -> tuple[bytes | None, int]:
    if cursor + 4 > entry_end:
        raise _corrupt(f"Legacy message {what} length is cut off", path, file_position, InvalidRecordError)
    (length,) = _INT32.unpack_from(view, cursor)
    cursor += 4
    if length == -1:
        return None, cursor
    if length < 0 or cursor + length > entry_end:
        raise _corrupt(
            f"Legacy message {what} length {length} exceeds the {entry_end - cursor} bytes left",
            path,
            file_position,
            InvalidRecordError,
        )
    return bytes(view[cursor : cursor + length]), cursor + length


def _deep_entries(wrapper: LegacyEntry, path: PathLike) -> list[LegacyEntry]:
    position = wrapper.position
    if wrapper.value is None:
        raise _corrupt(
            f"Found invalid compressed record set with null value (magic = {wrapper.magic})",
            path,
            position,
            InvalidRecordError,
        )
    try:
        data = get_codec(wrapper.compression_id).decompress(wrapper.value)
    except CorruptRecordError as e:
        raise _corrupt(f"Compressed legacy message does not decompress: {e}", path, position) from None
    view = memoryview(data)
    inner: list[LegacyEntry] = []
    q = 0
    while q < len(view):
        entry = _parse_entry(view, q, len(view), position, path)
        if entry.magic != wrapper.magic:
            raise _corrupt(
                f"Compressed message magic {entry.magic} does not match wrapper magic {wrapper.magic}",
                path,
                position,
                InvalidRecordError,
            )
        if entry.is_compressed:
            raise _corrupt(
                "Compressed legacy message contains a compressed message", path, position, InvalidRecordError
            )
        inner.append(entry)
        q += entry.size_in_bytes
    if not inner:
        raise _corrupt("Found invalid compressed record set with no inner records", path, position, InvalidRecordError)
    if wrapper.magic == MAGIC_V0:
        return inner
    base_offset = wrapper.offset - inner[-1].offset
    if base_offset < 0:
        raise _corrupt(
            f"Found invalid compressed record set with negative absolute base offset {base_offset}",
            path,
            position,
            InvalidRecordError,
        )
    log_append = wrapper.timestamp_type == LOG_APPEND_TIME
    return [
        dataclasses.replace(
            entry,
            offset=base_offset + entry.offset,
            timestamp=wrapper.timestamp if log_append else entry.timestamp,
            timestamp_type=wrapper.timestamp_type,
        )
        for entry in inner
    ]


def iter_legacy_entries(
    buf: bytes | bytearray | memoryview, *, base_position: int = 0, path: PathLike = None
) -> Iterator[LegacyEntry]:
    """The shallow v0/v1 log entries of ``buf`` (whole entries back to back), CRCs computed, not enforced.

    Raises:
        CorruptRecordError: an entry is cut off or its size field is impossible.
        InvalidRecordError: an entry is not magic 0/1 or its key/value lengths are inconsistent.
    """
    view = memoryview(buf).cast("B")
    q = 0
    while q < len(view):
        entry = _parse_entry(view, q, len(view), base_position + q, path)
        yield entry
        q += entry.size_in_bytes


def legacy_base_offset(entry: LegacyEntry, *, path: PathLike = None) -> int:
    """The first offset an entry holds (Kafka's ``baseOffset()``): decompresses compressed wrappers."""
    return entry.inner_entries(path=path)[0].offset


def decode_legacy_records(
    buf: bytes | bytearray | memoryview,
    *,
    base_position: int = 0,
    path: PathLike = None,
    verify_crc: bool = True,
) -> pa.Table:
    """Every message of the v0/v1 entries in ``buf`` as a READ_SCHEMA table (headers always empty).

    Raises:
        CorruptRecordError: a CRC mismatch (when ``verify_crc``), a truncated entry or a value
            that does not decompress; ``path`` and ``position`` say where.
        InvalidRecordError: a structurally invalid message (see ``LegacyEntry.inner_entries``).
    """
    offsets: list[int] = []
    timestamps: list[int] = []
    timestamp_types: list[int] = []
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    for entry in iter_legacy_entries(buf, base_position=base_position, path=path):
        if verify_crc:
            entry.ensure_valid(path)
        for record in entry.inner_entries(path=path):
            if verify_crc and record is not entry:
                record.ensure_valid(path)
            offsets.append(record.offset)
            timestamps.append(record.timestamp)
            timestamp_types.append(record.timestamp_type)
            keys.append(record.key)
            values.append(record.value)
    headers_type = READ_SCHEMA.field("headers").type
    return pa.Table.from_arrays(
        [
            pa.array(offsets, pa.int64()),
            pa.array(timestamps, pa.int64()),
            pa.array(timestamp_types, pa.int32()),
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            pa.array([[] for _ in offsets], headers_type),
        ],
        schema=READ_SCHEMA,
    )
