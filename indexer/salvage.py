"""Salvage: which batches of a damaged ``.log`` are intact, and what recovery removes around them.

Kafka's recovery cuts a segment at its first invalid byte and deletes every later segment: a
replica re-fetches the rest. seglog has no replica, so by default (``recovery.strategy=salvage``)
recovery keeps every *intact* batch, before and after the damage:

1. the vectorised scan (``FileRecords.scan``) walks the headers and checks the CRCs up to the first
   problem (a bad CRC, an impossible size or magic, or an entry that does not fit: a torn tail);
2. from just after that point a compiled kernel (:func:`next_candidate`) looks for the next
   plausible v2 batch start: magic 2 at +16, attribute byte 21 zero and a known codec, a length that
   fits the file, a non-negative last-offset delta and record count, offsets inside the segment's
   range; each candidate's CRC-32C is checked, the first valid one resumes the scan there. Python
   runs once per damaged region and per rejected candidate, never per byte;
3. of the CRC-valid batches found, those whose offsets cannot belong to the segment (below its
   base, past ``base + Int.MAX``, at or past the next segment's base) are dropped; so is a batch
   whose base offset (a field the CRC does not cover) was damaged in place, recognised because its
   offsets contradict both byte-adjacent neighbours while exactly its record count is missing
   between them, or because they collide with a byte-adjacent batch that, unlike it, continues the
   offsets of its other neighbour; of the rest, the longest chain with strictly increasing offsets
   is kept (a damaged base offset elsewhere must not push out the intact batches after it).

Everything not kept is a removed byte range; each becomes an offset gap (readers tolerate gaps,
as after Kafka's compaction) whose exact bounds come from the kept batches on either side (or the
segment's base offset, or the next segment's base offset). A gap at the end of the last segment
has no known upper bound here: the caller bounds it with what was committed.

On an undamaged segment none of this runs: the loader calls :func:`plan_salvage` only when the
scan stopped before the end of the file or the offsets do not increase.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numba import njit

from indexer._files import pwrite_all
from indexer.errors import storage_errors
from indexer.limits import INT32_MAX, INT64_MAX
from indexer.records.batch_header import ATTRIBUTES_OFFSET, CRC_OFFSET, LOG_OVERHEAD, RECORD_BATCH_OVERHEAD, crc32c
from indexer.records.file_records import BatchScan, FileRecords

_MAX_CODEC = 4  # zstd
_COPY_CHUNK = 8 << 20


@njit(cache=True, inline="always")
def _be_i64(buf: np.ndarray, p: np.int64) -> np.int64:
    v = np.int64(0)
    for i in range(8):
        v = (v << np.int64(8)) | np.int64(buf[p + i])
    return v


@njit(cache=True, inline="always")
def _be_i32(buf: np.ndarray, p: np.int64) -> np.int64:
    v = (
        (np.int64(buf[p]) << np.int64(24))
        | (np.int64(buf[p + 1]) << np.int64(16))
        | (np.int64(buf[p + 2]) << np.int64(8))
        | np.int64(buf[p + 3])
    )
    return v - np.int64(1 << 32) if v >= np.int64(1 << 31) else v


@njit(cache=True)
def next_candidate(buf: np.ndarray, start: int, end: int, min_base: int, max_last: int) -> int:
    """The first position ``p >= start`` of ``buf`` where a whole v2 batch header is plausible, or -1.

    Plausible: magic 2 at +16, attribute byte 21 zero and a codec id of at most 4 in byte 22, a
    batch length that fits before ``end`` (where the file ends, as a position of ``buf``: ``buf``
    may hold only a window of it), a last-offset delta and record count that are not negative, and
    offsets within ``[min_base, max_last]``. The CRC is the caller's to check.
    """
    p = np.int64(start)
    stop = np.int64(min(len(buf), end)) - RECORD_BATCH_OVERHEAD
    while p <= stop:
        if buf[p + 16] == 2 and buf[p + 21] == 0 and (buf[p + 22] & 7) <= _MAX_CODEC:
            total = _be_i32(buf, p + 8) + LOG_OVERHEAD
            if total >= RECORD_BATCH_OVERHEAD and p + total <= end:
                delta = _be_i32(buf, p + 23)
                base = _be_i64(buf, p)
                if delta >= 0 and _be_i32(buf, p + 57) >= 0 and base >= min_base and base <= max_last - delta:
                    return int(p)
        p += 1
    return -1


@njit(cache=True)
def longest_increasing_chain(base: np.ndarray, last: np.ndarray) -> np.ndarray:
    """Mask of a longest subsequence whose offsets strictly increase (``base[k] > last[j]`` for each
    consecutive pair), in O(n log n); among equally long ones, the one ending lowest."""
    n = len(base)
    tails = np.empty(n, dtype=np.int64)  # tails[k]: lowest last offset ending a chain of length k+1
    tail_index = np.empty(n, dtype=np.int64)
    previous = np.full(n, -1, dtype=np.int64)
    length = 0
    for i in range(n):
        lo, hi = 0, length
        while lo < hi:
            mid = (lo + hi) // 2
            if tails[mid] < base[i]:
                lo = mid + 1
            else:
                hi = mid
        if lo == length or last[i] < tails[lo]:
            tails[lo] = last[i]
            tail_index[lo] = i
            previous[i] = tail_index[lo - 1] if lo > 0 else -1
            if lo == length:
                length += 1
    keep = np.zeros(n, dtype=np.bool_)
    k = tail_index[length - 1] if length else -1
    while k >= 0:
        keep[k] = True
        k = previous[k]
    return keep


@dataclass(frozen=True, slots=True)
class LostRange:
    """Offsets ``[first, end)`` recovery removed from a segment; ``end`` None: up to the old log end,
    unknown from the files (only a torn or damaged end of the last segment)."""

    first: int
    end: int | None

    def to_dict(self) -> dict[str, int | None]:
        """``{"first", "last"}`` with ``last`` inclusive (None: unknown), as every offset range seglog prints."""
        return {"first": self.first, "last": None if self.end is None else self.end - 1}


@dataclass(frozen=True, slots=True)
class SalvagePlan:
    """What salvaging one ``.log`` keeps and removes.

    ``kept`` holds the intact batches (file order, original positions); ``removed`` the byte ranges
    ``(position, length)`` of the original file that go to quarantine; ``lost`` the offset ranges
    those ranges held.
    """

    size: int
    kept: BatchScan
    removed: list[tuple[int, int]]
    lost: list[LostRange]

    @property
    def kept_bytes(self) -> int:
        return int(self.kept.sizes.sum())

    @property
    def removed_bytes(self) -> int:
        return sum(length for _, length in self.removed)

    @property
    def tail_only(self) -> bool:
        """Whether only bytes at the end go (then cutting the file is enough: no rewrite)."""
        return len(self.removed) <= 1 and all(p + n == self.size for p, n in self.removed)

    @property
    def next_offset(self) -> int | None:
        """The segment's next offset after salvage (None: no batch kept)."""
        return int(self.kept.last_offsets[-1]) + 1 if len(self.kept) else None


