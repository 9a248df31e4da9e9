"""`seglog bench engine`: the storage engine against baselines run side by side in this process.

Figures (docs/benchmarks.md explains each one and how to read it):

* batch encoding: records/s of ``encode_batches`` vs kafka-python's ``DefaultRecordBatchBuilder``
  on the same records (1M records with 100-byte values; ``--quick`` 200k); goal >= 20x.
* append: MB/s of ``Log.append`` (encode + write + index) vs writing the same bytes with a plain
  sequential ``write``; goal >= 0.8x.
* offset-index lookups: vectorised ``lookup_many`` on a full 10 MiB index vs a pure-Python
  ``bisect`` over a list (goal >= 10M lookups/s), and single ``lookup`` p50 / p99 in microseconds.
* warm/cold search: major page faults of tail lookups after the index was evicted from the page
  cache, its tail re-warmed and the index grown past a page boundary: the warm/cold search
  (goal 0) vs a plain binary search over the whole index (goal > 0).
* recovery: MB/s of ``LogSegment.recover`` on a 1 GiB segment (``--quick`` 128 MiB) vs reading
  the file once in 8 MiB chunks, the page cache dropped before each; goal >= 0.5x.
* random fetch: ``Log.read_records(random offset, 100)`` p50 / p99 in microseconds on a log written
  with the default ``batch.size`` vs the same records in batches packed up to ``max.message.bytes``
  (1 MiB, the baseline); goal p50 >= 2x faster.

examples:
  seglog bench engine --quick
  seglog bench engine --json bench-engine.json --dir /var/tmp
"""

from __future__ import annotations

import argparse
import bisect
import functools
import math
import resource
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from indexer.abstract_index import plain_binary_search_slot_for
from indexer.clock import SystemClock
from indexer.config import LogConfig
from indexer.file_names import log_file, offset_index_file
from indexer.log import Log
from indexer.offset_index import OffsetIndex
from indexer.records.columns import to_append_table
from indexer.records.encoder import encode_batches
from indexer.segment import LogSegment
from indexer.transaction_replay import TransactionReplay
from seglog.bench.report import (
    BenchResult,
    add_suite_arguments,
    cold_read_seconds,
    drop_page_cache,
    latency_result,
    percentiles,
    publish,
    recovery_result,
    throughput_result,
    timed,
)

VALUE_BYTES = 100
TIMESTAMP_BASE_MS = 1_700_000_000_000
MAX_BATCH_BYTES = 1048588  # Kafka's max.message.bytes default
MiB = 1 << 20
REPEATS = 3  # runs of each side of the encoding figure; the best of each is kept
# Runs of each side of the append figure, alternating; the best of each is kept. An append takes ~30 ms
# and uses both cores, so one busy moment of the shared machine moves a single run by 30% or more.
APPEND_REPEATS = 7
FETCH_RECORDS = 100  # records per random fetch, as a consumer poll of a small max.poll.records
FETCHES = 3000  # random fetches per side, alternating
WARMUP_RECORDS = 30_000  # enough for several full batches, so every append code path is loaded
# Synthetic index entries: one every 100 offsets and 1 KiB of log (a full 10 MiB index then
# covers 1.3 GB of log, within the int32 positions of a segment).
INDEX_OFFSET_STRIDE = 100
INDEX_POSITION_STRIDE = 1024


# Options of ``seglog bench engine``: the common ones.
add_arguments = functools.partial(
    add_suite_arguments,
    quick="smaller inputs (200k records, 128 MiB segment)",
    scratch="where to write scratch files (default: the system temp dir; needs a disk, not tmpfs, "
    "for the page-cache figures)",
)


