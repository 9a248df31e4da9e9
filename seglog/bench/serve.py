"""`seglog bench serve`: consumers reading through `seglog serve`, against the physical limit.

Figures (the server runs as a `seglog serve` subprocess on a free loopback port; each consumer and the
baseline run side by side in this process):

* consume MB/s with confluent-kafka (librdkafka) and with kafka-python: one partition of 1 KiB
  records, 512 MiB (``--quick`` 64 MiB) of `.log` bytes, from the beginning to the end, vs
  `sendfile` of the same `.log` files to a loopback socket drained by a thread (the bytes a
  broker would send, with no protocol: the physical limit). Goal: confluent-kafka >= 0.5x, the
  median of five rounds, each a `sendfile` baseline then a consumer (the rounds are in the JSON
  details). The consumers fetch 16 MiB at a time (``max.partition.fetch.bytes``; an eighth of the data
  in smaller runs) and take up to 1,000 messages a call (``consume(n)``). The clock starts at each
  consumer's first record, and the records of its first fetch (already received then) are left out
  of the count: its start-up (connection, metadata, offsets, first fetch) is reported apart, as
  ``startup_s`` in the JSON details.
* the same confluent-kafka consume loop over the same records already queued in librdkafka (no server
  in the timed part): what the client's per-record cost allows, the ceiling of the first figure.
* consume MB/s of one confluent-kafka consumer of 4 partitions holding the same amount of data,
  through ``seglog serve --brokers 4`` (one broker node per partition, fetched at once) against
  ``--brokers 1``, measured between the consumer's receipt of 25% and of 95% of the records; the
  median of five interleaved rounds (no goal).
* end-to-end latency, p50 and p99: from the start of a commit of one record (append,
  `update_high_watermark`, the checkpoint the server follows) to its receipt by a confluent-kafka
  consumer tailing the partition (500 commits, ``--quick`` 100, 10-30 ms apart at random). The
  writer's own time for the commit (its fsyncs) is in it, and in the JSON details. Baseline: the
  server's checkpoint poll interval while a fetch waits.

examples:
  seglog bench serve --quick
  seglog bench serve --json bench-serve.json
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import socket
import statistics
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from indexer.config import load_settings
from indexer.log_manager import LogManager
from indexer.records.framing import whole_entries
from seglog.bench.report import (
    BenchResult,
    add_suite_arguments,
    latency_result,
    percentiles,
    publish,
    scratch_directory,
)
from seglog.bench.report import throughput_result as throughput
from seglog.commands.serve import listening_port, loopback_command
from seglog.serve.catalog import WAITING_POLL_S

logger = logging.getLogger(__name__)

MiB = 1024 * 1024
RECORD_BYTES = 1024
PARTITION_FETCH_BYTES = 16 * MiB  # max.partition.fetch.bytes of both consumers (at most an eighth of the data)
ROUNDS = 5  # of the confluent-kafka figure and its baseline, interleaved; the medians are reported
APPEND_RECORDS = 50_000
POLL_MS = 10
PARTITIONS = 4  # of the --brokers figure


# Options of ``seglog bench serve``: the common ones.
add_arguments = functools.partial(
    add_suite_arguments,
    quick="64 MiB to consume, 100 latency samples",
    scratch="scratch directory (default: a temporary directory, removed afterwards)",
)


class _Server:
    """`seglog serve` in a subprocess, presenting ``brokers`` broker nodes."""

    def __init__(self, log_dir: Path, brokers: int = 1) -> None:
        self._stderr = tempfile.TemporaryFile()
        command = loopback_command(log_dir, "--poll-ms", str(POLL_MS), "--brokers", str(brokers))
        self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=self._stderr)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self.proc.poll() is None:
            self._stderr.seek(0)
            port = listening_port(self._stderr.read().decode(errors="replace"))
            if port is not None:
                self.bootstrap = f"127.0.0.1:{port}"
                return
            time.sleep(0.05)
        self.close()
        raise RuntimeError("seglog serve did not start")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)
        self._stderr.close()


@dataclass(frozen=True, slots=True)
class _Workload:
    """What the consumers read: ``records`` in partition ``bench-0``, fetched ``fetch_bytes`` at a time
    (``max.partition.fetch.bytes``), the first fetch from the beginning holding ``first_fetch`` of them."""

    bootstrap: str
    records: int
    fetch_bytes: int
    first_fetch: int


def _write(log_dir: Path, total_bytes: int, partitions: int = 1) -> tuple[int, int, int]:
    """``total_bytes`` of 1 KiB records in topic ``bench``, spread over ``partitions``; returns the record
    count, the consumers' ``max.partition.fetch.bytes`` and how many records their first fetch of
    partition 0 from the beginning holds (the whole batches in its first ``max.partition.fetch.bytes``,
    what the server sends)."""
    fetch_bytes = min(PARTITION_FETCH_BYTES, total_bytes // 8)
    rng = np.random.default_rng(7)
    values = [rng.bytes(RECORD_BYTES) for _ in range(256)]
    records = 0
    with LogManager(log_dir, load_settings()) as manager:
        for partition in range(partitions):
            log = manager.get_or_create_log("bench", partition)
            while log.size_in_bytes < total_bytes // partitions:
                count = min(APPEND_RECORDS, (total_bytes // partitions - log.size_in_bytes) // RECORD_BYTES + 1)
                log.append({"value": [values[i % 256] for i in range(count)]})
                records += count
            log.update_high_watermark(log.log_end_offset)
        manager.checkpoint_high_watermarks()
        first = manager.get_or_create_log("bench", 0).read(0, fetch_bytes).records
    assert isinstance(first, bytes)  # read without as_slice
    return records, fetch_bytes, whole_entries(first)[1]


def _sendfile_baseline(paths: list[Path]) -> float:
    """Seconds to sendfile every file to a loopback socket drained by a thread."""
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    peer, _ = server.accept()

    def drain() -> None:
        buf = bytearray(4 * MiB)
        while peer.recv_into(buf):
            pass

    reader = threading.Thread(target=drain)
    reader.start()
    start = time.perf_counter()
    for path in paths:
        with path.open("rb") as f:
            offset, size = 0, os.fstat(f.fileno()).st_size
            while offset < size:
                offset += os.sendfile(client.fileno(), f.fileno(), offset, size - offset)
    client.close()
    reader.join()
    elapsed = time.perf_counter() - start
    peer.close()
    server.close()
    return elapsed


@dataclass(frozen=True, slots=True)
class _Consumed:
    """One consumer's run: seconds from its creation to its first record (connection, metadata,
    offsets, first fetch), then seconds for the remaining records."""

    startup_s: float
    rest_s: float
    rest_fraction: float  # of the records (and, records being equal, of the bytes) in ``rest_s``

    @classmethod
    def timed(cls, start: float, first: float, end: float, records: int, first_fetch: int) -> _Consumed:
        """A run from ``start``, its first record at ``first`` and its last at ``end``: the records of the
        first fetch arrived before the clock started (``first``), so they are not in the timed part."""
        return cls(first - start, end - first, (records - first_fetch) / records)

    def mb_per_s(self, size: int) -> float:
        return size * self.rest_fraction / MiB / self.rest_s


def _confluent_config(workload: _Workload, **overrides: object) -> dict[str, object]:
    return {
        "bootstrap.servers": workload.bootstrap,
        "group.id": "bench",
        "enable.auto.commit": False,
        "fetch.max.bytes": 64 * MiB,
        "max.partition.fetch.bytes": workload.fetch_bytes,
        # librdkafka stops fetching for fetch.queue.backoff.ms (default 1 s) whenever its queue is full
        # (queued.max.messages.kbytes, 64 MiB): with a server faster than the application, a bounded run
        # would mostly measure those pauses.
        "fetch.queue.backoff.ms": 10,
        **overrides,
    }


def _batch(remaining: int) -> int:
    """How many messages one ``consume`` call asks for: never more than remain, since ``consume(n, t)``
    waits the whole timeout for ``n`` messages that will not come. 1,000 a call: a list of 10,000
    messages costs ~1.4 us a record here against ~1 us (the collector runs over each longer list)."""
    return min(1_000, remaining)


def _count(messages: list[Any]) -> int:
    return sum(1 for m in messages if not m.error())


def _confluent(workload: _Workload) -> _Consumed:
    import confluent_kafka

    records = workload.records
    start = time.perf_counter()
    consumer = confluent_kafka.Consumer(_confluent_config(workload))
    consumer.assign([confluent_kafka.TopicPartition("bench", 0, confluent_kafka.OFFSET_BEGINNING)])
    got = 0
    while got == 0:
        got += _count(consumer.consume(1, 1.0))
    first = time.perf_counter()
    while got < records:
        got += _count(consumer.consume(_batch(records - got), 1.0))
    end = time.perf_counter()
    consumer.close()
    return _Consumed.timed(start, first, end, records, workload.first_fetch)


def _confluent_queued(workload: _Workload) -> _Consumed:
    """The same consume loop over records librdkafka already holds (its queue sized for all of them,
    filled before the clock starts): the client's own per-record cost, no server in it. The records
    taken while waiting for the queue to fill are not in the timed part."""
    import confluent_kafka

    records = workload.records
    queued: list[int] = []

    def stats(text: str) -> None:
        partitions = json.loads(text)["topics"].get("bench", {}).get("partitions", {})
        queued.append(int(partitions.get("0", {}).get("fetchq_cnt", 0)))

    consumer = confluent_kafka.Consumer(
        _confluent_config(
            workload,
            **{
                "queued.max.messages.kbytes": 2_097_151,
                "queued.min.messages": 10_000_000,
                "statistics.interval.ms": 50,
                "stats_cb": stats,
            },
        )
    )
    begin = time.perf_counter()
    consumer.assign([confluent_kafka.TopicPartition("bench", 0, confluent_kafka.OFFSET_BEGINNING)])
    got = _count(consumer.consume(1, 10.0))
    deadline = time.monotonic() + 120
    while (not queued or queued[-1] < records - got) and time.monotonic() < deadline:
        time.sleep(0.05)  # the fetcher fills the queue meanwhile
        message = consumer.poll(0)  # serves the stats callback (and takes one message)
        got += message is not None and not message.error()
    start, timed = time.perf_counter(), records - got
    while got < records:
        got += _count(consumer.consume(_batch(records - got), 1.0))
    end = time.perf_counter()
    consumer.close()
    return _Consumed(start - begin, end - start, timed / records)


def _kafka_python(workload: _Workload) -> _Consumed:
    from kafka import KafkaConsumer, TopicPartition

    records = workload.records
    start = time.perf_counter()
    consumer = KafkaConsumer(
        bootstrap_servers=workload.bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        max_partition_fetch_bytes=workload.fetch_bytes,
        fetch_max_bytes=64 * MiB,
    )
    consumer.assign([TopicPartition("bench", 0)])
    got = 0
    while got == 0:
        got += sum(len(v) for v in consumer.poll(timeout_ms=1000, max_records=1).values())
    first = time.perf_counter()
    while got < records:
        got += sum(len(v) for v in consumer.poll(timeout_ms=1000, max_records=100_000).values())
    end = time.perf_counter()
    consumer.close()
    return _Consumed.timed(start, first, end, records, workload.first_fetch)


def bench_throughput(log_dir: Path, total_bytes: int) -> list[BenchResult]:
    records, fetch_bytes, first_fetch = _write(log_dir, total_bytes)
    paths = sorted((log_dir / "bench-0").glob("*.log"))
    size = sum(p.stat().st_size for p in paths)
    server = _Server(log_dir)
    workload = _Workload(server.bootstrap, records, fetch_bytes, first_fetch)
    try:
        limits, rounds = [], []
        for _ in range(ROUNDS):  # interleaved: a busy moment of the machine falls on both sides alike
            limits.append(size / MiB / _sendfile_baseline(paths))
            rounds.append(_confluent(workload))
        queued = _confluent_queued(workload)
        kafka_python = _kafka_python(workload)
    finally:
        server.close()
    limit = statistics.median(limits)
    confluent = sorted(rounds, key=lambda r: r.mb_per_s(size))[ROUNDS // 2]
    details = {
        "bytes": size,
        "records": records,
        "max_partition_fetch_bytes": fetch_bytes,
        "first_fetch_records": first_fetch,
        "rounds_limit_mb_per_s": [round(x, 1) for x in limits],
        "rounds_confluent_mb_per_s": [round(r.mb_per_s(size), 1) for r in rounds],
    }
    return [
        throughput(
            "consume via seglog serve (confluent-kafka)",
            "MB/s",
            confluent.mb_per_s(size),
            "sendfile of the .log files",
            limit,
            0.5,
            startup_s=confluent.startup_s,
            **details,
        ),
        throughput(
            "confluent-kafka consume loop, records already queued",
            "MB/s",
            queued.mb_per_s(size),
            "sendfile of the .log files",
            limit,
            None,
            **details,
        ),
        throughput(
            "consume via seglog serve (kafka-python)",
            "MB/s",
            kafka_python.mb_per_s(size),
            "sendfile of the .log files",
            limit,
            None,
            startup_s=kafka_python.startup_s,
            **details,
        ),
    ]


def _steady_mb_per_s(workload: _Workload, size: int, partitions: int) -> float:
    """MB/s of a confluent-kafka consumer of every partition, between its receipt of 25% and of 95% of
    the records (the steady part: its start-up and first fetches before, the last partial fetches after)."""
    import confluent_kafka

    consumer = confluent_kafka.Consumer(_confluent_config(workload))
    consumer.assign(
        [confluent_kafka.TopicPartition("bench", p, confluent_kafka.OFFSET_BEGINNING) for p in range(partitions)]
    )
    records, got = workload.records, 0
    marks = {records // 4: 0.0, records * 95 // 100: 0.0}
    for mark in marks:
        while got < mark:
            got += _count(consumer.consume(_batch(records - got), 1.0))
        marks[mark] = time.perf_counter()
    consumer.close()
    (first, start), (last, end) = marks.items()
    return size * (last - first) / records / MiB / (end - start)


def bench_brokers(log_dir: Path, total_bytes: int) -> BenchResult:
    """A consumer of :data:`PARTITIONS` partitions through ``seglog serve --brokers`` 1 and
    :data:`PARTITIONS` (one node per partition), side by side, the rounds interleaved."""
    records, fetch_bytes, _ = _write(log_dir, total_bytes, PARTITIONS)
    size = sum(p.stat().st_size for p in log_dir.glob("bench-*/*.log"))
    servers = {brokers: _Server(log_dir, brokers) for brokers in (1, PARTITIONS)}
    rates: dict[int, list[float]] = {brokers: [] for brokers in servers}
    try:
        for _ in range(ROUNDS):
            for brokers, server in servers.items():
                workload = _Workload(server.bootstrap, records, fetch_bytes, 0)
                rates[brokers].append(_steady_mb_per_s(workload, size, PARTITIONS))
    finally:
        for server in servers.values():
            server.close()
    return throughput(
        f"consume {PARTITIONS} partitions via seglog serve --brokers {PARTITIONS} (confluent-kafka)",
        "MB/s",
        statistics.median(rates[PARTITIONS]),
        "the same with --brokers 1",
        statistics.median(rates[1]),
        None,
        bytes=size,
        records=records,
        **{f"rounds_brokers_{brokers}_mb_per_s": [round(x, 1) for x in r] for brokers, r in rates.items()},
    )


def bench_latency(log_dir: Path, samples: int) -> list[BenchResult]:
    import confluent_kafka

    with LogManager(log_dir, load_settings()) as manager:
        log = manager.get_or_create_log("tail", 0)
        log.append({"value": [b"start"]})
        log.update_high_watermark(log.log_end_offset)
        manager.checkpoint_high_watermarks()
        server = _Server(log_dir)
        received: dict[int, float] = {}
        stop = threading.Event()

        def consume() -> None:
            consumer = confluent_kafka.Consumer(
                {
                    "bootstrap.servers": server.bootstrap,
                    "group.id": "tail",
                    "enable.auto.commit": False,
                    "fetch.wait.max.ms": 500,
                    "fetch.error.backoff.ms": 0,
                }
            )
            consumer.assign([confluent_kafka.TopicPartition("tail", 0, 1)])
            while not stop.is_set():
                m = consumer.poll(0.05)
                offset = None if m is None or m.error() else m.offset()
                if offset is not None:
                    received[offset] = time.perf_counter()
            consumer.close()

        reader = threading.Thread(target=consume)
        reader.start()
        committed: dict[int, float] = {}
        publish_ms: list[float] = []  # the writer's append and checkpoint (fsyncs), inside the figure
        # Random gaps: a fixed one can lock in phase with the server's poll and show a lucky or unlucky delay.
        gaps = np.random.default_rng(11).uniform(0.01, 0.03, samples)
        try:
            time.sleep(2.0)  # the consumer connects and starts polling
            for _ in range(samples):
                start = time.perf_counter()
                offset = log.append({"value": [b"x" * 100]}).first_offset
                log.update_high_watermark(log.log_end_offset)
                manager.checkpoint_high_watermarks()  # readers see it once renamed in place, before this returns
                committed[offset] = start
                publish_ms.append((time.perf_counter() - start) * 1000)
                time.sleep(gaps[len(publish_ms) - 1])
            deadline = time.monotonic() + 10
            while len(received) < samples and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            stop.set()
            reader.join()
            server.close()
    latencies = [(received[o] - t) * 1000 for o, t in committed.items() if o in received]
    p = percentiles(latencies)
    return [
        latency_result(
            f"commit to consumer receipt {q}",
            "ms",
            p[q],
            "checkpoint poll while a fetch waits",
            WAITING_POLL_S * 1000,
            None,
            "ratio>=",
            samples=len(latencies),
            lost=samples - len(latencies),
            writer_publish_ms_p50=percentiles(publish_ms)["p50"],
            **p,
        )
        for q in ("p50", "p99")
    ]


def run(args: argparse.Namespace) -> int:
    """Run the figures, print the table, write the JSON; 0 even when a goal is missed."""
    if args.scale <= 0:
        raise ValueError(f"--scale must be > 0, got {args.scale}")
    total = int((64 if args.quick else 512) * MiB * args.scale)
    samples = max(10, int((100 if args.quick else 500) * min(1.0, args.scale)))
    removed = ["throughput", "brokers", "latency"]
    with scratch_directory(args.dir, "seglog-bench-serve-", removed=removed) as scratch:
        results = [
            *bench_throughput(scratch / "throughput", total),
            bench_brokers(scratch / "brokers", total),
            *bench_latency(scratch / "latency", samples),
        ]
    publish(results, json_path=args.json, suite="serve", quick=args.quick)
    return 0
