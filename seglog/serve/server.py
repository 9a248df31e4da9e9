"""The asyncio server: connections, request dispatch, and the small APIs (metadata, coordinator, refusals).

Why asyncio: a Kafka consumer keeps its connections open and mostly waits (a Fetch long-polls for
``max.wait.ms``, a JoinGroup waits for the rest of its group), so the server holds many idle
connections and few busy ones. One event loop thread holds them all cheaply, and the state they
share (the catalog's logs, the groups) is touched by that thread only, without locks. The work per
request is small: a Fetch is one ``pread`` per partition from the page cache and an encode of the
response around the stored bytes (no decoding, no record loop); only the fsync of committed group
offsets leaves the loop, to a worker thread.

Per connection, requests are answered one at a time and in order, as a broker does (it mutes a
channel until its response is sent). A connection is closed, and only that one, when a frame is
larger than ``max_request_bytes`` (Kafka's ``socket.request.max.bytes``) or negative, when a request
does not parse or names an unknown API or an unsupported version (ApiVersions is answered with
UNSUPPORTED_VERSION, as Kafka does), when it is idle for ``connections_max_idle_ms``, or when a
response cannot be sent within ``send_timeout_ms`` (a client that stopped reading).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import errno
import functools
import logging
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafka.admin import ACLOperation, ConfigResourceType, ConfigSourceType, ConfigType
from kafka.protocol.admin import (
    AlterConfigsResponse,
    CreatePartitionsResponse,
    CreateTopicsResponse,
    DeleteGroupsResponse,
    DeleteRecordsResponse,
    DeleteTopicsResponse,
    DescribeClusterResponse,
    DescribeConfigsResponse,
    DescribeGroupsResponse,
    DescribeLogDirsResponse,
    IncrementalAlterConfigsResponse,
    ListGroupsResponse,
)
from kafka.protocol.consumer import (
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    OffsetCommitResponse,
    OffsetDeleteResponse,
    OffsetFetchResponse,
    SyncGroupResponse,
)
from kafka.protocol.metadata import FindCoordinatorResponse, MetadataResponse
from kafka.protocol.producer import InitProducerIdResponse, ProduceResponse

from indexer.config import Settings, broker_config_name, topic_config_type
from indexer.errors import StorageError
from indexer.file_names import INTERNAL_TOPICS
from indexer.log_manager import missing_log_dir_note
from seglog.serve import fetch, protocol
from seglog.serve.catalog import Catalog
from seglog.serve.group_offsets import CommittedOffset, GroupOffsets
from seglog.serve.groups import GroupCoordinator, GroupState, JoinResult, SyncResult
from seglog.serve.live_groups import PublishedGroups

logger = logging.getLogger(__name__)

NODE_ID = 0  # the group coordinator's and the controller's node
CLUSTER_ID = "seglog"
OFFSET_METADATA_MAX_BYTES = 4096  # Kafka's offset.metadata.max.bytes (its check counts characters)
_SAID_MAX = 4096  # (client, what) pairs whose refusal was logged, remembered so that each is logged once
_SEND_CHUNK_BYTES = 1024 * 1024
_SENDFILE_CHUNK_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ServeOptions:
    """How ``seglog serve`` runs (Kafka's broker setting names where one exists)."""

    host: str = "127.0.0.1"
    port: int = 9092
    advertised_host: str | None = None  # what Metadata names (default: host, or the hostname for 0.0.0.0)
    group_offsets_dir: Path | None = None  # default: the log directory
    max_request_bytes: int = 1024 * 1024  # socket.request.max.bytes (a read-only server gets small requests)
    connections_max_idle_ms: int = 600_000  # connections.max.idle.ms
    send_timeout_ms: int = 30_000
    group_initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    poll_ms: int = 10  # how often the writer's checkpoints are looked at
    rescan_ms: int = 500  # how often the directory is listed for new partitions
    brokers: int = 1  # broker nodes presented, each on a port of its own (see Server._Metadata)

    def __post_init__(self) -> None:
        """Node i listens on ``port + i``: every one must be a port."""
        last = self.port + self.brokers - 1
        if self.port and last > 65535:
            raise ValueError(
                f"{self.brokers} brokers from port {self.port} need ports up to {last} (the last is 65535)"
            )


# What a client may do here (Kafka's authorized operations, KIP-430), answered when a Metadata,
# DescribeCluster or DescribeGroups request asks, as a broker always does: a topic is read and
# described, its configs too (every write is refused); a group is read (joined, committed to),
# described and deleted; the cluster is described (its brokers, log directories, groups) and so are
# its brokers' configs (creating topics, altering configs and idempotent writes are refused).
TOPIC_OPERATIONS = frozenset({ACLOperation.READ, ACLOperation.DESCRIBE, ACLOperation.DESCRIBE_CONFIGS})
GROUP_OPERATIONS = frozenset({ACLOperation.READ, ACLOperation.DESCRIBE, ACLOperation.DELETE})
CLUSTER_OPERATIONS = frozenset({ACLOperation.DESCRIBE, ACLOperation.DESCRIBE_CONFIGS})


def _authorized_operations(asked: bool | None, operations: frozenset[ACLOperation]) -> set[int] | None:
    """The response's bit field of ``operations`` when the request ``asked`` for it, else None (the
    field's default: not asked)."""
    return {op.value for op in operations} if asked else None


def _group_response(
    response: type[Any], request: protocol.Request, result: JoinResult | SyncResult, **fields: Any
) -> Any:
    """``response`` at the request's version carrying every field of the coordinator's ``result`` (its
    fields are the response's), then ``fields`` (ones it lacks, or a field in another form)."""
    carried = {f.name: getattr(result, f.name) for f in dataclasses.fields(result)}
    return response(version=request.version, throttle_time_ms=0, **{**carried, **fields})


# DescribeCluster's endpoint types: this server is a broker (it has no controller endpoint).
_BROKERS_ENDPOINT = 1
_CONTROLLERS_ENDPOINT = 2

# Settings.topic_config_origins' answers as Kafka's DescribeConfigs sources.
_CONFIG_SOURCES = {
    "topic": ConfigSourceType.DYNAMIC_TOPIC_CONFIG,
    "settings": ConfigSourceType.STATIC_BROKER_CONFIG,
    "default": ConfigSourceType.DEFAULT_CONFIG,
}


@dataclass(frozen=True, slots=True)
class _Config:
    """One config a DescribeConfigs answer carries: its Kafka name and value, where the value comes from
    (a :meth:`Settings.topic_config_origins` answer) and the type Kafka declares (``ConfigType``'s name)."""

    name: str
    value: object
    origin: str
    kind: str

    def entry(self, entry: type[Any]) -> Any:
        """As the response's ``entry``: read-only, its value as Kafka writes it (``true``)."""
        text = str(self.value).lower() if isinstance(self.value, bool) else str(self.value)
        return entry(
            name=self.name,
            value=text,
            read_only=True,
            config_source=_CONFIG_SOURCES[self.origin],
            is_default=self.origin == "default",
            is_sensitive=False,
            synonyms=[],
            config_type=ConfigType[self.kind],
            documentation=None,
        )


class Server:
    """A read-only Kafka endpoint over one log directory. Use :meth:`start`, then :meth:`close`."""

    def __init__(self, log_dir: str | Path, settings: Settings, options: ServeOptions) -> None:
        self.options = options
        self.catalog = Catalog(log_dir, settings, poll_ms=options.poll_ms, rescan_ms=options.rescan_ms)
        offsets_dir = Path(options.group_offsets_dir or log_dir)
        self.groups = GroupCoordinator(
            GroupOffsets(offsets_dir),
            initial_rebalance_delay_ms=options.group_initial_rebalance_delay_ms,
            published=PublishedGroups(offsets_dir),
        )
        self._servers: list[asyncio.Server] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._connections: set[asyncio.Task[None]] = set()
        self._said: collections.OrderedDict[tuple[str, str | None, str], None] = collections.OrderedDict()
        self.port = options.port
        self.ports: list[int] = []  # node i's port: ports[0] is port, where clients bootstrap
        self.advertised_host = options.advertised_host or (
            socket.gethostname() if options.host in ("0.0.0.0", "::", "") else options.host
        )

    async def start(self) -> None:
        """Bind and start serving (``port`` 0 picks a free port, then in :attr:`port`); with several
        ``brokers``, node ``i`` listens on ``port + i`` (on free ports when ``port`` is 0), in
        :attr:`ports`.

        Raises:
            OSError: a port cannot be bound (nothing is left listening).
        """
        fetch.compile_kernels()  # not at the first Fetch, with every client waiting
        try:
            for node in range(self.options.brokers):
                port = self.options.port + node if self.options.port else 0
                server = await asyncio.start_server(functools.partial(self._connection, node), self.options.host, port)
                self._servers.append(server)
                if not server.sockets:  # asyncio opens none, silently, once the process has no file left
                    raise OSError(
                        errno.EMFILE,
                        f"cannot listen for broker node {node} of {self.options.brokers} on {self.options.host}:"
                        f"{port}: no socket could be opened ({len(self._servers) - 1} listening already; too many "
                        "open files?)",
                    )
                self.ports.append(int(server.sockets[0].getsockname()[1]))
        except OSError:
            for server in self._servers:
                server.close()
            raise
        self.port = self.ports[0]
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self.catalog.follow(), name="catalog"), self.groups.run()]
        others = f"; brokers 1..{len(self.ports) - 1} on ports {', '.join(map(str, self.ports[1:]))}"
        logger.info(
            "serving %s on %s:%d (read-only, no authentication)%s",
            self.catalog.log_dir,
            self.options.host,
            self.port,
            others if len(self.ports) > 1 else "",
        )

    async def close(self) -> None:
        """Stop accepting, close every connection, stop the background tasks, close the logs."""
        for server in self._servers:
            server.close()
        for task in [*self._tasks, *self._connections]:
            task.cancel()
        for task in [*self._tasks, *self._connections]:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for server in self._servers:
            await server.wait_closed()
        self.groups.close()
        self.catalog.close()

    # -- connections -----------------------------------------------------------------------------

    async def _connection(self, node: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peer = writer.get_extra_info("peername")
        client_host = f"/{peer[0]}" if isinstance(peer, tuple) and peer else ""  # Kafka's InetAddress.toString
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # Keep up to a few chunks queued so the socket never waits for the next write (the default
        # 64 KiB high-water mark drains to 16 KiB before every chunk).
        writer.transport.set_write_buffer_limits(high=4 * _SEND_CHUNK_BYTES)
        idle_s = self.options.connections_max_idle_ms / 1000
        try:
            while True:
                async with asyncio.timeout(idle_s):
                    head = await reader.readexactly(protocol.FRAME_HEADER.size)
                (size,) = protocol.FRAME_HEADER.unpack(head)
                if not 0 <= size <= self.options.max_request_bytes:
                    logger.warning(
                        "%s: request of %d bytes (limit %d): closing", peer, size, self.options.max_request_bytes
                    )
                    return
                async with asyncio.timeout(idle_s):
                    frame = await reader.readexactly(size)
                response = await self._handle(frame, node, client_host)
                if response is not None:
                    await self._send(writer, response)
        except protocol.ProtocolError as e:  # an old client reconnects and sends it again: said once
            self._say_once(client_host, None, str(e), f"{peer}: {e}: closing")
        except StorageError as e:
            logger.warning("%s: %s: closing", peer, e)
        except TimeoutError:
            logger.info("%s: idle or not reading: closing", peer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except asyncio.CancelledError:  # close(): end normally (3.11's start_server logs a cancelled handler
            pass  # as "Exception in callback" with a traceback)
        except Exception:  # a bug in one request's handling must not stop the server
            logger.exception("%s: request failed: closing", peer)
        finally:
            self._connections.discard(task)
            writer.close()

    async def _send(self, writer: asyncio.StreamWriter, pieces: list[protocol.ResponsePiece]) -> None:
        """Send a response's pieces in order: encoded bytes written in pieces of :data:`_SEND_CHUNK_BYTES`,
        draining after each (the 3.11 transport buffers what the socket does not take in one bytearray
        and drops sent bytes from its front, a copy of the rest each time: quadratic in a 16 MiB
        response); file regions with ``sendfile`` (``loop.sendfile``, which first lets the transport
        empty its buffer), no copy through this process. Each piece must make progress within
        ``send_timeout_ms``. The regions' files are closed afterwards."""
        loop = asyncio.get_running_loop()
        timeout = self.options.send_timeout_ms / 1000
        try:
            for piece in pieces:
                if isinstance(piece, protocol.FileRegion):
                    await self._sendfile(loop, writer, piece, timeout)
                    continue
                view = memoryview(piece)
                for start in range(0, len(view), _SEND_CHUNK_BYTES):
                    writer.write(view[start : start + _SEND_CHUNK_BYTES])
                    async with asyncio.timeout(timeout):
                        await writer.drain()
        finally:
            for piece in pieces:
                if isinstance(piece, protocol.FileRegion):
                    piece.file.close()

    async def _sendfile(
        self, loop: asyncio.AbstractEventLoop, writer: asyncio.StreamWriter, region: protocol.FileRegion, timeout: float
    ) -> None:
        end = region.position + region.size
        for start in range(region.position, end, _SENDFILE_CHUNK_BYTES):
            count = min(_SENDFILE_CHUNK_BYTES, end - start)
            async with asyncio.timeout(timeout):
                sent = await loop.sendfile(writer.transport, region.file, start, count)
            if sent != count:  # the file is shorter than when it was read: the response cannot be completed
                raise StorageError(
                    f"{region.path}: only {sent} of {count} bytes at position {start} could be sent", path=region.path
                )

    async def _handle(self, frame: bytes, node: int, client_host: str) -> list[protocol.ResponsePiece] | None:
        key, version, correlation_id = protocol.peek_header(frame)
        if key == protocol.API_VERSIONS_KEY:
            api = protocol.APIS[key]
            if not api.min_version <= version <= api.max_version:
                response = protocol.api_versions_response(0, protocol.UNSUPPORTED_VERSION)
                return [protocol.encode_response(response, 0, correlation_id)]
        request = dataclasses.replace(protocol.decode_request(frame), node=node, client_host=client_host)
        logger.debug(
            "%s v%d from %s (correlation id %d)", request.api.name, request.version, request.client_id, correlation_id
        )
        handler = getattr(self, f"_{request.api.name}")
        answer = handler(request)
        if asyncio.iscoroutine(answer):
            answer = await answer
        if answer is None:
            return None
        if isinstance(answer, protocol.Spliced):
            try:
                return protocol.encode_spliced(answer, request.version, correlation_id)
            except BaseException:
                answer.close()
                raise
        return [protocol.encode_response(answer, request.version, correlation_id)]

    def _say_once(self, client_host: str, client_id: str | None, what: str, message: str) -> None:
        """Log a refusal at WARNING once per client (address and client id) and ``what``, at DEBUG after
        that: the operator sees why a client failed, and a client that sends the same request again
        and again (clients retry, reconnect) does not flood the log."""
        key = (client_host, client_id, what)
        if key in self._said:
            logger.debug("%s", message)
            return
        self._said[key] = None
        if len(self._said) > _SAID_MAX:
            self._said.popitem(last=False)
        logger.warning("%s", message)

    def _refused(self, request: protocol.Request) -> None:
        """Say that a write (``request``'s API) was refused."""
        name = request.api.name
        client = f"client {request.client_id!r} at {request.client_host}"
        message = f"refused {name} from {client}: {protocol.READ_ONLY_MESSAGE}"
        self._say_once(request.client_host, request.client_id, name, message)

    # -- cluster ---------------------------------------------------------------------------------

    def _ApiVersions(self, request: protocol.Request) -> Any:
        return protocol.api_versions_response(request.version)

    def _Metadata(self, request: protocol.Request) -> Any:
        """The topics and their partitions, led by the ``brokers`` nodes in turn (partition p by node
        ``p % brokers``, on :attr:`ports` ``[p % brokers]``).

        A client keeps one Fetch in flight per broker connection for the partitions that broker
        leads (librdkafka: one thread per broker), so several nodes let one consumer fetch several
        partitions at once. Every port serves every request: the data is the same whichever node is
        asked (but ListGroups, see there). Each node has a port of its own because clients tell
        brokers apart by address too (librdkafka 2.0 takes a second node id at the bootstrap address
        for the bootstrap broker).

        A topic has the engine's partition count; a partition without a directory here is offline
        (LEADER_NOT_AVAILABLE, no leader), as a broker answers for a partition whose replicas are all
        down: clients then read the others (with a gap in the numbers, librdkafka took the topic for
        a smaller one and never read its last partitions).
        """
        body, version = request.body, request.version
        served = self.catalog.topics()
        topics = self.catalog.partition_counts()
        if body.topics is None or (version == 0 and not body.topics):
            wanted = [(name, None) for name in topics]
        else:
            wanted = [
                (t.name if t.name is not None else (self.catalog.topic_by_id(t.topic_id) or ""), t.topic_id)
                for t in body.topics
            ]
        partition = MetadataResponse.MetadataResponseTopic.MetadataResponsePartition
        answers = []
        for name, asked_id in wanted:
            if name not in topics:
                if name:
                    client = f"client {request.client_id!r} at {request.client_host}"
                    self._say_once(
                        request.client_host,
                        request.client_id,
                        f"topic {name}",
                        f"{client} asked for topic {name!r}, which does not exist (UNKNOWN_TOPIC_OR_PARTITION)",
                    )
                error = (
                    protocol.UNKNOWN_TOPIC_ID
                    if version >= 10 and asked_id and not name
                    else (protocol.UNKNOWN_TOPIC_OR_PARTITION)
                )
                answers.append(
                    MetadataResponse.MetadataResponseTopic(
                        error_code=error, name=name, is_internal=False, partitions=[]
                    )
                )
                continue
            online = set(served.get(name, []))
            parts = [
                partition(
                    error_code=protocol.NONE,
                    partition_index=p,
                    leader_id=self._leader(p),
                    leader_epoch=-1,
                    replica_nodes=[self._leader(p)],
                    isr_nodes=[self._leader(p)],
                    offline_replicas=[],
                )
                if p in online
                else partition(
                    error_code=protocol.LEADER_NOT_AVAILABLE,
                    partition_index=p,
                    leader_id=-1,
                    leader_epoch=-1,
                    replica_nodes=[],
                    isr_nodes=[],
                    offline_replicas=[],
                )
                for p in range(topics[name])
            ]
            answers.append(
                MetadataResponse.MetadataResponseTopic(
                    error_code=protocol.NONE,
                    name=name,
                    topic_id=self.catalog.topic_id(name),
                    is_internal=name in INTERNAL_TOPICS,
                    partitions=parts,
                    authorized_operations=_authorized_operations(
                        version >= 8 and body.include_topic_authorized_operations, TOPIC_OPERATIONS
                    ),
                )
            )
        brokers = [
            MetadataResponse.MetadataResponseBroker(node_id=node, host=self.advertised_host, port=port, rack=None)
            for node, port in enumerate(self.ports)
        ]
        return MetadataResponse(
            version=version,
            throttle_time_ms=0,
            brokers=brokers,
            cluster_id=CLUSTER_ID,
            controller_id=NODE_ID,
            topics=answers,
            error_code=protocol.NONE,
            # v8-10 only (librdkafka's describe_cluster asks at v10); later versions ask DescribeCluster
            authorized_operations=_authorized_operations(
                8 <= version <= 10 and body.include_cluster_authorized_operations, CLUSTER_OPERATIONS
            ),
        )

    def _leader(self, partition: int) -> int:
        """The broker node that leads ``partition`` and holds its replica (see :meth:`_Metadata`)."""
        return partition % len(self.ports)

    def _DescribeCluster(self, request: protocol.Request) -> Any:
        """The broker nodes, as Metadata names them, for admin clients' ``describe_cluster`` (kafka-python,
        Kafka's Admin), with the cluster's authorized operations when asked. A request for the
        controllers' endpoints is refused as a broker refuses it (MISMATCHED_ENDPOINT_TYPE)."""
        body, version = request.body, request.version
        endpoint = body.endpoint_type if version >= 1 else _BROKERS_ENDPOINT
        if endpoint != _BROKERS_ENDPOINT:
            known = endpoint == _CONTROLLERS_ENDPOINT
            return DescribeClusterResponse(
                version=version,
                throttle_time_ms=0,
                error_code=protocol.MISMATCHED_ENDPOINT_TYPE if known else protocol.UNSUPPORTED_ENDPOINT_TYPE,
                error_message="The request was sent to an endpoint of type BROKER, but we wanted an endpoint of "
                "type CONTROLLER"
                if known
                else f"Unsupported endpoint type {endpoint}",
                endpoint_type=endpoint,
                cluster_id="",
                controller_id=-1,
                brokers=[],
            )
        brokers = [
            DescribeClusterResponse.DescribeClusterBroker(
                broker_id=node, host=self.advertised_host, port=port, rack=None, is_fenced=False
            )
            for node, port in enumerate(self.ports)
        ]
        return DescribeClusterResponse(
            version=version,
            throttle_time_ms=0,
            error_code=protocol.NONE,
            error_message=None,
            endpoint_type=endpoint,
            cluster_id=CLUSTER_ID,
            controller_id=NODE_ID,
            brokers=brokers,
            authorized_operations=_authorized_operations(
                body.include_cluster_authorized_operations, CLUSTER_OPERATIONS
            ),
        )

    def _DescribeLogDirs(self, request: protocol.Request) -> Any:
        """The log directory as a broker describes its storage (``kafka-log-dirs.sh --describe``,
        kafka-python's ``describe_log_dirs``): its absolute path, the volume's total and usable bytes,
        and each partition this node holds (the ones it leads, as a broker of a cluster: a tool that
        adds the nodes' answers counts each once), or of those asked the ones it holds, with the
        engine's size of its log (``Log.size_in_bytes``), its offset lag (Kafka's: how far its end is
        below the high watermark, 0 for a leader) and no future log, as Kafka's
        ``ReplicaManager.describeLogDirs``. A partition that cannot be opened is left out, as a broker
        leaves out an offline log. A log directory that does not exist yet is empty, its volume's sizes
        unknown (-1); one whose volume cannot be read is KAFKA_STORAGE_ERROR."""
        body, version = request.body, request.version
        result = DescribeLogDirsResponse.DescribeLogDirsResult
        asked = None if body.topics is None else {(t.topic, p) for t in body.topics for p in t.partitions}
        try:
            volume: os.statvfs_result | None = os.statvfs(self.catalog.log_dir)
        except FileNotFoundError:  # not created yet (the writer creates it): nothing in it, its volume unknown
            volume = None
        except OSError as e:
            logger.warning("cannot describe log directory %s: %s", self.catalog.log_dir, e)
            failed = result(error_code=protocol.KAFKA_STORAGE_ERROR, log_dir=self._log_dir_name(), topics=[])
            return DescribeLogDirsResponse(
                version=version, throttle_time_ms=0, error_code=protocol.NONE, results=[failed]
            )
        described: dict[str, list[Any]] = {}
        for topic, partitions in self.catalog.topics().items():
            for p in partitions:
                if self._leader(p) != request.node or asked is not None and (topic, p) not in asked:
                    continue
                log = self.catalog.log(topic, p)
                if log is None:
                    continue
                described.setdefault(topic, []).append(
                    result.DescribeLogDirsTopic.DescribeLogDirsPartition(
                        partition_index=p,
                        partition_size=log.size_in_bytes,
                        offset_lag=max(log.high_watermark - log.log_end_offset, 0),
                        is_future_key=False,
                    )
                )
        answer = result(
            error_code=protocol.NONE,
            log_dir=self._log_dir_name(),
            topics=[result.DescribeLogDirsTopic(name=name, partitions=rows) for name, rows in described.items()],
            total_bytes=volume.f_blocks * volume.f_frsize if volume else -1,
            usable_bytes=volume.f_bavail * volume.f_frsize if volume else -1,
            is_cordoned=False,
        )
        return DescribeLogDirsResponse(version=version, throttle_time_ms=0, error_code=protocol.NONE, results=[answer])

    def _FindCoordinator(self, request: protocol.Request) -> Any:
        body, version = request.body, request.version
        # Key type 0 is a consumer group. A transaction (1) writes: TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        # as Kafka answers for a transactional id the client may not use, which clients take as fatal
        # (COORDINATOR_NOT_AVAILABLE they retry until their timeout). Share groups (2) are not served.
        error = {
            0: protocol.NONE,
            1: protocol.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        }.get(body.key_type, protocol.COORDINATOR_NOT_AVAILABLE)
        message = None if error == protocol.NONE else protocol.READ_ONLY_MESSAGE
        if error != protocol.NONE:
            self._refused(request)
        if version < 4:
            return FindCoordinatorResponse(
                version=version,
                throttle_time_ms=0,
                error_code=error,
                error_message=message,
                node_id=NODE_ID,
                host=self.advertised_host,
                port=self.port,
            )
        coordinators = [
            FindCoordinatorResponse.Coordinator(
                key=key,
                node_id=NODE_ID,
                host=self.advertised_host,
                port=self.port,
                error_code=error,
                error_message=message,
            )
            for key in body.coordinator_keys
        ]
        return FindCoordinatorResponse(version=version, throttle_time_ms=0, coordinators=coordinators)

    # -- consumption -----------------------------------------------------------------------------

    async def _Fetch(self, request: protocol.Request) -> Any:
        return await fetch.fetch(self.catalog, request.body, request.version)

    def _ListOffsets(self, request: protocol.Request) -> Any:
        return fetch.list_offsets(self.catalog, request.body, request.version)

    # -- groups ----------------------------------------------------------------------------------

    async def _JoinGroup(self, request: protocol.Request) -> Any:
        body = request.body
        result = await self.groups.join(
            body.group_id,
            body.member_id,
            request.client_id or "",
            request.client_host,
            body.session_timeout_ms,
            body.rebalance_timeout_ms if request.version >= 1 else body.session_timeout_ms,
            body.protocol_type,
            [(p.name, bytes(p.metadata)) for p in body.protocols],
            body.group_instance_id if request.version >= 5 else None,
            can_skip_assignment=request.version >= 9,
        )
        members = [
            JoinGroupResponse.JoinGroupResponseMember(member_id=m, group_instance_id=instance, metadata=meta)
            for m, instance, meta in result.members
        ]
        return _group_response(
            JoinGroupResponse,
            request,
            result,
            protocol_name=result.protocol_name or ("" if request.version < 7 else None),
            members=members,
        )

    async def _SyncGroup(self, request: protocol.Request) -> Any:
        body = request.body
        assignments = {a.member_id: bytes(a.assignment) for a in body.assignments}
        instance_id = body.group_instance_id if request.version >= 3 else None
        result = await self.groups.sync(body.group_id, body.member_id, body.generation_id, assignments, instance_id)
        return _group_response(SyncGroupResponse, request, result)

    def _Heartbeat(self, request: protocol.Request) -> Any:
        body = request.body
        instance_id = body.group_instance_id if request.version >= 3 else None
        error = self.groups.heartbeat(body.group_id, body.member_id, body.generation_id, instance_id)
        return HeartbeatResponse(version=request.version, throttle_time_ms=0, error_code=error)

    def _LeaveGroup(self, request: protocol.Request) -> Any:
        body = request.body
        leaving: list[tuple[str, str | None]] = [(body.member_id, None)]
        if request.version >= 3:  # a batch of members, each by member id and/or instance id
            leaving = [(m.member_id, m.group_instance_id) for m in body.members]
        errors = self.groups.leave(body.group_id, leaving)
        members = [
            LeaveGroupResponse.MemberResponse(member_id=m, group_instance_id=instance, error_code=e)
            for (m, instance), e in zip(leaving, errors, strict=True)
        ]
        top = errors[0] if request.version < 3 else protocol.NONE
        return LeaveGroupResponse(version=request.version, throttle_time_ms=0, error_code=top, members=members)

    async def _OffsetCommit(self, request: protocol.Request) -> Any:
        body, version = request.body, request.version
        topics = self.catalog.topics()
        valid: dict[tuple[str, int], CommittedOffset] = {}
        codes: dict[tuple[str, int], int] = {}
        for topic in body.topics:
            name = topic.name if version < 10 else (self.catalog.topic_by_id(topic.topic_id) or "")
            for p in topic.partitions:
                tp = (name, p.partition_index)
                if p.partition_index not in topics.get(name, []):
                    codes[tp] = protocol.UNKNOWN_TOPIC_OR_PARTITION
                elif len(p.committed_metadata or "") > OFFSET_METADATA_MAX_BYTES:
                    codes[tp] = protocol.OFFSET_METADATA_TOO_LARGE
                else:
                    epoch = p.committed_leader_epoch if version >= 6 else -1
                    valid[tp] = CommittedOffset(p.committed_offset, epoch, p.committed_metadata or "")
        if valid:
            try:
                error = await self.groups.commit_offsets(
                    body.group_id,
                    body.member_id,
                    body.generation_id_or_member_epoch,
                    valid,
                    body.group_instance_id if version >= 7 else None,
                )
            except StorageError as e:  # said once per client, group and reason: consumers commit again and again
                message = (
                    f"cannot store offsets of group {body.group_id}: {e}: answered KAFKA_STORAGE_ERROR "
                    "(--group-offsets-dir names a writable directory for group offsets)"
                )
                self._say_once(
                    request.client_host, request.client_id, f"store offsets of {body.group_id}: {e}", message
                )
                error = protocol.KAFKA_STORAGE_ERROR
            codes.update({tp: error for tp in valid})
        answer = OffsetCommitResponse.OffsetCommitResponseTopic
        return OffsetCommitResponse(
            version=version,
            throttle_time_ms=0,
            topics=[
                answer(
                    name=t.name,
                    topic_id=t.topic_id if version >= 10 else None,
                    partitions=[
                        answer.OffsetCommitResponsePartition(
                            partition_index=p.partition_index,
                            error_code=codes[
                                (
                                    t.name if version < 10 else self.catalog.topic_by_id(t.topic_id) or "",
                                    p.partition_index,
                                )
                            ],
                        )
                        for p in t.partitions
                    ],
                )
                for t in body.topics
            ],
        )

    def _OffsetFetch(self, request: protocol.Request) -> Any:
        body, version = request.body, request.version
        if version < 8:
            topics = self._offsets_of(body.group_id, body.topics, version, OffsetFetchResponse.OffsetFetchResponseTopic)
            return OffsetFetchResponse(version=version, throttle_time_ms=0, topics=topics, error_code=protocol.NONE)
        group_answer = OffsetFetchResponse.OffsetFetchResponseGroup
        groups = [
            group_answer(
                group_id=g.group_id,
                error_code=protocol.NONE,
                topics=self._offsets_of(g.group_id, g.topics, version, group_answer.OffsetFetchResponseTopics),
            )
            for g in body.groups
        ]
        return OffsetFetchResponse(version=version, throttle_time_ms=0, groups=groups)

    def _offsets_of(self, group_id: str, asked: list[Any] | None, version: int, topic_class: Any) -> list[Any]:
        committed = self.groups.fetch_offsets(group_id)
        ids: dict[str, Any] = {}
        if asked is None:  # every partition the group committed
            wanted: dict[str, list[int]] = {}
            for topic, partition in sorted(committed):
                wanted.setdefault(topic, []).append(partition)
            ids = {topic: self.catalog.topic_id(topic) for topic in wanted}
        else:
            wanted = {}
            for t in asked:
                name = t.name if version < 10 else (self.catalog.topic_by_id(t.topic_id) or "")
                wanted[name] = list(t.partition_indexes)
                ids[name] = t.topic_id if version >= 10 else None
        partition_class = (
            topic_class.OffsetFetchResponsePartition if version < 8 else (topic_class.OffsetFetchResponsePartitions)
        )
        answers = []
        for name, partitions in wanted.items():
            rows = []
            for p in partitions:
                c = committed.get((name, p), CommittedOffset(-1))
                rows.append(
                    partition_class(
                        partition_index=p,
                        committed_offset=c.offset,
                        committed_leader_epoch=c.leader_epoch,
                        metadata=c.metadata,
                        error_code=protocol.NONE,
                    )
                )
            with_id = {"topic_id": ids.get(name)} if version >= 8 else {}  # v0-7's topic has no topic_id field
            answers.append(topic_class(name=name, partitions=rows, **with_id))
        return answers

    def _ListGroups(self, request: protocol.Request) -> Any:
        """The groups, at node 0 only: a broker lists the groups it coordinates, and admin clients ask
        every broker and join the answers (every group at every node was listed once per node)."""
        body, version = request.body, request.version
        if request.node != NODE_ID:
            return ListGroupsResponse(version=version, throttle_time_ms=0, error_code=protocol.NONE, groups=[])
        # Either filter matches whatever the case, as Kafka's coordinator (librdkafka sends "Classic").
        states = {s.strip().lower() for s in body.states_filter or []} if version >= 4 else set()
        types = {t.strip().lower() for t in body.types_filter or []} if version >= 5 else set()
        listed = [
            ListGroupsResponse.ListedGroup(
                group_id=g.group_id,
                protocol_type=g.protocol_type or "",
                group_state=g.state.value,
                group_type="classic",
            )
            for g in self.groups.listed()
            if (not states or g.state.value.lower() in states) and (not types or "classic" in types)
        ]
        return ListGroupsResponse(version=version, throttle_time_ms=0, error_code=protocol.NONE, groups=listed)

    def _DescribeGroups(self, request: protocol.Request) -> Any:
        """Each group's state, protocol and members; the members' metadata and assignments once it is
        Stable, as Kafka. A group the server does not know is Dead (v6: with GROUP_ID_NOT_FOUND)."""
        version = request.version
        known = {g.group_id: g for g in self.groups.listed()}
        described = DescribeGroupsResponse.DescribedGroup
        operations = _authorized_operations(
            version >= 3 and request.body.include_authorized_operations, GROUP_OPERATIONS
        )
        answers = []
        for group_id in request.body.groups:
            group = known.get(group_id)
            if group is None:
                error = protocol.GROUP_ID_NOT_FOUND if version >= 6 else protocol.NONE
                message = f"group {group_id} is not known" if version >= 6 else None
                answers.append(
                    described(
                        error_code=error,
                        error_message=message,
                        group_id=group_id,
                        group_state="Dead",
                        protocol_type="",
                        protocol_data="",
                        members=[],
                        authorized_operations=operations,
                    )
                )
                continue
            stable = group.state is GroupState.STABLE
            members = [
                described.DescribedGroupMember(
                    member_id=m.member_id,
                    group_instance_id=m.instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    member_metadata=next((meta for name, meta in m.protocols if name == group.protocol_name), b"")
                    if stable
                    else b"",
                    member_assignment=m.assignment if stable else b"",
                )
                for m in group.members.values()
            ]
            answers.append(
                described(
                    error_code=protocol.NONE,
                    error_message=None,
                    group_id=group_id,
                    group_state=group.state.value,
                    protocol_type=group.protocol_type or "",
                    protocol_data=(group.protocol_name or "") if stable else "",
                    members=members,
                    authorized_operations=operations,
                )
            )
        return DescribeGroupsResponse(version=version, throttle_time_ms=0, groups=answers)

    async def _DeleteGroups(self, request: protocol.Request) -> Any:
        results = []
        for group_id in request.body.groups_names:
            try:
                error = await self.groups.delete(group_id)
            except StorageError as e:
                logger.error("cannot delete the offsets of group %s: %s", group_id, e)
                error = protocol.KAFKA_STORAGE_ERROR
            results.append(DeleteGroupsResponse.DeletableGroupResult(group_id=group_id, error_code=error))
        return DeleteGroupsResponse(version=request.version, throttle_time_ms=0, results=results)

    async def _OffsetDelete(self, request: protocol.Request) -> Any:
        """The group's offsets of the partitions named (``kafka-consumer-groups.sh --delete-offsets``,
        kafka-python's ``delete_group_offsets``): see :meth:`GroupCoordinator.delete_offsets`; a
        partition that does not exist is UNKNOWN_TOPIC_OR_PARTITION, as from a broker."""
        body = request.body
        topics = self.catalog.topics()
        asked = [(t.name, p.partition_index) for t in body.topics for p in t.partitions]
        known = [tp for tp in asked if tp[1] in topics.get(tp[0], [])]
        try:
            error, codes = await self.groups.delete_offsets(body.group_id, known)
        except StorageError as e:
            logger.error("cannot delete offsets of group %s: %s", body.group_id, e)
            error, codes = protocol.KAFKA_STORAGE_ERROR, {}
        answer = OffsetDeleteResponse.OffsetDeleteResponseTopic
        by_topic: dict[str, list[Any]] = {}
        for tp in asked:
            code = codes.get(tp, protocol.NONE if tp in known else protocol.UNKNOWN_TOPIC_OR_PARTITION)
            by_topic.setdefault(tp[0], []).append(
                answer.OffsetDeleteResponsePartition(partition_index=tp[1], error_code=code)
            )
        return OffsetDeleteResponse(
            version=request.version,
            error_code=error,
            throttle_time_ms=0,
            topics=[] if error else [answer(name=name, partitions=rows) for name, rows in by_topic.items()],
        )

    # -- configs ---------------------------------------------------------------------------------

    def _DescribeConfigs(self, request: protocol.Request) -> Any:
        """The configs of each topic or broker asked for (:meth:`_resource_configs`), read-only, with the
        source Kafka would name; no synonyms or documentation. Other resources (groups, broker
        loggers, ...) have no configs here: INVALID_REQUEST, as Kafka answers a resource type it does
        not describe."""
        version = request.version
        result = DescribeConfigsResponse.DescribeConfigsResult
        entry = result.DescribeConfigsResourceResult
        answers = []
        for resource in request.body.resources:
            error, message, found = self._resource_configs(resource.resource_type, resource.resource_name, request.node)
            configs = [
                config.entry(entry)
                for config in found
                if resource.configuration_keys is None or config.name in resource.configuration_keys
            ]
            answers.append(
                result(
                    error_code=error,
                    error_message=message,
                    resource_type=resource.resource_type,
                    resource_name=resource.resource_name,
                    configs=configs,
                )
            )
        return DescribeConfigsResponse(version=version, throttle_time_ms=0, results=answers)

    def _resource_configs(self, kind: int, name: str, node: int) -> tuple[int, str | None, list[_Config]]:
        """The error, message and configs of resource ``name`` of type ``kind`` asked at broker ``node``.

        A topic's configs are the ones this server's settings give it (``Settings.log_config``: the
        settings files and ``--config``, the files the writers and the maintenance daemon read). The
        broker ``node`` (a broker describes itself only) has its id, ``log.dirs`` and, by Kafka's
        names (:func:`~indexer.config.broker_config_name`), the values every topic falls back to
        (``log_config()`` without a topic), with the same sources; the broker ``""`` (the cluster's
        dynamic defaults) has none."""
        settings = self.catalog.settings
        if kind == ConfigResourceType.TOPIC:
            if name not in self.catalog.partition_counts():
                return protocol.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.", []
            origins = settings.topic_config_origins(name)
            values = settings.log_config(name).to_dict()
            return protocol.NONE, None, [_Config(k, v, origins[k], topic_config_type(k)) for k, v in values.items()]
        if kind != ConfigResourceType.BROKER:
            return protocol.INVALID_REQUEST, "seglog serve describes the configs of topics and brokers only", []
        if name == "":
            return protocol.NONE, None, []
        if name != str(node):
            return (
                protocol.INVALID_REQUEST,
                f"Unexpected broker id, expected {node} or empty string, but received {name}",
                [],
            )
        origins = settings.topic_config_origins(None)
        configs = [
            _Config("node.id", node, "settings", "INT"),
            _Config("broker.id", node, "settings", "INT"),
            _Config("log.dirs", self._log_dir_name(), "settings", "STRING"),
        ]
        for key, value in settings.log_config().to_dict().items():
            broker_name = broker_config_name(key)
            if broker_name is not None:
                configs.append(_Config(broker_name, value, origins[key], topic_config_type(key)))
        return protocol.NONE, None, configs

    def _log_dir_name(self) -> str:
        """The log directory as a broker names it (DescribeLogDirs, ``log.dirs``): its absolute path."""
        return str(self.catalog.log_dir.absolute())

    # -- refused writes --------------------------------------------------------------------------

    def _Produce(self, request: protocol.Request) -> Any:
        self._refused(request)
        body, version = request.body, request.version
        if body.acks == 0:  # the producer expects no answer
            return None
        topic_class = ProduceResponse.TopicProduceResponse
        return ProduceResponse(
            version=version,
            throttle_time_ms=0,
            responses=[
                topic_class(
                    name=t.name,
                    topic_id=getattr(t, "topic_id", None),
                    partition_responses=[
                        topic_class.PartitionProduceResponse(
                            index=p.index,
                            error_code=protocol.TOPIC_AUTHORIZATION_FAILED,
                            base_offset=-1,
                            log_append_time_ms=-1,
                            log_start_offset=-1,
                            record_errors=[],
                            error_message=protocol.READ_ONLY_MESSAGE,
                        )
                        for p in t.partition_data
                    ],
                )
                for t in body.topic_data
            ],
        )

    def _CreateTopics(self, request: protocol.Request) -> Any:
        names = [t.name for t in request.body.topics]
        return self._topics_refused(
            request,
            CreateTopicsResponse,
            ("topics", CreateTopicsResponse.CreatableTopicResult),
            names,
            num_partitions=-1,
            replication_factor=-1,
            configs=None,
        )

    def _DeleteTopics(self, request: protocol.Request) -> Any:
        body = request.body
        names = list(body.topic_names) if request.version < 6 else [t.name for t in body.topics]
        return self._topics_refused(
            request, DeleteTopicsResponse, ("responses", DeleteTopicsResponse.DeletableTopicResult), names
        )

    def _CreatePartitions(self, request: protocol.Request) -> Any:
        results = ("results", CreatePartitionsResponse.CreatePartitionsTopicResult)
        return self._topics_refused(request, CreatePartitionsResponse, results, [t.name for t in request.body.topics])

    def _topics_refused(
        self,
        request: protocol.Request,
        response: type[Any],
        results: tuple[str, type[Any]],
        names: list[str],
        **extra: Any,
    ) -> Any:
        """A topic admin request refused for each of its topics ``names``: the response's list field
        ``results[0]`` holds one ``results[1]`` per topic, with ``extra`` fields, each refused with
        TOPIC_AUTHORIZATION_FAILED, Kafka's answer to a client without CREATE/DELETE/ALTER on it."""
        self._refused(request)
        field, result = results
        refusals = [
            result(
                name=name,
                error_code=protocol.TOPIC_AUTHORIZATION_FAILED,
                error_message=protocol.READ_ONLY_MESSAGE,
                **extra,
            )
            for name in names
        ]
        return response(version=request.version, throttle_time_ms=0, **{field: refusals})

    def _DeleteRecords(self, request: protocol.Request) -> Any:
        """Refused for every partition, its low watermark -1 (Kafka's ``INVALID_LOW_WATERMARK``)."""
        self._refused(request)
        result = DeleteRecordsResponse.DeleteRecordsTopicResult
        return DeleteRecordsResponse(
            version=request.version,
            throttle_time_ms=0,
            topics=[
                result(
                    name=t.name,
                    partitions=[
                        result.DeleteRecordsPartitionResult(
                            partition_index=p.partition_index,
                            low_watermark=-1,
                            error_code=protocol.TOPIC_AUTHORIZATION_FAILED,
                        )
                        for p in t.partitions
                    ],
                )
                for t in request.body.topics
            ],
        )

    def _AlterConfigs(self, request: protocol.Request) -> Any:
        return self._config_changes_refused(request, AlterConfigsResponse)

    def _IncrementalAlterConfigs(self, request: protocol.Request) -> Any:
        return self._config_changes_refused(request, IncrementalAlterConfigsResponse)

    def _config_changes_refused(self, request: protocol.Request, response: type[Any]) -> Any:
        """Each resource refused with Kafka's error for a client without ALTER_CONFIGS on it: a topic
        TOPIC_AUTHORIZATION_FAILED, a group GROUP_AUTHORIZATION_FAILED, the cluster's resources
        (brokers, loggers, client metrics) CLUSTER_AUTHORIZATION_FAILED."""
        self._refused(request)
        errors = {
            ConfigResourceType.TOPIC: protocol.TOPIC_AUTHORIZATION_FAILED,
            ConfigResourceType.GROUP: protocol.GROUP_AUTHORIZATION_FAILED,
        }
        return response(
            version=request.version,
            throttle_time_ms=0,
            responses=[
                response.AlterConfigsResourceResponse(
                    error_code=errors.get(r.resource_type, protocol.CLUSTER_AUTHORIZATION_FAILED),
                    error_message=protocol.READ_ONLY_MESSAGE,
                    resource_type=r.resource_type,
                    resource_name=r.resource_name,
                )
                for r in request.body.resources
            ],
        )

    def _InitProducerId(self, request: protocol.Request) -> Any:
        self._refused(request)
        transactional = request.body.transactional_id is not None
        error = (
            protocol.TRANSACTIONAL_ID_AUTHORIZATION_FAILED if transactional else protocol.CLUSTER_AUTHORIZATION_FAILED
        )
        return InitProducerIdResponse(
            version=request.version, throttle_time_ms=0, error_code=error, producer_id=-1, producer_epoch=-1
        )


async def serve_forever(log_dir: str | Path, settings: Settings, options: ServeOptions, stop: asyncio.Event) -> None:
    """Run a :class:`Server` until ``stop`` is set; a ``log_dir`` that does not exist yet is said once
    and served (its topics) once it appears (:func:`~indexer.log_manager.missing_log_dir_note`)."""
    missing = missing_log_dir_note(Path(log_dir), "serving its topics")
    server = Server(log_dir, settings, options)
    await server.start()
    if missing:
        logger.warning("%s", missing)
    try:
        await stop.wait()
    finally:
        await server.close()
    logger.info("stopped")
