"""Real Kafka consumers, none written here, reading from ``seglog serve``: kafka-python, kcat
(librdkafka) and confluent-kafka. Each returns ``{(topic, partition): [Record, ...]}`` in receipt
order and stops once it has ``expected`` records (or after ``timeout_s``, so a test fails rather
than hangs), then keeps reading for ``linger_s`` more, so records beyond those expected would
show up."""

from __future__ import annotations

import subprocess
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

import confluent_kafka

with warnings.catch_warnings():  # kafka-python 3 imports its protocol JSON with a deprecated API
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, TopicPartition

Received = dict[tuple[str, int], list["Record"]]


class Record(NamedTuple):
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int


def _add(out: Received, topic: str, partition: int, record: Record) -> None:
    out.setdefault((topic, partition), []).append(record)


def _count(out: Received) -> int:
    return sum(len(v) for v in out.values())


class _Until:
    """Read until ``expected`` records arrived and ``linger_s`` more passed, or ``timeout_s``."""

    def __init__(self, expected: int, timeout_s: float, linger_s: float) -> None:
        self.expected, self.linger_s = expected, linger_s
        self.deadline = time.monotonic() + timeout_s
        self.linger_until: float | None = None

    def more(self, out: Received) -> bool:
        now = time.monotonic()
        if self.linger_until is None and _count(out) >= self.expected:
            self.linger_until = now + self.linger_s
        return now < self.deadline and (self.linger_until is None or now < self.linger_until)


def _consume(
    consumer: Any,
    partitions: list[Any] | None,
    topics: list[str] | None,
    poll: Callable[[], Iterable[tuple[str, int, Record]]],
    until: _Until,
) -> Received:
    """Assign ``consumer`` its ``partitions`` (or, with none, subscribe it to ``topics``), then gather the
    ``(topic, partition, record)`` that each ``poll()`` returns until ``until`` says to stop."""
    if partitions is not None:
        consumer.assign(partitions)
    else:
        consumer.subscribe(topics or [])
    out: Received = {}
    while until.more(out):
        for topic, partition, record in poll():
            _add(out, topic, partition, record)
    return out


def kafka_python(
    bootstrap: str,
    expected: int,
    *,
    assign: list[tuple[str, int]] | None = None,
    topics: list[str] | None = None,
    group: str | None = None,
    committed: bool = False,
    timeout_s: float = 60,
    linger_s: float = 1.0,
) -> Received:
    """kafka-python's KafkaConsumer: assigned partitions, or subscribed in ``group``."""
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        isolation_level="read_committed" if committed else "read_uncommitted",
        fetch_max_wait_ms=100,
    )

    def poll() -> list[tuple[str, int, Record]]:
        return [
            (
                m.topic,
                m.partition,
                Record(
                    m.offset,
                    m.key,
                    m.value,
                    tuple((k, bytes(v)) for k, v in m.headers),
                    -1 if m.timestamp is None else m.timestamp,
                ),
            )
            for batch in consumer.poll(timeout_ms=200).values()
            for m in batch
        ]

    partitions = None if assign is None else [TopicPartition(t, p) for t, p in assign]
    try:
        out = _consume(consumer, partitions, topics, poll, _Until(expected, timeout_s, linger_s))
        if group is not None:
            consumer.commit()
    finally:
        consumer.close()
    return out


def confluent(
    bootstrap: str,
    expected: int,
    *,
    assign: list[tuple[str, int]] | None = None,
    topics: list[str] | None = None,
    group: str = "confluent",
    committed: bool = False,
    timeout_s: float = 60,
    linger_s: float = 1.0,
    extra: Mapping[str, object] | None = None,
) -> Received:
    """confluent-kafka's Consumer (librdkafka): assigned partitions from the beginning, or subscribed."""
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "fetch.wait.max.ms": 100,
        "isolation.level": "read_committed" if committed else "read_uncommitted",
        **(extra or {}),
    }
    consumer = confluent_kafka.Consumer(conf)

    def poll() -> list[tuple[str, int, Record]]:
        m = consumer.poll(0.2)
        if m is None:
            return []
        if m.error():
            if m.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                return []
            raise AssertionError(f"confluent-kafka error: {m.error()}")
        headers = tuple((k, bytes(v)) for k, v in (m.headers() or []))
        kind, timestamp = m.timestamp()
        timestamp = -1 if kind == confluent_kafka.TIMESTAMP_NOT_AVAILABLE else timestamp
        return [(m.topic(), m.partition(), Record(m.offset(), m.key(), m.value(), headers, timestamp))]

    beginning = confluent_kafka.OFFSET_BEGINNING
    partitions = None if assign is None else [confluent_kafka.TopicPartition(t, p, beginning) for t, p in assign]
    try:
        out = _consume(consumer, partitions, topics, poll, _Until(expected, timeout_s, linger_s))
        if assign is None:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return out


def kcat(
    bootstrap: str,
    expected: int,
    topics: list[str],
    *,
    group: str | None = None,
    partition: int | None = None,
    committed: bool = False,
    timeout_s: float = 60,
) -> Received:
    """``kcat -C -e`` (every partition of one topic, or only ``partition``, from the beginning to the end) or
    ``kcat -G group -e`` (until every assigned partition is at its end); ``expected`` is not needed: kcat
    stops by itself.

        Each record is printed as a text line with the key and value lengths (-1 for null) followed by the
        raw bytes, so binary data and null versus empty survive; headers come as kcat's ``n=v`` CSV.
    """
    fmt = r"@@ %t %p %o %T %K %S %h\n%k%s\n"
    args = [
        "kcat",
        "-b",
        bootstrap,
        "-q",
        "-u",
        "-f",
        fmt,
        "-o",
        "beginning",
        "-X",
        "fetch.wait.max.ms=100",
        "-X",
        f"isolation.level={'read_committed' if committed else 'read_uncommitted'}",
    ]
    if group is None:
        assert len(topics) == 1
        args += ["-C", "-e", "-t", topics[0], *([] if partition is None else ["-p", str(partition)])]
    else:
        args += ["-e", "-G", group, *topics, "-X", "enable.auto.commit=true", "-X", "auto.commit.interval.ms=100"]
    proc = subprocess.run(args, capture_output=True, timeout=timeout_s, check=False)
    if proc.returncode != 0:
        raise AssertionError(f"kcat failed ({proc.returncode}): {proc.stderr.decode(errors='replace')}")
    out: Received = {}
    data, pos = proc.stdout, 0
    while pos < len(data):
        end = data.index(b"\n", pos)
        fields = data[pos:end].decode().split(" ", 7)
        assert fields[0] == "@@", data[pos : pos + 100]
        topic, partition, offset, ts, klen, vlen = fields[1], *map(int, fields[2:7])
        csv = fields[7] if len(fields) > 7 else ""
        pos = end + 1
        key = None if klen < 0 else data[pos : pos + klen]
        pos += max(klen, 0)
        value = None if vlen < 0 else data[pos : pos + vlen]
        pos += max(vlen, 0) + 1
        headers = tuple((n, v.encode()) for n, _, v in (h.partition("=") for h in csv.split(",") if h))
        # kcat prints 0 for a record without a timestamp (magic v0); no test record has timestamp 0.
        _add(out, topic, partition, Record(offset, key, value, headers, ts if ts else -1))
    return out
