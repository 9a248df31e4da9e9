"""Fetch and ListOffsets over the catalog's read-only logs (Kafka's ``ReplicaManager.fetchMessages``
and ``handleListOffsetRequest``, for a single replica).

Fetch sends the stored batch bytes, never re-encoded: ``Log.read(..., as_slice=True)`` names them in
the segment file, and from :data:`SENDFILE_MIN_BYTES` on they go from the file to the socket with
``sendfile`` (kafka-python encodes the rest of the response around a placeholder, see
:func:`~seglog.serve.protocol.encode_spliced`); smaller ones are read and written with the response.
Whole batches from the one holding the fetch offset, up to the partition's and the response's byte limits (the
first partition with data gets at least one whole batch, as in Kafka), never past the high watermark
(``read_uncommitted``) or the last stable offset (``read_committed``, which also carries the aborted
transactions of the range from the ``.txnindex`` files). A fetch that found fewer than ``min.bytes``
waits up to ``max.wait.ms`` for the catalog to report a change (a commit, a roll, retention) and
looks again. Fetch sessions (KIP-227) are not kept: every response has session id 0, which tells the
client to send full fetches (the protocol's way for a broker to decline a session).
:func:`compile_kernels` runs both once over a log of its own before the server listens, so that no
client waits while numba compiles the engine's kernels.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import secrets
import tempfile
import time
import uuid
from typing import Any

import numpy as np
from kafka.protocol.consumer import FetchRequest, FetchResponse, ListOffsetsRequest, ListOffsetsResponse
from kafka.record.default_records import DefaultRecordBatchBuilder

from indexer.config import Settings
from indexer.errors import CorruptRecordError, OffsetOutOfRangeError, SeglogError
from indexer.limits import INT32_MAX
from indexer.log import Log
from indexer.log_manager import LogManager
from indexer.records.encoder import EncodedBatches
from indexer.records.file_records import FileSlice
from seglog.serve import protocol
from seglog.serve.catalog import Catalog

logger = logging.getLogger(__name__)

READ_COMMITTED = 1
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
_PartitionData = FetchResponse.FetchableTopicResponse.PartitionData
_ABORTED_TRANSACTION = _PartitionData.AbortedTransaction
_NO_TOPIC_ID = uuid.UUID(int=0)
# Records this large are sent from the segment file with sendfile; smaller ones are read and go out in
# one write with the rest of the response (fewer system calls for a tailing consumer's small fetches).
SENDFILE_MIN_BYTES = 64 * 1024
_PLACEHOLDER_BYTES = 16  # random: a client cannot put the same bytes in a topic name it asks for


def _partition_error(index: int, error_code: int) -> Any:
    return _PartitionData(
        partition_index=index,
        error_code=error_code,
        high_watermark=-1,
        last_stable_offset=-1,
        log_start_offset=-1,
        aborted_transactions=None,
        preferred_read_replica=-1,
        records=b"",
    )


def _read_partition(
    catalog: Catalog, topic: str, part: Any, budget: int, first: bool, committed: bool
) -> tuple[Any, FileSlice | None]:
    """One partition's answer and, when its records are to be sent from the file, their slice (the
    answer then carries a placeholder); ``budget`` is what the response may still carry."""
    index = part.partition
    for attempt in (0, 1):
        log = catalog.log(topic, index) if attempt == 0 else catalog.reopen(topic, index)
        if log is None:
            return _partition_error(index, protocol.UNKNOWN_TOPIC_OR_PARTITION), None
        try:
            return _read(log, part, budget, first, committed)
        except OffsetOutOfRangeError as e:
            logger.info("fetch of %s-%d: %s", topic, index, e)
            return _partition_error(index, protocol.OFFSET_OUT_OF_RANGE), None
        except SeglogError as e:  # a segment went away under the log (retention): open it again, once
            if attempt == 1:
                logger.warning("fetch of %s-%d at offset %d failed: %s", topic, index, part.fetch_offset, e)
                damaged = isinstance(e, CorruptRecordError)  # the batches before it were sent by earlier fetches
                error = protocol.CORRUPT_MESSAGE if damaged else protocol.KAFKA_STORAGE_ERROR
                return _partition_error(index, error), None
    raise AssertionError("unreachable")


def _read(log: Log, part: Any, budget: int, first: bool, committed: bool) -> tuple[Any, FileSlice | None]:
    bound = log.last_stable_offset if committed else log.high_watermark
    max_bytes = max(0, min(part.partition_max_bytes, budget))
    info = log.read(part.fetch_offset, max_bytes, max_offset=bound, min_one_message=first, as_slice=True)
    records: bytes = b""
    file_slice: FileSlice | None = None
    if isinstance(info.records, bytes):
        records = info.records
    elif len(info.records) >= SENDFILE_MIN_BYTES:
        records, file_slice = secrets.token_bytes(_PLACEHOLDER_BYTES), info.records
    else:
        records = info.records.read()
    aborted = None
    if committed:
        txns = log.collect_aborted_transactions(part.fetch_offset, bound) if len(info.records) else []
        aborted = [_ABORTED_TRANSACTION(producer_id=t.producer_id, first_offset=t.first_offset) for t in txns]
    answer = _PartitionData(
        partition_index=part.partition,
        error_code=protocol.NONE,
        high_watermark=log.high_watermark,
        last_stable_offset=log.last_stable_offset,
        log_start_offset=log.log_start_offset,
        aborted_transactions=aborted,
        preferred_read_replica=-1,
        records=records,
    )
    return answer, file_slice


def _fetch_once(catalog: Catalog, request: Any, version: int) -> tuple[Any, dict[bytes, FileSlice], int, bool]:
    """The response as things stand, the slices its placeholders stand for, the record bytes it
    carries, and whether a partition has an error."""
    committed = request.isolation_level == READ_COMMITTED
    budget = request.max_bytes if version >= 3 else INT32_MAX
    total = 0
    errors = False
    slices: dict[bytes, FileSlice] = {}
    topics = []
    for fetch_topic in request.topics:
        name = fetch_topic.topic
        known = True
        if version >= 13:
            name = catalog.topic_by_id(fetch_topic.topic_id) or ""
            known = bool(name)
        partitions = []
        for part in fetch_topic.partitions:
            if not known:
                data, file_slice = _partition_error(part.partition, protocol.UNKNOWN_TOPIC_ID), None
            else:
                data, file_slice = _read_partition(catalog, name, part, budget - total, total == 0, committed)
            errors |= data.error_code != protocol.NONE
            if file_slice is None:
                total += len(data.records)
            else:
                slices[data.records] = file_slice
                total += len(file_slice)
            partitions.append(data)
        topics.append(
            FetchResponse.FetchableTopicResponse(
                topic=name or "",
                topic_id=fetch_topic.topic_id if version >= 13 else _NO_TOPIC_ID,
                partitions=partitions,
            )
        )
    response = FetchResponse(
        version=version, throttle_time_ms=0, error_code=protocol.NONE, session_id=0, responses=topics
    )
    return response, slices, total, errors


async def fetch(catalog: Catalog, request: Any, version: int) -> Any:
    """Answer a Fetch request, waiting up to ``max_wait_ms`` for ``min_bytes`` of records.

    Records of at least :data:`SENDFILE_MIN_BYTES` stay in their segment file: the answer is then a
    :class:`~seglog.serve.protocol.Spliced` response holding the files open (duplicated descriptors,
    taken before anything else runs on the loop, so a re-opened or deleted segment cannot change them).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(0, request.max_wait_ms) / 1000
    while True:
        response, slices, total, errors = _fetch_once(catalog, request, version)
        remaining = deadline - loop.time()
        if total >= request.min_bytes or errors or remaining <= 0 or total > 0 and request.min_bytes <= 0:
            if not slices:
                return response
            regions = {p: protocol.FileRegion(s.open(), s.position, s.size, s.records.path) for p, s in slices.items()}
            return protocol.Spliced(response, regions)
        await catalog.wait_for_change(remaining)


