"""The time index, ``<base>.timeindex`` (Kafka's ``TimeIndex``).

A sparse map from timestamps to offsets. Slot ``n`` sits at byte ``12*n``; all integers
big-endian::

    offset  size  field
    0       8     timestamp         int64, ms since the epoch
    8       4     relative offset   int32, offset - base_offset (0 .. 2**31-1)

An entry ``(T, O)`` says: the largest timestamp seen at or before offset ``O`` is ``T``, so any
record with a timestamp above ``T`` comes after ``O``. Timestamps strictly increase (equal ones are
not appended); offsets never decrease. One slot is always kept free for the entry written when the
segment is rolled or closed. The file is pre-allocated (see :mod:`indexer.abstract_index`) and
carries no checksum: after a crash recovery rebuilds it.

Public methods take and return absolute offsets only.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import NamedTuple

import numpy as np

from indexer import _index_kernels as kernels
from indexer.abstract_index import AbstractIndex
from indexer.errors import CorruptIndexError, IndexFullError, InvalidOffsetError, storage_errors
from indexer.limits import INT32_MAX

NO_TIMESTAMP = -1

_ENTRY = struct.Struct(">qi")
_ENTRY_DTYPE = np.dtype([("timestamp", ">i8"), ("relative_offset", ">i4")])  # the same layout, vectorised


class TimestampOffset(NamedTuple):
    """A timestamp and the offset of the record at or before which it was the largest seen."""

    timestamp: int
    offset: int


UNKNOWN_TIMESTAMP_OFFSET = TimestampOffset(-1, -1)
"""Kafka's ``TimestampOffset.UNKNOWN``, also reachable as ``TimestampOffset.UNKNOWN``."""
TimestampOffset.UNKNOWN = UNKNOWN_TIMESTAMP_OFFSET  # type: ignore[attr-defined]  # NamedTuple has no ClassVar


