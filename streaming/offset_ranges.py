"""Offset arithmetic of the ``seglog`` source: rate limits per trigger and splitting ranges into tasks.

Pure functions over ``{(topic, partition): offset}`` maps (Spark's Kafka source does the same in
``KafkaMicroBatchStream.rateLimit`` and ``KafkaOffsetRangeCalculator``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from indexer.file_names import TopicPartition


@dataclass(frozen=True)
class OffsetRange:
    """Offsets ``[start, end)`` of one partition, read by one Spark task."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def rate_limit(
    start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int], limit: int
) -> dict[TopicPartition, int]:
    """End offsets reading at most ``limit`` offsets in all, shared in proportion to each partition's
    backlog (as the Kafka source does), but never more than ``limit``: each partition gets the floor of
    its share, and the offsets left over go first to partitions whose share is below one offset (Kafka
    rounds those up, so that a quiet partition beside a large backlog is not starved), then to the
    largest remainders (ties: partition order). A partition with a backlog always ends at or after its
    start; with ``limit`` >= 1 the sum advances.
    """
    backlog = {tp: max(0, latest[tp] - start[tp]) for tp in latest}
    total = sum(backlog.values())
    if total <= limit:
        return dict(latest)
    shares = {tp: limit * size / total for tp, size in backlog.items()}
    ends = {tp: start[tp] + math.floor(share) for tp, share in shares.items()}
    left = limit - sum(ends[tp] - start[tp] for tp in ends)
    by_remainder = sorted(shares, key=lambda tp: (not 0 < shares[tp] < 1, -(shares[tp] - math.floor(shares[tp])), tp))
    for tp in by_remainder[:left]:
        ends[tp] += 1
    return ends


def split_ranges(
    ranges: list[OffsetRange], *, min_partitions: int | None, max_records_per_partition: int | None
) -> list[OffsetRange]:
    """Split large ranges into several tasks, as Spark's ``KafkaOffsetRangeCalculator`` does: first into
    pieces of at most ``maxRecordsPerPartition``; then, when there are fewer than ``minPartitions``,
    the large ones in proportion to their size. A partition whose pieces would each get one task stays
    as it is, and its records and task count are left out of the proportion given to the others. So
    the count is about ``minPartitions``, more or less by rounding. Empty ranges are dropped."""
    ranges = [r for r in ranges if r.size > 0]
    if max_records_per_partition is not None:
        ranges = [p for r in ranges for p in _split(r, math.ceil(r.size / max_records_per_partition))]
    if min_partitions is None or not 0 < len(ranges) < min_partitions:
        return ranges
    total = sum(r.size for r in ranges)
    unsplit = [r for r in ranges if _part_count(r.size, total, min_partitions) == 1]
    kept = {(r.topic, r.partition) for r in unsplit}
    split_total = total - sum(r.size for r in unsplit)
    split_min = max(min_partitions - len(unsplit), 1)
    return [
        piece
        for r in ranges
        for piece in _split(r, 1 if (r.topic, r.partition) in kept else _part_count(r.size, split_total, split_min))
    ]


def _part_count(size: int, total: int, min_partitions: int) -> int:
    """Tasks for a range of ``size`` of ``total`` records: its share of ``min_partitions``, rounded half
    up (Scala's ``math.round``), at least one."""
    return max(math.floor(size / total * min_partitions + 0.5), 1)


def _split(piece: OffsetRange, parts: int) -> list[OffsetRange]:
    """``parts`` contiguous pieces of near-equal size (never an empty one)."""
    parts = max(1, min(parts, piece.size))
    bounds = [piece.start + piece.size * k // parts for k in range(parts + 1)]
    return [OffsetRange(piece.topic, piece.partition, a, b) for a, b in zip(bounds, bounds[1:], strict=False)]
