"""The offset queries that applications and lag monitors make of ``seglog serve``, through real
clients' own calls (confluent-kafka's AdminClient and Consumer, kafka-python's KafkaConsumer): each
answer is a broker's for the same log."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from indexer.config import load_settings
from indexer.log_manager import LogManager
from tests.serve.conftest import ServeProcess

TOPIC = "t"
CODECS = ["none", "gzip", "none"]  # partition i is written with CODECS[i]
# Two batches per partition; the largest timestamp is the middle record of the first one.
BATCHES = [[1000, 5000, 2000], [3000, 4000]]
TRIMMED = 2  # this partition's log starts at offset 3 (records deleted), after the largest timestamp


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    log_dir = tmp_path / "logs"
    with LogManager(log_dir, load_settings()) as manager:
        for partition, codec in enumerate(CODECS):
            log = manager.get_or_create_log(TOPIC, partition)
            for timestamps in BATCHES:
                log.append([{"value": b"%d" % ts, "timestamp": ts} for ts in timestamps], compression=codec)
            log.update_high_watermark(log.log_end_offset)
        manager.get_or_create_log(TOPIC, TRIMMED).maybe_increment_log_start_offset(3)
        manager.checkpoint_high_watermarks()
        manager.checkpoint_log_start_offsets()
    return log_dir


def test_max_timestamp_is_the_offset_of_the_record_that_has_it(
    serve: Callable[..., ServeProcess], log_dir: Path
) -> None:
    """ListOffsets with MAX_TIMESTAMP (KIP-734; confluent-kafka's ``OffsetSpec.max_timestamp()``) names
    the record with the largest timestamp, as Kafka 3.8+ does (it looks the record up in its batch),
    not the last offset of the batch holding it (what the segment's time index keeps). When records
    deleted below the log start hold it, the segment's answer stands (Kafka too answers below the log
    start then); it was a KAFKA_STORAGE_ERROR."""
    server = serve(log_dir)
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    asked = {TopicPartition(TOPIC, p): OffsetSpec.max_timestamp() for p in range(len(CODECS))}
    answers = {tp.partition: f.result(20) for tp, f in admin.list_offsets(asked, request_timeout=20).items()}
    assert {p: (a.offset, a.timestamp) for p, a in answers.items()} == {0: (1, 5000), 1: (1, 5000), TRIMMED: (2, 5000)}
