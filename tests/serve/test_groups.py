"""A consumer group over ``seglog serve``: 3 kafka-python consumers share 4 partitions, the group
rebalances when one leaves, and after the server restarts a consumer of the group resumes from the
committed offsets (kept in the log directory)."""

from __future__ import annotations

import signal
import subprocess
import time
import warnings
from collections.abc import Callable
from pathlib import Path

from indexer.config import load_settings
from indexer.log_manager import LogManager
from tests.serve.conftest import ServeProcess

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, TopicPartition

TOPIC, PARTITIONS, RECORDS = "orders", 4, 50


def _write(log_dir: Path, start: int, count: int) -> None:
    with LogManager(log_dir, load_settings()) as manager:
        for p in range(PARTITIONS):
            log = manager.get_or_create_log(TOPIC, p)
            log.append({"value": [b"%d-%d" % (p, i) for i in range(start, start + count)]})
            log.update_high_watermark(log.log_end_offset)
        manager.checkpoint_high_watermarks()


def _consumer(bootstrap: str) -> KafkaConsumer:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id="grp",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=6000,
        heartbeat_interval_ms=300,
        fetch_max_wait_ms=100,
    )
    consumer.subscribe([TOPIC])
    return consumer


def _poll_until(
    consumers: list[KafkaConsumer],
    done: Callable[[], bool],
    seen: dict[TopicPartition, list[int]],
    timeout_s: float = 60,
) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, [c.assignment() for c in consumers]
        for consumer in consumers:
            for tp, records in consumer.poll(timeout_ms=50).items():
                seen.setdefault(tp, []).extend(r.offset for r in records)


def _split(consumers: list[KafkaConsumer]) -> bool:
    """Every partition assigned to exactly one consumer, every consumer holding at least one."""
    assigned = [c.assignment() for c in consumers]
    every = [tp for a in assigned for tp in a]
    return all(assigned) and len(every) == len(set(every)) == PARTITIONS


def test_group_rebalances_on_leave_and_resumes_after_restart(
    serve: Callable[..., ServeProcess], tmp_path: Path
) -> None:
    log_dir = tmp_path / "logs"
    _write(log_dir, 0, RECORDS)
    server = serve(log_dir)
    consumers = [_consumer(server.bootstrap) for _ in range(3)]
    seen: dict[TopicPartition, list[int]] = {}
    _poll_until(
        consumers, lambda: _split(consumers) and sum(len(set(v)) for v in seen.values()) == PARTITIONS * RECORDS, seen
    )
    assert {tp: sorted(set(v)) for tp, v in seen.items()} == {
        TopicPartition(TOPIC, p): list(range(RECORDS)) for p in range(PARTITIONS)
    }
    for consumer in consumers:
        consumer.commit()

    consumers.pop().close()  # LeaveGroup: the other two take its partitions over
    _poll_until(consumers, lambda: _split(consumers), seen)
    assert "left" in server.log_text()
    for consumer in consumers:
        consumer.close()

    server.stop()
    assert (log_dir / "group-offsets-checkpoint").exists()
    _write(log_dir, RECORDS, 10)
    server = serve(log_dir)
    resumed = _consumer(server.bootstrap)
    after: dict[TopicPartition, list[int]] = {}
    _poll_until([resumed], lambda: sum(len(v) for v in after.values()) >= PARTITIONS * 10, after)
    time.sleep(0.5)
    for tp, records in resumed.poll(timeout_ms=300).items():
        after.setdefault(tp, []).extend(r.offset for r in records)
    resumed.close()
    assert after == {TopicPartition(TOPIC, p): list(range(RECORDS, RECORDS + 10)) for p in range(PARTITIONS)}


def test_member_killed_without_leaving_is_expired_and_its_partitions_move(
    serve: Callable[..., ServeProcess], tmp_path: Path
) -> None:
    """A kcat -G member killed with SIGKILL sends no LeaveGroup: its session expires (6 s) and the
    remaining kafka-python member gets every partition."""
    log_dir = tmp_path / "logs"
    _write(log_dir, 0, RECORDS)
    server = serve(log_dir)
    kcat = subprocess.Popen(
        [
            "kcat",
            "-b",
            server.bootstrap,
            "-G",
            "grp",
            TOPIC,
            "-q",
            "-X",
            "session.timeout.ms=6000",
            "-X",
            "heartbeat.interval.ms=500",
            "-o",
            "beginning",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        consumer = _consumer(server.bootstrap)
        seen: dict[TopicPartition, list[int]] = {}
        _poll_until([consumer], lambda: 0 < len(consumer.assignment()) < PARTITIONS, seen)
        kcat.send_signal(signal.SIGKILL)
        kcat.wait(10)
        _poll_until([consumer], lambda: len(consumer.assignment()) == PARTITIONS, seen, timeout_s=40)
        consumer.close()
    finally:
        if kcat.poll() is None:
            kcat.kill()
    assert "session expired" in server.log_text()
