"""`seglog bench maintenance`: recovery of a whole log directory and one retention pass.

Figures (each against a baseline run side by side in this process):

* directory recovery: MB/s of ``seglog recover`` (every batch CRC-checked, every index rebuilt,
  checkpoints repaired) over a log directory of 4 partitions, 256 MiB in all (``--quick`` 64 MiB),
  vs reading every ``.log`` once in 8 MiB chunks; the page cache is dropped before each; goal >= 0.5x.
* retention pass: seconds for one daemon retention pass over 100 partitions x 1,000 segments
  (``--quick`` 20 x 1,000) where nothing is due, decided from metadata; goal <= 1 s. The baseline
  opens every partition with the engine and runs ``Log.delete_old_segments`` (measured on the
  first 10 partitions and scaled to all). The directory is built once, from tiny one-record
  segments, and reused (``--dir`` keeps it between runs).

examples:
  seglog bench maintenance --quick
  seglog bench maintenance --json bench-maintenance.json --dir /var/tmp
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from seglog.bench.report import (
    BenchResult,
    add_suite_arguments,
    cold_read_seconds,
    latency_result,
    percentiles,
    publish,
    recovery_result,
    scratch_directory,
    timed,
)

logger = logging.getLogger(__name__)

MiB = 1 << 20
RECOVERY_PARTITIONS = 4
SEGMENTS_PER_PARTITION = 1000
BASELINE_PARTITIONS = 10
PASSES = 5


# Options of ``seglog bench maintenance``: the common ones.
add_arguments = functools.partial(
    add_suite_arguments,
    quick="64 MiB to recover, 20 partitions x 1,000 segments",
    scratch="scratch directory; the retention directory built there is reused by later runs "
    "(default: a temporary directory, removed afterwards)",
)


def _records(count: int, value_bytes: int = 100) -> dict[str, pa.Array]:
    rng = np.random.default_rng(1)
    values = rng.integers(0, 256, size=count * value_bytes, dtype=np.uint8)
    offsets = np.arange(0, (count + 1) * value_bytes, value_bytes, dtype=np.int32)
    value = pa.BinaryArray.from_buffers(pa.binary(), count, [None, pa.py_buffer(offsets), pa.py_buffer(values)])
    stamps = pa.array(1_700_000_000_000 + np.arange(count, dtype=np.int64))
    return {"value": value, "timestamp": stamps}


def bench_recovery(log_dir: Path, total_bytes: int) -> BenchResult:
    """MB/s of recovering a whole directory vs reading its ``.log`` files once."""
    from indexer.config import LogConfig, Settings
    from indexer.log import Log
    from maintenance.recovery import recover_log_dir

    config = LogConfig(segment_bytes=32 * MiB)
    settings = Settings(topic_defaults=config.to_dict(), source="bench")
    chunk = _records(50_000)
    per_partition = total_bytes // RECOVERY_PARTITIONS
    for p in range(RECOVERY_PARTITIONS):
        with Log.open(log_dir / f"bench-{p}", config) as log:
            while log.size_in_bytes < per_partition:
                log.append(chunk)
            log.update_high_watermark(log.log_end_offset)
    # Warm-up on a small copy, so that loading the compiled scan kernels is not timed.
    warm_up = log_dir.with_name(log_dir.name + ".warm-up")
    with Log.open(warm_up / "bench-0", config) as log:
        log.append(chunk)
    recover_log_dir(warm_up, settings, progress=False)
    shutil.rmtree(warm_up)
    logs = sorted(log_dir.glob("*/*.log"))
    size = sum(p.stat().st_size for p in logs)

    base_s = cold_read_seconds(logs)
    seconds, outcome = timed(lambda: recover_log_dir(log_dir, settings, progress=False), evict=logs)
    assert not outcome.failed and not outcome.committed_data_lost
    return recovery_result(
        "log directory recovery (seglog recover)",
        "read every .log once (8 MiB chunks)",
        size,
        seconds,
        base_s,
        partitions=RECOVERY_PARTITIONS,
        segments=len(logs),
    )


def _build_retention_dir(log_dir: Path, partitions: int, segments: int) -> None:
    """``partitions`` x ``segments`` tiny segments of one record each, everything committed and recent.

    One batch is encoded once; each segment gets a copy with its base offset assigned (the base
    offset is not covered by the CRC), a 0-byte ``.index`` and a one-entry ``.timeindex`` (relative
    offset 0, the same bytes for every segment): what a broker leaves for tiny rolled segments.
    """
    from indexer import file_names
    from indexer.checkpoint import OffsetCheckpointFile
    from indexer.records.columns import to_append_table
    from indexer.records.encoder import encode_batches
    from indexer.records.framing import assign_offsets
    from indexer.time_index import TimeIndex

    now = int(time.time() * 1000)
    table = to_append_table({"value": [b"x" * 20], "timestamp": [now]}, now_ms=now)
    batch = encode_batches(table, 0)
    building = log_dir.with_name(log_dir.name + ".building")
    shutil.rmtree(building, ignore_errors=True)
    building.mkdir(parents=True)
    with TimeIndex(file_names.time_index_file(building, 0), 0, max_index_size=4096) as time_index:
        time_index.maybe_append(now, 0)  # closing trims the file to this one entry
    time_entry = time_index.path.read_bytes()
    time_index.path.unlink()
    high_watermarks = {}
    for p in range(partitions):
        directory = building / file_names.partition_dir_name("bench", p)
        directory.mkdir()
        for base in range(segments):
            batch = assign_offsets(batch, base)
            file_names.log_file(directory, base).write_bytes(batch.buffer.tobytes())
            file_names.offset_index_file(directory, base).write_bytes(b"")
            file_names.time_index_file(directory, base).write_bytes(time_entry)
        high_watermarks[("bench", p)] = segments
    OffsetCheckpointFile(building / file_names.REPLICATION_OFFSET_CHECKPOINT_FILE).write(high_watermarks)
    building.rename(log_dir)


def bench_retention(log_dir: Path, partitions: int, segments: int) -> BenchResult:
    """Seconds of one daemon retention pass (metadata only) vs opening every log in the engine."""
    from indexer.config import LogConfig, Settings
    from indexer.log import Log
    from maintenance.access import BorrowedLogs
    from maintenance.jobs import retention

    if not log_dir.is_dir():
        logger.info("building %s (%d partitions x %d segments)", log_dir, partitions, segments)
        _build_retention_dir(log_dir, partitions, segments)
        os.sync()  # let the writeback of the new files finish before timing
    config = LogConfig(segment_bytes=1024)  # retention.ms 7 days: nothing is due
    settings = Settings(topic_defaults=config.to_dict(), source="bench")
    retention(BorrowedLogs(log_dir, settings))  # warm-up: directory entries into the cache
    samples = []
    for _ in range(PASSES):
        seconds, report = timed(lambda: retention(BorrowedLogs(log_dir, settings)))
        assert report.actions == 0 and not report.errors, report.summary()
        samples.append(seconds)
    sampled = min(BASELINE_PARTITIONS, partitions)

    def engine_pass() -> None:
        for p in range(sampled):
            with Log.open(log_dir / f"bench-{p}", config, had_clean_shutdown=True, high_watermark=segments) as log:
                log.delete_old_segments()

    base_s, _ = timed(engine_pass)
    value = float(np.median(samples))
    return latency_result(
        f"retention pass, {partitions} partitions x {segments} segments",
        "s",
        value,
        f"open each log + delete_old_segments (scaled from {sampled} partitions)",
        base_s * partitions / sampled,
        1.0,
        goal_kind="value<=",
        passes=PASSES,
        **percentiles(samples),
    )


def run(args: argparse.Namespace) -> int:
    """Run both figures, print the table, write the JSON; 0 even when a goal is missed."""
    if args.scale <= 0:
        raise ValueError(f"--scale must be > 0, got {args.scale}")
    recovery_bytes = int((64 if args.quick else 256) * MiB * args.scale)
    partitions = max(1, int((20 if args.quick else 100) * args.scale))
    segments = max(2, int(SEGMENTS_PER_PARTITION * min(1.0, args.scale)))
    with scratch_directory(args.dir, "seglog-bench-maintenance-", removed=["recovery"]) as scratch:
        results = [
            bench_recovery(scratch / "recovery", recovery_bytes),
            bench_retention(scratch / f"retention-{partitions}x{segments}", partitions, segments),
        ]
    publish(results, json_path=args.json, suite="maintenance", quick=args.quick)
    return 0
