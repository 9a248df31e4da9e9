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


def test_lag_monitors_see_what_a_group_committed_against_the_end_offsets(
    serve: Callable[..., ServeProcess], log_dir: Path
) -> None:
    """A group commits through the server what it read; a lag monitor's view (committed offsets
    against end offsets) is the same through confluent-kafka's AdminClient, its Consumer and
    kafka-python's admin client and consumer."""
    import warnings

    from confluent_kafka import Consumer, ConsumerGroupTopicPartitions

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka import KafkaAdminClient, KafkaConsumer

    server = serve(log_dir)
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "lag", "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, 0, 0), TopicPartition(TOPIC, 1, 0)])
    read: dict[int, int] = {}
    while read.get(0, 0) < 2 or read.get(1, 0) < 4:
        m = consumer.poll(20)
        assert m is not None and not m.error()
        if read.get(m.partition(), 0) < (2 if m.partition() == 0 else 4):
            consumer.commit(message=m, asynchronous=False)
        read[m.partition()] = read.get(m.partition(), 0) + 1
    end = len(BATCHES[0]) + len(BATCHES[1])
    expected = {0: (2, end), 1: (4, end)}  # partition: committed, end offset

    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("lag")])["lag"].result(20)
    committed = {tp.partition: tp.offset for tp in listed.topic_partitions}
    latest = {TopicPartition(TOPIC, p): OffsetSpec.latest() for p in committed}
    ends = {tp.partition: f.result(20).offset for tp, f in admin.list_offsets(latest, request_timeout=20).items()}
    assert {p: (committed[p], ends[p]) for p in committed} == expected
    tps = [TopicPartition(TOPIC, p) for p in expected]
    assert {
        tp.partition: (tp.offset, consumer.get_watermark_offsets(tp, timeout=20)[1])
        for tp in consumer.committed(tps, timeout=20)
    } == expected
    consumer.close()

    kafka_admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    offsets = kafka_admin.list_group_offsets("lag")["lag"]
    kafka_admin.close()
    kafka_consumer = KafkaConsumer(bootstrap_servers=server.bootstrap)
    kafka_ends = kafka_consumer.end_offsets(list(offsets))
    kafka_consumer.close()
    assert {tp.partition: (o.offset, kafka_ends[tp]) for tp, o in offsets.items()} == expected


# transactions-commit's ksql command topic: a transactional record at each even offset, its COMMIT
# marker at the odd offset after it (offset 1 at 1692287577963, 6 a record at 1692288696143, 7 a marker
# at 1692288696154); what ListOffsets by timestamp answers, target -> (offset, its record's timestamp).
COMMAND_TOPIC = "_confluent-ksql-default__command_topic"
BY_TIMESTAMP = {
    1692287577900: (1, 1692287577963),
    1692288696143: (6, 1692288696143),
    1692288696150: (7, 1692288696154),
}


def test_by_timestamp_the_timestamp_is_the_found_records_also_for_a_transaction_marker(
    serve: Callable[..., ServeProcess], vectors_dir: Path, tmp_path: Path
) -> None:
    """ListOffsets by timestamp answers the first record at or after the time, a transaction's COMMIT
    marker included, with that record's timestamp, as Kafka's ``findOffsetByTimestamp``. For a marker
    the server gave the next data record's timestamp (offset 1 with 1692288399917, offset 2's) or -1
    (offset 7, the last): confluent-kafka's ``list_offsets`` and kafka-python's ``offsets_for_times``
    paired an offset with a time it does not have."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import kafka

    server = serve(vectors_dir / "transactions-commit", "--group-offsets-dir", str(tmp_path))
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    answers = {}
    for target in BY_TIMESTAMP:
        asked = {TopicPartition(COMMAND_TOPIC, 0): OffsetSpec.for_timestamp(target)}
        (found,) = [f.result(20) for f in admin.list_offsets(asked, request_timeout=20).values()]
        answers[target] = (found.offset, found.timestamp)
    assert answers == BY_TIMESTAMP

    consumer = kafka.KafkaConsumer(bootstrap_servers=server.bootstrap)
    try:
        tp = kafka.TopicPartition(COMMAND_TOPIC, 0)
        found_by = {target: consumer.offsets_for_times({tp: target})[tp] for target in BY_TIMESTAMP}
    finally:
        consumer.close()
    assert {target: (f.offset, f.timestamp) for target, f in found_by.items()} == BY_TIMESTAMP


def test_offsets_that_cannot_be_stored_are_refused_and_said_once(
    serve: Callable[..., ServeProcess], log_dir: Path
) -> None:
    """Group offsets the server cannot store (a read-only log directory without ``--group-offsets-dir``;
    here its lock file cannot be opened) are refused with KAFKA_STORAGE_ERROR, as a broker whose log
    directory failed; the server said so at ERROR for every commit (10 lines a second with kcat's
    consumers), now once per client and reason, at WARNING, naming ``--group-offsets-dir``."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    (log_dir / "group-offsets-checkpoint.lock").mkdir()
    server = serve(log_dir)
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    for offset in range(5):
        asked = [ConsumerGroupTopicPartitions("g", [TopicPartition(TOPIC, 0, offset)])]
        [future] = admin.alter_consumer_group_offsets(asked, request_timeout=20).values()
        [answer] = future.result(20).topic_partitions
        assert answer.error is not None and answer.error.name() == "KAFKA_STORAGE_ERROR", answer.error
    said = [line for line in server.log_text().splitlines() if "cannot store offsets of group g" in line]
    assert len(said) == 1, server.log_text()
    assert " WARNING " in said[0] and "--group-offsets-dir" in said[0], said[0]
