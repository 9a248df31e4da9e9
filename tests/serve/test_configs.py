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
from tests.serve.test_bad_clients import _connect, _read_frame, _request

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource as KafkaPythonResource
    from kafka.protocol.admin import DescribeConfigsRequest, DescribeConfigsResponse


def _orders_log(tmp_path: Path) -> Path:
    """A log directory holding topic ``orders``, one committed record."""
    log_dir = tmp_path / "logs"
    with LogManager(log_dir, load_settings()) as manager:
        log = manager.get_or_create_log("orders", 0)
        log.append({"value": [b"v"]})
        log.update_high_watermark(log.log_end_offset)
    return log_dir


@pytest.fixture
def server(serve: Callable[..., ServeProcess], tmp_path: Path) -> ServeProcess:
    """A server whose settings file gives topic ``orders`` its own retention, and whose ``--config``
    sets every topic's segment size."""
    log_dir = _orders_log(tmp_path)
    conf = tmp_path / "seglog.toml"
    conf.write_text('[topics."orders"]\n"retention.ms" = 3600000\n')
    return serve(log_dir, "--conf", str(conf), "--config", "segment.bytes=1048576")


def test_confluent_kafka_describes_a_topics_configs(server: ServeProcess) -> None:
    """confluent-kafka's ``describe_configs`` failed at once: "DescribeConfigs (KIP-133) not
    supported by broker". An unknown topic is UNKNOWN_TOPIC_OR_PARTITION; a group has no configs
    here (INVALID_REQUEST, as Kafka answers a resource type it does not describe)."""
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    resources = [
        ConfigResource(ResourceType.TOPIC, "orders"),
        ConfigResource(ResourceType.TOPIC, "nope"),
        ConfigResource(ResourceType.GROUP, "g"),
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
    for name, code in (("nope", KafkaError.UNKNOWN_TOPIC_OR_PART), ("g", KafkaError.INVALID_REQUEST)):
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


def test_a_broker_describes_its_id_log_dir_and_the_defaults_topics_fall_back_to(
    serve: Callable[..., ServeProcess], tmp_path: Path
) -> None:
    """A broker's configs (confluent-kafka's ``describe_configs`` of ``BROKER "0"``,
    ``kafka-configs.sh --describe --broker 0``) were refused with INVALID_REQUEST. A broker answers its
    id, ``log.dirs`` and the ``log.*`` configs every topic falls back to, by Kafka's names, from the
    settings the topics' configs come from: ``--config`` and a ``[topic]`` table are the static
    broker config, the rest Kafka's default; a topic's own table changes no broker config. Each node
    describes itself only, as a broker; the empty name (the cluster's dynamic defaults) has none."""
    log_dir = _orders_log(tmp_path)
    conf = tmp_path / "seglog.toml"
    conf.write_text('[topic]\n"retention.bytes" = 1000000\n[topics."orders"]\n"retention.ms" = 3600000\n')
    server = serve(log_dir, "--conf", str(conf), "--config", "segment.bytes=1048576", "--brokers", "2")
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    node0, node1 = (
        next(
            iter(admin.describe_configs([ConfigResource(ResourceType.BROKER, name)], request_timeout=20).values())
        ).result(20)
        for name in ("0", "1")
    )
    static, default = ConfigSource.STATIC_BROKER_CONFIG.value, ConfigSource.DEFAULT_CONFIG.value
    shown = {key: (c.value, c.source, c.is_default) for key, c in node0.items()}
    assert shown == {
        "node.id": ("0", static, False),
        "broker.id": ("0", static, False),
        "log.dirs": (str(log_dir.absolute()), static, False),
        "log.segment.bytes": ("1048576", static, False),
        "log.roll.ms": ("604800000", default, True),
        "log.roll.jitter.ms": ("0", default, True),
        "log.index.size.max.bytes": ("10485760", default, True),
        "log.index.interval.bytes": ("4096", default, True),
        "message.max.bytes": ("1048588", default, True),
        "log.message.timestamp.type": ("CreateTime", default, True),
        "log.retention.ms": ("604800000", default, True),
        "log.retention.bytes": ("1000000", static, False),
        "log.segment.delete.delay.ms": ("60000", default, True),
        "log.flush.interval.messages": ("9223372036854775807", default, True),
        "log.flush.interval.ms": ("9223372036854775807", default, True),
        "log.preallocate": ("false", default, True),
        "compression.type": ("producer", default, True),
    }
    assert all(c.is_read_only and not c.is_sensitive for c in node0.values())
    assert node1["node.id"].value == "1"  # asked at node 1's port, as clients send it
    # The cluster's defaults (the empty name, Kafka's ``kafka-configs.sh --entity-default``): none.
    request = DescribeConfigsRequest(
        version=4,
        resources=[
            DescribeConfigsRequest.DescribeConfigsResource(resource_type=4, resource_name="", configuration_keys=None)
        ],
        include_synonyms=False,
        include_documentation=False,
    )
    with _connect(server) as sock:
        sock.sendall(_request(request, 4))
        (result,) = DescribeConfigsResponse.decode(_read_frame(sock), version=4, header=True).results
    assert (result.error_code, result.configs) == (0, [])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        kp = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    try:
        keys = ["log.dirs", "log.segment.bytes", "log.roll.ms"]
        found = kp.describe_configs([KafkaPythonResource("BROKER", "0", keys)], config_filter="static")
    finally:
        kp.close()
    assert {k: (v["value"], v["config_type"]) for k, v in found["broker"]["0"].items()} == {
        "log.dirs": (str(log_dir.absolute()), "STRING"),
        "log.segment.bytes": ("1048576", "INT"),
    }
