"""What a partition directory says about itself without opening the log: file names, sizes, mtimes
and the last entry of a time index. The daemon uses it to decide which partitions a job must open.

Every rule is the engine's: retention is :func:`indexer.retention.plan_retention` fed from this
metadata (one ``scandir``, one ``stat`` per ``.log`` asked about, the last entry of the time index
of only the oldest segments: retention deletes a prefix, so the walk stops at the first segment
that must stay); index validation is :func:`indexer.index_check.segment_index_problem`; the file
layouts are read through the engine's index and record classes, never parsed here.
"""

from __future__ import annotations

import os
from pathlib import Path

from indexer.config import LogConfig
from indexer.file_names import (
    LOG_FILE_SUFFIX,
    PARTITION_LOCK_FILE,
    TIME_INDEX_FILE_SUFFIX,
    filename_prefix_from_offset,
    is_stray_deleted_file,
)
from indexer.index_check import IndexProblem, segment_index_problem
from indexer.retention import RetentionPlan, plan_retention
from indexer.time_index import TimeIndex, largest_timestamp_in_file

TIME_INDEX_ENTRY_SIZE = TimeIndex.ENTRY_SIZE


class PartitionMetadata:
    """A partition directory's segments (base offsets, sorted), its ``.deleted`` files (segments a
    retention or truncation renamed, awaiting ``file.delete.delay.ms``) and its checkpointed offsets.

    File sizes and mtimes are read lazily, one ``stat`` per file asked about, and cached: a
    retention pass without ``retention.bytes`` stats only the few oldest segments.
    """

    __slots__ = ("path", "config", "base_offsets", "deleted_files", "log_start_offset", "high_watermark", "_stats")

    def __init__(
        self,
        path: Path,
        config: LogConfig,
        base_offsets: tuple[int, ...],
        log_start_offset: int,
        high_watermark: int,
        deleted_files: tuple[str, ...] = (),
    ) -> None:
        self.path = path
        self.config = config
        self.base_offsets = base_offsets
        self.deleted_files = deleted_files
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
    """The segments and ``.deleted`` files of ``path`` from one listing of names (other
    temporary-suffixed files are ignored)."""
    names = os.listdir(path)
    heads = [name[:-4] for name in names if name.endswith(LOG_FILE_SUFFIX)]
    deleted = tuple(sorted(name for name in names if is_stray_deleted_file(name)))
    try:
        bases = sorted(map(int, heads))
    except ValueError:  # a stray non-segment ".log" name: the slow, filtering path
        bases = sorted(int(head) for head in heads if head.isdigit())
    return PartitionMetadata(path, config, tuple(bases), log_start_offset, high_watermark, deleted)


def largest_timestamp(meta: PartitionMetadata, base_offset: int) -> int:
    """Kafka's ``LogSegment.largestTimestamp`` from files: the time index's largest entry, else the
    ``.log`` mtime (:func:`indexer.time_index.largest_timestamp_in_file`; no ``.log`` data read)."""
    if meta.time_index_size(base_offset) >= TIME_INDEX_ENTRY_SIZE:
        timestamp = largest_timestamp_in_file(meta.time_index_path(base_offset), base_offset)
        if timestamp >= 0:
            return timestamp
    return meta.log_mtime_ms(base_offset)


def retention_plan(meta: PartitionMetadata, now_ms: int) -> RetentionPlan:
    """What retention would delete now, and why (:func:`indexer.retention.plan_retention`), from
    metadata alone: the log end offset is unknown here, so the last segment only "may go"."""
    config = meta.config
    return plan_retention(
        meta.base_offsets,
        size_of=meta.log_size,
        largest_timestamp_of=lambda base: largest_timestamp(meta, base),
        log_start_offset=meta.log_start_offset,
        high_watermark=meta.high_watermark,
        log_end_offset=None,
        retention_bytes=config.retention_bytes,
        retention_ms=config.retention_ms,
        now_ms=now_ms,
    )


def index_problems(meta: PartitionMetadata, *, include_last: bool = False) -> dict[int, IndexProblem]:
    """The engine's index validation (:func:`indexer.index_check.segment_index_problem`, every
    entry compared with a header walk of the ``.log``) of every inactive segment of ``meta``, and
    of the last one too with ``include_last``: base offset -> problem. Segments deleted meanwhile
    are skipped."""
    problems: dict[int, IndexProblem] = {}
    bases = meta.base_offsets
    following_bases: list[int | None] = [*bases[1:], None] if include_last else [*bases[1:]]
    for base, following in zip(bases, following_bases, strict=False):  # (no segment at all: nothing)
        try:
            problem = segment_index_problem(meta.path, base, next_base_offset=following, against_log=True)
        except FileNotFoundError:
            continue
        if problem is not None:
            problems[base] = problem
    return problems
