"""`seglog run` on a real ``local-cluster[2,1,1024]`` with executor writes, given relative paths as a user
types them: the executors' tasks run in their own working directories, yet every row lands in the
driver's log directory exactly once."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from indexer.commit_log import SinkCommitLog
from seglog.commands.serve import SEGLOG_MAIN
from tests.streaming.helpers import QUERY_TIMEOUT_S, read_topic, write_json_inputs

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_seglog_run_with_executor_writes_and_relative_paths(tmp_path: Path) -> None:
    rows = write_json_inputs(tmp_path / "in", files=2, rows_per_file=300, keys=7)
    command = [
        sys.executable,
        "-c",
        SEGLOG_MAIN,
        "run",
        "--master",
        "local-cluster[2,1,1024]",
        "--writes",
        "executors",
        "--source",
        "files",
        "--input",
        "in",
        "--format",
        "json",
        "--max-files-per-trigger",
        "1",
        "--available-now",
        "--log-dir",
        "logs",
        "--checkpoint-location",
        "checkpoint",
        "--topic",
        "ev",
        "--partitions",
        "3",
    ]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=QUERY_TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "2 micro-batches, 600 rows" in done.stdout
    stored = read_topic(tmp_path / "logs", "ev")  # kafka-python decodes every batch: every CRC checked
    assert Counter((r.key, r.value) for r in stored) == Counter((k.encode(), v.encode()) for k, v in rows)
    assert SinkCommitLog(tmp_path / "logs", "ev").read().batch_id == 1
    assert "written on the executors" in done.stderr
