"""The first reads of a new server: nothing is compiled while clients wait for answers."""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from tests.serve.conftest import ServeProcess

with warnings.catch_warnings():  # kafka-python 3 imports its protocol JSON with a deprecated API
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka

TOPIC = "lsx1"  # mixed-codecs-epochs: gzip and uncompressed batches, headers, 14 records
RECORDS = 14


def _compiled(cache: Path) -> list[str]:
    """The kernels numba compiled into ``cache`` (one file per kernel and signature)."""
    return sorted(p.name for p in cache.rglob("*.nbc"))


def test_the_engine_kernels_are_compiled_before_the_server_listens(
    serve: Callable[..., ServeProcess], vectors_dir: Path, tmp_path: Path
) -> None:
    """numba compiles a kernel at its first call, for seconds when no compiled copy is on disk (a new
    install or checkout: CI's every run). The server compiled the kernels of its reads at the first
    Fetch and ListOffsets, on its one event loop: every client waited (8.6 s for a Metadata request on
    2 cores), and a consumer group member with ``session.timeout.ms=6000`` lost its session and its
    partitions to a rebalance. The server now answers each read once over a small log of its own
    before it listens, so with an empty numba cache (``NUMBA_CACHE_DIR``) nothing is compiled once it
    serves: a group member, an admin client's offset queries and kafka-python's read_committed
    consumer leave the cache as the server found it when it started listening."""
    cache = tmp_path / "numba-cache"
    cache.mkdir()
    offsets_dir = tmp_path / "offsets"
    offsets_dir.mkdir()
    server = serve(
        vectors_dir / "mixed-codecs-epochs",
        "--group-offsets-dir",
        str(offsets_dir),
        env={"NUMBA_CACHE_DIR": str(cache)},
    )
    before = _compiled(cache)

    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    tp = TopicPartition(TOPIC, 0)
    specs = [OffsetSpec.earliest(), OffsetSpec.latest(), OffsetSpec.max_timestamp(), OffsetSpec.for_timestamp(0)]
    for spec in specs:
        for future in admin.list_offsets({tp: spec}, request_timeout=60).values():
            assert future.result(60).offset >= 0

    revoked: list[list[int]] = []
    member = Consumer(
        {
            "bootstrap.servers": server.bootstrap,
            "group.id": "first",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
        }
    )
    member.subscribe([TOPIC], on_revoke=lambda _, parts: revoked.append([p.partition for p in parts]))
    read = 0
    deadline = time.monotonic() + 60
    while read < RECORDS and time.monotonic() < deadline:
        message = member.poll(0.5)
        if message is not None:
            assert not message.error(), message.error()
            read += 1
    member.commit(asynchronous=False)
    member.close()
    assert read == RECORDS

    other = kafka.KafkaConsumer(bootstrap_servers=server.bootstrap, isolation_level="read_committed")
    try:
        assert other.offsets_for_times({kafka.TopicPartition(TOPIC, 0): 0})[kafka.TopicPartition(TOPIC, 0)].offset == 0
        other.assign([kafka.TopicPartition(TOPIC, 0)])
        other.seek_to_beginning()
        assert sum(len(batch) for batch in other.poll(timeout_ms=30_000).values()) > 0
    finally:
        other.close()

    assert _compiled(cache) == before
    assert revoked == [[0]]  # at close only
    assert "session expired" not in server.log_text()


def test_the_server_compiles_each_read_kernel_once_and_none_of_the_writer(
    serve: Callable[..., ServeProcess], vectors_dir: Path, tmp_path: Path
) -> None:
    """With an empty numba cache the server took 20 CPU seconds to start on 2 cores: its warm-up wrote
    its small log with seglog's encoder, compiling the writer's kernels (plan_batches, write_batches),
    which a read-only server never calls, and the index search and record parsing kernels were
    compiled once per literal argument value (``_binary_search`` twice, ``_read_bytes_field`` four
    times). Now the warm-up log is built by kafka-python and every kernel is compiled once: each has
    one entry (``.1.nbc``) in the cache once the server listens."""
    cache = tmp_path / "numba-cache"
    cache.mkdir()
    serve(vectors_dir / "mixed-codecs-epochs", env={"NUMBA_CACHE_DIR": str(cache)})
    compiled = _compiled(cache)
    assert any("parse_records" in name for name in compiled)
    assert [name for name in compiled if not name.endswith(".1.nbc")] == []
    assert [name for name in compiled if "plan_batches" in name or "write_batches" in name] == []
