"""A consumer group over ``seglog serve``: 3 kafka-python consumers share 4 partitions, the group
rebalances when one leaves, and after the server restarts a consumer of the group resumes from the
committed offsets (kept in the log directory). Static members (``group.instance.id``, KIP-345) with
confluent-kafka and kafka-python's admin client."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import confluent_kafka
import pytest

from indexer.config import load_settings
from indexer.log_manager import LogManager
from tests.serve.conftest import ServeProcess

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaAdminClient, KafkaConsumer, OffsetAndMetadata, TopicPartition
    from kafka.admin import MemberToRemove
    from kafka.errors import CommitFailedError, RebalanceInProgressError

TOPIC, PARTITIONS, RECORDS = "orders", 4, 50


def _write(log_dir: Path, start: int, count: int) -> None:
    with LogManager(log_dir, load_settings()) as manager:
        for p in range(PARTITIONS):
            log = manager.get_or_create_log(TOPIC, p)
            log.append({"value": [b"%d-%d" % (p, i) for i in range(start, start + count)]})
            log.update_high_watermark(log.log_end_offset)
        manager.checkpoint_high_watermarks()


def _consumer(bootstrap: str) -> KafkaConsumer:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id="grp",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=6000,
        heartbeat_interval_ms=300,
        fetch_max_wait_ms=100,
    )
    consumer.subscribe([TOPIC])
    return consumer


Assignments = list[set[TopicPartition]]


def _poll_until(
    consumers: list[KafkaConsumer],
    done: Callable[[Assignments], bool],
    seen: dict[TopicPartition, list[int]],
    timeout_s: float = 60,
    *,
    commit: bool = False,
) -> None:
    """Poll each consumer in a thread of its own, as applications run them, until ``done`` holds for
    their latest assignments. (One thread polling several consumers in turn, 50 ms each, left each
    one's join half-done while it polled the others: the leader kept re-joining, a rebalance storm.)

    With ``commit``, each consumer then commits what has been read of its partitions, in its thread
    between polls, and this returns once all have. ``done`` may hold while a member rebalances:
    kafka-python 3.0.12 drops a join that completed after its ``poll`` timed out and joins again
    (``join_group_async``), so under load its leader starts rebalance after rebalance, and a consumer
    keeps its last assignment meanwhile. A commit then fails (RebalanceInProgressError, or
    CommitFailedError once the generation moved on): poll and retry, as kafka-python says."""
    stop, lock, commit_now = threading.Event(), threading.Lock(), threading.Event()
    assignments: Assignments = [set() for _ in consumers]
    committed = [False for _ in consumers]
    errors: list[BaseException] = []

    def run(i: int, consumer: KafkaConsumer) -> None:
        try:
            while not stop.is_set():
                polled = consumer.poll(timeout_ms=100)
                with lock:
                    for tp, records in polled.items():
                        seen.setdefault(tp, []).extend(r.offset for r in records)
                    assignments[i] = set(consumer.assignment())
                    read = {tp: OffsetAndMetadata(max(seen[tp]) + 1, "", -1) for tp in assignments[i] if tp in seen}
                if commit_now.is_set() and not committed[i]:
                    try:
                        consumer.commit(read)
                    except (RebalanceInProgressError, CommitFailedError):
                        continue
                    with lock:
                        committed[i] = True
        except BaseException as e:  # reported by the waiting loop
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i, c), daemon=True) for i, c in enumerate(consumers)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            with lock:
                if done(assignments):
                    if not commit or all(committed):
                        return
                    commit_now.set()
                assert not errors and time.monotonic() < deadline, (assignments, committed, errors)
            time.sleep(0.05)
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)


def _split(assigned: Assignments) -> bool:
    """Every partition assigned to exactly one consumer, every consumer holding at least one."""
    every = [tp for a in assigned for tp in a]
    return all(assigned) and len(every) == len(set(every)) == PARTITIONS


def test_group_rebalances_on_leave_and_resumes_after_restart(
    serve: Callable[..., ServeProcess], tmp_path: Path
) -> None:
    log_dir = tmp_path / "logs"
    _write(log_dir, 0, RECORDS)
    server = serve(log_dir)
    consumers = [_consumer(server.bootstrap) for _ in range(3)]
    seen: dict[TopicPartition, list[int]] = {}
    _poll_until(
        consumers,
        lambda a: _split(a) and sum(len(set(v)) for v in seen.values()) == PARTITIONS * RECORDS,
        seen,
        commit=True,
    )
    assert {tp: sorted(set(v)) for tp, v in seen.items()} == {
        TopicPartition(TOPIC, p): list(range(RECORDS)) for p in range(PARTITIONS)
    }

    consumers.pop().close()  # LeaveGroup: the other two take its partitions over
    _poll_until(consumers, _split, seen)
    assert "left" in server.log_text()
    for consumer in consumers:
        consumer.close()

    server.stop()
    assert (log_dir / "group-offsets-checkpoint").exists()
    _write(log_dir, RECORDS, 10)
    server = serve(log_dir)
    resumed = _consumer(server.bootstrap)
    after: dict[TopicPartition, list[int]] = {}
    _poll_until([resumed], lambda _: sum(len(v) for v in after.values()) >= PARTITIONS * 10, after)
    time.sleep(0.5)
    for tp, records in resumed.poll(timeout_ms=300).items():
        after.setdefault(tp, []).extend(r.offset for r in records)
    resumed.close()
    assert after == {TopicPartition(TOPIC, p): list(range(RECORDS, RECORDS + 10)) for p in range(PARTITIONS)}


def test_member_killed_without_leaving_is_expired_and_its_partitions_move(
    serve: Callable[..., ServeProcess], tmp_path: Path
) -> None:
    """A kcat -G member killed with SIGKILL sends no LeaveGroup: its session expires (6 s) and the
    remaining kafka-python member gets every partition."""
    log_dir = tmp_path / "logs"
    _write(log_dir, 0, RECORDS)
    server = serve(log_dir)
    kcat = subprocess.Popen(
        [
            "kcat",
            "-b",
            server.bootstrap,
            "-G",
            "grp",
            TOPIC,
            "-q",
            "-X",
            "session.timeout.ms=6000",
            "-X",
            "heartbeat.interval.ms=500",
            "-o",
            "beginning",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        consumer = _consumer(server.bootstrap)
        seen: dict[TopicPartition, list[int]] = {}
        _poll_until([consumer], lambda a: 0 < len(a[0]) < PARTITIONS, seen)
        kcat.send_signal(signal.SIGKILL)
        kcat.wait(10)
        _poll_until([consumer], lambda a: len(a[0]) == PARTITIONS, seen, timeout_s=40)
        consumer.close()
    finally:
        if kcat.poll() is None:
            kcat.kill()
    assert "session expired" in server.log_text()


def _kcat_group(bootstrap: str, *options: str) -> list[bytes]:
    """The values a ``kcat -G grp`` member reads up to the end of every partition (then it commits,
    leaves and exits)."""
    done = subprocess.run(
        ["kcat", "-b", bootstrap, "-G", "grp", "-e", "-q", "-f", "%s\\n", *options, TOPIC],
        capture_output=True,
        timeout=60,
        check=True,
    )
    return done.stdout.split()


def test_kcat_group_resumes_from_its_committed_offsets(tmp_path: Path, serve: Callable[..., ServeProcess]) -> None:
    """A kcat group member without ``-o`` starts from the group's committed offsets, which it asks for
    with OffsetFetch v7 (librdkafka 2.0): it gets only the records written after the first member
    committed (the server used to fail that request and close the connection, so kcat retried forever)."""
    log_dir = tmp_path / "logs"
    _write(log_dir, 0, RECORDS)
    server = serve(log_dir)
    assert len(_kcat_group(server.bootstrap, "-o", "beginning")) == PARTITIONS * RECORDS
    _write(log_dir, RECORDS, 5)
    expected = [b"%d-%d" % (p, i) for p in range(PARTITIONS) for i in range(RECORDS, RECORDS + 5)]
    assert sorted(_kcat_group(server.bootstrap)) == sorted(expected)


def test_admin_clients_list_and_describe_the_groups(serve: Callable[..., ServeProcess], tmp_path: Path) -> None:
    """ListGroups and DescribeGroups, as confluent-kafka's and kafka-python's admin clients (and
    kafka-consumer-groups.sh) use them: a live group is Stable with its members and their partitions,
    a group known only by its committed offsets is Empty, an unknown one Dead (they answered "not
    supported by broker"). Each member's host is the broker's ``/address`` of its connection (it was
    empty)."""
    from confluent_kafka import ConsumerGroupState
    from confluent_kafka.admin import AdminClient

    log_dir = tmp_path / "logs"
    _write(log_dir, 0, RECORDS)
    server = serve(log_dir)
    standalone = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id="offsets-only", enable_auto_commit=False)
    standalone.assign([TopicPartition(TOPIC, 0)])
    standalone.commit({TopicPartition(TOPIC, 0): OffsetAndMetadata(7, "", -1)})
    standalone.close()
    consumers = [_consumer(server.bootstrap) for _ in range(2)]
    _poll_until(consumers, _split, {})

    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    listed = admin.list_consumer_groups().result(20)
    assert not listed.errors
    assert {(g.group_id, g.state) for g in listed.valid} == {
        ("grp", ConsumerGroupState.STABLE),
        ("offsets-only", ConsumerGroupState.EMPTY),
    }
    described = {g: f.result(20) for g, f in admin.describe_consumer_groups(["grp", "offsets-only", "nope"]).items()}
    assert described["grp"].state == ConsumerGroupState.STABLE and described["grp"].partition_assignor == "range"
    assigned = [tp.partition for m in described["grp"].members for tp in m.assignment.topic_partitions]
    assert sorted(assigned) == list(range(PARTITIONS)) and len(described["grp"].members) == 2
    assert [m.host for m in described["grp"].members] == ["/127.0.0.1"] * 2  # as a broker names it
    assert (described["offsets-only"].state, described["offsets-only"].members) == (ConsumerGroupState.EMPTY, [])
    assert described["nope"].state == ConsumerGroupState.DEAD

    kafka_admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    assert {(g["group_id"], g["group_state"]) for g in kafka_admin.list_groups()} == {
        ("grp", "Stable"),
        ("offsets-only", "Empty"),
    }
    assert kafka_admin.describe_groups(["grp"])["grp"]["group_state"] == "Stable"
    kafka_admin.close()
    for consumer in consumers:
        consumer.close()


def test_admin_client_deletes_a_group_without_members(serve: Callable[..., ServeProcess], tmp_path: Path) -> None:
    """DeleteGroups (confluent-kafka's delete_consumer_groups, kafka-consumer-groups.sh --delete): a
    group without members loses its committed offsets, on disk too; a group with members is
    NON_EMPTY_GROUP, an unknown one GROUP_ID_NOT_FOUND (librdkafka 2.16 aborted the process after
    "not supported by broker")."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    log_dir = tmp_path / "logs"
    _write(log_dir, 0, RECORDS)
    server = serve(log_dir)
    for group in ("old", "older"):
        standalone = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id=group, enable_auto_commit=False)
        standalone.commit({TopicPartition(TOPIC, 0): OffsetAndMetadata(7, "", -1)})
        standalone.close()
    live = _consumer(server.bootstrap)
    _poll_until([live], lambda a: len(a[0]) == PARTITIONS, {})

    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    errors: dict[str, int] = {}
    for group, future in admin.delete_consumer_groups(["old", "grp", "nope"], request_timeout=20).items():
        try:
            future.result(20)
            errors[group] = KafkaError.NO_ERROR
        except KafkaException as e:
            errors[group] = e.args[0].code()
    assert errors == {
        "old": KafkaError.NO_ERROR,
        "grp": KafkaError.NON_EMPTY_GROUP,
        "nope": KafkaError.GROUP_ID_NOT_FOUND,
    }
    live.close()
    assert {g.group_id for g in admin.list_consumer_groups().result(20).valid} == {"grp", "older"}
    server.stop()
    groups = {json.loads(line)["group"] for line in (log_dir / "group-offsets-checkpoint").read_text().splitlines()[2:]}
    assert groups == {"older"}


def test_two_servers_on_one_log_directory_keep_each_others_groups(
    serve: Callable[..., ServeProcess], tmp_path: Path
) -> None:
    """Two ``seglog serve`` on one log directory (other ports) share its group offsets file: each
    commit changes only its own group in the file as it is then, so neither server writes the other's
    groups away (each used to write back what it had read at its start), and a restart finds both."""
    log_dir = tmp_path / "logs"
    _write(log_dir, 0, RECORDS)
    servers = [serve(log_dir), serve(log_dir)]

    def commit(bootstrap: str, group: str, offset: int) -> None:
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
        consumer.commit({TopicPartition(TOPIC, 0): OffsetAndMetadata(offset, "", -1)})
        consumer.close()

    commit(servers[0].bootstrap, "first", 7)
    commit(servers[1].bootstrap, "second", 9)
    commit(servers[0].bootstrap, "first", 8)
    for server in servers:
        server.stop()
    restarted = serve(log_dir)
    for group, offset in (("first", 8), ("second", 9)):
        consumer = KafkaConsumer(bootstrap_servers=restarted.bootstrap, group_id=group, enable_auto_commit=False)
        assert consumer.committed(TopicPartition(TOPIC, 0)) == offset, group
        consumer.close()


def test_list_groups_filters_ignore_case(serve: Callable[..., ServeProcess], tmp_path: Path) -> None:
    """ListGroups' state and type filters match whatever the case, as Kafka 4's coordinator does:
    librdkafka sends the type as "Classic" (confluent-kafka's ``list_consumer_groups(types=...)``), which
    matched no group at all."""
    from confluent_kafka import ConsumerGroupState, ConsumerGroupType
    from confluent_kafka.admin import AdminClient

    log_dir = tmp_path / "logs"
    _write(log_dir, 0, 1)
    server = serve(log_dir)
    standalone = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id="g", enable_auto_commit=False)
    standalone.commit({TopicPartition(TOPIC, 0): OffsetAndMetadata(1, "", -1)})
    standalone.close()

    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    classic, empty = {ConsumerGroupType.CLASSIC}, {ConsumerGroupState.EMPTY}
    listed = admin.list_consumer_groups(types=classic, states=empty, request_timeout=20).result(20)
    assert [g.group_id for g in listed.valid] == ["g"]
    assert admin.list_consumer_groups(types={ConsumerGroupType.CONSUMER}).result(20).valid == []


