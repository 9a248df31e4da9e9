"""Soak: the streaming sink with in-process maintenance, and the daemon beside it, for a bounded run."""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from indexer.config import LogConfig, load_settings
from indexer.log import Log
from maintenance.recovery import recover_log_dir
from tests.budget import scaled
from tests.maintenance.conftest import maintain_daemon, wait_for, write_conf

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
# 40 s by default, 15 s under SEGLOG_TEST_BUDGET=ci (still 14 micro-batches, several retention deletes
# per partition and over 3x retention.bytes written), 10 min under soak; SEGLOG_SOAK_SECONDS overrides.
DURATION_S = float(os.environ.get("SEGLOG_SOAK_SECONDS", scaled(40, ci=15, soak=600)))


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
            num_partitions=2,
            source="rate",
            rows_per_second=3000,
            trigger_interval="1 second",
            progress_interval_s=3600,
        )
        with caplog.at_level(logging.INFO, logger="maintenance"):
            summary = run_job(spec, settings, duration_s=DURATION_S, spark=spark, maintenance=start_maintenance)
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=60) == 0
        daemon_log = "".join(wait_for(err, "stopped", timeout=10))
    assert summary.rows > 0 and summary.batches > 5
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
    for (topic, partition), end in summary.end_offsets.items():
        log = Log.open(log_dir / f"{topic}-{partition}", config, read_only=True)
        try:
            start = log.log_start_offset
            assert start > 0, "retention.bytes never deleted anything"
            # Bounded by retention.bytes (plus what arrived since the last pass), not by what was written.
            assert log.size_in_bytes < 4 * TOPIC["retention.bytes"]
            offsets = log.read_records(start, max_offset=end).column("offset").to_pylist()
            assert offsets == list(range(start, end))
        finally:
            log.close()
