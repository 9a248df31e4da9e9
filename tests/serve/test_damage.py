"""A damaged partition is never silence to a Kafka client: a fetch gets the batches before the damage,
and the fetch at the damage gets ``CORRUPT_MESSAGE`` (``Log.read`` raises ``CorruptRecordError``)."""

from __future__ import annotations

import socket
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from indexer.config import load_settings
from indexer.log_manager import LogManager
from indexer.records.file_records import FileRecords
from tests.serve import clients
from tests.serve.conftest import ServeProcess, fetch_request
from tests.serve.test_bad_clients import _read_frame, _request

with warnings.catch_warnings():  # kafka-python 3 imports its protocol JSON with a deprecated API
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import errors as kafka_errors
    from kafka.protocol.consumer import FetchResponse

    from seglog.serve import protocol


def _fetch(server: ServeProcess, offset: int) -> Any:
    request = fetch_request(11, {0: 1 << 20}, max_bytes=1 << 20, fetch_offset=offset)
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(_request(request, 11))
        return FetchResponse.decode(_read_frame(sock), version=11, header=True).responses[0].partitions[0]


def test_a_fetch_at_a_damaged_size_field_gets_corrupt_message(
    serve: Callable[..., ServeProcess], tmp_path: Path
) -> None:
    log_dir = tmp_path / "logs"
    with LogManager(log_dir, load_settings()) as manager:
        log = manager.get_or_create_log("t", 0)
        for _ in range(3):
            log.append({"value": [b"x" * 100] * 100})
        log.update_high_watermark(log.log_end_offset)
    data = log_dir / "t-0" / "00000000000000000000.log"
    with FileRecords.open(data, mutable=False) as records:
        victim = list(records.batches())[1]
    with open(data, "r+b") as f:  # its size field now points past the end of the segment
        f.seek(victim.position + 8)
        f.write((0x7FFF0000).to_bytes(4, "big"))
    server = serve(log_dir)
    before = _fetch(server, 0)
    assert before.error_code == protocol.NONE and len(before.records) >= victim.position
    at = _fetch(server, victim.base_offset)
    assert at.error_code == protocol.CORRUPT_MESSAGE and at.records == b""
    assert f"cannot read offset {victim.base_offset} of t-0" in server.log_text()


def test_committed_records_missing_from_the_end_of_the_log_are_a_warning(
    serve: Callable[..., ServeProcess], tmp_path: Path
) -> None:
    """Damage in the last batch of a small active segment (no index entry after it) ends the log
    before the checkpointed high watermark: the partition looks empty to a consumer, as a broker's
    recovery would truncate it, but the server says so (it was silent)."""
    log_dir = tmp_path / "logs"
    with LogManager(log_dir, load_settings()) as manager:
        log = manager.get_or_create_log("t", 0)
        log.append({"value": [b"x"] * 20})
        log.update_high_watermark(log.log_end_offset)
    with open(log_dir / "t-0" / "00000000000000000000.log", "r+b") as f:
        f.write(b"\xff" * 12)  # the batch's base offset and size
    server = serve(log_dir)
    assert _fetch(server, 0).high_watermark == 0
    # in the engine's words, as the seglog source and the writers say it
    assert "partition t-0 in" in server.log_text()
    assert "below its checkpointed high watermark 20: committed records (offsets 0..19) are missing" in (
        server.log_text()
    )
    assert "served up to offset 0" in server.log_text()


def test_a_log_ending_below_its_recovery_point_is_a_warning(
    serve: Callable[..., ServeProcess], cut_below_recovery_point: Path
) -> None:
    """A broker's partition without a high watermark entry, cut below its recovery point: the server
    served its 236 records to ``kcat -C -e`` in silence; it still serves them, and now names the
    flushed offsets 236..436 that are gone."""
    server = serve(cut_below_recovery_point)
    got = clients.kcat(server.bootstrap, 0, ["items"], partition=0)
    assert len(got[("items", 0)]) == 236
    assert "ends at offset 236, below its checkpointed recovery point 437" in server.log_text()
    assert "(offsets 236..436) are missing" in server.log_text()


def test_a_partition_that_cannot_be_opened_is_a_warning_not_silence(
    serve: Callable[..., ServeProcess], tmp_path: Path
) -> None:
    """A partition the server cannot open for good (here its log start checkpoint is above its log
    end) was answered as unknown with only a DEBUG line: a consumer waited in silence. The server now
    warns, naming the partition and why, once."""
    log_dir = tmp_path / "logs"
    with LogManager(log_dir, load_settings()) as manager:
        log = manager.get_or_create_log("t", 0)
        log.append({"value": [b"x"] * 10})
        log.update_high_watermark(log.log_end_offset)
    (log_dir / "log-start-offset-checkpoint").write_text("0\n1\nt 0 99999\n")
    server = serve(log_dir)
    for _ in range(2):
        assert _fetch(server, 0).error_code != protocol.NONE
    warnings = [line for line in server.log_text().splitlines() if "log start offset 99999" in line]
    assert len(warnings) == 1 and "WARNING" in warnings[0] and "t-0" in warnings[0], server.log_text()


