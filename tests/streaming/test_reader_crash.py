"""Exactly once from seglog to seglog: ``readStream.format("seglog")`` -> transform -> ``SegmentLogSink``
across SIGKILLs of the driver. Each run is a fresh user driver (``tests/streaming/pipeline_driver.py``)
in a plain SparkSession without ``PYSPARK_PYTHON`` (the source is found through ``pyspark_seglog``);
the runs chain on one log directory and checkpoint."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from indexer.commit_log import SinkCommitLog
from indexer.config import Settings
from streaming.sink import SegmentLogSink
from tests.streaming.helpers import QUERY_TIMEOUT_S, read_topic

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
ROWS, KEYS, PER_TRIGGER = 900, 11, 150


def _driver(tmp_path: Path, *extra: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # an activated venv
    env["PYTHONPATH"] = str(REPO)
    cmd = [
        sys.executable,
        "-m",
        "tests.streaming.pipeline_driver",
        "--log-dir",
        str(tmp_path / "logs"),
        "--checkpoint",
        str(tmp_path / "checkpoint"),
        "--max-offsets-per-trigger",
        str(PER_TRIGGER),
        *extra,
    ]
    return subprocess.Popen(
        cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )


def _run(proc: subprocess.Popen[str]) -> tuple[str, str]:
    """Wait for the driver, then SIGKILL what is left of its process group (its Spark JVM)."""
    try:
        return proc.communicate(timeout=QUERY_TIMEOUT_S)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_seglog_to_seglog_keeps_every_record_once_across_driver_sigkills(tmp_path: Path, test_budget: str) -> None:
    values = [f"k{(i * 7919) % KEYS}:{i:05d}" for i in range(ROWS)]
    with SegmentLogSink(
        tmp_path / "logs", topic="src", num_partitions=3, settings=Settings(), sink_id="producer"
    ) as producer:
        producer.write_batch(
            pa.table({"key": [v.split(":")[0].encode() for v in values], "value": [v.encode() for v in values]}),
            0,
            query_id="producer",
        )
    seed = int(os.environ.get("SEGLOG_CRASH_SEED", random.randrange(2**32)))
    print(f"SEGLOG_CRASH_SEED={seed}")
    rng = random.Random(seed)
    phases = rng.sample(["append", "flush", "commit", "publish"], 4 if test_budget == "soak" else 2)
    for phase in phases:
        done = SinkCommitLog(tmp_path / "logs", "dst").read().batch_id
        proc = _driver(tmp_path, "--kill-batch", str(done + 1), "--kill-phase", phase)
        _, err = _run(proc)
        assert proc.returncode == -signal.SIGKILL, f"driver was to die in {phase} of batch {done + 1}: {err[-3000:]}"
    final = _driver(tmp_path)
    out, err = _run(final)
    assert final.returncode == 0, err[-3000:]
    assert "DONE" in out
    stored = read_topic(tmp_path / "logs", "dst")  # kafka-python decodes, every CRC checked
    assert Counter(s.value for s in stored) == Counter(v.upper().encode() for v in values)
    for key in {s.key for s in stored}:  # per-key order survives the pipeline
        ordered = [s.value for s in sorted(stored, key=lambda s: s.offset) if s.key == key]
        assert ordered == sorted(ordered)
    assert SinkCommitLog(tmp_path / "logs", "dst").read().batch_id >= ROWS // PER_TRIGGER - 1
