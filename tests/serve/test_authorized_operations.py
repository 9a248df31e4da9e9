"""What an admin client learns it may do (KIP-430's authorized operations) through ``seglog serve``."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import ConsumerGroupTopicPartitions, TopicCollection, TopicPartition
from confluent_kafka.admin import AclOperation, AdminClient

from indexer.config import load_settings
from indexer.log_manager import LogManager
from tests.serve.conftest import ServeProcess

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaAdminClient


def test_topics_and_groups_name_the_operations_a_client_may_do_here(
    serve: Callable[..., ServeProcess], tmp_path: Path
) -> None:
    """Asked for them (``include_authorized_operations=True``), a broker always names what the client
    may do with a topic or a group (every operation when it has no authorizer). The server answered
    nothing: confluent-kafka's ``describe_topics`` and ``describe_consumer_groups`` gave None, as if not
    asked. It names what it allows: a topic may be read and described (its configs too), every write
    being refused; a group may be read (joined, committed to), described and deleted."""
    log_dir = tmp_path / "logs"
    with LogManager(log_dir, load_settings()) as manager:
        log = manager.get_or_create_log("t", 0)
        log.append({"value": [b"x"]})
        log.update_high_watermark(log.log_end_offset)
    server = serve(log_dir)
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    committed = [ConsumerGroupTopicPartitions("g", [TopicPartition("t", 0, 1)])]
    for future in admin.alter_consumer_group_offsets(committed, request_timeout=20).values():
        future.result(20)

    topics = admin.describe_topics(TopicCollection(["t"]), include_authorized_operations=True)
    groups = admin.describe_consumer_groups(["g"], include_authorized_operations=True)
    assert set(topics["t"].result(20).authorized_operations) == {
        AclOperation.READ,
        AclOperation.DESCRIBE,
        AclOperation.DESCRIBE_CONFIGS,
    }
    assert set(groups["g"].result(20).authorized_operations) == {
        AclOperation.READ,
        AclOperation.DESCRIBE,
        AclOperation.DELETE,
    }
    not_asked = admin.describe_topics(TopicCollection(["t"]))["t"].result(20)
    assert not_asked.authorized_operations is None


def test_the_cluster_names_the_operations_a_client_may_do_here(
    serve: Callable[..., ServeProcess], tmp_path: Path
) -> None:
    """``describe_cluster(include_authorized_operations=True)`` gave None with confluent-kafka (which asks
    Metadata v10) and nothing with kafka-python (which asks DescribeCluster, then falls back to
    Metadata v13, which has no such field). A broker names what the client may do with the cluster:
    here describe it (its brokers, log directories, groups) and its brokers' configs, every change
    being refused."""
    server = serve(tmp_path / "logs")
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    cluster = admin.describe_cluster(include_authorized_operations=True).result(20)
    assert set(cluster.authorized_operations) == {AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS}
    assert admin.describe_cluster().result(20).authorized_operations is None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        kp = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    try:
        described = kp.describe_cluster()
    finally:
        kp.close()
    assert set(described["authorized_operations"]) == {"DESCRIBE", "DESCRIBE_CONFIGS"}
    assert (described["cluster_id"], described["controller_id"]) == ("seglog", 0)
    assert described["brokers"] == [
        {"broker_id": 0, "host": "127.0.0.1", "port": server.port, "rack": None, "is_fenced": False}
    ]
