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
    its share, and the offsets left over go to the largest remainders (ties: partition order). A
    partition with a backlog always ends at or after its start; with ``limit`` >= 1 the sum advances.
    """
    backlog = {tp: max(0, latest[tp] - start[tp]) for tp in latest}
    total = sum(backlog.values())
    if total <= limit:
        return dict(latest)
    shares = {tp: limit * size / total for tp, size in backlog.items()}
    ends = {tp: start[tp] + math.floor(share) for tp, share in shares.items()}
    left = limit - sum(ends[tp] - start[tp] for tp in ends)
    by_remainder = sorted(shares, key=lambda tp: (-(shares[tp] - math.floor(shares[tp])), tp))
    for tp in by_remainder[:left]:
        ends[tp] += 1
    return ends


def split_ranges(
    ranges: list[OffsetRange], *, min_partitions: int | None, max_records_per_partition: int | None
) -> list[OffsetRange]:
    """Split large ranges into several tasks: first into pieces of at most ``maxRecordsPerPartition``,
    then, while there are fewer than ``minPartitions``, each range into a number of pieces in proportion
    to its size (at least one), as ``KafkaOffsetRangeCalculator`` does. Empty ranges are dropped."""
    ranges = [r for r in ranges if r.size > 0]
    if max_records_per_partition is not None:
        ranges = [p for r in ranges for p in _split(r, math.ceil(r.size / max_records_per_partition))]
    if min_partitions is not None and 0 < len(ranges) < min_partitions:
        total = sum(r.size for r in ranges)
        ranges = [p for r in ranges for p in _split(r, max(1, round(r.size / total * min_partitions)))]
    return ranges


def _split(piece: OffsetRange, parts: int) -> list[OffsetRange]:
    """``parts`` contiguous pieces of near-equal size (never an empty one)."""
    parts = max(1, min(parts, piece.size))
    bounds = [piece.start + piece.size * k // parts for k in range(parts + 1)]
    return [OffsetRange(piece.topic, piece.partition, a, b) for a, b in zip(bounds, bounds[1:], strict=False)]
