"""Bad clients on raw sockets: ``seglog serve`` answers with Kafka's error codes or closes that one
connection, and keeps serving everyone else. Writes are refused with authorization errors."""

from __future__ import annotations

import socket
import struct
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from indexer.config import load_settings
from indexer.log_manager import LogManager
from tests.serve.conftest import ServeProcess, fetch_request

with warnings.catch_warnings():  # kafka-python 3 imports its protocol JSON with a deprecated API
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.admin import (
        CreateTopicsRequest,
        CreateTopicsResponse,
        DescribeClusterRequest,
        DescribeClusterResponse,
    )
    from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse
    from kafka.protocol.producer import ProduceRequest, ProduceResponse

    from seglog.serve import protocol


@pytest.fixture
def server(serve: Callable[..., ServeProcess], tmp_path: Path) -> Iterator[ServeProcess]:
    log_dir = tmp_path / "logs"
    with LogManager(log_dir, load_settings()) as manager:
        log = manager.get_or_create_log("t", 0)
        log.append({"value": [b"x" * 1000] * 2000})
        log.update_high_watermark(log.log_end_offset)
    yield serve(log_dir, "--socket-request-max-bytes", "65536")


def _connect(server: ServeProcess) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    return sock


def _request(message: object, version: int, correlation_id: int = 1) -> bytes:
    message.API_VERSION = version  # type: ignore[attr-defined]
    message.with_header(correlation_id=correlation_id, client_id="raw")  # type: ignore[attr-defined]
    return bytes(message.encode(header=True, framed=True))  # type: ignore[attr-defined]


def _read_frame(sock: socket.socket) -> bytes:
    head = _read_exactly(sock, 4)
    return _read_exactly(sock, struct.unpack(">i", head)[0])


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def _closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def _still_serves(server: ServeProcess) -> None:
    with _connect(server) as sock:
        sock.sendall(_request(MetadataRequest(version=12, topics=None), 12, 7))
        response = MetadataResponse.decode(_read_frame(sock), version=12, header=True)
        assert response.header.correlation_id == 7
        assert [t.name for t in response.topics] == ["t"]


@pytest.mark.parametrize(
    "frame",
    [
        b"\x00\x00\x00\x03abc",  # shorter than a request header
        struct.pack(">ihhi", 8, 999, 0, 1),  # unknown API key
        struct.pack(">ihhi", 8, 1, 99, 1),  # Fetch version 99
        struct.pack(">ihhi", 12, 3, 12, 1) + b"\xff\xff\xff\xff",  # Metadata whose body does not parse
        struct.pack(">i", 10_000_000),  # larger than socket.request.max.bytes
        struct.pack(">i", -5),  # negative size
    ],
    ids=["short", "unknown-api", "unknown-version", "malformed", "oversized", "negative"],
)
def test_bad_frame_closes_only_that_connection(server: ServeProcess, frame: bytes) -> None:
    with _connect(server) as bystander, _connect(server) as bad:
        bad.sendall(frame)
        assert _closed(bad)
        bystander.sendall(_request(MetadataRequest(version=1, topics=None), 1, 3))
        assert MetadataResponse.decode(_read_frame(bystander), version=1, header=True).header.correlation_id == 3
    _still_serves(server)


def test_api_versions_of_a_newer_client_is_answered_unsupported_at_v0(server: ServeProcess) -> None:
    with _connect(server) as sock:
        sock.sendall(struct.pack(">ihhi", 10, protocol.API_VERSIONS_KEY, 99, 5) + b"\xff\xff")
        response = ApiVersionsResponse.decode(_read_frame(sock), version=0, header=True)
        assert response.header.correlation_id == 5
        assert response.error_code == protocol.UNSUPPORTED_VERSION
        assert {k.api_key for k in response.api_keys} == set(protocol.APIS)
        sock.sendall(
            _request(ApiVersionsRequest(version=3, client_software_name="raw", client_software_version="1"), 3, 6)
        )
        assert ApiVersionsResponse.decode(_read_frame(sock), version=3, header=True).error_code == protocol.NONE


def test_client_that_never_reads_does_not_stop_the_others(server: ServeProcess) -> None:
    fetch = fetch_request(11, {0: 50_000_000}, max_bytes=50_000_000)
    stuck = _connect(server)
    stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    frame = _request(fetch, 11, 1)
    stuck.setblocking(False)
    sent = 0
    for _ in range(50):  # pipelined fetches of ~2 MB each, never read
        try:
            stuck.send(frame)
            sent += 1
        except BlockingIOError:
            break
    time.sleep(0.5)
    for _ in range(3):
        _still_serves(server)
    stuck.close()
    assert sent > 0


