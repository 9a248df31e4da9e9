"""DescribeLogDirs: what ``kafka-log-dirs.sh --describe`` and kafka-python's ``describe_log_dirs`` ask a
broker of its storage, answered from the engine's logs as a broker answers it."""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from pathlib import Path

from indexer.config import load_settings
from indexer.log import Log
from indexer.log_manager import LogManager
from tests.serve.conftest import ServeProcess

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaAdminClient


def _write(log_dir: Path) -> dict[tuple[str, int], int]:
    """Topic ``orders`` (3 partitions, each with a different number of batches) and ``events`` (1);
    each partition's size in bytes, as the engine gives it."""
    sizes = {}
    with LogManager(log_dir, load_settings()) as manager:
        for topic, partitions in (("orders", 3), ("events", 1)):
            for p in range(partitions):
                log = manager.get_or_create_log(topic, p)
                for _ in range(p + 1):
                    log.append({"value": [b"v" * 100] * 3})
                log.update_high_watermark(log.log_end_offset)
                sizes[(topic, p)] = log.size_in_bytes
    return sizes


def _described(answers: list[dict[str, object]]) -> dict[int, dict[str, object]]:
    """kafka-python's answer as {broker: {log_dir: (error_code, {(topic, partition): (size, lag, future)})}}."""
    out: dict[int, dict[str, object]] = {}
    for answer in answers:
        dirs = {}
        for result in answer["log_dirs"]:  # type: ignore[attr-defined]
            partitions = {
                (t["name"], p["partition_index"]): (p["partition_size"], p["offset_lag"], p["is_future_key"])
                for t in result["topics"]
                for p in t["partitions"]
            }
            dirs[result["log_dir"]] = (result["error_code"], partitions)
        out[answer["broker"]] = dirs  # type: ignore[index]
    return out


def test_kafka_python_describes_the_log_dir_with_each_partitions_size(
    serve: Callable[..., ServeProcess], tmp_path: Path
) -> None:
    """kafka-python's ``describe_log_dirs`` failed with IncompatibleBrokerVersion (DescribeLogDirs was
    neither answered nor advertised). A broker names its log directory (absolute) and each partition in
    it with its size in bytes (the engine's ``Log.size_in_bytes``), offset lag 0 (a leader's end is its
    high watermark) and no future log; asked for some partitions, those that exist only; and the
    volume's total and usable bytes."""
    log_dir = tmp_path / "logs"
    sizes = _write(log_dir)
    assert len(set(sizes.values())) == 3  # the partitions of orders are told apart by their size
    server = serve(log_dir)
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    try:
        every = admin.describe_log_dirs()
        some = admin.describe_log_dirs({"orders": [1, 7], "nope": [0]})
    finally:
        admin.close()
    where = str(log_dir.absolute())
    assert _described(every) == {0: {where: (0, {tp: (size, 0, False) for tp, size in sizes.items()})}}
    assert _described(some) == {0: {where: (0, {("orders", 1): (sizes[("orders", 1)], 0, False)})}}
    result = every[0]["log_dirs"][0]
    assert 0 < result["usable_bytes"] <= result["total_bytes"]


def test_each_broker_node_describes_the_partitions_it_leads(serve: Callable[..., ServeProcess], tmp_path: Path) -> None:
    """With ``--brokers 2`` each node holds, as a broker of a cluster, the partitions it leads (partition p
    on node p % 2, as Metadata names them): a tool that adds up the nodes' answers counts each once."""
    log_dir = tmp_path / "logs"
    sizes = _write(log_dir)
    server = serve(log_dir, "--brokers", "2")
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    try:
        answers = _described(admin.describe_log_dirs())
    finally:
        admin.close()
    where = str(log_dir.absolute())
    assert answers == {
        node: {where: (0, {tp: (size, 0, False) for tp, size in sizes.items() if tp[1] % 2 == node})} for node in (0, 1)
    }


def test_sizes_follow_the_writer(serve: Callable[..., ServeProcess], tmp_path: Path) -> None:
    """A partition's size is that of its log as the server last re-opened it: after a commit, the new
    batches count."""
    log_dir = tmp_path / "logs"
    _write(log_dir)
    server = serve(log_dir)
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    try:
        before = _described(admin.describe_log_dirs({"events": [0]}))
        with LogManager(log_dir, load_settings()) as manager:
            log: Log = manager.get_or_create_log("events", 0)
            log.append({"value": [b"w" * 1000]})
            log.update_high_watermark(log.log_end_offset)
            size = log.size_in_bytes
            manager.checkpoint_high_watermarks()
        where = str(log_dir.absolute())
        deadline = time.monotonic() + 30  # the server re-opens the log within a poll of the checkpoint
        while (after := _described(admin.describe_log_dirs({"events": [0]}))) == before and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        admin.close()
    assert after == {0: {where: (0, {("events", 0): (size, 0, False)})}}


def test_a_log_dir_not_created_yet_is_described_empty(serve: Callable[..., ServeProcess], tmp_path: Path) -> None:
    """Started before the writer creates its log directory, the server describes it without partitions
    and with its volume's sizes unknown (-1), not as a failed directory."""
    log_dir = tmp_path / "logs"
    server = serve(log_dir)
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    try:
        (answer,) = admin.describe_log_dirs()
    finally:
        admin.close()
    assert answer["log_dirs"] == [
        {
            "error_code": 0,
            "log_dir": str(log_dir.absolute()),
            "topics": [],
            "total_bytes": -1,
            "usable_bytes": -1,
            "is_cordoned": False,
        }
    ]
