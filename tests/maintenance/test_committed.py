"""The committed offset of a partition: high watermark checkpoint or sink commit record, the larger."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from indexer.checkpoint import OffsetCheckpointFile
from maintenance.committed import committed_offsets


def sink_record(log_dir: Path, sink_id: str, offsets: dict[str, dict[str, int]]) -> None:
    (log_dir / f"seglog-sink.{sink_id}.json").write_text(json.dumps({
        "version": 1, "sink_id": sink_id, "query_id": "q", "batch_id": 1, "committed_at_ms": 0,
        "end_offsets": offsets,
    }))


def test_the_larger_of_checkpoint_and_sink_records_wins(log_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    OffsetCheckpointFile(log_dir / "replication-offset-checkpoint").write({("a", 0): 10, ("a", 1): 50, ("b", 0): 7})
    sink_record(log_dir, "one", {"a": {"0": 30, "1": 40}})
    sink_record(log_dir, "two", {"c": {"3": 5}})
    (log_dir / "seglog-sink.broken.json").write_text("{not json")
    with caplog.at_level(logging.WARNING, logger="maintenance.committed"):
        assert committed_offsets(log_dir) == {("a", 0): 30, ("a", 1): 50, ("b", 0): 7, ("c", 3): 5}
    assert "ignoring sink commit record" in caplog.text and "seglog-sink.broken.json" in caplog.text