def test_writes_are_refused_with_authorization_errors(server: ServeProcess) -> None:
    produce = ProduceRequest(
        version=9,
        transactional_id=None,
        acks=-1,
        timeout_ms=1000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="t", partition_data=[ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=b"")]
            )
        ],
    )
    create = CreateTopicsRequest(
        version=5,
        topics=[
            CreateTopicsRequest.CreatableTopic(
                name="new", num_partitions=1, replication_factor=1, assignments=[], configs=[]
            )
        ],
        timeout_ms=1000,
        validate_only=False,
    )
    with _connect(server) as sock:
        sock.sendall(_request(produce, 9, 1))
        answer = ProduceResponse.decode(_read_frame(sock), version=9, header=True)
        part = answer.responses[0].partition_responses[0]
        assert part.error_code == protocol.TOPIC_AUTHORIZATION_FAILED
        assert part.error_message == protocol.READ_ONLY_MESSAGE
        sock.sendall(_request(create, 5, 2))
        topic = CreateTopicsResponse.decode(_read_frame(sock), version=5, header=True).topics[0]
        assert (topic.name, topic.error_code) == ("new", protocol.TOPIC_AUTHORIZATION_FAILED)
        for correlation_id in (3, 4):  # a second refusal of the same client is not logged again
            sock.sendall(_request(produce, 9, correlation_id))
            _read_frame(sock)
        sock.sendall(
            _request(
                MetadataRequest(
                    version=12,
                    topics=[MetadataRequest.MetadataRequestTopic(name="nope")],
                    allow_auto_topic_creation=True,
                    include_cluster_authorized_operations=False,
                    include_topic_authorized_operations=False,
                ),
                12,
                5,
            )
        )
        unknown = MetadataResponse.decode(_read_frame(sock), version=12, header=True).topics[0]
        assert unknown.error_code == protocol.UNKNOWN_TOPIC_OR_PARTITION
    assert not (server.log_dir / "new-0").exists()
    said = [line.split(": ", 1)[1] for line in server.log_text().splitlines() if "WARNING" in line]
    assert said == [
        f"refused Produce from client 'raw' at /127.0.0.1: {protocol.READ_ONLY_MESSAGE}",
        f"refused CreateTopics from client 'raw' at /127.0.0.1: {protocol.READ_ONLY_MESSAGE}",
        "client 'raw' at /127.0.0.1 asked for topic 'nope', which does not exist (UNKNOWN_TOPIC_OR_PARTITION)",
    ]


# The values of a plausible request, by field name: topic t, partition 0, a new member of a group.
_REQUEST_VALUES: dict[str, object] = {
    "topic": "t",
    "name": "t",
    "topic_names": ["t"],
    "partition": 0,
    "partition_index": 0,
    "partition_indexes": [0],
    "index": 0,
    "key": "g",
    "coordinator_keys": ["g"],
    "member_id": "",
    "generation_id": -1,
    "generation_id_or_member_epoch": -1,
    "session_timeout_ms": 10_000,
    "rebalance_timeout_ms": 10_000,
    "protocol_type": "consumer",
    "max_wait_ms": 0,
    "max_bytes": 1 << 20,
    "partition_max_bytes": 1 << 20,
    "timestamp": -1,
    "acks": -1,
    "timeout_ms": 1000,
    "num_partitions": 1,
    "replication_factor": 1,
    "records": b"",
    "metadata": b"",
    "assignment": b"",
    "client_software_name": "raw",
    "client_software_version": "1",
}


def _filled(cls: Any, version: int, values: dict[str, object]) -> Any:
    """A kafka-python message or struct of ``cls`` at ``version``: each field of that version named in
    ``values`` set from it, each struct (or array of structs, with one element) filled the same way."""
    fields: dict[str, object] = {}
    for field in cls.fields.values():
        if not field.for_version_q(version):
            continue
        if field.is_struct() or field.is_struct_array():
            element = _filled(getattr(cls, field.type_str), version, values)
            fields[field.name] = [element] if field.is_struct_array() else element
        elif field.name in values:
            fields[field.name] = values[field.name]
    return cls(version=version, **fields) if hasattr(cls, "API_KEY") else cls(**fields)