def first_misplaced_batch(scan: BatchScan, base_offset: int, next_base: int | None) -> int | None:
    """The index of the first batch of ``scan`` (a segment based at ``base_offset``, followed by one
    based at ``next_base`` if any) whose offsets start below the segment's base, do not come after
    the batch before it (written twice, swapped, moved) or reach the next segment; None when every
    batch fits. Such batches are damage that salvage removes, although each one's CRC is valid."""
    base = np.asarray(scan.base_offsets, dtype=np.int64)
    last = np.asarray(scan.last_offsets, dtype=np.int64)
    bad = np.zeros(len(base), dtype=bool)
    if len(base):
        bad[0] = base[0] < base_offset
        bad[1:] = base[1:] <= last[:-1]
        if next_base is not None:
            bad |= last >= next_base
    hits = np.flatnonzero(bad)
    return int(hits[0]) if hits.size else None


def plan_salvage(records: FileRecords, base_offset: int, next_base: int | None, scan: BatchScan) -> SalvagePlan:
    """Find the intact batches of ``records`` (a segment based at ``base_offset``, followed by a
    segment based at ``next_base`` if any), given ``scan``, its CRC-checked scan from 0.

    The file is read with ``pread`` in windows of :data:`SEARCH_WINDOW_BYTES`, never mapped, as every
    scan is: memory stays bounded whatever the segment's size, and a writer cutting the file under
    a reader without the lock (``seglog describe``, a dry run) ends the bytes read rather than
    killing the process with SIGBUS. The plan then covers the bytes read.

    Raises:
        StorageError: the file cannot be read.
    """
    size = records.size_in_bytes()
    max_last = min(base_offset + INT32_MAX, (next_base - 1) if next_base is not None else INT64_MAX)
    pieces = [scan]
    position = scan.valid_bytes
    if position < size:
        window = _Window(records, size)
        search = position + 1
        while search < window.size:
            candidate = window.next_candidate(search, base_offset, max_last)
            if candidate < 0:
                break
            if not window.crc_valid(candidate):
                search = candidate + 1
                continue
            piece = records.scan(candidate, window.size)
            if not len(piece):
                search = candidate + 1
                continue
            pieces.append(piece)
            search = piece.valid_bytes + 1
        size = window.size
    valid = _concat(pieces)
    keep = _intact(valid, base_offset, next_base, size)
    kept = _select(valid, keep)
    removed = _removed_ranges(kept, size)
    lost = _lost_ranges(kept, size, base_offset, next_base)
    return SalvagePlan(size, kept, removed, lost)


