"""Which segments retention deletes, and why: the one decision the log and the maintenance daemon share.

Kafka's ``UnifiedLog.deleteOldSegments`` (spec 5.6): first the segments wholly below the log start
offset, then the oldest segments while the log is above ``retention.bytes``, then those older than
``retention.ms``. Each rule deletes a prefix of the segments, only segments wholly below the high
watermark, never an empty last segment. Decided from metadata only (sizes and largest
timestamps, which the callers get from open segments or from file names, sizes and time indexes).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass


class RetentionReason(enum.StrEnum):
    """The limit a deleted segment breached, by its Kafka name."""

    LOG_START_OFFSET = "log start offset"
    RETENTION_BYTES = "retention.bytes"
    RETENTION_MS = "retention.ms"


@dataclass(frozen=True, slots=True)
class RetentionDecision:
    """One segment retention deletes, and the limit it breached."""

    base_offset: int
    reason: RetentionReason


@dataclass(frozen=True, slots=True)
class RetentionPlan:
    """The segments to delete, oldest first; ``last_segment_may_go`` when the last segment breaches
    too but only the log end offset (unknown to a caller deciding from files) says whether it goes."""

    decisions: tuple[RetentionDecision, ...]
    last_segment_may_go: bool = False

    @property
    def base_offsets(self) -> tuple[int, ...]:
        return tuple(d.base_offset for d in self.decisions)

    @property
    def needs_log(self) -> bool:
        """Whether opening the log would delete anything."""
        return bool(self.decisions) or self.last_segment_may_go


def plan_retention(
    base_offsets: Sequence[int],
    *,
    size_of: Callable[[int], int],
    largest_timestamp_of: Callable[[int], int],
    log_start_offset: int,
    high_watermark: int,
    log_end_offset: int | None,
    retention_bytes: int,
    retention_ms: int,
    now_ms: int,
) -> RetentionPlan:
    """What retention deletes now from segments ``base_offsets`` (sorted), and why.

    ``size_of``/``largest_timestamp_of`` give a segment's ``.log`` size and largest timestamp by
    base offset; they are asked lazily (only about segments a rule reaches). ``log_end_offset``
    None: unknown (a caller reading only files), then the last segment is never deleted and the
    plan says whether it may go.
    """
    segments = list(base_offsets)
    decisions: list[RetentionDecision] = []
    last_may_go = False

    def take(predicate: Callable[[int, int | None], bool], reason: RetentionReason) -> None:
        nonlocal last_may_go
        while segments:
            base = segments[0]
            following = segments[1] if len(segments) > 1 else None
            if following is None:
                if size_of(base) == 0:
                    return
                if log_end_offset is None:
                    last_may_go = last_may_go or predicate(base, None)
                    return
            upper = following if following is not None else log_end_offset
            assert upper is not None
            if high_watermark < upper or not predicate(base, following):
                return
            decisions.append(RetentionDecision(segments.pop(0), reason))

    take(
        lambda _base, following: following is not None and following <= log_start_offset,
        RetentionReason.LOG_START_OFFSET,
    )
    if retention_bytes >= 0:
        size = sum(size_of(b) for b in segments)
        if size >= retention_bytes:
            diff = size - retention_bytes

            def size_breach(base: int, _following: int | None) -> bool:
                nonlocal diff
                if diff - size_of(base) >= 0:
                    diff -= size_of(base)
                    return True
                return False

            take(size_breach, RetentionReason.RETENTION_BYTES)
    if retention_ms >= 0:
        take(lambda base, _following: now_ms - largest_timestamp_of(base) > retention_ms, RetentionReason.RETENTION_MS)
    return RetentionPlan(tuple(decisions), last_may_go)
