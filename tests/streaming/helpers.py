"""Test helpers: deterministic input files, and an independent reader of what the sink wrote; the
streaming queries and the driver subprocesses that several test files start.

The reader decodes the ``.log`` files with kafka-python (not with seglog's own decoder), checks
every batch's CRC-32C, and cuts each partition at its high watermark from
``replication-offset-checkpoint``: exactly what a consumer would be allowed to see.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from indexer.checkpoint import OffsetCheckpointFile
from indexer.config import Settings
from indexer.file_names import REPLICATION_OFFSET_CHECKPOINT_FILE, is_log_file, partition_dirs
from indexer.log_manager import LogManager
from indexer.records.batch_header import compute_batch_crc, parse_batch_header

with warnings.catch_warnings():  # kafka-python 3 imports its protocol JSON with a deprecated API
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.memory_records import MemoryRecords

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

REPO = Path(__file__).resolve().parents[2]
# How long a test waits for a query's event (its end, its next batch): only a deadline for a query that
# would hang, far above what a loaded machine takes (CI: 2 cores shared by 2 test workers).
QUERY_TIMEOUT_S = 600


@dataclass(frozen=True)
class Stored:
    """One record as stored in a partition."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: tuple[tuple[str, bytes | None], ...]


def write_json_inputs(directory: Path, *, files: int, rows_per_file: int, keys: int) -> list[tuple[str, str]]:
    """``files`` JSON-lines files of ``{"key": "k<i>", "value": "<key>:<seq>"}``; returns (key, value) in order.

    ``seq`` counts per key across all files, so per-key order can be checked after the run. File
    ``f`` is given modification time ``now + f`` seconds: Spark's file source takes files oldest
    first, so with ``maxFilesPerTrigger=1`` the batches follow file order (within a batch, Spark
    may order a batch's files by size, not by name).
    """
    directory.mkdir(parents=True, exist_ok=True)
    rows: list[tuple[str, str]] = []
    seq = [0] * keys
    base = time.time()
    n = 0
    for f in range(files):
        lines = []
        for _ in range(rows_per_file):
            k = (n * 7919) % keys
            row = (f"k{k}", f"k{k}:{seq[k]}")
            seq[k] += 1
            n += 1
            rows.append(row)
            lines.append(json.dumps({"key": row[0], "value": row[1]}))
        path = directory / f"part-{f:04d}.json"
        path.write_text("\n".join(lines) + "\n")
        os.utime(path, (base + f, base + f))
    return rows


def high_watermarks(log_dir: Path) -> dict[tuple[str, int], int]:
    return OffsetCheckpointFile(log_dir / REPLICATION_OFFSET_CHECKPOINT_FILE).read()


def check_crcs(path: Path) -> int:
    """Walk a .log file batch by batch, asserting each v2 batch's stored CRC; returns the batch count."""
    data = path.read_bytes()
    position = 0
    count = 0
    while position < len(data):
        header = parse_batch_header(data, position)
        batch = data[position : position + header.size_in_bytes]
        assert len(batch) == header.size_in_bytes, f"truncated batch at {path}:{position}"
        assert header.magic == 2, f"magic {header.magic} at {path}:{position}"
        assert compute_batch_crc(batch) == header.crc, f"CRC mismatch at {path}:{position}"
        position += header.size_in_bytes
        count += 1
    return count


def topic_partition_dirs(log_dir: Path, topic: str) -> list[tuple[int, Path]]:
    """``(partition, directory)`` of every live partition directory of ``topic``, in partition order."""
    return [(partition, directory) for (name, partition), directory in partition_dirs(log_dir) if name == topic]


def read_topic(log_dir: Path, topic: str, *, up_to_high_watermark: bool = True) -> list[Stored]:
    """Every record of ``topic`` (all partitions), decoded by kafka-python, CRCs checked."""
    hws = high_watermarks(log_dir)
    out: list[Stored] = []
    for partition, directory in topic_partition_dirs(log_dir, topic):
        limit = hws.get((topic, partition), 0) if up_to_high_watermark else None
        for segment in sorted(p for p in directory.iterdir() if is_log_file(p)):
            check_crcs(segment)
            records = MemoryRecords(segment.read_bytes())
            while (batch := records.next_batch()) is not None:
                for record in batch:
                    if limit is not None and record.offset >= limit:
                        continue
                    out.append(
                        Stored(
                            partition, record.offset, record.key, record.value, record.timestamp, tuple(record.headers)
                        )
                    )
    return out


def snapshot(log_dir: Path) -> dict[str, bytes]:
    """Every file under ``log_dir`` (relative path -> bytes), lock files excluded."""
    return {
        str(p.relative_to(log_dir)): p.read_bytes()
        for p in sorted(log_dir.rglob("*"))
        if p.is_file() and not p.name.endswith(".lock")
    }