SEARCH_WINDOW_BYTES = 8 << 20  # plan_salvage reads the file in windows of this size


class _Window:
    """The bytes of a ``.log`` that :func:`plan_salvage` searches: ``buf`` holds a window of the file
    from position ``origin`` on, read with ``pread`` and moved along as the search goes (``size``
    shrinks to where the bytes end if the file was cut meanwhile)."""

    def __init__(self, records: FileRecords, size: int) -> None:
        self.records = records
        self.size = size
        self.origin = 0
        self.buf = np.empty(0, dtype=np.uint8)

    def next_candidate(self, start: int, min_base: int, max_last: int) -> int:
        """The file position of the first plausible batch header at or after ``start`` (-1: none)."""
        while start <= self.size - RECORD_BATCH_OVERHEAD:
            if not self._holds(start, RECORD_BATCH_OVERHEAD):
                self._read(start, SEARCH_WINDOW_BYTES)
            found = int(next_candidate(self.buf, start - self.origin, self.size - self.origin, min_base, max_last))
            if found >= 0:
                return self.origin + found
            start = self.origin + len(self.buf) - RECORD_BATCH_OVERHEAD + 1  # the first position not tried
        return -1

    def crc_valid(self, position: int) -> bool:
        """Whether the batch at ``position`` (its whole header in ``buf``) has a valid CRC-32C; a batch
        reaching past the window is read on in window-sized pieces."""
        header = self.buf[position - self.origin : position - self.origin + RECORD_BATCH_OVERHEAD]
        total = int.from_bytes(header[8:12].tobytes(), "big", signed=True) + LOG_OVERHEAD
        stored = int.from_bytes(header[CRC_OFFSET:ATTRIBUTES_OFFSET].tobytes(), "big")
        crc, at, end = 0, position + ATTRIBUTES_OFFSET, position + total
        while at < end:
            if not self._holds(at, 1):
                self._read(at, min(end - at, SEARCH_WINDOW_BYTES))
                if not self._holds(at, 1):  # the file was cut: no whole batch there
                    return False
            piece = self.buf[at - self.origin : min(end, self.origin + len(self.buf)) - self.origin]
            crc = crc32c(piece.data, crc)
            at += len(piece)
        return crc == stored

    def _holds(self, position: int, length: int) -> bool:
        return self.origin <= position and position + length <= self.origin + len(self.buf)

    def _read(self, position: int, length: int) -> None:
        """Make ``buf`` the ``length`` bytes at ``position`` (fewer where the file ends)."""
        wanted = max(0, min(length, self.size - position))
        data = self.records.read(position, wanted)
        if len(data) < wanted:  # the file shrank underneath us: its bytes end here
            self.size = position + len(data)
        self.origin, self.buf = position, np.frombuffer(data, dtype=np.uint8)


