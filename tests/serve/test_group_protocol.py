"""The group coordinator's answers to what real clients do only on a timeout, a crash or a stall,
sent on cue from raw sockets (kafka-python's protocol classes), each checked against Kafka's
``GroupCoordinator``; a real consumer shows what its user sees where one can."""

from __future__ import annotations

import socket
import struct
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest

from indexer.config import load_settings
from indexer.log_manager import LogManager
from tests.serve.conftest import ServeProcess

with warnings.catch_warnings():  # kafka-python 3 imports its protocol JSON with a deprecated API
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.consumer import (
        JoinGroupRequest,
        JoinGroupResponse,
        SyncGroupRequest,
        SyncGroupResponse,
    )

TOPIC, PARTITIONS = "orders", 4


def _write(log_dir: Path) -> None:
    with LogManager(log_dir, load_settings()) as manager:
        for p in range(PARTITIONS):
            log = manager.get_or_create_log(TOPIC, p)
            log.append({"value": [b"%d" % p] * 5})
            log.update_high_watermark(log.log_end_offset)
        manager.checkpoint_high_watermarks()


class RawMember:
    """One group member on a connection of its own, sending JoinGroup and SyncGroup when told."""

    def __init__(
        self,
        port: int,
        group: str,
        *,
        version: int = 5,
        instance_id: str | None = None,
        session_ms: int = 6000,
        rebalance_ms: int = 6000,
    ) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.group, self.version, self.instance_id = group, version, instance_id
        self.session_ms, self.rebalance_ms = session_ms, rebalance_ms
        self.member_id, self.generation = "", -1
        self._correlation = 0

    def _call(self, request: Any, response: Any, version: int) -> Any:
        self._correlation += 1
        request.API_VERSION = version
        request.with_header(correlation_id=self._correlation, client_id="raw")
        self.sock.sendall(bytes(request.encode(header=True, framed=True)))
        (size,) = struct.unpack(">i", self._read(4))
        return response.decode(self._read(size), version=version, header=True)

    def _read(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed by the server")
            data += chunk
        return data

    def join(self, metadata: bytes = b"m") -> Any:
        """JoinGroup (the member's id once it has one); keeps the member id and generation it gets."""
        request = JoinGroupRequest(
            version=self.version,
            group_id=self.group,
            session_timeout_ms=self.session_ms,
            rebalance_timeout_ms=self.rebalance_ms,
            member_id=self.member_id,
            group_instance_id=self.instance_id,
            protocol_type="consumer",
            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=metadata)],
            reason=None,
        )
        answer = self._call(request, JoinGroupResponse, self.version)
        if answer.error_code == 0:
            self.member_id, self.generation = answer.member_id, answer.generation_id
        return answer

    def sync(self, assignments: dict[str, bytes] | None = None) -> Any:
        """SyncGroup of the generation it joined (the leader's carries ``assignments``)."""
        version = 5 if self.version >= 7 else 3
        assignment = SyncGroupRequest.SyncGroupRequestAssignment
        request = SyncGroupRequest(
            version=version,
            group_id=self.group,
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=self.instance_id,
            protocol_type="consumer",
            protocol_name="range",
            assignments=[assignment(member_id=m, assignment=a) for m, a in (assignments or {}).items()],
        )
        return self._call(request, SyncGroupResponse, version)

    def close(self) -> None:
        self.sock.close()


def _join_both(server: ServeProcess, first: RawMember, second: RawMember) -> tuple[Any, Any]:
    """Both join one rebalance, ``first`` first so that it leads; their JoinGroup answers. ``second``
    joins once the server has logged ``first``'s join (a 50 ms head start was no order under load),
    and both must join within the server's initial rebalance delay: give it seconds."""
    with ThreadPoolExecutor(2) as pool:
        joined = pool.submit(first.join)
        deadline = time.monotonic() + 20
        while f"group {first.group}: member " not in server.log_text():
            assert time.monotonic() < deadline, server.log_text()
            time.sleep(0.01)
        answers = joined, pool.submit(second.join)
        return answers[0].result(20), answers[1].result(20)


