"""Soak: the streaming sink with in-process maintenance, and the daemon beside it, for a bounded run."""

from __future__ import annotations

import logging
import os
import queue
import signal
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from indexer.commit_log import SinkCommitLog
from indexer.config import LogConfig, load_settings
from indexer.file_names import TopicPartition
from indexer.log import Log
from maintenance.recovery import recover_log_dir
from tests.budget import scaled
from tests.maintenance.conftest import maintain_daemon, wait_for, write_conf
from tests.streaming.helpers import QUERY_TIMEOUT_S

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.slow]

TOPIC = {
    "segment.bytes": 65536,
    "retention.bytes": 262144,
    "segment.ms": 3000,
    "file.delete.delay.ms": 500,
    "index.interval.bytes": 4096,
}
MAINTENANCE = {
    "log.initial.task.delay.ms": 0,
    "log.retention.check.interval.ms": 500,
    "seglog.roll.check.interval.ms": 500,
    "seglog.index.check.interval.ms": 2000,
    "log.flush.offset.checkpoint.interval.ms": 1000,
    "log.flush.start.offset.checkpoint.interval.ms": 1000,
    "replica.high.watermark.checkpoint.interval.ms": 1000,
    "log.flush.scheduler.interval.ms": 1000,
}
# The run's least length: 40 s by default, 15 s under SEGLOG_TEST_BUDGET=ci, 10 min under soak;
# SEGLOG_SOAK_SECONDS overrides. It goes on until what the test checks has happened (SOAK_EVENTS) or
# QUERY_TIMEOUT_S more passed: a loaded machine may fit fewer micro-batches in the least length.
DURATION_S = float(os.environ.get("SEGLOG_SOAK_SECONDS", scaled(40, ci=15, soak=600)))
MIN_BATCHES = 6
PARTITIONS = 2


class SoakEvents:
    """Stops the job (``stop``) once it ran ``DURATION_S`` and what the test checks has happened: at
    least ``MIN_BATCHES`` micro-batches committed, retention deleted the first segment of every
    partition, the in-process jobs reported work and the daemon skipped the sink's partitions; or after
    ``QUERY_TIMEOUT_S`` more, when the assertions then say what did not happen. Keeps the daemon's lines
    it read (``daemon_lines``) and the end offsets of the micro-batches it saw committed (``ends``)."""

    def __init__(self, tmp_path: Path, err: queue.Queue[str], caplog: pytest.LogCaptureFixture) -> None:
        self.tmp_path, self.err, self.caplog = tmp_path, err, caplog
        self.stop = threading.Event()
        self.daemon_lines: list[str] = []
        self.ends: dict[int, dict[TopicPartition, int]] = {}  # the sink's committed end offsets, by batch
        self.started = time.monotonic()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def happened(self) -> bool:
        commits = self.tmp_path / "checkpoint" / "commits"
        batches = sum(1 for p in commits.iterdir() if p.name.isdigit()) if commits.is_dir() else 0
        first_segments = [
            min((int(p.stem) for p in (self.tmp_path / "logs" / f"soak-{i}").glob("*.log")), default=0)
            for i in range(PARTITIONS)
        ]
        return (
            batches >= MIN_BATCHES
            and all(first > 0 for first in first_segments)
            and ("segments_rolled" in self.caplog.text or "segments_deleted" in self.caplog.text)
            and any("skipped by mutating maintenance jobs" in line for line in self.daemon_lines)
        )

    def _watch(self) -> None:
        commits = SinkCommitLog(self.tmp_path / "logs", "soak")
        while not self.stop.is_set():
            commit = commits.read()
            self.ends[commit.batch_id] = dict(commit.end_offsets)
            while not self.err.empty():
                self.daemon_lines.append(self.err.get())
            elapsed = time.monotonic() - self.started
            if (elapsed >= DURATION_S and self.happened()) or elapsed >= DURATION_S + QUERY_TIMEOUT_S:
                self.stop.set()
            time.sleep(0.2)

    def join(self) -> None:
        self.stop.set()
        self._thread.join()


def _bytes_wholly_below(directory: Path, offset: int) -> int:
    """The bytes of the partition's ``.log`` files whose records all lie below ``offset`` (the next
    segment starts at or below it)."""
    segments = sorted((int(p.stem), p.stat().st_size) for p in directory.glob("*.log"))
    return sum(size for (_, size), (after, _) in zip(segments, segments[1:], strict=False) if after <= offset)


def test_sink_and_maintenance_run_together(
    spark: SparkSession, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from maintenance.scheduler import start_maintenance
    from streaming.job import JobSpec, run_job

    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    conf = write_conf(tmp_path / "seglog.toml", TOPIC, MAINTENANCE)
    settings = load_settings(conf)
    with maintain_daemon(log_dir, conf) as (daemon, err):
        spec = JobSpec(
            log_dir=log_dir,
            checkpoint_location=str(tmp_path / "checkpoint"),
            topic="soak",
            num_partitions=PARTITIONS,
            source="rate",
            rows_per_second=3000,
            trigger_interval="1 second",
            progress_interval_s=3600,
        )
        with caplog.at_level(logging.INFO, logger="maintenance"):
            events = SoakEvents(tmp_path, err, caplog)
            try:
                summary = run_job(spec, settings, stop=events.stop, spark=spark, maintenance=start_maintenance)
            finally:
                events.join()
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=60) == 0
        daemon_log = "".join(events.daemon_lines + wait_for(err, "stopped", timeout=10))
    assert summary.rows > 0 and summary.batches >= MIN_BATCHES
    failures = [r for r in caplog.records if r.name.startswith("maintenance") and r.levelno >= logging.ERROR]
    assert failures == []
    assert "segments_rolled" in caplog.text or "segments_deleted" in caplog.text
    # The sink held its partitions throughout: the daemon only ever skipped them.
    assert "skipped by mutating maintenance jobs" in daemon_log
    # Everything on disk is consistent: nothing to repair, no committed data missing.
    outcome = recover_log_dir(log_dir, settings, dry_run=True, progress=False)
    assert outcome.exit_status() == 0
    for row in outcome.partitions:
        assert (row.bytes_truncated, row.batches_dropped, row.segments_deleted) == (0, 0, 0), row
    config = LogConfig.from_mapping(TOPIC)
    summary_batch = SinkCommitLog(log_dir, "soak").read().batch_id
    for (topic, partition), end in summary.end_offsets.items():
        log = Log.open(log_dir / f"{topic}-{partition}", config, read_only=True)
        try:
            start = log.log_start_offset
            assert start > 0, "retention.bytes never deleted anything"
            # Bounded by retention.bytes, not by what was written: the segments wholly below where the
            # micro-batch before the last two ended were all there at a retention pass (one every 500 ms;
            # micro-batches start at least 1 s apart), which left less than retention.bytes beside the
            # first segment. The last two micro-batches may hold any amount (a trigger late on a loaded
            # machine reads every row due since the one before).
            older = events.ends[max(b for b in events.ends if b <= summary_batch - 2)].get((topic, partition), 0)
            old_bytes = _bytes_wholly_below(log_dir / f"{topic}-{partition}", older)
            assert old_bytes < TOPIC["retention.bytes"] + TOPIC["segment.bytes"], (older, old_bytes)
            offsets = log.read_records(start, max_offset=end).column("offset").to_pylist()
            assert offsets == list(range(start, end))
        finally:
            log.close()
