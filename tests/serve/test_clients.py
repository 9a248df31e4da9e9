"""Real consumers (kafka-python, kcat/librdkafka, confluent-kafka) read everything a seglog writer
committed through ``seglog serve``: keys, values, headers and timestamps intact, every codec, each
record exactly once and in offset order; nothing above the high watermark."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import confluent_kafka
import confluent_kafka.admin
import pytest

from indexer.checkpoint import OffsetCheckpointFile
from indexer.config import load_settings
from indexer.file_names import REPLICATION_OFFSET_CHECKPOINT_FILE
from indexer.log_manager import LogManager
from tests.serve import clients
from tests.serve.clients import Record
from tests.serve.conftest import ServeProcess

TOPIC = "events"
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]  # partition i is written with CODECS[i]
APPENDS = [300, 1, 700]  # records per append: several batches per partition
UNCOMMITTED = 50  # records appended after the last commit: never served


def _rows(partition: int, start: int, count: int) -> list[dict[str, object]]:
    rows = []
    for i in range(start, start + count):
        key = None if i % 7 == 0 else f"key-{partition}-{i % 13}".encode()
        value = None if i % 11 == 5 else b"" if i % 11 == 6 else f"value {partition}/{i} ".encode() * (i % 5 + 1)
        headers = [{"key": f"h{j}", "value": f"v{i}.{j}".encode()} for j in range(i % 3)]
        rows.append({"key": key, "value": value, "timestamp": 1_700_000_000_000 + 17 * i, "headers": headers})
    return rows


def _record(offset: int, row: dict[str, object]) -> Record:
    headers = tuple((h["key"], h["value"]) for h in row["headers"])  # type: ignore[attr-defined]
    return Record(offset, row["key"], row["value"], headers, row["timestamp"])  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[tuple[str, int], list[Record]]]:
    """A log directory written by seglog (one codec per partition) and the committed records."""
    log_dir = tmp_path_factory.mktemp("serve-clients") / "logs"
    expected: dict[tuple[str, int], list[Record]] = {}
    with LogManager(log_dir, load_settings()) as manager:
        for partition, codec in enumerate(CODECS):
            log = manager.get_or_create_log(TOPIC, partition)
            records = expected.setdefault((TOPIC, partition), [])
            for count in APPENDS:
                rows = _rows(partition, len(records), count)
                first = log.append(rows, compression=codec).first_offset
                records += [_record(first + i, row) for i, row in enumerate(rows)]
                log.roll()  # several segments per partition
            log.flush()
            log.update_high_watermark(log.log_end_offset)
        manager.checkpoint_high_watermarks()
        for partition, codec in enumerate(CODECS):  # appended, never committed
            manager.get_or_create_log(TOPIC, partition).append(_rows(partition, 10_000, UNCOMMITTED), compression=codec)
        manager.flush_all()
    # The manager's close wrote the high watermarks again: put the committed ones back.
    OffsetCheckpointFile(log_dir / REPLICATION_OFFSET_CHECKPOINT_FILE).write(
        {tp: len(records) for tp, records in expected.items()}
    )
    return log_dir, expected


def _check(received: clients.Received, expected: dict[tuple[str, int], list[Record]], *, headers: bool = True) -> None:
    assert set(received) == set(expected)
    for tp, records in expected.items():
        got = received[tp]
        if not headers:
            got, records = [r._replace(headers=()) for r in got], [r._replace(headers=()) for r in records]
        assert [r.offset for r in got] == [r.offset for r in records], tp  # exactly once, in order
        assert got == records, tp


PARTITIONS = [(TOPIC, p) for p in range(len(CODECS))]
CONSUMERS: dict[str, Callable[[str, int], clients.Received]] = {
    "kafka-python-assign": lambda b, n: clients.kafka_python(b, n, assign=PARTITIONS),
    "kafka-python-group": lambda b, n: clients.kafka_python(b, n, topics=[TOPIC], group="kp"),
    "confluent-assign": lambda b, n: clients.confluent(b, n, assign=PARTITIONS),
    "confluent-group": lambda b, n: clients.confluent(b, n, topics=[TOPIC], group="ck"),
    "kcat-C": lambda b, n: clients.kcat(b, n, [TOPIC]),
    "kcat-G": lambda b, n: clients.kcat(b, n, [TOPIC], group="kc"),
}


@pytest.mark.parametrize("brokers", [1, 3])
@pytest.mark.parametrize("consumer", sorted(CONSUMERS))
def test_consumer_reads_every_committed_record(
    serve: Callable[..., ServeProcess], written, consumer: str, brokers: int, tmp_path: Path
) -> None:
    """With ``--brokers 3`` the five partitions are led by three nodes on three ports: each client
    fetches them over three connections at once (librdkafka from three broker threads). Group offsets
    go to a directory of the test's own, so no run starts from another's commits."""
    log_dir, expected = written
    server = serve(log_dir, "--group-offsets-dir", str(tmp_path), "--brokers", str(brokers))
    total = sum(len(r) for r in expected.values())
    received = CONSUMERS[consumer](server.bootstrap, total)  # and lingers: the uncommitted tail must not come
    _check(received, expected)


GAP_CONSUMERS: dict[str, Callable[[str, int], clients.Received]] = {
    "kafka-python-group": lambda b, n: clients.kafka_python(b, n, topics=["gap"], group="kp"),
    "confluent-group": lambda b, n: clients.confluent(b, n, topics=["gap"], group="ck"),
}


@pytest.mark.parametrize("consumer", sorted(GAP_CONSUMERS))
def test_a_partition_without_a_directory_is_offline_and_the_others_are_read(
    serve: Callable[..., ServeProcess], consumer: str, tmp_path: Path
) -> None:
    """One broker's directory holds only the partitions it replicated: here gap-0 and gap-2 of a topic
    of 3. Metadata has all 3, gap-1 offline (LEADER_NOT_AVAILABLE), and every consumer reads gap-0
    and gap-2 (listed as partitions 0 and 2 alone, librdkafka took the topic for one of 2
    partitions and never read gap-2). (kcat -e would wait for gap-1's end forever, as with a broker.)"""
    log_dir = tmp_path / "logs"
    with LogManager(log_dir, load_settings()) as manager:
        manager.create_topic("gap", 3)
        for partition in (0, 2):
            log = manager.get_or_create_log("gap", partition)
            log.append({"value": [b"%d-%d" % (partition, i) for i in range(10)]})
            log.update_high_watermark(log.log_end_offset)
    shutil.rmtree(log_dir / "gap-1")
    (log_dir / "seglog-topics.json").unlink()  # as a broker's directory: the count is the directories'
    server = serve(log_dir, "--group-offsets-dir", str(tmp_path))
    metadata = confluent_kafka.admin.AdminClient({"bootstrap.servers": server.bootstrap}).list_topics(timeout=20)
    partitions = metadata.topics["gap"].partitions
    assert {p: (m.leader, m.error.code() if m.error else None) for p, m in partitions.items()} == {
        0: (0, None),
        1: (-1, confluent_kafka.KafkaError.LEADER_NOT_AVAILABLE),
        2: (0, None),
    }
    received = GAP_CONSUMERS[consumer](server.bootstrap, 20)
    assert {tp: [r.value for r in records] for tp, records in received.items()} == {
        ("gap", p): [b"%d-%d" % (p, i) for i in range(10)] for p in (0, 2)
    }