def test_with_several_brokers_each_group_is_listed_once(serve: Callable[..., ServeProcess], tmp_path: Path) -> None:
    """An admin client sends ListGroups to every broker and joins the answers (each broker lists the
    groups it coordinates); with ``--brokers 3`` every node listed every group, so kafka-python's
    ``list_groups`` had each group three times (librdkafka and Kafka's admin client drop repeats).
    Only node 0, the coordinator, lists them now."""
    from confluent_kafka.admin import AdminClient

    log_dir = tmp_path / "logs"
    _write(log_dir, 0, 1)
    server = serve(log_dir, "--brokers", "3")
    standalone = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id="g", enable_auto_commit=False)
    standalone.commit({TopicPartition(TOPIC, 0): OffsetAndMetadata(1, "", -1)})
    standalone.close()

    kafka_admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    assert [g["group_id"] for g in kafka_admin.list_groups()] == ["g"]
    kafka_admin.close()
    admin = AdminClient({"bootstrap.servers": server.bootstrap})  # kept: a client gone answers no group
    listed = admin.list_consumer_groups(request_timeout=20).result(20)
    assert [g.group_id for g in listed.valid] == ["g"] and not listed.errors


def test_a_member_commits_when_its_partitions_are_revoked(serve: Callable[..., ServeProcess], tmp_path: Path) -> None:
    """A consumer commits what it read when a rebalance takes its partitions (in its revoke callback,
    or librdkafka's and kafka-python's auto-commit), while the group prepares the rebalance and its
    generation is still the current one: Kafka accepts that commit (only CompletingRebalance answers
    REBALANCE_IN_PROGRESS). It was refused, so every rebalance lost the offsets read since the last
    commit and the next owner read those records again."""
    log_dir = tmp_path / "logs"
    _write(log_dir, 0, RECORDS)
    server = serve(log_dir)
    conf = {
        "bootstrap.servers": server.bootstrap,
        "group.id": "rev",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "heartbeat.interval.ms": 200,
    }
    outcome: list[object] = []

    def on_revoke(consumer: confluent_kafka.Consumer, _partitions: list[confluent_kafka.TopicPartition]) -> None:
        try:
            outcome.append(consumer.commit(asynchronous=False))
        except confluent_kafka.KafkaException as e:
            outcome.append(e.args[0])

    first = confluent_kafka.Consumer(conf)
    first.subscribe([TOPIC], on_revoke=on_revoke)
    read, deadline = 0, time.monotonic() + 30
    while read < PARTITIONS * RECORDS and time.monotonic() < deadline:
        m = first.poll(0.2)
        read += m is not None and not m.error()
    second = confluent_kafka.Consumer(conf)
    second.subscribe([TOPIC])
    while not (outcome and first.assignment() and second.assignment()) and time.monotonic() < deadline:
        first.poll(0.1)
        second.poll(0.1)
    for consumer in (first, second):
        consumer.close()
    assert read == PARTITIONS * RECORDS and outcome
    assert isinstance(outcome[0], list), outcome  # the committed partitions, not a KafkaError
    committed = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id="rev", enable_auto_commit=False)
    assert {p: committed.committed(TopicPartition(TOPIC, p)) for p in range(PARTITIONS)} == dict.fromkeys(
        range(PARTITIONS), RECORDS
    )
    committed.close()