def test_a_repeated_join_during_the_sync_gets_the_current_generation(
    serve: Callable[..., ServeProcess], tmp_path: Path
) -> None:
    """A member that sends its JoinGroup again, unchanged, while the group waits for the leader's
    SyncGroup (a client whose request timed out resends it) is answered at once with the current
    generation, the leader with the members again, as Kafka's coordinator ("member is joining with
    the same metadata"). It started a new rebalance: every member had to join again and the
    repeated JoinGroup waited for them, so clients that resend on timeouts rebalanced in turn."""
    log_dir = tmp_path / "logs"
    _write(log_dir)
    server = serve(log_dir, "--group-initial-rebalance-delay-ms", "3000")
    leader, follower = RawMember(server.port, "g"), RawMember(server.port, "g")
    first, _ = _join_both(server, leader, follower)
    assert first.leader == leader.member_id and len(first.members) == 2
    with ThreadPoolExecutor(1) as pool:
        again = pool.submit(follower.join).result(2)
        assert (again.error_code, again.generation_id, again.leader, again.members) == (0, 1, leader.member_id, [])
        again = pool.submit(leader.join).result(2)
        assert (again.error_code, again.generation_id) == (0, 1)
        assert sorted(m.member_id for m in again.members) == sorted([leader.member_id, follower.member_id])
        waiting = pool.submit(follower.sync)
        time.sleep(0.1)
        assert leader.sync({leader.member_id: b"L", follower.member_id: b"F"}).error_code == 0
        synced = waiting.result(5)
    assert (synced.error_code, bytes(synced.assignment)) == (0, b"F")
    assert server.log_text().count("rebalancing") == 1
    leader.close()
    follower.close()


def test_a_member_that_never_sends_sync_group_is_removed_after_the_rebalance_timeout(
    serve: Callable[..., ServeProcess], tmp_path: Path
) -> None:
    """A member that got its JoinGroup answer and then stalls (sends no SyncGroup; a long session
    timeout keeps it alive) is removed after the group's rebalance timeout, as by Kafka's
    pending-sync expiry, and the group rebalances without it. It held the group in
    CompletingRebalance until its session expired (60 s here; forever if it kept heartbeating) while
    the confluent-kafka consumer waited in SyncGroup for the stalled leader's assignment."""
    log_dir = tmp_path / "logs"
    _write(log_dir)
    server = serve(log_dir, "--group-initial-rebalance-delay-ms", "3000")
    stalled = RawMember(server.port, "g", session_ms=60_000, rebalance_ms=6000)
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": server.bootstrap,
            "group.id": "g",
            "session.timeout.ms": 6000,
            "max.poll.interval.ms": 6000,
            "heartbeat.interval.ms": 300,
            "enable.auto.commit": False,
        }
    )
    try:
        with ThreadPoolExecutor(1) as pool:
            joined = pool.submit(stalled.join)
            consumer.subscribe([TOPIC])
            deadline = time.monotonic() + 20
            while not joined.done():  # the consumer joins within the initial delay; then the stall
                assert time.monotonic() < deadline
                consumer.poll(0.05)
            assert joined.result().leader == stalled.member_id
        # Removed after the 6 s rebalance timeout, then a rebalance: given 40 s, which a loaded machine
        # needs more than the 10 s it had, and still well below the stalled member's 60 s session.
        start = time.monotonic()
        while sorted(tp.partition for tp in consumer.assignment()) != list(range(PARTITIONS)):
            assert time.monotonic() < start + 40, server.log_text()
            consumer.poll(0.05)
        assert "did not send SyncGroup" in server.log_text()
    finally:
        consumer.close()
        stalled.close()


@pytest.mark.parametrize("version", [5, 9])
def test_a_returning_static_leader_is_told_it_leads_from_join_group_v9(
    serve: Callable[..., ServeProcess], tmp_path: Path, version: int
) -> None:
    """A static leader that restarts (new connection, same instance id, no LeaveGroup) into a Stable
    group: from JoinGroup v9 (Java clients 3.2+) it is told it is the leader, with the members and
    ``skip_assignment`` (KIP-814), so it keeps watching the metadata for the group; before v9 the
    leader id is the one it replaced (Kafka's answer to the versions without ``skip_assignment``:
    librdkafka's v5, kafka-python's v7). Either way the group does not rebalance and the member gets
    its assignment back. v9 got the pre-KIP-814 answer."""
    log_dir = tmp_path / "logs"
    _write(log_dir)
    server = serve(log_dir)
    first = RawMember(server.port, "s", version=version, instance_id="a")
    assert first.join().leader == first.member_id
    assert first.sync({first.member_id: b"A"}).error_code == 0
    first.close()

    back = RawMember(server.port, "s", version=version, instance_id="a")
    answer = back.join()
    assert answer.error_code == 0 and answer.generation_id == 1 and back.member_id != first.member_id
    if version >= 9:
        assert (answer.leader, answer.skip_assignment) == (back.member_id, True)
        assert [(m.member_id, m.group_instance_id) for m in answer.members] == [(back.member_id, "a")]
    else:
        assert (answer.leader, answer.members) == (first.member_id, [])
    synced = back.sync()
    assert (synced.error_code, bytes(synced.assignment)) == (0, b"A")
    assert server.log_text().count("rebalancing") == 1
    back.close()