def _list_offset(log: Log, timestamp: int, committed: bool) -> tuple[int, int]:
    """(timestamp, offset) answering a ListOffsets partition query; (-1, -1) when nothing matches."""
    if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
        return -1, log.log_start_offset
    if timestamp == LATEST_TIMESTAMP:
        return -1, log.last_stable_offset if committed else log.high_watermark
    if timestamp == MAX_TIMESTAMP:
        found = log.max_timestamp_and_offset()
        return (-1, -1) if found is None else (found.timestamp, found.offset)
    if timestamp < 0:
        return -1, -1
    found = log.fetch_offset_by_timestamp(timestamp)
    return (-1, -1) if found is None else (found.timestamp, found.offset)


def list_offsets(catalog: Catalog, request: Any, version: int) -> Any:
    """Answer a ListOffsets request (earliest, latest, max timestamp, or by timestamp)."""
    committed = request.isolation_level == READ_COMMITTED if version >= 2 else False
    topics = []
    for topic in request.topics:
        partitions = []
        for part in topic.partitions:
            answer = ListOffsetsResponse.ListOffsetsTopicResponse.ListOffsetsPartitionResponse
            error, timestamp, offset = protocol.NONE, -1, -1
            log = catalog.log(topic.name, part.partition_index)
            if log is None:
                error = protocol.UNKNOWN_TOPIC_OR_PARTITION
            else:
                try:
                    timestamp, offset = _list_offset(log, part.timestamp, committed)
                except SeglogError as e:
                    logger.warning("ListOffsets of %s-%d failed: %s", topic.name, part.partition_index, e)
                    error = protocol.KAFKA_STORAGE_ERROR
            partitions.append(
                answer(
                    partition_index=part.partition_index,
                    error_code=error,
                    timestamp=timestamp,
                    offset=offset,
                    leader_epoch=-1,
                )
            )
        topics.append(ListOffsetsResponse.ListOffsetsTopicResponse(name=topic.name, partitions=partitions))
    return ListOffsetsResponse(version=version, throttle_time_ms=0, topics=topics)


