"""A consumer tailing ``seglog serve`` while a writer process appends and commits sees every committed
batch once, in order, never before its commit and never an uncommitted one, across segment rolls and
retention deleting segments under the server; a fetch below the new log start is OFFSET_OUT_OF_RANGE."""

from __future__ import annotations

import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import confluent_kafka
import pytest

from indexer.checkpoint import OffsetCheckpointFile
from indexer.file_names import LOG_START_OFFSET_CHECKPOINT_FILE, offset_from_file_name
from tests.serve.conftest import ServeProcess
from tests.serve.writer_proc import RECORDS_PER_BATCH

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka.errors
    from kafka import KafkaConsumer, TopicPartition

BATCHES = 60
WRITER = Path(__file__).with_name("writer_proc.py")


def test_tailing_consumer_sees_each_commit_once_across_rolls_and_retention(
    serve: Callable[..., ServeProcess], tmp_path: Path
) -> None:
    log_dir, commits_path, go = tmp_path / "logs", tmp_path / "commits", tmp_path / "go"
    writer = subprocess.Popen(
        [sys.executable, str(WRITER), str(log_dir), str(BATCHES), str(commits_path), str(go)],
        env={"PYTHONPATH": str(Path(__file__).parents[2]), "PATH": "/usr/bin:/bin"},
    )
    try:
        deadline = time.monotonic() + 60
        while not (commits_path.exists() and commits_path.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        server = serve(log_dir)
        consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": server.bootstrap,
                "group.id": "tail",
                "fetch.wait.max.ms": 500,
                "enable.auto.commit": False,
            }
        )
        consumer.assign([confluent_kafka.TopicPartition("tail", 0, confluent_kafka.OFFSET_BEGINNING)])
        received: list[tuple[int, bytes, float]] = []  # offset, value, receipt time
        errors: list[str] = []
        deadline = time.monotonic() + 90
        last_offset = BATCHES * RECORDS_PER_BATCH - 1
        linger_until = None
        while time.monotonic() < deadline and (linger_until is None or time.monotonic() < linger_until):
            m = consumer.poll(0.1)
            if m is None:
                continue
            if m.error():
                errors.append(str(m.error()))
                continue
            received.append((m.offset(), m.value(), time.time()))
            if m.offset() == 0:
                go.touch()
            if m.offset() == last_offset:
                linger_until = time.monotonic() + 1.5  # the uncommitted last batch must not come
        consumer.close()
        assert writer.wait(60) == 0
    finally:
        if writer.poll() is None:
            writer.kill()
    commits = dict(line.split() for line in commits_path.read_text().splitlines())
    assert [offset for offset, _, _ in received] == list(range(BATCHES * RECORDS_PER_BATCH)), errors  # once, in order
    for offset, value, at in received:
        batch = offset // RECORDS_PER_BATCH
        assert value.startswith(b"batch %d record %d " % (batch, offset % RECORDS_PER_BATCH))
        assert at >= float(commits[str(batch)]), f"batch {batch} received before it was committed"
    # Rolls and retention happened under the server.
    segments = sorted((log_dir / "tail-0").glob("*.log"))
    log_start = max(
        offset_from_file_name(segments[0].name),
        OffsetCheckpointFile(log_dir / LOG_START_OFFSET_CHECKPOINT_FILE).read().get(("tail", 0), 0),
    )
    assert log_start > 0 and len(segments) >= 2

    tp = TopicPartition("tail", 0)
    strict = KafkaConsumer(bootstrap_servers=server.bootstrap, auto_offset_reset="none", fetch_max_wait_ms=100)
    strict.assign([tp])
    strict.seek(tp, 0)
    with pytest.raises(kafka.errors.OffsetOutOfRangeError):
        for _ in range(50):
            strict.poll(timeout_ms=100)
    strict.close()
    resetting = KafkaConsumer(bootstrap_servers=server.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100)
    resetting.assign([tp])
    resetting.seek(tp, 0)
    first = None
    for _ in range(50):
        batch = resetting.poll(timeout_ms=100, max_records=1).get(tp)
        if batch:
            first = batch[0].offset
            break
    resetting.close()
    assert first == log_start