def check_indexes(log_dir: Path, topic: str) -> int:
    """Assert every ``.index`` entry of ``topic`` points at the batch it names (the entry's offset is that
    batch's last offset, as Kafka indexes) and every ``.timeindex`` entry's offset lies in its segment with
    timestamps not decreasing; returns the number of offset index entries checked."""
    checked = 0
    for _partition, directory in topic_partition_dirs(log_dir, topic):
        for segment in sorted(p for p in directory.iterdir() if is_log_file(p)):
            base = int(segment.stem)
            data = segment.read_bytes()
            entries = segment.with_suffix(".index").read_bytes()
            for i in range(0, len(entries) - len(entries) % 8, 8):
                relative, position = struct.unpack_from(">ii", entries, i)
                assert 0 <= position < len(data), f"{segment}: index entry {i // 8} points past the log"
                header = parse_batch_header(data, position)
                assert header.last_offset == base + relative, f"{segment}: index entry {i // 8} names another batch"
                checked += 1
            times = segment.with_suffix(".timeindex").read_bytes()
            last_timestamp = -1
            for i in range(0, len(times) - len(times) % 12, 12):
                timestamp, relative = struct.unpack_from(">qi", times, i)
                assert timestamp >= last_timestamp and relative >= 0, f"{segment}: time index entry {i // 12}"
                last_timestamp = timestamp
    return checked


def json_input_stream(spark: SparkSession, directory: Path, *, files_per_trigger: int | None = None) -> DataFrame:
    """The files of :func:`write_json_inputs` in ``directory`` as a streaming DataFrame of ``key`` and ``value``
    strings; ``files_per_trigger`` is Spark's ``maxFilesPerTrigger``."""
    reader = spark.readStream.schema("key string, value string")
    if files_per_trigger is not None:
        reader = reader.option("maxFilesPerTrigger", files_per_trigger)
    return reader.json(str(directory))


def start_foreach_batch(
    df: DataFrame,
    function: Callable[[DataFrame, int], None],
    checkpoint: Path,
    *,
    processing_time: str | None = None,
    output_mode: str | None = None,
) -> StreamingQuery:
    """Start the streaming query of ``df`` into ``foreachBatch(function)``, checkpointed at ``checkpoint``:
    with ``Trigger.AvailableNow``, or a trigger every ``processing_time`` when given."""
    writer = df.writeStream
    if output_mode is not None:
        writer = writer.outputMode(output_mode)
    writer = writer.foreachBatch(function).option("checkpointLocation", str(checkpoint))
    if processing_time is None:
        return writer.trigger(availableNow=True).start()
    return writer.trigger(processingTime=processing_time).start()


def await_end(query: StreamingQuery, timeout_s: int = QUERY_TIMEOUT_S) -> None:
    """Wait for ``query`` to end by itself (``Trigger.AvailableNow``): raises its
    ``StreamingQueryException`` if it failed, and AssertionError (after stopping it) if it still runs
    after ``timeout_s``, where ``awaitTermination`` would only return False."""
    if not query.awaitTermination(timeout_s):
        query.stop()
        raise AssertionError(f"query {query.id} still running after {timeout_s} s")


def wait_until(
    condition: Callable[[], bool], what: str, query: StreamingQuery, timeout_s: float = QUERY_TIMEOUT_S
) -> None:
    """Wait until ``condition()`` holds while ``query`` runs: raises its error if it ends first
    (AssertionError if it ended without one), AssertionError naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if not query.isActive:
            query.awaitTermination()  # raises the query's StreamingQueryException
            raise AssertionError(f"query {query.id} ended before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s:.0f} s")
        time.sleep(0.1)


def start_driver(module: str, tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    """Start the driver script ``module`` (``python -m``) on ``tmp_path``'s ``logs``, ``checkpoint`` and ``in``
    with ``args``, in a session of its own (so that :func:`reap_driver` can kill its JVMs with it); its stdout
    is a pipe of text lines."""
    cmd = [
        sys.executable,
        "-m",
        module,
        "--log-dir",
        str(tmp_path / "logs"),
        "--checkpoint",
        str(tmp_path / "checkpoint"),
        "--input",
        str(tmp_path / "in"),
        *args,
    ]
    return subprocess.Popen(
        cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True
    )


def reap_driver(proc: subprocess.Popen[str], timeout_s: float) -> str:
    """Wait up to ``timeout_s`` for a driver of :func:`start_driver`, then SIGKILL what is left of its process
    group (its Spark JVMs); returns the rest of its output."""
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if proc.stdout is not None:
            proc.stdout.close()
    return out


def committed_then_damaged(log_dir: Path) -> None:
    """Topic "dmg", one partition: 20 records committed in two batches (0..9, 10..19), then the second
    batch's header overwritten: the log now ends at 10, below its checkpointed high watermark 20."""
    with LogManager(log_dir, Settings()) as manager:
        log = manager.get_or_create_log("dmg", 0)
        for first in (0, 10):
            log.append({"value": [f"d{i}".encode() for i in range(first, first + 10)]})
        log.flush()
        log.update_high_watermark(log.log_end_offset)
    segment = log_dir / "dmg-0" / "00000000000000000000.log"
    first_batch = parse_batch_header(segment.read_bytes(), 0).size_in_bytes
    with open(segment, "r+b") as f:
        f.seek(first_batch)
        f.write(b"\xff" * 12)  # the second batch's base offset and size