_WARM_UP_TOPIC = "warm-up"
_WARM_UP_TIMESTAMPS = (1_000, 3_000, 2_000)


def _warm_up_batch(codec: int) -> EncodedBatches:
    """One v2 batch of records with keys and headers at :data:`_WARM_UP_TIMESTAMPS`, over
    ``index.interval.bytes`` uncompressed, built by kafka-python rather than seglog's encoder: the
    server never appends, and compiling the encoder's kernels took ~8 of the ~20 CPU seconds of its
    first start."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=codec, is_transactional=False, producer_id=-1, producer_epoch=-1,
        base_sequence=-1, batch_size=INT32_MAX,
    )  # fmt: skip
    for offset, ts in enumerate(_WARM_UP_TIMESTAMPS):
        builder.append(offset, timestamp=ts, key=b"k", value=bytes(5_000), headers=[("h", b"v")])
    buffer = np.frombuffer(bytearray(builder.build()), np.uint8)
    last = len(_WARM_UP_TIMESTAMPS) - 1

    def one(value: int) -> np.ndarray:
        return np.array([value], np.int64)

    return EncodedBatches(
        buffer, one(0), one(buffer.size), one(0), one(last), one(max(_WARM_UP_TIMESTAMPS)), one(last), one(last + 1)
    )


def _warm_up_log(log_dir: str) -> None:
    """Two segments of ``warm-up-0`` in ``log_dir``: an uncompressed and a gzip batch of records with keys
    and headers, each over ``index.interval.bytes`` (offset and time index entries), all committed."""
    with LogManager(log_dir, Settings()) as manager:
        log = manager.get_or_create_log(_WARM_UP_TOPIC, 0)
        for codec in (DefaultRecordBatchBuilder.CODEC_NONE, DefaultRecordBatchBuilder.CODEC_GZIP):
            log.append_encoded(_warm_up_batch(codec))
            log.roll()
        log.update_high_watermark(log.log_end_offset)


def _warm_up_reads(catalog: Catalog) -> None:
    """A Fetch and a ListOffsets of every kind of :func:`_warm_up_log`'s partition, at both isolation levels."""
    part = FetchRequest.FetchTopic.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1)
    asked = [
        ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
            partition_index=0, current_leader_epoch=-1, timestamp=ts
        )
        for ts in (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, _WARM_UP_TIMESTAMPS[1])
    ]
    for isolation in (0, READ_COMMITTED):
        topics = [FetchRequest.FetchTopic(topic=_WARM_UP_TOPIC, partitions=[part])]
        _fetch_once(
            catalog,
            FetchRequest(
                version=12, max_wait_ms=0, min_bytes=0, max_bytes=INT32_MAX, isolation_level=isolation, topics=topics
            ),
            12,
        )
        offsets = [ListOffsetsRequest.ListOffsetsTopic(name=_WARM_UP_TOPIC, partitions=asked)]
        list_offsets(
            catalog, ListOffsetsRequest(version=7, replica_id=-1, isolation_level=isolation, topics=offsets), 7
        )


@functools.cache
def compile_kernels() -> None:
    """Answer a Fetch at both isolation levels and a ListOffsets of every kind once, over a small log
    written to a temporary directory, so that the engine's numba kernels these reads call are compiled
    (or loaded from numba's cache) now. Once per process.

    numba compiles a kernel at its first call: with no compiled copy on disk (a new install or
    checkout) that takes seconds, and on the server's one event loop every client waited meanwhile
    (8.6 s for a Metadata request on 2 cores) and group members lost their sessions. The server calls
    this before it listens (:meth:`~seglog.serve.server.Server.start`). The engine's own log lines
    about the temporary log are not shown; a failure (no room in the temporary directory) is said and
    the server starts all the same, compiling at the first reads.
    """
    started = time.monotonic()
    logging.disable(logging.INFO)  # the temporary log's opening and closing are not the served directory's
    try:
        with tempfile.TemporaryDirectory(prefix="seglog-serve-") as log_dir:
            _warm_up_log(log_dir)
            catalog = Catalog(log_dir, Settings())
            try:
                _warm_up_reads(catalog)
            finally:
                catalog.close()
    except (OSError, SeglogError) as e:
        logger.warning("cannot compile the engine's read kernels ahead (the first reads will): %s", e)
        return
    finally:
        logging.disable(logging.NOTSET)
    took = time.monotonic() - started
    logger.log(logging.INFO if took >= 1 else logging.DEBUG, "compiled the engine's read kernels in %.1f s", took)
