"""Partition metadata read without opening logs: listings, time-index tails, index checks."""

from __future__ import annotations

import os
import struct
from pathlib import Path

from indexer.clock import MockClock
from indexer.index_check import segment_index_problem
from indexer.log import Log
from indexer.segment import first_batch_max_timestamp
from maintenance.metadata import (
    largest_timestamp,
    scan_partition,
)
from maintenance.metadata import (
    retention_plan as plan_retention,
)
from tests.maintenance.conftest import START_MS, append_batches, small_config


def index_problem(directory: Path, base: int, _size: int, following: int) -> str | None:
    problem = segment_index_problem(directory, base, next_base_offset=following, against_log=False)
    return None if problem is None else str(problem)


def sealed_log(log_dir: Path, clock: MockClock) -> Path:
    log = Log.open(log_dir / "t-0", small_config(), clock=clock)
    append_batches(log, clock, 12)
    log.close()
    return log.directory


def test_scan_lists_segments_and_ignores_other_files(log_dir: Path, clock: MockClock) -> None:
    directory = sealed_log(log_dir, clock)
    (directory / "00000000000000000000.log.deleted").write_bytes(b"x")
    (directory / "leader-epoch-checkpoint").write_text("0\n0\n")
    meta = scan_partition(directory, small_config(), log_start_offset=0, high_watermark=0)
    assert meta.base_offsets == tuple(sorted(int(p.name[:20]) for p in directory.glob("*.log")))
    assert meta.size_in_bytes == sum(p.stat().st_size for p in directory.glob("*.log"))
    assert meta.lock_holder() == ""  # emptied by the clean close


def test_largest_timestamp_from_the_time_index_tail(log_dir: Path, clock: MockClock) -> None:
    directory = sealed_log(log_dir, clock)
    meta = scan_partition(directory, small_config(), log_start_offset=0, high_watermark=0)
    first, second = meta.base_offsets[:2]
    expected = largest_timestamp(meta, first)
    assert START_MS <= expected < START_MS + 12_000
    # An un-trimmed index ends in zero slots: the real last entry is still found.
    with open(meta.time_index_path(first), "ab") as f:
        f.write(bytes(24))
    assert (
        largest_timestamp(scan_partition(directory, small_config(), log_start_offset=0, high_watermark=0), first)
        == expected
    )
    # No time index entry at all: the .log mtime, as Kafka.
    meta.time_index_path(second).write_bytes(b"")
    os.utime(meta.log_path(second), ns=(START_MS * 1_000_000, 1_234_000_000))
    assert (
        largest_timestamp(scan_partition(directory, small_config(), log_start_offset=0, high_watermark=0), second)
        == 1_234
    )


def test_first_batch_max_timestamp_reads_one_header(log_dir: Path, clock: MockClock) -> None:
    directory = sealed_log(log_dir, clock)
    assert first_batch_max_timestamp(directory / "00000000000000000000.log") == START_MS
    (directory / "empty.log").write_bytes(b"")
    assert first_batch_max_timestamp(directory / "empty.log") == -1


def test_plan_retention_by_start_offset_and_high_watermark(log_dir: Path, clock: MockClock) -> None:
    directory = sealed_log(log_dir, clock)
    config = small_config(retention_ms=-1)
    bases = scan_partition(directory, config, log_start_offset=0, high_watermark=0).base_offsets
    plan = plan_retention(scan_partition(directory, config, log_start_offset=bases[2], high_watermark=10**9), 0)
    assert plan.base_offsets == bases[:2] and not plan.last_segment_may_go
    # Nothing above the high watermark goes, whatever the start offset says.
    plan = plan_retention(scan_partition(directory, config, log_start_offset=bases[2], high_watermark=bases[1]), 0)
    assert plan.base_offsets == bases[:1]


def test_index_problem_finds_what_a_sealed_segment_must_not_have(log_dir: Path, clock: MockClock) -> None:
    directory = sealed_log(log_dir, clock)
    meta = scan_partition(directory, small_config(), log_start_offset=0, high_watermark=0)
    base, following = meta.base_offsets[:2]
    size = meta.log_size(base)
    index = directory / f"{base:020d}.index"
    good = index.read_bytes()
    assert index_problem(directory, base, size, following) is None
    cases = {
        good + b"\x00": "multiple of 8",
        good + bytes(16): "do not strictly increase",
        struct.pack(">ii", following - base, 0): "points past its segment",
        struct.pack(">ii", 1, size): "points past its segment",
    }
    for content, expected in cases.items():
        index.write_bytes(content)
        problem = index_problem(directory, base, size, following)
        assert problem is not None and expected in problem, (content.hex(), problem)
    index.unlink()
    assert "is missing" in (index_problem(directory, base, size, following) or "")