def test_metadata_over_4_kib_is_refused_as_by_kafka(serve: Callable[..., ServeProcess], tmp_path: Path) -> None:
    """A committed offset's metadata longer than Kafka's ``offset.metadata.max.bytes`` (4096) gets
    OFFSET_METADATA_TOO_LARGE for its partition, as from a broker, and the other partitions of the
    commit are committed (it was stored, whatever its size, in the file every commit rewrites)."""
    log_dir = tmp_path / "logs"
    _write(log_dir, 0, 1)
    server = serve(log_dir)
    consumer = confluent_kafka.Consumer({"bootstrap.servers": server.bootstrap, "group.id": "md"})
    offsets = [
        confluent_kafka.TopicPartition(TOPIC, 0, 1, metadata="m" * 4000),
        confluent_kafka.TopicPartition(TOPIC, 1, 1, metadata="m" * 5000),
    ]
    with pytest.raises(confluent_kafka.KafkaException) as refused:
        consumer.commit(offsets=offsets, asynchronous=False)
    assert refused.value.args[0].code() == confluent_kafka.KafkaError.OFFSET_METADATA_TOO_LARGE
    committed = consumer.committed([confluent_kafka.TopicPartition(TOPIC, p) for p in (0, 1)], timeout=20)
    assert [tp.offset for tp in committed] == [1, confluent_kafka.OFFSET_INVALID]
    consumer.close()


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


