"""Static group membership (KIP-345, ``group.instance.id``) over ``seglog serve``, with the real
clients: a static member that restarts gets its partitions back at once, without a rebalance; a
second consumer with the same instance id fences the first (FENCED_INSTANCE_ID, fatal to it); an
admin client removes a static member by its instance id alone."""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from pathlib import Path

import confluent_kafka

from tests.serve.conftest import ServeProcess
from tests.serve.test_groups import PARTITIONS, RECORDS, TOPIC, _write

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaAdminClient
    from kafka.admin import MemberToRemove


def _static(bootstrap: str, instance_id: str) -> confluent_kafka.Consumer:
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "static",
            "group.instance.id": instance_id,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 200,
            "fetch.wait.max.ms": 100,
        }
    )
    consumer.subscribe([TOPIC])
    return consumer


def _poll(consumers: list[confluent_kafka.Consumer], seconds: float, errors: list[confluent_kafka.KafkaError]) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for consumer in consumers:
            message = consumer.poll(0.05)
            if message is not None and message.error():
                errors.append(message.error())


def _partitions(consumer: confluent_kafka.Consumer) -> list[int]:
    return sorted(tp.partition for tp in consumer.assignment())


def _assigned_within(consumer: confluent_kafka.Consumer, seconds: float) -> float | None:
    """Seconds until ``consumer`` holds every partition, or None after ``seconds``."""
    start = time.monotonic()
    while time.monotonic() < start + seconds:
        consumer.poll(0.05)
        if _partitions(consumer) == list(range(PARTITIONS)):
            return time.monotonic() - start
    return None


def test_a_static_member_restarts_without_a_rebalance_and_a_duplicate_is_fenced(
    serve: Callable[..., ServeProcess], tmp_path: Path
) -> None:
    """librdkafka's static member does not leave on close. Restarted with its instance id, it used to
    join as a new member and wait for the old one's session to expire (6 s here, 45 s by default)
    before getting partitions; two consumers with one instance id shared the partitions."""
    log_dir = tmp_path / "logs"
    _write(log_dir, 0, RECORDS)
    server = serve(log_dir)
    first = _static(server.bootstrap, "a")
    assert _assigned_within(first, 20) is not None
    first.close()

    restarted = _static(server.bootstrap, "a")
    waited = _assigned_within(restarted, 5)
    assert waited is not None and waited < 2, waited
    assert server.log_text().count("rebalancing") == 1  # the first join's only

    duplicate = _static(server.bootstrap, "a")
    errors: list[confluent_kafka.KafkaError] = []
    _poll([restarted, duplicate], 3, errors)
    assert errors and all(e.code() == confluent_kafka.KafkaError._FATAL for e in errors), errors
    assert "fenced" in errors[0].str()
    assert _partitions(duplicate) == list(range(PARTITIONS))
    restarted.close()
    duplicate.close()


def test_an_admin_client_removes_a_static_member_by_its_instance_id(
    serve: Callable[..., ServeProcess], tmp_path: Path
) -> None:
    """LeaveGroup naming an instance id and no member id (kafka-python's remove_group_members, Kafka's
    kafka-consumer-groups.sh --remove-members) removed nothing: UNKNOWN_MEMBER_ID."""
    log_dir = tmp_path / "logs"
    _write(log_dir, 0, RECORDS)
    server = serve(log_dir)
    consumer = _static(server.bootstrap, "worker-1")
    assert _assigned_within(consumer, 20) is not None
    consumer.close()  # a static member does not leave: it stays in the group

    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    try:
        members = admin.describe_groups(["static"])["static"]["members"]
        assert [m["group_instance_id"] for m in members] == ["worker-1"]
        removed = admin.remove_group_members("static", [MemberToRemove(group_instance_id="worker-1")])
        assert [e.__name__ for e in removed.values()] == ["NoError"]
        assert admin.describe_groups(["static"])["static"]["group_state"] == "Empty"
        again = admin.remove_group_members("static", [MemberToRemove(group_instance_id="worker-1")])
        assert [e.__name__ for e in again.values()] == ["UnknownMemberIdError"]
    finally:
        admin.close()