_COLUMNS = ("positions", "sizes", "base_offsets", "last_offsets", "max_timestamps", "magics", "attributes")


def _concat(pieces: list[BatchScan]) -> BatchScan:
    if len(pieces) == 1:
        return pieces[0]
    columns = {name: np.concatenate([getattr(p, name) for p in pieces]).astype(np.int64) for name in _COLUMNS}
    return BatchScan(**columns, valid_bytes=pieces[-1].valid_bytes, error=pieces[-1].error)


def _select(scan: BatchScan, keep: np.ndarray) -> BatchScan:
    columns = {name: np.asarray(getattr(scan, name))[keep] for name in _COLUMNS}
    positions, sizes = columns["positions"], columns["sizes"]
    valid_bytes = int(positions[-1] + sizes[-1]) if len(positions) else 0
    return BatchScan(**columns, valid_bytes=valid_bytes, error=None)


def _intact(valid: BatchScan, base_offset: int, next_base: int | None, size: int) -> np.ndarray:
    """Mask of the CRC-valid batches kept (see the module docstring, step 3)."""
    base = np.asarray(valid.base_offsets, dtype=np.int64)
    last = np.asarray(valid.last_offsets, dtype=np.int64)
    positions = np.asarray(valid.positions, dtype=np.int64)
    ends = positions + np.asarray(valid.sizes, dtype=np.int64)
    keep = (base >= base_offset) & (last >= base) & (last - base_offset <= INT32_MAX)
    if next_base is not None:
        keep &= last < next_base
    n = len(base)
    if n == 0:
        return keep
    # A base offset damaged in place: the batch sits between two byte-adjacent neighbours (or the
    # segment's start / the next segment) whose offsets leave a hole exactly its size, which its
    # own offsets do not fill.
    before = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)  # last offset before, if adjacent
    after = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)  # base offset after, if adjacent
    adjacent = ends[:-1] == positions[1:]
    before[1:][adjacent] = last[:-1][adjacent]
    after[:-1][adjacent] = base[1:][adjacent]
    if positions[0] == 0:
        before[0] = base_offset - 1
    if next_base is not None and ends[-1] == size:
        after[-1] = next_base
    known = (before != np.iinfo(np.int64).min) & (after != np.iinfo(np.int64).min)
    misplaced = known & (base != before + 1) & (after - before - 1 == last - base + 1)
    keep &= ~misplaced
    # Two byte-adjacent batches whose offsets collide: when only one of them continues the offsets
    # of its other neighbour, the other one's base offset is the damaged one.
    anchored_before = base == before + 1
    anchored_after = last + 1 == after
    collide = np.flatnonzero(adjacent & (base[1:] <= last[:-1]))
    keep[collide[anchored_after[collide + 1] & ~anchored_before[collide]]] = False
    keep[collide[anchored_before[collide] & ~anchored_after[collide + 1]] + 1] = False
    # Two byte-adjacent batches whose offsets leave a hole (nothing lies between them to hold it), one
    # of them next to damage: when the other continues its other neighbour, the base offset of the
    # one next to the damage was hit (a zeroed range ending in its baseOffset, as after a power loss).
    damage_before = np.concatenate(([positions[0] > 0], ~adjacent))
    damage_after = np.concatenate((~adjacent, [ends[-1] < size]))
    hole = np.flatnonzero(adjacent & (base[1:] > last[:-1] + 1))
    keep[hole[damage_before[hole] & anchored_after[hole + 1]]] = False
    keep[hole[damage_after[hole + 1] & anchored_before[hole]] + 1] = False
    candidates = np.flatnonzero(keep)
    if candidates.size > 1 and np.any(base[candidates[1:]] <= last[candidates[:-1]]):
        chain = longest_increasing_chain(base[candidates], last[candidates])
        keep[candidates[~chain]] = False
    return keep


