"""Fetch responses on a raw socket carry the stored bytes exactly, whichever way they are sent (read
and written with the response, or from the segment file with ``sendfile`` between pieces that
kafka-python encoded), at a non-flexible and a flexible Fetch version, several partitions in one
response."""

from __future__ import annotations

import os
import socket
import struct
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

from indexer.config import load_settings
from indexer.log_manager import LogManager
from tests.serve.conftest import ServeProcess, fetch_request

with warnings.catch_warnings():  # kafka-python 3 imports its protocol JSON with a deprecated API
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.consumer import FetchResponse
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse

    from seglog.serve.fetch import SENDFILE_MIN_BYTES

# partition -> records appended: 0 and 2 well over SENDFILE_MIN_BYTES, 1 under it
_PARTITIONS = {0: 3000, 1: 3, 2: 1500}


def _exchange(sock: socket.socket, message: object, version: int) -> bytes:
    message.API_VERSION = version  # type: ignore[attr-defined]
    message.with_header(correlation_id=version, client_id="raw")  # type: ignore[attr-defined]
    sock.sendall(bytes(message.encode(header=True, framed=True)))  # type: ignore[attr-defined]
    (size,) = struct.unpack(">i", _read_exactly(sock, 4))
    return _read_exactly(sock, size)


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    parts, got = [], 0
    while got < n:
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            raise ConnectionError("closed")
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


@pytest.mark.parametrize("version", [11, 17])
def test_fetch_carries_the_stored_bytes(serve: Callable[..., ServeProcess], tmp_path: Path, version: int) -> None:
    log_dir = tmp_path / "logs"
    with LogManager(log_dir, load_settings()) as manager:
        for partition, count in _PARTITIONS.items():
            log = manager.get_or_create_log("t", partition)
            for i in range(count // 3 or 1):
                log.append({"value": [bytes([i % 251]) * 1000] * min(count, 3)})
            log.update_high_watermark(log.log_end_offset)
    stored = {p: (log_dir / f"t-{p}" / "00000000000000000000.log").read_bytes() for p in _PARTITIONS}
    assert len(stored[0]) > 2 * SENDFILE_MIN_BYTES > len(stored[1])
    server = serve(log_dir)
    with socket.create_connection(("127.0.0.1", server.port), timeout=20) as sock:
        metadata = MetadataResponse.decode(
            _exchange(sock, MetadataRequest(version=12, topics=None), 12), version=12, header=True
        )
        topic_id = metadata.topics[0].topic_id
        # partition 0 is cut by its limit (mid-batch), 1 and 2 come whole
        limits = {0: len(stored[0]) // 2 + 7, 1: 1 << 20, 2: 1 << 22}
        fetch = fetch_request(version, limits, max_bytes=1 << 24, topic_id=topic_id)
        response = FetchResponse.decode(_exchange(sock, fetch, version), version=version, header=True)
    assert response.header.correlation_id == version
    (topic,) = response.responses
    got = {p.partition_index: bytes(p.records) for p in topic.partitions}
    assert got == {p: stored[p][: min(limits[p], len(stored[p]))] for p in _PARTITIONS}
    assert all(p.error_code == 0 and p.high_watermark == _PARTITIONS[p.partition_index] for p in topic.partitions)


def test_a_slice_opened_for_sending_outlives_its_segment(tmp_path: Path) -> None:
    """What a slow client's response is sent from stays the read bytes after the log is closed and the
    segment deleted (retention, or the catalog re-opening the partition meanwhile)."""
    with LogManager(tmp_path, load_settings()) as manager:
        log = manager.get_or_create_log("t", 0)
        log.append({"value": [b"v" * 1000] * 100})
        log.update_high_watermark(log.log_end_offset)
        expected = log.read(0, 1 << 20).records
        file_slice = log.read(0, 1 << 20, as_slice=True).records
        assert not isinstance(file_slice, bytes) and len(file_slice) == len(expected) and file_slice.read() == expected
        opened = file_slice.open()
    for path in (tmp_path / "t-0").glob("*.log"):
        path.unlink()
    with opened:
        assert os.pread(opened.fileno(), len(expected) + 10, file_slice.position) == expected
