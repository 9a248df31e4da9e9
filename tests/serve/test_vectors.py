"""Real consumers read the real broker-written directories of ``../shared/vectors/kafka`` (and legacy
v0/v1 message sets as a pre-0.11 broker stored them) through ``seglog serve`` exactly as kafka-python's
decoder reads the ``.log`` files: every record below the high watermark, control batches left out,
transactions served with ``read_committed``."""

from __future__ import annotations

import struct
import subprocess
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

from indexer.checkpoint import OffsetCheckpointFile
from indexer.file_names import REPLICATION_OFFSET_CHECKPOINT_FILE, parse_topic_partition_name
from tests.serve import clients
from tests.serve.clients import Record
from tests.serve.conftest import ServeProcess

with warnings.catch_warnings():  # kafka-python 3 imports its protocol JSON with a deprecated API
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.legacy_records import LegacyRecordBatchBuilder
    from kafka.record.memory_records import MemoryRecords

Expected = dict[tuple[str, int], list[Record]]

# (vector, partitions to consume, read_committed). multi-segment-3x: one of its 100k-record partitions.
VECTORS = {
    "gzip-large-records": (["items-0", "makeup-0", "quickstart-events-0", "tenitems-0", "test-0"], False),
    "mixed-codecs-epochs": (["lsx1-0"], False),
    "multi-segment-3x": (["invoice-2"], False),
    "snappy-headers": (["some-topic-0"], False),
    "transactions-commit": (["_confluent-ksql-default__command_topic-0", "locations-0", "CURRENTLOCATION-0"], True),
}


def decode_files(log_dir: Path, names: list[str]) -> Expected:
    """kafka-python's reading of the partitions' ``.log`` files, up to the checkpointed high watermark."""
    high_watermarks = OffsetCheckpointFile(log_dir / REPLICATION_OFFSET_CHECKPOINT_FILE).read()
    expected: Expected = {}
    for name in names:
        tp = parse_topic_partition_name(name)
        end = high_watermarks.get(tp)
        records = expected.setdefault(tp, [])
        for path in sorted((log_dir / name).glob("*.log")):
            batches = MemoryRecords(path.read_bytes())
            while (batch := batches.next_batch()) is not None:
                if batch.magic == 2 and batch.is_control_batch:
                    continue
                for r in batch:
                    if end is not None and r.offset >= end:
                        break
                    headers = tuple((k, bytes(v)) for k, v in r.headers) if batch.magic == 2 else ()
                    timestamp = -1 if r.timestamp is None else r.timestamp
                    records.append(Record(r.offset, r.key, r.value, headers, timestamp))
        assert records, name
    return expected


def _legacy_set(magic: int, codec: int, first_offset: int, count: int) -> bytes:
    """A message set as a 0.10 broker stored it (compressed wrappers carry their last absolute offset)."""
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 20)
    for i in range(count):
        offset = i if (magic == 1 and codec) else first_offset + i
        key = None if i % 4 == 2 else b"key-%d" % (first_offset + i)
        value = None if i % 5 == 3 else b"value-%d " % (first_offset + i) * (i % 3 + 1)
        builder.append(offset, timestamp=1_700_000_000_000 + 10 * i, key=key, value=value)
    data = bytearray(builder.build())
    if codec:
        data[0:8] = struct.pack(">q", first_offset + count - 1)
    return bytes(data)


@pytest.fixture(scope="module")
def legacy_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Topic ``legacy``: partition ``magic * 4 + codec`` holds v0/v1 message sets with codec none/gzip/snappy/lz4."""
    log_dir = tmp_path_factory.mktemp("legacy")
    for magic in (0, 1):
        for codec in (0, 1, 2, 3):
            directory = log_dir / f"legacy-{magic * 4 + codec}"
            directory.mkdir()
            sets = [_legacy_set(magic, codec, first, 7) for first in range(0, 35, 7)]
            (directory / "00000000000000000000.log").write_bytes(b"".join(sets))
    return log_dir


def _check(received: clients.Received, expected: Expected) -> None:
    assert set(received) == set(expected)
    for tp, records in expected.items():
        assert received[tp] == records, tp


def _consumers(committed: bool) -> dict[str, Callable[[str, Expected], clients.Received]]:
    def kcat(bootstrap: str, expected: Expected) -> clients.Received:
        received: clients.Received = {}
        for topic in sorted({t for t, _ in expected}):
            # One partition of a topic is read alone (as the other consumers' assign): kcat read all five
            # 100k-record partitions of multi-segment-3x's invoice to keep one, 80% of this test's time.
            partitions = [p for t, p in expected if t == topic]
            only = partitions[0] if len(partitions) == 1 else None
            got = clients.kcat(bootstrap, 0, [topic], partition=only, committed=committed)
            received.update({tp: r for tp, r in got.items() if tp in expected})
        return received

    return {
        "kafka-python": lambda b, e: clients.kafka_python(
            b, sum(map(len, e.values())), assign=sorted(e), committed=committed, linger_s=0.5
        ),
        "confluent": lambda b, e: clients.confluent(
            b, sum(map(len, e.values())), assign=sorted(e), committed=committed, linger_s=0.5
        ),
        "kcat": kcat,
    }


@pytest.mark.parametrize("consumer", ["kafka-python", "confluent", "kcat"])
def test_broker_written_vectors(
    serve: Callable[..., ServeProcess], vectors_dir: Path, tmp_path: Path, consumer: str
) -> None:
    for vector, (names, committed) in VECTORS.items():
        expected = decode_files(vectors_dir / vector, names)
        server = serve(vectors_dir / vector, "--group-offsets-dir", str(tmp_path))
        try:
            _check(_consumers(committed)[consumer](server.bootstrap, expected), expected)
        finally:
            server.stop()


def test_a_pattern_subscription_reads_topics_not_the_kraft_metadata_log(
    serve: Callable[..., ServeProcess], vectors_dir: Path, tmp_path: Path
) -> None:
    """``kcat -G group '^.*'`` over a KRaft broker's directory reads its topics: it read the 16,593
    records of KRaft's ``__cluster_metadata`` log too, which is not a topic (a broker never lists it)."""
    server = serve(vectors_dir / "transactions-commit", "--group-offsets-dir", str(tmp_path))
    done = subprocess.run(
        ["kcat", "-b", server.bootstrap, "-G", "pattern", "-o", "beginning", "-e", "-q", "-f", "%t\n", "^.*"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    topics = set(done.stdout.split())
    assert "locations" in topics and "__cluster_metadata" not in topics


@pytest.mark.parametrize("consumer", ["kafka-python", "confluent", "kcat"])
def test_legacy_message_sets(serve: Callable[..., ServeProcess], legacy_dir: Path, consumer: str) -> None:
    names = sorted(p.name for p in legacy_dir.iterdir())
    expected = decode_files(legacy_dir, names)
    server = serve(legacy_dir)
    _check(_consumers(False)[consumer](server.bootstrap, expected), expected)