def _removed_ranges(kept: BatchScan, size: int) -> list[tuple[int, int]]:
    """The byte ranges ``(position, length)`` of a ``size``-byte file outside the kept batches."""
    starts = np.asarray(kept.positions, dtype=np.int64)
    ends = starts + np.asarray(kept.sizes, dtype=np.int64)
    gap_starts = np.concatenate(([0], ends))
    gap_ends = np.concatenate((starts, [size]))
    nonempty = gap_ends > gap_starts
    return [(int(s), int(e - s)) for s, e in zip(gap_starts[nonempty], gap_ends[nonempty], strict=True)]


def _lost_ranges(kept: BatchScan, size: int, base_offset: int, next_base: int | None) -> list[LostRange]:
    """Every offset of the segment (``size`` bytes) that no kept batch holds: before the first, between
    two, and after the last up to the next segment's base. The kept batches are in offset order, but
    removed bytes need not lie where their offsets belong (a batch swapped out of place, or damaged
    there). In the last segment, offsets after the last kept batch are lost (how many: unknown) only
    when bytes after it were removed."""
    firsts = [base_offset, *(int(o) + 1 for o in kept.last_offsets)]
    ends: list[int | None] = [*(int(o) for o in kept.base_offsets), next_base]
    if next_base is None and kept.valid_bytes >= size:
        ends[-1] = firsts[-1]  # nothing removed after the last kept batch: the log ends there
    return [LostRange(first, end) for first, end in zip(firsts, ends, strict=True) if end is None or end > first]


def offsets_without_batch(scan: BatchScan, base_offset: int, next_base: int | None) -> list[LostRange]:
    """The offsets of the segment based at ``base_offset`` (``scan``: its batches, followed by the
    segment based at ``next_base`` if any) that none of its batches holds: the gaps salvage left
    (or, in a broker's compacted segment, compaction); none after the last batch of the last segment."""
    return _lost_ranges(scan, scan.valid_bytes, base_offset, next_base)


def merge_lost_ranges(ranges: Iterable[LostRange]) -> list[LostRange]:
    """Sorted, with touching or overlapping ranges merged (an open end absorbs what follows)."""
    out: list[LostRange] = []
    for r in sorted(ranges, key=lambda r: r.first):
        if out and (out[-1].end is None or r.first <= out[-1].end):
            prev = out[-1]
            end = None if prev.end is None or r.end is None else max(prev.end, r.end)
            out[-1] = LostRange(prev.first, end)
        else:
            out.append(r)
    return out


def write_ranges(source: FileRecords, ranges: list[tuple[int, int]], target: Path) -> None:
    """Write the byte ranges ``(position, length)`` of ``source``, back to back, to the new file
    ``target`` (replaced if it exists) and fsync it. A failed copy is deleted: on a full disk it
    would hold what little space there is until a later recovery replaced it.

    Raises:
        StorageError: a read or write failed.
    """
    with storage_errors(target, "write"):
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            out = 0
            for position, length in ranges:
                done = 0
                while done < length:
                    chunk = source.read(position + done, min(length - done, _COPY_CHUNK))
                    if not chunk:
                        raise OSError(errno.EIO, f"short read of {source.path} at position {position + done}")
                    pwrite_all(fd, chunk, out)
                    done += len(chunk)
                    out += len(chunk)
            os.fsync(fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(target)
            raise
        finally:
            os.close(fd)