class TimeIndex(AbstractIndex):
    """``<base>.timeindex``: 12-byte entries (timestamp, relative offset), searched by timestamp or offset.

    Thread-safety: ``maybe_append``, ``truncate_to`` and ``resize`` take the index lock;
    ``lookup``, ``entry`` and ``lookup_many`` are lock-free (see :class:`AbstractIndex`).
    """

    ENTRY_SIZE = 12
    _LAYOUT = kernels.TIME_LAYOUT
    _KIND = "time index"
    _OFFSET_BY_VALUE = True
    _last_entry: TimestampOffset

    @property
    def last_entry(self) -> TimestampOffset:
        """The last entry, or ``(-1, base_offset)`` when empty (cached; re-read on truncation/resize)."""
        return self._last_entry

    def _read_last_entry(self, slot: bytes | None = None) -> TimestampOffset:
        entries = self.entries
        if entries == 0:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        if slot is None:
            return self.entry(entries - 1)
        timestamp, relative = _ENTRY.unpack(slot)
        return TimestampOffset(timestamp, self.base_offset + relative)

    def _reload_last_entry(self, slot: bytes | None = None) -> None:
        self._last_entry = self._read_last_entry(slot)

    def is_full(self) -> bool:
        """True when only the slot reserved for the roll/close entry is left (entries >= max_entries-1)."""
        return self.entries >= self.max_entries - 1

    def entry(self, n: int) -> TimestampOffset:
        """Entry in slot ``n``; ``IndexError`` if ``n >= entries``. Lock-free."""
        words, _ = self._snapshot()
        self._check_slot(n)
        timestamp, relative = _ENTRY.unpack_from(words.data, n * self.ENTRY_SIZE)
        return TimestampOffset(timestamp, self.base_offset + relative)

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """The entry with the largest timestamp <= target; ``(-1, base_offset)`` if none. Lock-free."""
        slot, timestamp, offset = self._search(target_timestamp, False, False)
        if slot < 0:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        return TimestampOffset(timestamp, offset)

    def lookup_many(self, timestamps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`lookup` of every timestamp: (floor timestamps, offsets) as int64 arrays. Lock-free.

        Misses give ``(-1, base_offset)``, as ``lookup``.
        """
        return self._lookup_many(timestamps, NO_TIMESTAMP, self.base_offset)

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Append ``(timestamp, offset)`` if ``timestamp`` is larger than the last one. Thread-safe.

        An equal timestamp is silently ignored, and so is any timestamp <= -1 on an empty index
        (magic v0 data leaves the time index empty). An equal offset is allowed, so re-inserting
        the last entry on roll or close is harmless. ``skip_full_check`` may use the reserved slot;
        only the segment's roll, close and recovery pass it.

        Raises:
            IndexFullError: no free slot and ``skip_full_check`` is false.
            InvalidOffsetError: ``offset`` is smaller than the last entry's offset.
            ValueError: ``timestamp`` is smaller than the last entry's timestamp.
            IndexOffsetOverflowError: ``offset`` does not fit relative to ``base_offset``.
        """
        with self._lock:
            self._require_writable("append to")
            if not skip_full_check and self.is_full():
                raise self._full_error(self.entries)
            last = self._last_entry
            if self.entries != 0 and offset < last.offset:
                raise self._offset_error(offset, self.entries, last.offset)
            if self.entries != 0 and timestamp < last.timestamp:
                raise self._timestamp_error(timestamp, self.entries, last.timestamp)
            if timestamp > last.timestamp:
                relative = self.relative_offset(offset)
                if self._mm is None or self.entries >= self.max_entries:
                    raise self._no_slot_error()
                self._write_entry(_ENTRY.pack(timestamp, relative))
                self._entries += 1
                self._last_entry = TimestampOffset(timestamp, offset)

    def append_many(self, timestamps: np.ndarray, offsets: np.ndarray, skip_full_check: bool = False) -> None:
        """:meth:`maybe_append` of every ``(timestamps[i], offsets[i])`` in order, with one copy into the map.

        The bulk path of recovery and multi-batch appends. Writes what the calls one by one would
        (entries whose timestamp does not exceed the last one are skipped) after the same checks,
        made for all pairs before anything is written: it writes all of them or none, raising the
        error the first failing call would raise. With ``skip_full_check`` the reserved slot may be
        used. Thread-safe.

        Raises:
            IndexFullError: the entries to write do not all fit.
            InvalidOffsetError: an offset is smaller than the last written entry's offset.
            ValueError: a timestamp is smaller than the last written one, or the arrays differ in length.
            IndexOffsetOverflowError: an offset to write does not fit relative to ``base_offset``.
        """
        timestamps, offsets = self._bulk_columns(timestamps, offsets)
        n = timestamps.shape[0]
        with self._lock:
            self._require_writable("append to")
            if n == 0:
                return
            entries = self.entries
            last = self._last_entry
            # Pairs before the first write into an empty index are skipped unchecked (maybe_append's
            # "entries != 0" guards); from then on each pair is checked against the last written one.
            first = 0 if entries != 0 else int(np.argmax(timestamps > last.timestamp))
            if entries == 0 and timestamps[first] <= last.timestamp:
                first = n
            calls = np.arange(n)
            previous_ts = np.full(n, last.timestamp, np.int64)
            if n > 1:
                previous_ts[1:] = np.maximum(np.maximum.accumulate(timestamps)[:-1], last.timestamp)
            writes = (calls >= first) & (timestamps > previous_ts)
            # The last written pair before call i: its offset is what call i's offset is checked against.
            written_at = np.maximum.accumulate(np.where(writes, calls, -1))
            previous_offset = np.full(n, last.offset, np.int64)
            previous_offset[1:] = np.where(written_at[:-1] >= 0, offsets[np.maximum(written_at[:-1], 0)], last.offset)
            checked = calls > first if entries == 0 else calls >= 0
            slots_before = entries + np.cumsum(writes) - writes  # entries when call i starts
            relative = offsets - self.base_offset
            # Each call's checks in maybe_append's order; the earliest failing call decides.
            failures = np.stack(
                [
                    (slots_before >= self.max_entries - 1) & (not skip_full_check),
                    checked & (offsets < previous_offset),
                    checked & (timestamps < previous_ts),
                    writes & ((relative < 0) | (relative > INT32_MAX)),
                    writes & (slots_before >= self.max_entries),
                ]
            )
            failure = self._first_failure(failures)
            if failure is not None:
                i, kind = failure
                slot = int(slots_before[i])
                if kind == 0:
                    raise self._full_error(slot)
                if kind == 1:
                    raise self._offset_error(int(offsets[i]), slot, int(previous_offset[i]))
                if kind == 2:
                    raise self._timestamp_error(int(timestamps[i]), slot, int(previous_ts[i]))
                if kind == 3:
                    self.relative_offset(int(offsets[i]))
                raise self._no_slot_error()
            count = int(np.count_nonzero(writes))
            if count == 0:
                return
            new_ts, new_offsets = timestamps[writes], offsets[writes]
            relative = relative[writes]
            packed = np.empty(count, dtype=np.dtype([("timestamp", ">i8"), ("offset", ">i4")]))
            packed["timestamp"] = new_ts
            packed["offset"] = relative
            self._write_entries(entries, packed)
            self._entries = entries + count
            self._last_entry = TimestampOffset(int(new_ts[-1]), int(new_offsets[-1]))

    def _no_slot_error(self) -> IndexFullError:
        path = self.path.absolute()
        return IndexFullError(f"Time index {path} has no slot left, not even the reserved one", path=path)

    def _offset_error(self, offset: int, slot: int, last: int) -> InvalidOffsetError:
        path = self.path.absolute()
        return InvalidOffsetError(
            f"Attempt to append an offset ({offset}) to slot {slot} no larger than the "
            f"last offset appended ({last}) to {path}",
            path=path,
            offset=offset,
        )

    def _timestamp_error(self, timestamp: int, slot: int, last: int) -> ValueError:
        return ValueError(
            f"Attempt to append a timestamp ({timestamp}) to slot {slot} no larger than "
            f"the last timestamp appended ({last}) to {self.path.absolute()}"
        )

    def sanity_check(self) -> None:
        """Raise :class:`CorruptIndexError` (naming the file): decreasing timestamps, bad offset or length."""
        path = self.path.absolute()
        last = self._last_entry
        if self.entries != 0:
            first_timestamp = self.entry(0).timestamp
            if last.timestamp < first_timestamp:
                raise CorruptIndexError(
                    f"Corrupt time index found, time index file ({path}) has non-zero size but the "
                    f"last timestamp is {last.timestamp} which is less than the first timestamp "
                    f"{first_timestamp}",
                    path=path,
                )
        if self.entries != 0 and last.offset < self.base_offset:
            raise CorruptIndexError(
                f"Corrupt time index found, time index file ({path}) has non-zero size but the "
                f"last offset is {last.offset} which is less than the first offset {self.base_offset}",
                path=path,
            )
        self._check_length()


def largest_timestamp_in_file(path: Path, base_offset: int) -> int:
    """The largest timestamp a ``.timeindex`` file holds, -1 if none: metadata only, no ``.log`` read.

    The last slot of a trimmed index holds the segment's max timestamp (written on roll and
    close); an un-trimmed (preallocated, zero-filled) one ends in zero slots, so then the largest
    of all entries is taken. Used to decide retention from files (Kafka's ``largestTimestamp``).
    The file is read, never mapped: it may be a live writer's active index, trimmed on roll at
    any moment (a mapping would fault).

    Raises:
        StorageError: the file cannot be read.
    """
    with storage_errors(path, "read time index"), open(path, "rb") as f:
        entries = os.fstat(f.fileno()).st_size // TimeIndex.ENTRY_SIZE
        if entries == 0:
            return -1
        f.seek((entries - 1) * TimeIndex.ENTRY_SIZE)
        last = f.read(TimeIndex.ENTRY_SIZE)
        if len(last) < TimeIndex.ENTRY_SIZE:  # trimmed meanwhile
            return -1
        timestamp, relative = _ENTRY.unpack(last)
        if timestamp == 0 and relative == 0 and entries > 1:
            f.seek(0)
            data = f.read(entries * TimeIndex.ENTRY_SIZE)
            whole = len(data) // TimeIndex.ENTRY_SIZE
            stamps = np.frombuffer(data, dtype=_ENTRY_DTYPE, count=whole)["timestamp"]
            return int(stamps.max()) if whole else -1
        return int(timestamp)
