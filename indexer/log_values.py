"""Small immutable values passed between segments, the log and its callers.

After Kafka's ``LogOffsetMetadata``, ``FetchDataInfo``, ``RollParams``, ``LogAppendInfo`` and
``FileRecords.TimestampAndOffset``. All are frozen: a reader can hold one while the writer moves on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from indexer.records.file_records import FileSlice

UNKNOWN_OFFSET = -1


@dataclass(frozen=True, slots=True)
class LogOffsetMetadata:
    """An offset plus, when known, where it sits: the segment's base offset and the byte position of the
    batch that holds it (Kafka ``LogOffsetMetadata``). ``-1`` for both means "message offset only"."""

    message_offset: int
    segment_base_offset: int = UNKNOWN_OFFSET
    relative_position_in_segment: int = UNKNOWN_OFFSET

    @property
    def message_offset_only(self) -> bool:
        """True when only the offset is known, not its segment and position."""
        return self.segment_base_offset == UNKNOWN_OFFSET and self.relative_position_in_segment == UNKNOWN_OFFSET


@dataclass(frozen=True, slots=True)
class FetchDataInfo:
    """The answer to a read (Kafka ``FetchDataInfo``).

    ``records`` holds whole batches from ``fetch_offset_metadata.relative_position_in_segment`` onward
    (their bytes, or the slice of the segment file holding them when read ``as_slice``);
    the last one may be cut short by the size limit, and ``first_entry_incomplete`` says the very
    first batch did not fit (a reader asked for fewer bytes than one batch without ``min_one_message``).
    """

    fetch_offset_metadata: LogOffsetMetadata
    records: bytes | FileSlice
    first_entry_incomplete: bool = False


@dataclass(frozen=True, slots=True)
class RollParams:
    """What :meth:`~indexer.segment.LogSegment.should_roll` weighs for one append (Kafka ``RollParams``)."""

    max_segment_ms: int
    max_segment_bytes: int
    max_timestamp_in_messages: int
    max_offset_in_messages: int
    messages_size: int
    now: int


@dataclass(frozen=True, slots=True)
class LogAppendInfo:
    """What one :meth:`~indexer.log.Log.append` wrote (Kafka ``LogAppendInfo``).

    ``first_offset``..``last_offset`` are the offsets assigned (``last_offset = first_offset - 1`` for an
    empty append); ``max_timestamp`` and ``offset_of_max_timestamp`` are over the appended records
    (``-1`` when empty); ``log_append_time_ms`` is the broker time stamped with ``LogAppendTime``, else
    ``-1``; ``num_batches`` and ``valid_bytes`` describe the bytes written; ``rolled`` counts the new
    segments this append opened.
    """

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time_ms: int
    log_start_offset: int
    num_records: int
    num_batches: int
    valid_bytes: int
    rolled: int = 0


class TimestampAndOffset(NamedTuple):
    """A record found by timestamp: its timestamp, offset and the batch's leader epoch (None if unset)."""

    timestamp: int
    offset: int
    leader_epoch: int | None
