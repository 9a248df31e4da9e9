"""The sorted map of a partition's segments by base offset (Kafka's ``LogSegments``).

Kafka uses a ``ConcurrentSkipListMap`` so readers never lock. Here the base offsets live in a sorted
list that is *replaced*, never mutated, on every change (copy-on-write; a roll or a deletion copies a
few thousand ints at most) and the segments in a dict. A reader takes the current list once and
bisects it without a lock; if the writer removed a segment meanwhile, the reader may still see it,
which is harmless because removed segments are only renamed to ``.deleted`` and physically deleted
after ``file.delete.delay.ms`` (the same weak consistency as Kafka's skip-list iteration).

Mutations (``add``, ``remove``, ``remove_all``, ``clear``, ``close``) are not thread-safe: the caller
holds the log lock. Lookups are thread-safe. A mutation changes the dict before it replaces the list,
so a reader that takes a segment's successor and *then* finds the segment still in the map
(:meth:`next_segment`) knows the successor followed it: a read never jumps over a removed segment.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator

from indexer.segment import LogSegment


class LogSegments:
    """Segments of one partition, ordered by base offset.

    ``topic_partition`` only names the partition in error messages.
    """

    def __init__(self, topic_partition: str) -> None:
        self.topic_partition = topic_partition
        self._bases: list[int] = []
        self._segments: dict[int, LogSegment] = {}

    # -- mutations (caller holds the log lock) -------------------------------------------------

    def add(self, segment: LogSegment) -> LogSegment | None:
        """Put ``segment`` under its base offset, replacing (and returning) any segment already there.

        Not thread-safe: the caller holds the log lock.
        """
        base = segment.base_offset
        previous = self._segments.get(base)
        self._segments[base] = segment
        if previous is None:
            bases = list(self._bases)
            bisect.insort(bases, base)
            self._bases = bases
        return previous

    def remove(self, base_offset: int) -> LogSegment | None:
        """Drop the segment with ``base_offset`` from the map (its files are untouched); returns it.

        Not thread-safe: the caller holds the log lock.
        """
        segment = self._segments.pop(base_offset, None)
        if segment is not None:
            self._bases = [b for b in self._bases if b != base_offset]
        return segment

    def remove_all(self, base_offsets: list[int]) -> None:
        """Drop the segments with these base offsets from the map at once (files untouched).

        Every segment leaves the dict before the list of bases is replaced, so a concurrent
        :meth:`next_segment` from a segment that stays never answers a segment beyond one removed.
        Not thread-safe: the caller holds the log lock.
        """
        removed = set(base_offsets)
        for base in removed:
            self._segments.pop(base, None)
        self._bases = [b for b in self._bases if b not in removed]

    def clear(self) -> None:
        """Forget every segment (files untouched). Not thread-safe: the caller holds the log lock."""
        self._bases = []
        self._segments = {}

    def close(self) -> None:
        """Close every segment (final time index entry, trim, fsync). Caller holds the log lock."""
        for segment in self.values():
            segment.close()

    def close_handlers(self) -> None:
        """Release every segment's file handles without writing. Caller holds the log lock."""
        for segment in self.values():
            segment.close_handlers()

    # -- lookups (thread-safe) -----------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._bases)

    def __iter__(self) -> Iterator[LogSegment]:
        return iter(self.values())

    def __contains__(self, base_offset: object) -> bool:
        return base_offset in self._segments

    def number_of_segments(self) -> int:
        return len(self._bases)

    def is_empty(self) -> bool:
        return not self._bases

    def contains(self, base_offset: int) -> bool:
        return base_offset in self._segments

    def get(self, base_offset: int) -> LogSegment | None:
        return self._segments.get(base_offset)

    def base_offsets(self) -> list[int]:
        """Base offsets in ascending order (a snapshot)."""
        return list(self._bases)

    def values(self, from_offset: int | None = None, to_offset: int | None = None) -> list[LogSegment]:
        """All segments ascending, or those that may hold offsets in ``[from_offset, to_offset)``.

        With a range: empty if ``from == to``; ``ValueError`` if ``to < from``; else the segments
        from the floor segment of ``from`` (or the first one) up to, excluding, the first with base
        ``>= to``. Example with bases 1,2,3,4: ``values(1, 4) == [1, 2, 3]``, ``values(4, 5) == [4]``.
        """
        bases = self._bases
        if from_offset is None and to_offset is None:
            return self._resolve(bases)
        if from_offset is None or to_offset is None:
            raise ValueError("values() takes both from_offset and to_offset, or neither")
        if from_offset == to_offset:
            return []
        if to_offset < from_offset:
            raise ValueError(
                f"Invalid log segment range: requested segments in {self.topic_partition} from offset "
                f"{from_offset} which is greater than limit offset {to_offset}"
            )
        start = max(bisect.bisect_right(bases, from_offset) - 1, 0)
        stop = bisect.bisect_left(bases, to_offset)
        return self._resolve(bases[start:stop])

    def non_active_log_segments_from(self, from_offset: int) -> list[LogSegment]:
        """Segments before the active one that may hold offsets ``>= from_offset``."""
        active = self.active_segment()
        if from_offset > active.base_offset:
            return []
        return self.values(from_offset, active.base_offset)

    def higher_segments(self, base_offset: int) -> list[LogSegment]:
        """Every segment with a base offset strictly greater than ``base_offset``, ascending."""
        bases = self._bases
        return self._resolve(bases[bisect.bisect_right(bases, base_offset) :])

    def first_segment(self) -> LogSegment | None:
        bases = self._bases
        return self._segments.get(bases[0]) if bases else None

    def first_segment_base_offset(self) -> int | None:
        bases = self._bases
        return bases[0] if bases else None

    def last_segment(self) -> LogSegment | None:
        bases = self._bases
        return self._segments.get(bases[-1]) if bases else None

    def active_segment(self) -> LogSegment:
        """The last segment, the only one appended to; ``LookupError`` if there is none."""
        segment = self.last_segment()
        if segment is None:
            raise LookupError(f"no active segment: {self.topic_partition} has no segments")
        return segment

    def floor_segment(self, offset: int) -> LogSegment | None:
        """The segment with the greatest base offset ``<= offset``."""
        bases = self._bases
        i = bisect.bisect_right(bases, offset) - 1
        return self._segments.get(bases[i]) if i >= 0 else None

    def next_segment(self, segment: LogSegment) -> LogSegment | None:
        """The segment that follows ``segment``, or None when it is the last one.

        Raises ``LookupError`` when ``segment`` is no longer in the map (removed or replaced): the
        segment after its base offset is then not necessarily the one that followed it, and a reader
        walking on would skip offsets. Membership is checked after the successor is taken; mutations
        change the dict before the list of bases (see the module docstring).
        """
        following = self.higher_segment(segment.base_offset)
        if self._segments.get(segment.base_offset) is not segment:
            raise LookupError(f"segment {segment.base_offset} is no longer in {self.topic_partition}")
        return following

    def lower_segment(self, offset: int) -> LogSegment | None:
        """The segment with the greatest base offset ``< offset``."""
        bases = self._bases
        i = bisect.bisect_left(bases, offset) - 1
        return self._segments.get(bases[i]) if i >= 0 else None

    def higher_segment(self, offset: int) -> LogSegment | None:
        """The segment with the smallest base offset ``> offset``."""
        bases = self._bases
        i = bisect.bisect_right(bases, offset)
        return self._segments.get(bases[i]) if i < len(bases) else None

    def size_in_bytes(self) -> int:
        """Sum of the segments' ``.log`` sizes."""
        return sum(segment.size for segment in self.values())

    def filter(self, predicate: Callable[[LogSegment], bool]) -> list[LogSegment]:
        """Segments (ascending) for which ``predicate`` holds."""
        return [segment for segment in self.values() if predicate(segment)]

    def _resolve(self, bases: list[int]) -> list[LogSegment]:
        # A base removed after the caller took its snapshot resolves to None and is skipped.
        segments = self._segments
        return [s for s in (segments.get(b) for b in bases) if s is not None]

    def __repr__(self) -> str:
        return f"LogSegments({self.topic_partition}, bases={self._bases})"
