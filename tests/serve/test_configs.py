"""DescribeConfigs: admin clients (and ``kafka-topics.sh --describe``, UI tools) read a topic's
configs from ``seglog serve``: the ones its settings give the topic, read-only, each with the source
Kafka would name."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, ResourceType

from indexer.config import load_settings
from indexer.log_manager import LogManager
from tests.serve.conftest import ServeProcess

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource as KafkaPythonResource


@pytest.fixture
def server(serve: Callable[..., ServeProcess], tmp_path: Path) -> ServeProcess:
    """A server whose settings file gives topic ``orders`` its own retention, and whose ``--config``
    sets every topic's segment size."""
    log_dir = tmp_path / "logs"
    with LogManager(log_dir, load_settings()) as manager:
        log = manager.get_or_create_log("orders", 0)
        log.append({"value": [b"v"]})
        log.update_high_watermark(log.log_end_offset)
    conf = tmp_path / "seglog.toml"
    conf.write_text('[topics."orders"]\n"retention.ms" = 3600000\n')
    return serve(log_dir, "--conf", str(conf), "--config", "segment.bytes=1048576")


def test_confluent_kafka_describes_a_topics_configs(server: ServeProcess) -> None:
    """confluent-kafka's ``describe_configs`` failed at once: "DescribeConfigs (KIP-133) not
    supported by broker". An unknown topic is UNKNOWN_TOPIC_OR_PARTITION; a broker has no configs
    here (INVALID_REQUEST, as Kafka answers a resource type it does not describe)."""
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    resources = [
        ConfigResource(ResourceType.TOPIC, "orders"),
        ConfigResource(ResourceType.TOPIC, "nope"),
        ConfigResource(ResourceType.BROKER, "0"),
    ]
    futures = admin.describe_configs(resources, request_timeout=20)
    configs = {resource.name: future for resource, future in futures.items()}["orders"].result(20)
    shown = {
        key: (configs[key].value, configs[key].source, configs[key].is_default)
        for key in ("retention.ms", "segment.bytes", "segment.ms", "preallocate")
    }
    assert shown == {
        "retention.ms": ("3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value, False),
        "segment.bytes": ("1048576", ConfigSource.STATIC_BROKER_CONFIG.value, False),
        "segment.ms": ("604800000", ConfigSource.DEFAULT_CONFIG.value, True),
        "preallocate": ("false", ConfigSource.DEFAULT_CONFIG.value, True),
    }
    assert all(c.is_read_only and not c.is_sensitive for c in configs.values())
    for name, code in (("nope", KafkaError.UNKNOWN_TOPIC_OR_PART), ("0", KafkaError.INVALID_REQUEST)):
        with pytest.raises(KafkaException) as refused:
            {resource.name: future for resource, future in futures.items()}[name].result(20)
        assert refused.value.args[0].code() == code, name


def test_kafka_python_describes_a_topics_changed_configs(server: ServeProcess) -> None:
    """kafka-python's ``describe_configs`` (by default the configs set for the topic itself, as
    ``kafka-configs.sh --describe``) failed with IncompatibleBrokerVersion; asking for named keys
    gives those only."""
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    try:
        changed = admin.describe_configs([KafkaPythonResource("TOPIC", "orders")])
        assert {k: v["value"] for k, v in changed["topic"]["orders"].items()} == {"retention.ms": "3600000"}
        named = admin.describe_configs(
            [KafkaPythonResource("TOPIC", "orders", ["segment.bytes", "flush.ms"])], config_filter="all"
        )
        assert {k: v["value"] for k, v in named["topic"]["orders"].items()} == {
            "segment.bytes": "1048576",
            "flush.ms": "9223372036854775807",
        }
    finally:
        admin.close()


def test_kafka_python_gets_each_config_with_the_type_kafka_declares(server: ServeProcess) -> None:
    """Every config was answered with type LONG (``message.timestamp.type`` and ``compression.type``
    too, which are strings; ``segment.bytes``, an int); each now has the type of Kafka's LogConfig:
    INT for the 4-byte sizes, LONG for times and counts, BOOLEAN, STRING."""
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    try:
        keys = [
            "segment.bytes",
            "index.interval.bytes",
            "max.message.bytes",
            "segment.ms",
            "retention.ms",
            "retention.bytes",
            "preallocate",
            "message.timestamp.type",
            "compression.type",
        ]
        found = admin.describe_configs([KafkaPythonResource("TOPIC", "orders", keys)], config_filter="all")
        types = {k: v["config_type"] for k, v in found["topic"]["orders"].items()}  # the type's name
    finally:
        admin.close()
    assert types == {
        "segment.bytes": "INT",
        "index.interval.bytes": "INT",
        "max.message.bytes": "INT",
        "segment.ms": "LONG",
        "retention.ms": "LONG",
        "retention.bytes": "LONG",
        "preallocate": "BOOLEAN",
        "message.timestamp.type": "STRING",
        "compression.type": "STRING",
    }