@pytest.mark.parametrize("api", protocol.APIS.values(), ids=lambda api: api.name)
def test_every_api_is_answered_at_every_version_it_advertises(server: ServeProcess, api: protocol.Api) -> None:
    """Each client speaks one version of each API: every version ApiVersions advertises must be
    answered (OffsetFetch v1-7, librdkafka 2.0's, closed the connection). A request for topic t (by
    name, and by id from v13 of Fetch), each version in a group of its own so that no join waits for
    another's member."""
    with _connect(server) as sock:
        sock.sendall(_request(MetadataRequest(version=12, topics=None), 12))
        topic_id = MetadataResponse.decode(_read_frame(sock), version=12, header=True).topics[0].topic_id
    for version in range(api.min_version, api.max_version + 1):
        group = f"g{version}"
        values = {
            **_REQUEST_VALUES,
            "topic_id": topic_id,
            "group_id": group,
            "key": group,
            "coordinator_keys": [group],
            "groups": [group],  # DescribeGroups (OffsetFetch v8+'s groups are structs, filled as such)
            "groups_names": [group],  # DeleteGroups
        }
        with _connect(server) as sock:
            sock.sendall(_request(_filled(api.request, version, values), version, version))
            response = api.response.decode(_read_frame(sock), version=version, header=True)
        assert response.header.correlation_id == version, (api.name, version)


def test_a_transactional_producer_is_refused_at_once_as_by_a_broker_that_denies_its_transactional_id(
    server: ServeProcess,
) -> None:
    """A transactional producer pointed at the server by mistake fails at once with Kafka's answer to
    a transactional id it may not use: FindCoordinator for a transaction (key type 1) answers
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka's when the id may not be described, which both
    clients take as fatal. It answered COORDINATOR_NOT_AVAILABLE, which clients retry: confluent-kafka's
    init_transactions ran into its 30 s timeout, kafka-python's into max_block_ms."""
    import confluent_kafka

    producer = confluent_kafka.Producer({"bootstrap.servers": server.bootstrap, "transactional.id": "tx"})
    started = time.monotonic()
    with pytest.raises(confluent_kafka.KafkaException) as refused:
        producer.init_transactions(30)
    assert refused.value.args[0].code() == confluent_kafka.KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert time.monotonic() - started < 20  # well below the 30 s it waited
    del producer  # librdkafka's threads stop before the server does
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import kafka.errors as kafka_errors
        from kafka import KafkaProducer

    other = KafkaProducer(bootstrap_servers=server.bootstrap, transactional_id="tx2", max_block_ms=30_000)
    started = time.monotonic()
    with pytest.raises(kafka_errors.TransactionalIdAuthorizationFailedError):
        other.init_transactions()
    assert time.monotonic() - started < 20
    other.close(timeout=5)


def test_an_old_client_retrying_an_unsupported_version_is_logged_once(server: ServeProcess) -> None:
    """A client that sends a version the server does not support (kafka-python forced to
    api_version=(0, 10, 0) sends ListOffsets v0) has its connection closed, and reconnects and sends it
    again about 8 times a second: the server said so at WARNING each time (30 lines in 4 s, for as
    long as the client ran). It says it once per client address and problem; each connection is
    still closed."""
    for _ in range(3):
        with _connect(server) as old:
            old.sendall(struct.pack(">ihhi", 8, 2, 0, 1))  # ListOffsets v0
            assert _closed(old)
    _still_serves(server)
    said = [line for line in server.log_text().splitlines() if "WARNING" in line]
    assert len(said) == 1, said
    assert "ListOffsets version 0 is not supported (versions 1-11): closing" in said[0]


@pytest.mark.parametrize(
    ("endpoint_type", "error"),
    [(2, protocol.MISMATCHED_ENDPOINT_TYPE), (7, protocol.UNSUPPORTED_ENDPOINT_TYPE)],
    ids=["controllers", "unknown"],
)
def test_describe_cluster_of_another_endpoint_type_is_refused_as_by_a_broker(
    server: ServeProcess, endpoint_type: int, error: int
) -> None:
    """The server is a broker: DescribeCluster for the controllers' endpoints (Kafka's Admin with
    ``bootstrap.controllers``) gets MISMATCHED_ENDPOINT_TYPE, an unknown type UNSUPPORTED_ENDPOINT_TYPE,
    each without brokers, as Kafka's ``computeDescribeClusterResponse`` answers them."""
    request = DescribeClusterRequest(
        version=2, include_cluster_authorized_operations=True, endpoint_type=endpoint_type, include_fenced_brokers=False
    )
    with _connect(server) as sock:
        sock.sendall(_request(request, 2))
        response = DescribeClusterResponse.decode(_read_frame(sock), version=2, header=True)
    assert (response.error_code, response.brokers) == (error, [])
    assert response.error_message
