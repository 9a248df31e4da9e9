"""The offset index, ``<base>.index`` (Kafka's ``OffsetIndex``).

A sparse map from offsets to byte positions in the segment's ``.log``. Slot ``n`` sits at byte
``8*n``; all integers big-endian::

    offset  size  field
    0       4     relative offset   int32, offset - base_offset (0 .. 2**31-1)
    4       4     position          int32, byte position of a batch in the .log file

An entry ``(offset, position)`` says: the batch starting at ``position`` (or one starting after it)
holds offsets up to ``offset``. Offsets are strictly increasing. The file is pre-allocated (see
:mod:`indexer.abstract_index`) and carries no checksum: after a crash recovery rebuilds it.

Public methods take and return absolute offsets only.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import numpy as np

from indexer import _index_kernels as kernels
from indexer.abstract_index import AbstractIndex
from indexer.errors import CorruptIndexError, InvalidOffsetError
from indexer.limits import INT32_MAX

_ENTRY = struct.Struct(">ii")


class OffsetPosition(NamedTuple):
    """An offset and the byte position in the ``.log`` file of the batch holding it."""

    offset: int
    position: int


class OffsetIndex(AbstractIndex):
    """``<base>.index``: 8-byte entries (relative offset, position), searched by offset (key) or position.

    Thread-safety: ``append`` and ``truncate_to`` take the index lock; ``lookup``, ``entry``,
    ``fetch_upper_bound_offset`` and ``lookup_many`` are lock-free (see :class:`AbstractIndex`).
    """

    ENTRY_SIZE = 8
    _LAYOUT = kernels.OFFSET_LAYOUT
    _KIND = "index"
    _OFFSET_BY_VALUE = False
    _last_offset: int

    @property
    def last_offset(self) -> int:
        """Offset of the last entry, or ``base_offset`` when empty."""
        return self._last_offset

    def _read_last_entry(self, slot: bytes | None = None) -> OffsetPosition:
        entries = self.entries
        if entries == 0:
            return OffsetPosition(self.base_offset, 0)
        if slot is None:
            return self.entry(entries - 1)
        relative, position = _ENTRY.unpack(slot)
        return OffsetPosition(self.base_offset + relative, position)

    def _reload_last_entry(self, slot: bytes | None = None) -> None:
        self._last_offset = self._read_last_entry(slot).offset

    def entry(self, n: int) -> OffsetPosition:
        """Entry in slot ``n``; ``IndexError`` if ``n >= entries``. Lock-free."""
        words, _ = self._snapshot()
        self._check_slot(n)
        relative, position = _ENTRY.unpack_from(words.data, n * self.ENTRY_SIZE)
        return OffsetPosition(self.base_offset + relative, position)

    def lookup(self, target_offset: int) -> OffsetPosition:
        """The entry with the largest offset <= ``target_offset``; ``(base_offset, 0)`` if none. Lock-free."""
        slot, offset, position = self._search(target_offset, False, False)
        if slot < 0:
            return OffsetPosition(self.base_offset, 0)
        return OffsetPosition(offset, position)

    def lookup_many(self, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`lookup` of every offset: (floor offsets, positions) as int64 arrays. Lock-free.

        Misses give ``(base_offset, 0)``, as ``lookup``.
        """
        return self._lookup_many(offsets, self.base_offset, 0)

    def fetch_upper_bound_offset(self, fetch_offset_position: OffsetPosition, fetch_size: int) -> OffsetPosition | None:
        """An entry whose position is >= ``fetch_offset_position.position + fetch_size``, or None.

        Its offset is guaranteed to lie outside the fetched byte range (not necessarily the smallest
        such offset). Lock-free.
        """
        slot, offset, position = self._search(fetch_offset_position.position + fetch_size, True, True)
        if slot < 0:
            return None
        return OffsetPosition(offset, position)

    def append(self, offset: int, position: int) -> None:
        """Append ``(offset, position)``. Thread-safe.

        Raises:
            IndexFullError: no free slot (the segment must roll).
            InvalidOffsetError: ``offset`` is not larger than the last offset.
            IndexOffsetOverflowError: ``offset`` is not within ``[base_offset, base_offset + 2**31-1]``.
        """
        with self._lock:
            self._require_writable("append to")
            if self.is_full():
                raise self._full_error(self.entries)
            if self.entries != 0 and offset <= self._last_offset:
                raise self._out_of_order_error(offset, self.entries, self._last_offset)
            if not 0 <= position <= INT32_MAX:
                raise ValueError(f"position {position} does not fit an index entry of {self.path.absolute()}")
            relative = self.relative_offset(offset)
            self._write_entry(_ENTRY.pack(relative, position))
            self._entries += 1
            self._last_offset = offset

    def append_many(self, offsets: np.ndarray, positions: np.ndarray) -> None:
        """:meth:`append` of every ``(offsets[i], positions[i])`` in order, with one copy into the map.

        The bulk path of recovery and multi-batch appends: the same checks as ``append``, made for
        all entries before any is written, so it writes all of them or none, raising the error the
        first failing ``append`` would raise. Thread-safe.

        Raises:
            IndexFullError: the entries do not all fit.
            InvalidOffsetError: an offset is not larger than the one before it (or the last offset).
            IndexOffsetOverflowError: an offset is not within ``[base_offset, base_offset + 2**31-1]``.
            ValueError: the arrays differ in length, or a position is outside ``[0, 2**31-1]``.
        """
        offsets, positions = self._bulk_columns(offsets, positions)
        n = offsets.shape[0]
        with self._lock:
            self._require_writable("append to")
            if n == 0:
                return
            entries = self.entries
            previous = np.empty(n, np.int64)
            previous[1:] = offsets[:-1]
            previous[0] = self._last_offset if entries != 0 else offsets[0] - 1
            relative = offsets - self.base_offset
            # Each append's checks in append's order; the earliest failing append decides.
            failures = np.stack(
                [
                    entries + np.arange(n) >= self.max_entries,
                    offsets <= previous,
                    (positions < 0) | (positions > INT32_MAX),
                    (relative < 0) | (relative > INT32_MAX),
                ]
            )
            failure = self._first_failure(failures)
            if failure is not None:
                i, kind = failure
                if kind == 0:
                    raise self._full_error(entries + i)
                if kind == 1:
                    raise self._out_of_order_error(int(offsets[i]), entries + i, int(previous[i]))
                if kind == 2:
                    raise ValueError(
                        f"position {int(positions[i])} does not fit an index entry of {self.path.absolute()}"
                    )
                self.relative_offset(int(offsets[i]))
            packed = np.empty((n, 2), dtype=">i4")
            packed[:, 0] = relative
            packed[:, 1] = positions
            self._write_entries(entries, packed)
            self._entries = entries + n
            self._last_offset = int(offsets[-1])

    def _out_of_order_error(self, offset: int, slot: int, last: int) -> InvalidOffsetError:
        path = self.path.absolute()
        return InvalidOffsetError(
            f"Attempt to append an offset {offset} to position {slot} no larger than "
            f"the last offset appended ({last}) to {path}",
            path=path,
            offset=offset,
        )

    def sanity_check(self) -> None:
        """Raise :class:`CorruptIndexError` (naming the file) on an impossible last offset or length."""
        path = self.path.absolute()
        if self.entries != 0 and self._last_offset < self.base_offset:
            raise CorruptIndexError(
                f"Corrupt index found, index file {path} has non-zero size but the last offset is "
                f"{self._last_offset} which is less than the base offset {self.base_offset}",
                path=path,
            )
        self._check_length()