def run(args: argparse.Namespace) -> int:
    """Run every figure, print the table, write the JSON; 0 even when a goal is missed."""
    sizes = Sizes.for_run(quick=args.quick, scale=args.scale)
    scratch = Path(tempfile.mkdtemp(prefix="seglog-bench-", dir=args.dir))
    try:
        results = run_suite(sizes, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    publish(results, json_path=args.json, suite="engine", quick=args.quick)
    return 0


@dataclass(frozen=True)
class Sizes:
    """Input sizes of one run."""

    records: int
    index_bytes: int
    lookups: int
    single_lookups: int
    segment_bytes: int

    @classmethod
    def for_run(cls, *, quick: bool, scale: float) -> Sizes:
        if scale <= 0:
            raise ValueError(f"--scale must be > 0, got {scale}")
        records = 200_000 if quick else 1_000_000
        segment = 128 * MiB if quick else 1024 * MiB

        def scaled(n: int, minimum: int) -> int:
            return max(minimum, int(n * scale))

        return cls(
            records=scaled(records, 100),
            index_bytes=scaled(10 * MiB, 64 * 1024),
            lookups=scaled(1_000_000, 1000),
            single_lookups=scaled(20_000, 200),
            segment_bytes=scaled(segment, 1 * MiB),
        )


def run_suite(sizes: Sizes, scratch: Path) -> list[BenchResult]:
    """Every figure of the suite, in order."""
    table, values = _records(sizes.records)
    results = [bench_encoding(table, values)]
    results.append(bench_append(table, scratch))
    results += bench_index_lookups(sizes, scratch)
    results += bench_page_faults(sizes, scratch)
    results.append(bench_recovery(sizes, scratch))
    results += bench_random_fetch(table, scratch)
    return results


# --- inputs ----------------------------------------------------------------------------------


def _records(n: int) -> tuple[pa.Table, np.ndarray]:
    """``n`` records with null keys, random 100-byte values and increasing timestamps."""
    rng = np.random.default_rng(42)
    data = rng.integers(0, 256, size=n * VALUE_BYTES, dtype=np.uint8)
    offsets = np.arange(0, (n + 1) * VALUE_BYTES, VALUE_BYTES, dtype=np.int32)
    values = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    timestamps = TIMESTAMP_BASE_MS + np.arange(n, dtype=np.int64)
    table = to_append_table({"value": values, "timestamp": timestamps}, now_ms=TIMESTAMP_BASE_MS)
    return table, data.reshape(n, VALUE_BYTES)


# --- encoding ----------------------------------------------------------------------------------


def _kafka_python_encoder(values: np.ndarray, timestamps: list[int]) -> Callable[[], list[bytes]]:
    """The baseline: kafka-python's v2 batch builder, batches of at most ``MAX_BATCH_BYTES``.

    Returns a function that encodes every record and returns the batches it built; its input,
    Python ``bytes`` and ``int`` objects, is prepared here, outside the timing.
    """
    with warnings.catch_warnings():  # kafka-python's package import uses a deprecated importlib API
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.record.default_records import DefaultRecordBatchBuilder

    def builder() -> Any:
        return DefaultRecordBatchBuilder(
            magic=2,
            compression_type=0,
            is_transactional=False,
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
            batch_size=MAX_BATCH_BYTES,
        )

    rows = [bytes(v) for v in values]

    def encode() -> list[bytes]:
        batches = []
        current = builder()
        delta = 0
        for value, ts in zip(rows, timestamps, strict=True):
            if current.append(delta, ts, None, value, []) is None:
                batches.append(bytes(current.build()))
                current, delta = builder(), 0
                current.append(delta, ts, None, value, [])
            delta += 1
        batches.append(bytes(current.build()))
        return batches

    return encode


def bench_encoding(table: pa.Table, values: np.ndarray) -> BenchResult:
    """records/s of ``encode_batches`` vs kafka-python on the same records (best of interleaved runs)."""
    n = table.num_rows
    encode_batches(table, 0, max_batch_bytes=MAX_BATCH_BYTES)  # load (or compile) every kernel it uses
    baseline = _kafka_python_encoder(values, table.column("timestamp").to_pylist())
    ours_s = base_s = math.inf
    for _ in range(REPEATS):
        seconds, encoded = timed(lambda: encode_batches(table, 0, max_batch_bytes=MAX_BATCH_BYTES))
        ours_s = min(ours_s, seconds)
        seconds, batches = timed(baseline)
        base_s = min(base_s, seconds)
    first = encoded.buffer[: int(encoded.sizes[0])].tobytes()
    return throughput_result(
        "batch encoding (v2, 100-byte values)",
        "records/s",
        n / ours_s,
        "kafka-python DefaultRecordBatchBuilder",
        n / base_s,
        20.0,
        records=n,
        batches=len(encoded),
        baseline_batches=len(batches),
        first_batch_identical=first == batches[0],
        seconds=ours_s,
        baseline_seconds=base_s,
        runs=REPEATS,
    )


# --- append --------------------------------------------------------------------------------------


def _write_sequentially(path: Path, data: memoryview) -> None:
    """The append baseline: ``data`` written to a new file, one ``write()`` per MiB."""
    with open(path, "wb") as f:
        for start in range(0, len(data), MiB):
            f.write(data[start : start + MiB])


def bench_append(table: pa.Table, scratch: Path) -> BenchResult:
    """MB/s of ``Log.append`` (encode + write + index) vs a plain write of the same bytes.

    Runs alternate and the best of each is kept. Each run writes a fresh log (or file); its dirty
    pages are written back, untimed, before the next run so one run's writeback does not slow the next.
    """
    config = LogConfig(segment_bytes=1 << 30)
    warm = Log.open(scratch / "warmup-0", config)
    try:
        warm.append(table.slice(0, min(table.num_rows, WARMUP_RECORDS)))
    finally:
        warm.close()
    target = scratch / "plain-write.bin"
    ours_s = base_s = math.inf
    for run in range(APPEND_REPEATS):
        directory = scratch / f"append{run}-0"
        log = Log.open(directory, config)
        try:
            seconds, _ = timed(functools.partial(log.append, table))
            ours_s = min(ours_s, seconds)
            log.flush()
            written = log.size_in_bytes
            data = memoryview(b"".join(segment.log.read(0, segment.size) for segment in log.segments.values()))
        finally:
            log.close()
        shutil.rmtree(directory)
        seconds, _ = timed(functools.partial(_write_sequentially, target, data))
        base_s = min(base_s, seconds)
        drop_page_cache(target)
    return throughput_result(
        "append through Log.append (encode+write+index)",
        "MB/s",
        written / ours_s / 1e6,
        "plain sequential file write of the same bytes",
        len(data) / base_s / 1e6,
        0.8,
        records=table.num_rows,
        bytes=written,
        seconds=ours_s,
        baseline_seconds=base_s,
        runs=APPEND_REPEATS,
    )


# --- random fetch ---------------------------------------------------------------------------------


def bench_random_fetch(table: pa.Table, scratch: Path) -> list[BenchResult]:
    """p50/p99 of ``read_records(random offset, 100)`` with the default ``batch.size`` vs batches of
    up to ``max.message.bytes``: a fetch decodes every batch its records span, whole."""
    default = LogConfig(segment_bytes=1 << 30)
    packed = LogConfig(segment_bytes=1 << 30, batch_size=default.max_message_bytes)
    logs = [Log.open(scratch / f"fetch-{name}-0", config) for name, config in (("ours", default), ("packed", packed))]
    try:
        batches = [log.append(table).num_batches for log in logs]
        for log in logs:
            log.update_high_watermark(log.log_end_offset)
        starts = np.random.default_rng(11).integers(0, max(1, table.num_rows - FETCH_RECORDS), FETCHES).tolist()
        for log in logs:  # load the decoder's kernels and warm the page cache
            for start in starts[:100]:
                log.read_records(start, FETCH_RECORDS)
        samples = np.empty((2, len(starts)), dtype=np.int64)
        clock = time.perf_counter_ns
        for i, start in enumerate(starts):
            for side, log in enumerate(logs):
                begin = clock()
                log.read_records(start, FETCH_RECORDS)
                samples[side, i] = clock() - begin
    finally:
        for log in logs:
            log.close()
    ours, base = percentiles(samples[0] / 1000.0), percentiles(samples[1] / 1000.0)
    baseline = f"batches up to max.message.bytes ({default.max_message_bytes} bytes)"
    details = {
        "records": table.num_rows,
        "batch_size": default.batch_size,
        "batches": batches[0],
        "baseline_batches": batches[1],
        "fetches": len(starts),
        "records_per_fetch": FETCH_RECORDS,
    }
    return [
        latency_result(
            f"random fetch of {FETCH_RECORDS} records p50 (read_records)",
            "us",
            ours["p50"],
            baseline,
            base["p50"],
            2.0,
            **details,
        ),
        latency_result(
            f"random fetch of {FETCH_RECORDS} records p99 (read_records)",
            "us",
            ours["p99"],
            baseline,
            base["p99"],
            None,
            **details,
        ),
    ]


# --- offset index -----------------------------------------------------------------------------------


def _write_offset_index(path: Path, entries: int) -> np.ndarray:
    """A full ``.index`` file as a broker writes it (relative offset, position; big-endian int32
    pairs) with one entry every ``INDEX_OFFSET_STRIDE`` offsets and ``INDEX_POSITION_STRIDE``
    bytes; returns the absolute offsets of the entries."""
    relative = np.arange(1, entries + 1, dtype=np.int64) * INDEX_OFFSET_STRIDE
    pairs = np.empty((entries, 2), dtype=">i4")
    pairs[:, 0] = relative
    pairs[:, 1] = np.arange(1, entries + 1, dtype=np.int64) * INDEX_POSITION_STRIDE
    path.write_bytes(pairs.tobytes())
    return relative


def bench_index_lookups(sizes: Sizes, scratch: Path) -> list[BenchResult]:
    """Vectorised lookups/s and single-lookup latency on a full offset index, vs Python bisect."""
    path = offset_index_file(scratch, 0)
    entries = sizes.index_bytes // OffsetIndex.ENTRY_SIZE
    keys = _write_offset_index(path, entries)
    rng = np.random.default_rng(7)
    targets = rng.integers(0, int(keys[-1]) + 100, size=sizes.lookups, dtype=np.int64)
    key_list = keys.tolist()
    with OffsetIndex(path, 0, writable=False) as index:
        index.lookup(int(targets[0]))  # compile / load the kernels
        runs = [timed(lambda: index.lookup_many(targets)) for _ in range(6)]
        many_s = min(seconds for seconds, _ in runs[1:])  # the first run loads the kernels
        found = runs[0][1][0]
        sample = targets[: min(targets.size, 200_000)]
        sample_list = sample.tolist()
        bisect_s, expected = timed(lambda: [key_list[bisect.bisect_right(key_list, t) - 1] for t in sample_list])
        hits = sample >= keys[0]  # below the first entry the index answers (base_offset, 0)
        agree = bool(np.array_equal(found[: sample.size][hits], np.asarray(expected)[hits]))
        single = targets[: sizes.single_lookups].tolist()
        ours_ns = np.empty(len(single), dtype=np.int64)
        base_ns = np.empty(len(single), dtype=np.int64)
        clock = time.perf_counter_ns
        for i, t in enumerate(single):
            start = clock()
            index.lookup(t)
            ours_ns[i] = clock() - start
        for i, t in enumerate(single):
            start = clock()
            key_list[bisect.bisect_right(key_list, t) - 1]
            base_ns[i] = clock() - start
    ours_us = percentiles(ours_ns / 1000.0)
    base_us = percentiles(base_ns / 1000.0)
    many_rate, bisect_rate = targets.size / many_s, sample.size / bisect_s
    many = BenchResult(
        "offset index: vectorised lookups (lookup_many)",
        "lookups/s",
        many_rate,
        "pure-Python bisect over a list",
        bisect_rate,
        many_rate / bisect_rate,
        10_000_000.0,
        "value>=",
        {"entries": entries, "targets": int(targets.size), "agrees_with_bisect": agree},
    )
    p50 = latency_result(
        "offset index: single lookup p50",
        "us",
        ours_us["p50"],
        "pure-Python bisect over a list",
        base_us["p50"],
        None,
        entries=entries,
    )
    p50.details.update({f"{k}_us": v for k, v in ours_us.items()})
    p50.details.update({f"baseline_{k}_us": v for k, v in base_us.items()})
    return [
        many,
        p50,
        latency_result(
            "offset index: single lookup p99",
            "us",
            ours_us["p99"],
            "pure-Python bisect over a list",
            base_us["p99"],
            None,
            entries=entries,
        ),
    ]


# --- warm/cold search vs page faults -------------------------------------------------------------------


def _major_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_majflt


def bench_page_faults(sizes: Sizes, scratch: Path) -> list[BenchResult]:
    """Major page faults of tail lookups: warm/cold search vs plain binary search (KAFKA-6432)."""
    path = offset_index_file(scratch, 0, ".faults")
    entries = sizes.index_bytes // OffsetIndex.ENTRY_SIZE
    keys = _write_offset_index(path, entries)
    # Load both search kernels first: loading compiled code reads files, which would count as
    # major faults of whichever search ran first.
    with OffsetIndex(path, 0, writable=False) as index:
        index.largest_lower_bound_slot_for(int(keys[-1]))
        plain_binary_search_slot_for(index, int(keys[-1]))
    drop_page_cache(path)
    page = resource.getpagesize()
    with OffsetIndex(path, 0, max_index_size=sizes.index_bytes + 4 * page, writable=True) as index:
        tail = keys[-(index.warm_entries) :]
        for t in tail[:: max(1, len(tail) // 16)]:  # re-warm the tail: what recent lookups keep cached
            index.lookup(int(t))
        # Grow past a page boundary: appends land on a new page, as an active segment's index does.
        index.resize(index.length + 4 * page)
        next_offset, position = int(keys[-1]), entries * INDEX_POSITION_STRIDE
        grown = 0
        while grown == 0 or (index.entries * OffsetIndex.ENTRY_SIZE) % page != OffsetIndex.ENTRY_SIZE:
            next_offset += INDEX_OFFSET_STRIDE
            position += INDEX_POSITION_STRIDE
            index.append(next_offset, position)
            grown += 1
        first_warm = next_offset - INDEX_OFFSET_STRIDE * (index.warm_entries - 1)
        targets = [int(t) for t in np.linspace(first_warm, next_offset, 64)]
        before = _major_faults()
        warm_slots = [index.largest_lower_bound_slot_for(t) for t in targets]
        warm_faults = _major_faults() - before
        before = _major_faults()
        plain_slots = [plain_binary_search_slot_for(index, t) for t in targets]
        plain_faults = _major_faults() - before
        same = warm_slots == plain_slots
    details = {"entries": entries, "appended": grown, "tail_lookups": len(targets), "same_slots": same}
    return [
        latency_result(
            "warm/cold search: major faults of tail lookups",
            "faults",
            warm_faults,
            "plain binary search",
            plain_faults,
            0.0,
            goal_kind="value==",
            **details,
        ),
        latency_result(
            "plain binary search: major faults of tail lookups",
            "faults",
            plain_faults,
            "warm/cold search",
            warm_faults,
            1.0,
            goal_kind="value>=",
            **details,
        ),
    ]


# --- recovery ----------------------------------------------------------------------------------------------


def _write_segment(path: Path, target_bytes: int) -> int:
    """A segment of about ``target_bytes``: one encoded chunk repeated with its batches rebased to
    consecutive offsets (the base offset field is not covered by the CRC). Returns its size."""

    chunk_records = max(100, min(200_000, target_bytes // (VALUE_BYTES + 10)))
    table, _ = _records(chunk_records)
    encoded = encode_batches(table, 0, max_batch_bytes=MAX_BATCH_BYTES)
    copies = max(1, target_bytes // encoded.total_bytes)
    base_fields = encoded.positions[:, None] + np.arange(8)
    with open(path, "wb") as f:
        for k in range(copies):
            buffer = encoded.buffer.copy()
            rebased = (encoded.base_offsets + k * chunk_records).astype(">i8")
            buffer[base_fields] = rebased.view(np.uint8).reshape(-1, 8)
            f.write(buffer.tobytes())
    return copies * encoded.total_bytes


def bench_recovery(sizes: Sizes, scratch: Path) -> BenchResult:
    """MB/s of ``LogSegment.recover`` vs one read of the same file, page cache dropped before each."""
    directory = scratch / "recover-0"
    directory.mkdir()
    path = log_file(directory, 0)
    size = _write_segment(path, sizes.segment_bytes)

    base_s = cold_read_seconds([path])
    config = LogConfig(segment_bytes=1 << 30)
    warmup = scratch / "recover-warmup-0"
    warmup.mkdir()
    _write_segment(log_file(warmup, 0), 1 << 20)
    small = LogSegment.open(warmup, 0, config, clock=SystemClock(), file_already_exists=True)
    try:
        small.recover(TransactionReplay(lambda: [(0, small.log)]))  # load (or compile) every kernel, untimed
    finally:
        small.close()
    segment = LogSegment.open(directory, 0, config, clock=SystemClock(), file_already_exists=True)
    try:
        replay = TransactionReplay(lambda: [(0, segment.log)])
        seconds, truncated = timed(lambda: segment.recover(replay), evict=[path])
        index_entries = segment.offset_index.entries
    finally:
        segment.close()
    return recovery_result(
        "segment recovery (CRC + index rebuild)",
        "read the file once (8 MiB chunks)",
        size,
        seconds,
        base_s,
        truncated=truncated,
        index_entries=index_entries,
    )
