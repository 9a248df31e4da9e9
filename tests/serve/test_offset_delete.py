"""OffsetDelete (``kafka-consumer-groups.sh --delete-offsets``, kafka-python's
``delete_group_offsets``): a group's committed offsets of some partitions go, as from a broker."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

from indexer.config import load_settings
from indexer.log_manager import LogManager
from tests.serve.conftest import ServeProcess

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka.errors as kafka_errors
    from kafka import KafkaAdminClient, KafkaConsumer, OffsetAndMetadata, TopicPartition


def test_an_admin_client_deletes_a_groups_offsets(serve: Callable[..., ServeProcess], tmp_path: Path) -> None:
    """A group without members loses the offsets named; a live consumer group keeps those of the
    topic its members subscribe to (GROUP_SUBSCRIBED_TO_TOPIC: they would commit them again) and
    loses the others; an unknown partition is UNKNOWN_TOPIC_OR_PARTITION, an unknown group
    GROUP_ID_NOT_FOUND. kafka-python raised IncompatibleBrokerVersion: OffsetDelete was neither
    answered nor advertised."""
    log_dir = tmp_path / "logs"
    with LogManager(log_dir, load_settings()) as manager:
        for topic in ("orders", "audit"):
            log = manager.get_or_create_log(topic, 0)
            log.append({"value": [b"v"] * 10})
            log.update_high_watermark(log.log_end_offset)
    server = serve(log_dir)
    orders, audit = TopicPartition("orders", 0), TopicPartition("audit", 0)
    for group in ("idle", "live"):
        committer = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id=group, enable_auto_commit=False)
        committer.commit({orders: OffsetAndMetadata(5, "", -1), audit: OffsetAndMetadata(7, "", -1)})
        committer.close()
    member = KafkaConsumer(
        bootstrap_servers=server.bootstrap, group_id="live", enable_auto_commit=False, session_timeout_ms=6000
    )
    member.subscribe(["orders"])
    for _ in range(100):
        member.poll(timeout_ms=100)
        if member.assignment():
            break
    assert member.assignment() == {orders}

    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    try:
        deleted = admin.delete_group_offsets("idle", [orders, TopicPartition("orders", 9)])
        assert deleted == {
            orders: kafka_errors.NoError,
            TopicPartition("orders", 9): kafka_errors.UnknownTopicOrPartitionError,
        }
        assert set(admin.list_group_offsets("idle")["idle"]) == {audit}
        deleted = admin.delete_group_offsets("live", [orders, audit])
        assert deleted == {orders: kafka_errors.GroupSubscribedToTopicError, audit: kafka_errors.NoError}
        assert set(admin.list_group_offsets("live")["live"]) == {orders}
        with pytest.raises(kafka_errors.GroupIdNotFoundError):
            admin.delete_group_offsets("nope", [orders])
    finally:
        admin.close()
        member.close()
