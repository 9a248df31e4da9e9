"""Admin clients' writes through their own calls (confluent-kafka's AdminClient, kafka-python's
KafkaAdminClient): ``seglog serve`` refuses each with the error a broker gives a client that may not
alter or delete the topic, and the log directory is left as it was."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    OffsetSpec,
    ResourceType,
)

from indexer.config import load_settings
from indexer.log_manager import LogManager
from tests.serve.conftest import ServeProcess

with warnings.catch_warnings():  # kafka-python 3 imports its protocol JSON with a deprecated API
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka
    import kafka.admin
    import kafka.errors

    from seglog.serve import protocol


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    """Topic ``t``: one partition of 10 committed records."""
    log_dir = tmp_path / "logs"
    with LogManager(log_dir, load_settings()) as manager:
        log = manager.get_or_create_log("t", 0)
        log.append({"value": [b"%d" % i for i in range(10)]})
        log.update_high_watermark(log.log_end_offset)
    return log_dir


def test_create_partitions_and_delete_records_are_refused_with_authorization_errors(
    serve: Callable[..., ServeProcess], log_dir: Path
) -> None:
    """CreatePartitions and DeleteRecords answer TOPIC_AUTHORIZATION_FAILED, as a broker answers a client
    without ALTER or DELETE on the topic, like CreateTopics and DeleteTopics. They were not advertised:
    confluent-kafka failed with _UNSUPPORTED_FEATURE, "CreatePartitions (KIP-195) not supported by
    broker, requires broker version >= 1.0.0" (as if the broker were older than 1.0), kafka-python with
    IncompatibleBrokerVersion, and the server log said nothing."""
    server = serve(log_dir)
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    refused = [
        *admin.create_partitions([NewPartitions("t", 3)], request_timeout=20).values(),
        *admin.delete_records([TopicPartition("t", 0, 5)], request_timeout=20).values(),
    ]
    for future in refused:
        with pytest.raises(KafkaException) as error:
            future.result(30)
        assert error.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    other = kafka.KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=20_000)
    try:
        with pytest.raises(kafka.errors.TopicAuthorizationFailedError):
            other.create_partitions({"t": kafka.admin.NewPartitions(3)})
        with pytest.raises(kafka.errors.TopicAuthorizationFailedError):
            other.delete_records({kafka.TopicPartition("t", 0): 5})
    finally:
        other.close()

    earliest = admin.list_offsets({TopicPartition("t", 0): OffsetSpec.earliest()}, request_timeout=20)
    assert [f.result(20).offset for f in earliest.values()] == [0]
    assert sorted(p.name for p in log_dir.iterdir() if p.is_dir()) == ["t-0"]
    said = [line.split(": ", 1)[1] for line in server.log_text().splitlines() if "WARNING" in line]
    assert said == [
        f"refused CreatePartitions from client 'rdkafka' at /127.0.0.1: {protocol.READ_ONLY_MESSAGE}",
        f"refused DeleteRecords from client 'rdkafka' at /127.0.0.1: {protocol.READ_ONLY_MESSAGE}",
        f"refused CreatePartitions from client 'kafka-python-{kafka.__version__}' at /127.0.0.1: "
        f"{protocol.READ_ONLY_MESSAGE}",
        f"refused DeleteRecords from client 'kafka-python-{kafka.__version__}' at /127.0.0.1: "
        f"{protocol.READ_ONLY_MESSAGE}",
    ]


def test_config_changes_are_refused_with_authorization_errors(
    serve: Callable[..., ServeProcess], log_dir: Path
) -> None:
    """IncrementalAlterConfigs (``kafka-configs.sh --alter``, confluent-kafka's
    ``incremental_alter_configs``) and AlterConfigs (kafka-python's ``alter_configs(...,
    incremental=False)``) answer each
    resource with the error a broker gives a client without ALTER_CONFIGS on it: a topic
    TOPIC_AUTHORIZATION_FAILED, a broker CLUSTER_AUTHORIZATION_FAILED. They were not advertised:
    confluent-kafka failed with _UNSUPPORTED_FEATURE, "IncrementalAlterConfigs (KIP-339) not supported
    by broker, requires broker version >= 2.3.0", kafka-python with IncompatibleBrokerVersion."""
    server = serve(log_dir)
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    change = [ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET)]
    resources = [
        ConfigResource(ResourceType.TOPIC, "t", incremental_configs=change),
        ConfigResource(ResourceType.BROKER, "0", incremental_configs=change),
    ]
    codes = []
    for future in admin.incremental_alter_configs(resources, request_timeout=20).values():
        with pytest.raises(KafkaException) as error:
            future.result(30)
        codes.append(error.value.args[0].code())
    assert codes == [KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED]

    other = kafka.KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=20_000)
    try:
        topic = kafka.admin.ConfigResource("TOPIC", "t", {"retention.ms": "1"})
        answer = other.alter_configs([topic], raise_on_unknown=False, incremental=False)  # every config is read-only
        assert answer["topic"]["t"].startswith("[Error 29] TopicAuthorizationFailedError: seglog serve is read-only")
    finally:
        other.close()
    said = [line.split(": ", 1)[1] for line in server.log_text().splitlines() if "WARNING" in line]
    assert said == [
        f"refused IncrementalAlterConfigs from client 'rdkafka' at /127.0.0.1: {protocol.READ_ONLY_MESSAGE}",
        f"refused AlterConfigs from client 'kafka-python-{kafka.__version__}' at /127.0.0.1: "
        f"{protocol.READ_ONLY_MESSAGE}",
    ]