def _poll(
    consumers: list[confluent_kafka.Consumer],
    errors: list[confluent_kafka.KafkaError],
    until: Callable[[], bool],
    timeout_s: float = 30,
) -> None:
    """Poll ``consumers`` in turn, keeping the errors they report, until ``until()`` holds."""
    deadline = time.monotonic() + timeout_s
    while not until():
        assert time.monotonic() < deadline, errors
        for consumer in consumers:
            message = consumer.poll(0.05)
            if message is not None and message.error():
                errors.append(message.error())


def _partitions(consumer: confluent_kafka.Consumer) -> list[int]:
    return sorted(tp.partition for tp in consumer.assignment())


def _assigned_within(consumer: confluent_kafka.Consumer, seconds: float) -> bool:
    """Whether ``consumer`` holds every partition within ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        consumer.poll(0.05)
        if _partitions(consumer) == list(range(PARTITIONS)):
            return True
    return False


def test_a_static_member_restarts_without_a_rebalance_and_a_duplicate_is_fenced(
    serve: Callable[..., ServeProcess], tmp_path: Path
) -> None:
    """librdkafka's static member does not leave on close. Restarted with its instance id, it used to
    join as a new member and wait for the old one's session to expire (6 s here, 45 s by default)
    before getting partitions; two consumers with one instance id shared the partitions.

    The server's log shows that the restart took no rebalance, and the duplicate is polled until it is
    fenced: the restart's 2 s and the duplicate's 3 s windows are no bound a loaded machine keeps."""
    log_dir = tmp_path / "logs"
    _write(log_dir, 0, RECORDS)
    server = serve(log_dir)
    first = _static(server.bootstrap, "a")
    assert _assigned_within(first, 20)
    first.close()

    restarted = _static(server.bootstrap, "a")
    assert _assigned_within(restarted, 20)
    assert server.log_text().count("rebalancing") == 1  # the first join's only
    assert "session expired" not in server.log_text()

    duplicate = _static(server.bootstrap, "a")
    errors: list[confluent_kafka.KafkaError] = []
    _poll([restarted, duplicate], errors, lambda: bool(errors) and _partitions(duplicate) == list(range(PARTITIONS)))
    assert all(e.code() == confluent_kafka.KafkaError._FATAL for e in errors), errors
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
    assert _assigned_within(consumer, 20)
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


def test_a_member_waiting_for_a_slow_leaders_assignment_keeps_its_session(
    serve: Callable[..., ServeProcess], tmp_path: Path
) -> None:
    """A member waiting in SyncGroup for the leader's assignment sends no heartbeats (librdkafka
    sends none then), and Kafka counts its session as kept while it waits (``hasSatisfiedHeartbeat``).
    With a leader whose assignor took longer than the follower's ``session.timeout.ms`` (7 s against
    6 s here) the follower's session expired: its SyncGroup got UNKNOWN_MEMBER_ID, it joined again
    under a new member id and the group rebalanced once more.

    Only the first assignment for two members is slow. kafka-python 3.0.12 drops a join that
    completed after its ``poll`` timed out and joins again (``join_group_async`` starts a new join
    when the cached one is done), so under load its leader may start one more rebalance right after
    the slow one; a fast assignment then settles it. The follower's assignments are recorded by
    ``on_assign`` so that a rebalance right after one cannot hide it from the test."""
    from kafka.coordinator.assignors.range import RangePartitionAssignor

    slow_once = threading.Event()

    class SlowRange(RangePartitionAssignor):  # an assignor that asks something slow before it decides
        @classmethod
        def assign(cls, cluster: object, members: dict[str, object]) -> dict[str, object]:
            if len(members) > 1 and not slow_once.is_set():
                slow_once.set()
                time.sleep(7)
            return dict(super().assign(cluster, members))

    log_dir = tmp_path / "logs"
    _write(log_dir, 0, RECORDS)
    server = serve(log_dir)
    leader = KafkaConsumer(
        bootstrap_servers=server.bootstrap,
        group_id="slow",
        partition_assignment_strategy=[SlowRange],
        session_timeout_ms=20000,
        heartbeat_interval_ms=300,
        max_poll_interval_ms=30000,
        enable_auto_commit=False,
        fetch_max_wait_ms=100,
    )
    leader.subscribe([TOPIC])
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            leader.poll(timeout_ms=100)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    follower = confluent_kafka.Consumer(
        {
            "bootstrap.servers": server.bootstrap,
            "group.id": "slow",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 300,
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    try:
        deadline = time.monotonic() + 10
        while "generation 1 stable" not in server.log_text():
            assert time.monotonic() < deadline, server.log_text()
            time.sleep(0.05)
        assigned: list[list[int]] = []
        member_ids = set()

        def on_assign(consumer: confluent_kafka.Consumer, partitions: list[object]) -> None:
            assigned.append(sorted(tp.partition for tp in partitions))  # type: ignore[attr-defined]
            member_ids.add(consumer.memberid())

        follower.subscribe([TOPIC], on_assign=on_assign)
        deadline = time.monotonic() + 25
        while [2, 3] not in assigned:
            assert time.monotonic() < deadline, (assigned, server.log_text())
            follower.poll(0.05)
            member_ids.add(follower.memberid())
        assert slow_once.is_set()
        assert len(member_ids - {None, ""}) == 1, member_ids
        assert "session expired" not in server.log_text()
    finally:
        follower.close()  # first: a rebalance the leader may have started waits for it to rejoin or leave
        stop.set()
        thread.join(10)
        leader.close()
