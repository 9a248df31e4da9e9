"""Kafka's wire framing for a server: size-prefixed frames, request headers, the API table, errors.

Message schemas come from kafka-python (>= 3.0), whose ``kafka.protocol`` classes are generated from
Apache Kafka's own JSON message definitions (``clients/src/main/resources/common/message``), every
version of every API, flexible (compact/tagged) encodings included. We use them for every request
and response rather than hand-written encoders: they are the client library's own, well tested
against real brokers, and follow Kafka's definitions field by field. Nothing is hand-written here
but the 8 bytes every request starts with (API key, version, correlation id), which we must read
before knowing which class decodes the rest.

A frame is ``int32 size`` + ``size`` bytes. A request is a request header (v1, or v2 = v1 + tagged
fields when the API version is flexible) and a body; a response is a response header (correlation
id, + tagged fields when flexible; always v0 for ApiVersions) and a body.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import kafka.errors as kafka_errors
from kafka.protocol.admin import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse, ProduceRequest, ProduceResponse
from kafka.protocol.schemas.fields.codecs.types import Int32, UnsignedVarInt32

from indexer.errors import SeglogError

FRAME_HEADER = struct.Struct(">i")
REQUEST_PREFIX = struct.Struct(">hhi")  # api key, api version, correlation id

# Kafka's error codes, by kafka-python's names (kafka.errors), so no number is written here.
NONE: int = kafka_errors.NoError.errno
OFFSET_OUT_OF_RANGE: int = kafka_errors.OffsetOutOfRangeError.errno
UNKNOWN_TOPIC_OR_PARTITION: int = kafka_errors.UnknownTopicOrPartitionError.errno
LEADER_NOT_AVAILABLE: int = kafka_errors.LeaderNotAvailableError.errno
UNKNOWN_TOPIC_ID: int = kafka_errors.UnknownTopicIdError.errno
KAFKA_STORAGE_ERROR: int = kafka_errors.KafkaStorageError.errno
CORRUPT_MESSAGE: int = kafka_errors.CorruptRecordError.errno
ILLEGAL_GENERATION: int = kafka_errors.IllegalGenerationError.errno
INCONSISTENT_GROUP_PROTOCOL: int = kafka_errors.InconsistentGroupProtocolError.errno
INVALID_GROUP_ID: int = kafka_errors.InvalidGroupIdError.errno
UNKNOWN_MEMBER_ID: int = kafka_errors.UnknownMemberIdError.errno
FENCED_INSTANCE_ID: int = kafka_errors.FencedInstanceIdError.errno
INVALID_SESSION_TIMEOUT: int = kafka_errors.InvalidSessionTimeoutError.errno
REBALANCE_IN_PROGRESS: int = kafka_errors.RebalanceInProgressError.errno
TOPIC_AUTHORIZATION_FAILED: int = kafka_errors.TopicAuthorizationFailedError.errno
CLUSTER_AUTHORIZATION_FAILED: int = kafka_errors.ClusterAuthorizationFailedError.errno
GROUP_AUTHORIZATION_FAILED: int = kafka_errors.GroupAuthorizationFailedError.errno
TRANSACTIONAL_ID_AUTHORIZATION_FAILED: int = kafka_errors.TransactionalIdAuthorizationFailedError.errno
UNSUPPORTED_VERSION: int = kafka_errors.UnsupportedVersionError.errno
INVALID_REQUEST: int = kafka_errors.InvalidRequestError.errno
COORDINATOR_NOT_AVAILABLE: int = kafka_errors.CoordinatorNotAvailableError.errno
GROUP_ID_NOT_FOUND: int = kafka_errors.GroupIdNotFoundError.errno
NON_EMPTY_GROUP: int = kafka_errors.NonEmptyGroupError.errno
GROUP_SUBSCRIBED_TO_TOPIC: int = kafka_errors.GroupSubscribedToTopicError.errno
OFFSET_METADATA_TOO_LARGE: int = kafka_errors.OffsetMetadataTooLargeError.errno
MISMATCHED_ENDPOINT_TYPE: int = kafka_errors.MismatchedEndpointTypeError.errno
UNSUPPORTED_ENDPOINT_TYPE: int = kafka_errors.UnsupportedEndpointTypeError.errno

READ_ONLY_MESSAGE = "seglog serve is read-only: writes and topic changes are refused"


@dataclass(frozen=True, slots=True)
class Api:
    """One API this server answers: its schema classes and the versions it accepts."""

    name: str
    request: Any
    response: Any
    min_version: int
    max_version: int


def _api(name: str, request: Any, response: Any) -> tuple[int, Api]:
    # kafka-python lets every class decode from v0; the lower bound of Kafka's definition (validVersions,
    # e.g. Fetch 4+, the versions a Kafka 4 broker still accepts) is what we advertise and accept.
    low, _, high = request.json["validVersions"].partition("-")  # "1-4", or "0" for one version
    return int(request.API_KEY), Api(name, request, response, int(low), int(high or low))


# Every API we answer, at every version Kafka 4 defines. Writes are listed so that clients learn they
# are refused (with Kafka's authorization errors) instead of guessing from a closed connection.
APIS: dict[int, Api] = dict(
    [
        _api("ApiVersions", ApiVersionsRequest, ApiVersionsResponse),
        _api("Metadata", MetadataRequest, MetadataResponse),
        _api("DescribeCluster", DescribeClusterRequest, DescribeClusterResponse),
        _api("DescribeLogDirs", DescribeLogDirsRequest, DescribeLogDirsResponse),
        _api("ListOffsets", ListOffsetsRequest, ListOffsetsResponse),
        _api("Fetch", FetchRequest, FetchResponse),
        _api("FindCoordinator", FindCoordinatorRequest, FindCoordinatorResponse),
        _api("JoinGroup", JoinGroupRequest, JoinGroupResponse),
        _api("SyncGroup", SyncGroupRequest, SyncGroupResponse),
        _api("Heartbeat", HeartbeatRequest, HeartbeatResponse),
        _api("LeaveGroup", LeaveGroupRequest, LeaveGroupResponse),
        _api("OffsetCommit", OffsetCommitRequest, OffsetCommitResponse),
        _api("OffsetFetch", OffsetFetchRequest, OffsetFetchResponse),
        _api("ListGroups", ListGroupsRequest, ListGroupsResponse),
        _api("DescribeGroups", DescribeGroupsRequest, DescribeGroupsResponse),
        _api("DeleteGroups", DeleteGroupsRequest, DeleteGroupsResponse),
        _api("OffsetDelete", OffsetDeleteRequest, OffsetDeleteResponse),
        _api("DescribeConfigs", DescribeConfigsRequest, DescribeConfigsResponse),
        _api("Produce", ProduceRequest, ProduceResponse),
        _api("CreateTopics", CreateTopicsRequest, CreateTopicsResponse),
        _api("DeleteTopics", DeleteTopicsRequest, DeleteTopicsResponse),
        _api("CreatePartitions", CreatePartitionsRequest, CreatePartitionsResponse),
        _api("DeleteRecords", DeleteRecordsRequest, DeleteRecordsResponse),
        _api("AlterConfigs", AlterConfigsRequest, AlterConfigsResponse),
        _api("IncrementalAlterConfigs", IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse),
        _api("InitProducerId", InitProducerIdRequest, InitProducerIdResponse),
    ]
)
API_VERSIONS_KEY = int(ApiVersionsRequest.API_KEY)


class ProtocolError(SeglogError):
    """A request that cannot be answered (malformed, unknown API or version): the connection is closed."""


@dataclass(frozen=True, slots=True)
class Request:
    """A decoded request: its API, version, correlation id, client id and body."""

    api: Api
    version: int
    correlation_id: int
    client_id: str | None
    body: Any
    node: int = 0  # the broker node whose port it came to (the server sets it)
    client_host: str = ""  # the client's address as a broker names it, "/127.0.0.1" (the server sets it)


def peek_header(frame: bytes) -> tuple[int, int, int]:
    """API key, API version and correlation id of a request frame (its first 8 bytes).

    Raises:
        ProtocolError: the frame is shorter than that.
    """
    if len(frame) < REQUEST_PREFIX.size:
        raise ProtocolError(f"request of {len(frame)} bytes is shorter than a request header")
    key, version, correlation_id = REQUEST_PREFIX.unpack_from(frame)
    return int(key), int(version), int(correlation_id)


def decode_request(frame: bytes) -> Request:
    """Decode a request frame (without its size prefix).

    Raises:
        ProtocolError: unknown API key, a version outside the API's range (except ApiVersions, whose
            caller answers UNSUPPORTED_VERSION as Kafka does), or bytes that do not parse.
    """
    key, version, correlation_id = peek_header(frame)
    api = APIS.get(key)
    if api is None:
        raise ProtocolError(f"unknown API key {key} (correlation id {correlation_id})")
    if not api.min_version <= version <= api.max_version:
        raise ProtocolError(
            f"{api.name} version {version} is not supported (versions {api.min_version}-{api.max_version})"
        )
    try:
        body = api.request.decode(frame, version=version, header=True)
    except Exception as e:  # kafka-python raises ValueError/struct.error/IndexError/... on bad bytes
        raise ProtocolError(f"malformed {api.name} v{version} request: {type(e).__name__}: {e}") from e
    return Request(api, version, correlation_id, body.header.client_id, body)


def encode_response(response: Any, version: int, correlation_id: int) -> bytearray:
    """A framed response (size prefix, response header, body) at ``version`` (kafka-python's buffer, not
    copied again: a Fetch response carries megabytes)."""
    response.API_VERSION = version
    response.with_header(correlation_id=correlation_id)
    encoded: bytearray = response.encode(header=True, framed=True)
    return encoded


@dataclass(frozen=True, slots=True)
class FileRegion:
    """``size`` bytes of an open file from ``position``: record bytes a response sends from the file."""

    file: BinaryIO
    position: int
    size: int
    path: Path  # the file's name, for errors


@dataclass(frozen=True, slots=True)
class Spliced:
    """A response whose bytes fields holding one of ``regions``' placeholders carry that region instead."""

    response: Any
    regions: dict[bytes, FileRegion]

    def close(self) -> None:
        """Close the regions' files."""
        for region in self.regions.values():
            region.file.close()


