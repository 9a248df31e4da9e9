"""What a partition directory says about itself without opening the log: file names, sizes, mtimes
and the last entry of a time index. The daemon uses it to decide which partitions a job must open.

Retention in particular is decided from this metadata only (Kafka's ``deletableSegments`` rules,
spec 5.6): a directory of thousands of segments costs one ``scandir`` plus one ``stat`` per
``.log`` and a 12-byte read of the time index of only the oldest segments (retention deletes a
prefix, so the walk stops at the first segment that must stay). Nothing here reads ``.log`` data;
:func:`first_batch_max_timestamp` reads one 61-byte batch header for the roll check.

Index layouts read here (big-endian, Kafka's ``TimeIndex``/``OffsetIndex``)::

    .timeindex entry (12 bytes): timestamp int64 | relative offset int32
    .index entry (8 bytes):      relative offset int32 | position int32
    batch header: maxTimestamp int64 at byte 35 of the batch (``DefaultRecordBatch``)
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from indexer.config import LogConfig
from indexer.file_names import (
    INDEX_FILE_SUFFIX,
    LOG_FILE_SUFFIX,
    PARTITION_LOCK_FILE,
    TIME_INDEX_FILE_SUFFIX,
    filename_prefix_from_offset,
)
from indexer.records.batch_header import MAGIC_OFFSET, MAGIC_V2, RECORD_BATCH_OVERHEAD

TIME_ENTRY_SIZE = 12
OFFSET_ENTRY_SIZE = 8
_MAX_TIMESTAMP_AT = 35
_TIME_ENTRY = struct.Struct(">qi")
_INT64 = struct.Struct(">q")
_OFFSET_DTYPE = np.dtype([("relative_offset", ">i4"), ("position", ">i4")])
_TIME_DTYPE = np.dtype([("timestamp", ">i8"), ("relative_offset", ">i4")])


class PartitionMetadata:
    """A partition directory's segments (base offsets, sorted) and its checkpointed offsets.

    File sizes and mtimes are read lazily, one ``stat`` per file asked about, and cached: a
    retention pass without ``retention.bytes`` stats only the few oldest segments.
    """

    __slots__ = ("path", "config", "base_offsets", "log_start_offset", "high_watermark", "_stats")

    def __init__(
        self, path: Path, config: LogConfig, base_offsets: tuple[int, ...], log_start_offset: int, high_watermark: int
    ) -> None:
        self.path = path
        self.config = config
        self.base_offsets = base_offsets
        self.log_start_offset = log_start_offset
        self.high_watermark = high_watermark
        self._stats: dict[str, tuple[int, int]] = {}

    def _stat(self, name: str) -> tuple[int, int]:
        """(size, mtime ms) of a file of the partition; (-1, -1) when it does not exist."""
        cached = self._stats.get(name)
        if cached is None:
            try:
                st = os.stat(self.path / name)
                cached = (st.st_size, st.st_mtime_ns // 1_000_000)
            except FileNotFoundError:
                cached = (-1, -1)
            self._stats[name] = cached
        return cached

    def log_path(self, base_offset: int) -> Path:
        return self.path / (filename_prefix_from_offset(base_offset) + LOG_FILE_SUFFIX)

    def time_index_path(self, base_offset: int) -> Path:
        return self.path / (filename_prefix_from_offset(base_offset) + TIME_INDEX_FILE_SUFFIX)

    def log_size(self, base_offset: int) -> int:
        return max(0, self._stat(filename_prefix_from_offset(base_offset) + LOG_FILE_SUFFIX)[0])

    def log_mtime_ms(self, base_offset: int) -> int:
        return self._stat(filename_prefix_from_offset(base_offset) + LOG_FILE_SUFFIX)[1]

    def time_index_size(self, base_offset: int) -> int:
        return self._stat(filename_prefix_from_offset(base_offset) + TIME_INDEX_FILE_SUFFIX)[0]

    @property
    def size_in_bytes(self) -> int:
        return sum(self.log_size(b) for b in self.base_offsets)

    def lock_holder(self) -> str:
        """The holder line of the partition's writer lock file: empty unless a writer holds the
        partition now or died holding it (a clean close empties it)."""
        try:
            return (self.path / PARTITION_LOCK_FILE).read_text(encoding="utf-8", errors="replace").strip()
        except FileNotFoundError:
            return ""


def scan_partition(path: Path, config: LogConfig, *, log_start_offset: int, high_watermark: int) -> PartitionMetadata:
    """The segments of ``path`` from one listing of names (temporary-suffixed files are ignored)."""
    heads = [name[:-4] for name in os.listdir(path) if name.endswith(LOG_FILE_SUFFIX)]
    try:
        bases = sorted(map(int, heads))
    except ValueError:  # a stray non-segment ".log" name: the slow, filtering path
        bases = sorted(int(head) for head in heads if head.isdigit())
    return PartitionMetadata(path, config, tuple(bases), log_start_offset, high_watermark)


def largest_timestamp(meta: PartitionMetadata, base_offset: int) -> int:
    """Kafka's ``LogSegment.largestTimestamp`` from files: the time index's last entry, else the ``.log`` mtime.

    The last slot of a trimmed time index holds the segment's max timestamp (written on roll and
    close). An un-trimmed (preallocated, zero-filled) index ends in zero slots: then the entries are
    walked back to the last non-zero one, still without touching ``.log`` data.
    """
    size = meta.time_index_size(base_offset)
    if size >= TIME_ENTRY_SIZE:
        entries = size // TIME_ENTRY_SIZE
        with open(meta.time_index_path(base_offset), "rb") as f:
            f.seek((entries - 1) * TIME_ENTRY_SIZE)
            timestamp, relative = _TIME_ENTRY.unpack(f.read(TIME_ENTRY_SIZE))
            if timestamp == 0 and relative == 0 and entries > 1:
                f.seek(0)
                stamps = np.frombuffer(f.read(entries * TIME_ENTRY_SIZE), dtype=_TIME_DTYPE)["timestamp"]
                timestamp = int(stamps.max()) if stamps.size else -1
        if timestamp >= 0:
            return int(timestamp)
    return meta.log_mtime_ms(base_offset)


def first_batch_max_timestamp(log_path: Path) -> int:
    """The max timestamp of the first batch of a ``.log`` (Kafka's rolling-based timestamp), -1 if none."""
    with open(log_path, "rb") as f:
        head = f.read(RECORD_BATCH_OVERHEAD)
    if len(head) < RECORD_BATCH_OVERHEAD or head[MAGIC_OFFSET] < MAGIC_V2:
        return -1
    return int(_INT64.unpack_from(head, _MAX_TIMESTAMP_AT)[0])


@dataclass(frozen=True, slots=True)
class RetentionPlan:
    """Segments retention would delete: ``base_offsets`` for sure; ``last_segment_may_go`` when the
    last segment breaches too and only the log end offset (unknown here) decides."""

    base_offsets: tuple[int, ...]
    last_segment_may_go: bool

    @property
    def needs_log(self) -> bool:
        return bool(self.base_offsets) or self.last_segment_may_go


def plan_retention(meta: PartitionMetadata, now_ms: int) -> RetentionPlan:
    """What retention would delete now (spec 5.6), decided from metadata alone.

    Mirrors ``UnifiedLog.deleteOldSegments``: log start offset breach, then ``retention.bytes``,
    then ``retention.ms``; each deletes a prefix of segments wholly below the high watermark, never
    an empty last segment. The last segment's upper bound is the log end offset, unknown without
    reading the active segment, so for it the plan only says "may go": the engine decides when the
    partition is opened.
    """
    segments = list(meta.base_offsets)
    deleted: list[int] = []
    last_may_go = False

    def take(predicate: Callable[[int, int | None], bool]) -> None:
        nonlocal last_may_go
        while segments:
            following = segments[1] if len(segments) > 1 else None
            if following is None:
                last_may_go = last_may_go or (meta.log_size(segments[0]) > 0 and predicate(segments[0], None))
                return
            if meta.high_watermark < following or not predicate(segments[0], following):
                return
            deleted.append(segments.pop(0))

    take(lambda _base, following: following is not None and following <= meta.log_start_offset)
    config = meta.config
    if config.retention_bytes >= 0:
        size = sum(meta.log_size(b) for b in segments)
        if size >= config.retention_bytes:
            diff = size - config.retention_bytes

            def size_breach(base: int, _following: int | None) -> bool:
                nonlocal diff
                if diff - meta.log_size(base) >= 0:
                    diff -= meta.log_size(base)
                    return True
                return False

            take(size_breach)
    if config.retention_ms >= 0:
        take(lambda base, _following: now_ms - largest_timestamp(meta, base) > config.retention_ms)
    return RetentionPlan(tuple(deleted), last_may_go)




def index_problem(directory: Path, base_offset: int, log_size: int, next_base_offset: int | None) -> str | None:
    """Why the ``.index``/``.timeindex`` of an inactive segment cannot be trusted, or None.

    Kafka's sanity checks (spec 1.2, 1.3) plus what a sealed segment's indexes must also satisfy:
    both files exist, hold whole entries that strictly increase (a zero-filled, un-trimmed tail
    fails this), point inside the ``.log`` and below the next segment's base offset. Reads only the
    two index files (vectorised), never the ``.log``.

    Raises:
        FileNotFoundError: the ``.log`` went away meanwhile (retention renamed it); callers skip it.
    """
    prefix = directory / filename_prefix_from_offset(base_offset)
    offset_path = prefix.with_name(prefix.name + INDEX_FILE_SUFFIX)
    time_path = prefix.with_name(prefix.name + TIME_INDEX_FILE_SUFFIX)
    limit = (next_base_offset - base_offset) if next_base_offset is not None else 2**31
    try:
        raw_offsets = offset_path.read_bytes()
        raw_times = time_path.read_bytes()
    except FileNotFoundError as e:
        if not (directory / (prefix.name + LOG_FILE_SUFFIX)).exists():
            raise
        return f"index file {e.filename} is missing"
    if len(raw_offsets) % OFFSET_ENTRY_SIZE:
        return f"index file {offset_path} has {len(raw_offsets)} bytes, not a multiple of {OFFSET_ENTRY_SIZE}"
    if len(raw_times) % TIME_ENTRY_SIZE:
        return f"time index file {time_path} has {len(raw_times)} bytes, not a multiple of {TIME_ENTRY_SIZE}"
    offsets = np.frombuffer(raw_offsets, dtype=_OFFSET_DTYPE)
    if offsets.size:
        rel = offsets["relative_offset"].astype(np.int64)
        pos = offsets["position"].astype(np.int64)
        if np.any(np.diff(rel) <= 0) or np.any(np.diff(pos) <= 0) or rel[0] < 0 or pos[0] < 0:
            return f"index file {offset_path} has entries that do not strictly increase (e.g. zero-filled slots)"
        if pos[-1] >= log_size or rel[-1] >= limit:
            last = f"offset {base_offset + int(rel[-1])}, position {int(pos[-1])}"
            return f"index file {offset_path} points past its segment ({last})"
    times = np.frombuffer(raw_times, dtype=_TIME_DTYPE)
    if times.size:
        stamps = times["timestamp"].astype(np.int64)
        rel = times["relative_offset"].astype(np.int64)
        if np.any(np.diff(stamps) <= 0) or np.any(np.diff(rel) < 0) or rel[0] < 0:
            return f"time index file {time_path} has entries that do not increase (e.g. zero-filled slots)"
        if rel[-1] >= limit:
            return f"time index file {time_path} points past its segment (offset {base_offset + int(rel[-1])})"
    return None


def index_problems(meta: PartitionMetadata) -> dict[int, str]:
    """:func:`index_problem` for every inactive segment of ``meta``: base offset -> problem."""
    problems: dict[int, str] = {}
    bases = meta.base_offsets
    for base, following in zip(bases, bases[1:], strict=False):
        try:
            problem = index_problem(meta.path, base, meta.log_size(base), following)
        except FileNotFoundError:
            continue
        if problem is not None:
            problems[base] = problem
    return problems
