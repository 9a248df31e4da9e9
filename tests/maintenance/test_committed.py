"""The committed offset of a partition: high watermark checkpoint or sink commit record, the larger; and
what maintenance keeps above it for a sink's fence."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from indexer.checkpoint import OffsetCheckpointFile
from indexer.clock import MockClock
from indexer.limits import INT64_MAX
from indexer.log import Log
from indexer.sink_fence import DONE, FenceFile, FenceToken
from maintenance.access import BorrowedLogs
from maintenance.committed import committed_offsets, kept_offset
from maintenance.jobs import JOBS
from tests.maintenance.conftest import append_batches, settings_for, small_config


def sink_record(log_dir: Path, sink_id: str, offsets: dict[str, dict[str, int]]) -> None:
    (log_dir / f"seglog-sink.{sink_id}.json").write_text(
        json.dumps(
            {
                "version": 1,
                "sink_id": sink_id,
                "query_id": "q",
                "batch_id": 1,
                "committed_at_ms": 0,
                "end_offsets": offsets,
            }
        )
    )


def test_the_larger_of_checkpoint_and_sink_records_wins(log_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    OffsetCheckpointFile(log_dir / "replication-offset-checkpoint").write({("a", 0): 10, ("a", 1): 50, ("b", 0): 7})
    sink_record(log_dir, "one", {"a": {"0": 30, "1": 40}})
    sink_record(log_dir, "two", {"c": {"3": 5}})
    (log_dir / "seglog-sink.broken.json").write_text("{not json")
    with caplog.at_level(logging.WARNING, logger="maintenance.committed"):
        assert committed_offsets(log_dir) == {("a", 0): 30, ("a", 1): 50, ("b", 0): 7, ("c", 3): 5}
    assert "ignoring sink commit record" in caplog.text and "seglog-sink.broken.json" in caplog.text


def test_kept_offset_adds_what_each_sinks_fence_keeps(log_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    partition = log_dir / "t-0"
    partition.mkdir()
    OffsetCheckpointFile(log_dir / "replication-offset-checkpoint").write({("t", 0): 10})
    sink_record(log_dir, "one", {"t": {"0": 40}})  # batch 1 of q committed up to 40
    assert kept_offset(log_dir, ("t", 0), partition) == 40
    assert kept_offset(log_dir, ("u", 0), partition) is None  # nothing known: nothing may go
    FenceFile(partition, "one").write(FenceToken("q", 2, "a", 40, 55, DONE))  # done, not committed yet
    assert kept_offset(log_dir, ("t", 0), partition) == 55
    FenceFile(partition, "two").write(FenceToken("p", 0, "b", 0))  # a sink without a record, writing
    assert kept_offset(log_dir, ("t", 0), partition) == INT64_MAX
    (partition / ".seglog-sink.two.fence").write_text("{")
    with caplog.at_level(logging.WARNING, logger="maintenance.committed"):
        assert kept_offset(log_dir, ("t", 0), partition) is None
    assert "keeping the whole tail" in caplog.text and ".seglog-sink.two.fence" in caplog.text


def test_index_job_decides_what_stays_from_the_records_as_they_are_when_it_borrows(
    log_dir: Path, clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = Log.open(log_dir / "t-0", small_config(), clock=clock)
    append_batches(log, clock, 6)
    end = log.log_end_offset
    log.close()
    sink_record(log_dir, "one", {"t": {"0": 3}})
    (log_dir / "t-0" / ".seglog.lock").write_text("pid=999999 host=elsewhere since_ms=0\n")
    access = BorrowedLogs(log_dir, settings_for(small_config()), clock=clock)
    borrow = access._borrow

    def commit_then_borrow(*args: Any, **kwargs: Any) -> Log | None:
        sink_record(log_dir, "one", {"t": {"0": end}})  # the sink committed after the pass began
        return borrow(*args, **kwargs)

    monkeypatch.setattr(access, "_borrow", commit_then_borrow)
    assert "offsets_truncated" not in JOBS["index"].fn(access).details
    reopened = Log.open(log_dir / "t-0", small_config(), clock=clock)
    try:
        assert reopened.log_end_offset == end
    finally:
        reopened.close()