def _consume_until_error(bootstrap: str, timeout_s: float = 30) -> tuple[list[int], Exception | None]:
    """kafka-python's KafkaConsumer reading t-0 from the beginning: the offsets it got, and the error its
    poll raised (None if it raised none within ``timeout_s``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka import KafkaConsumer, TopicPartition
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, fetch_max_wait_ms=100)
    offsets: list[int] = []
    try:
        consumer.assign([TopicPartition("t", 0)])
        consumer.seek_to_beginning()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                polled = consumer.poll(timeout_ms=200)
            except Exception as e:  # noqa: BLE001 - what a client raises is the point
                return offsets, e
            offsets += [m.offset for records in polled.values() for m in records]
    finally:
        consumer.close()
    return offsets, None


def _three_segments(log_dir: Path) -> list[Path]:
    """t-0: offsets 0..29 committed in 3 segments of one batch of 10 records each; their .log files."""
    with LogManager(log_dir, load_settings(overrides={"segment.bytes": "4000"})) as manager:
        log = manager.get_or_create_log("t", 0)
        for i in range(3):
            log.append({"value": [b"%d" % (10 * i + j) for j in range(10)]})
            log.roll()
        log.update_high_watermark(log.log_end_offset)
    return sorted((log_dir / "t-0").glob("*.log"))[:3]


def test_a_consumer_stops_at_a_missing_segment(serve: Callable[..., ServeProcess], tmp_path: Path) -> None:
    """The middle segment's .log deleted by hand: the consumer got offsets 0..9 then 20..29, as if
    contiguous. It now gets 0..9, then its poll raises CORRUPT_MESSAGE, and the server warns naming the
    partition, the missing offsets and ``seglog recover``."""
    log_dir = tmp_path / "logs"
    _three_segments(log_dir)[1].unlink()
    server = serve(log_dir)
    offsets, error = _consume_until_error(server.bootstrap)
    assert offsets == list(range(10)) and isinstance(error, kafka_errors.CorruptRecordError), (offsets, error)
    warned = [line for line in server.log_text().splitlines() if "cannot read offsets 10..19 of t-0" in line]
    assert warned and "WARNING" in warned[0] and "seglog recover" in warned[0], server.log_text()


@pytest.mark.parametrize("kind", ["duplicate", "swap"])
def test_a_consumer_stops_at_a_batch_whose_offsets_go_backwards(
    serve: Callable[..., ServeProcess], tmp_path: Path, kind: str
) -> None:
    """A CRC-valid batch written twice, or two batches swapped, in a sealed segment: the server sent the
    stored bytes as they are, and the consumer, which drops records below its position, lost records
    in silence (swap: 20..29 then nothing of 10..19). It now gets the records in order up to that batch,
    then its poll raises CORRUPT_MESSAGE, and the server warns naming the file and the position."""
    log_dir = tmp_path / "logs"
    with LogManager(log_dir, load_settings()) as manager:
        log = manager.get_or_create_log("t", 0)
        for i in range(4):
            log.append({"value": [b"%d" % (10 * i + j) for j in range(10)]})
        log.roll()
        log.update_high_watermark(log.log_end_offset)
    data = log_dir / "t-0" / "00000000000000000000.log"
    with FileRecords.open(data, mutable=False) as records:
        spans = [(b.position, b.position + b.size_in_bytes) for b in records.batches()]
    raw = data.read_bytes()
    batch = [raw[start:end] for start, end in spans]
    order = [0, 1, 2, 1, 3] if kind == "duplicate" else [0, 2, 1, 3]
    data.write_bytes(b"".join(batch[i] for i in order))
    position = sum(len(batch[i]) for i in order[: 3 if kind == "duplicate" else 2])  # where it goes back
    server = serve(log_dir)
    offsets, error = _consume_until_error(server.bootstrap)
    assert offsets == list(range(10)) and isinstance(error, kafka_errors.CorruptRecordError), (offsets, error)
    warned = [line for line in server.log_text().splitlines() if "offsets go backwards" in line]
    assert warned and "WARNING" in warned[0] and str(data) in warned[0], server.log_text()
    assert f"position {position}" in warned[0], warned[0]