ResponsePiece = bytearray | bytes | FileRegion


def encode_spliced(spliced: Spliced, version: int, correlation_id: int) -> list[ResponsePiece]:
    """A framed response as pieces to send in order: kafka-python encodes the response with each region's
    placeholder in place of its bytes, then each placeholder (with its length prefix) is cut out and
    replaced by the region's own length prefix and the region, and the frame size is corrected. So the
    encoder never copies record bytes, and they can go from the file to the socket (``sendfile``)."""
    encoded = encode_response(spliced.response, version, correlation_id)
    compact = spliced.response.flexible_version_q(version)

    def prefix(size: int) -> bytes:
        return bytes(UnsignedVarInt32.encode(size + 1) if compact else Int32.encode(size))

    found = []
    for placeholder, region in spliced.regions.items():
        marked = prefix(len(placeholder)) + placeholder
        at = encoded.find(marked)
        if at < 0 or encoded.find(marked, at + 1) >= 0:
            raise AssertionError("a record placeholder must appear exactly once in the encoded response")
        found.append((at, len(marked), region))
    pieces: list[ResponsePiece] = []
    start = 0
    for at, length, region in sorted(found, key=lambda f: f[0]):
        pieces += [encoded[start:at] + prefix(region.size), region]
        start = at + length
    pieces.append(encoded[start:])
    head = pieces[0]
    assert isinstance(head, bytearray)
    size = sum(p.size if isinstance(p, FileRegion) else len(p) for p in pieces) - FRAME_HEADER.size
    FRAME_HEADER.pack_into(head, 0, size)
    return pieces


def api_versions_response(version: int, error_code: int = NONE) -> Any:
    """The ApiVersions answer: every API of :data:`APIS` with its version range.

    Kafka answers a too-new ApiVersions request at v0 with UNSUPPORTED_VERSION and the same list, so
    the client can retry at a version both know.
    """
    keys = [
        ApiVersionsResponse.ApiVersion(api_key=key, min_version=api.min_version, max_version=api.max_version)
        for key, api in sorted(APIS.items())
    ]
    return ApiVersionsResponse(version=version, error_code=error_code, api_keys=keys, throttle_time_ms=0)
