"""Batches fit every limit the configuration sets: max.message.bytes, segment.bytes, batch.size.

Kafka's broker refuses a batch above max.message.bytes (RecordTooLargeException) or above
segment.bytes (RecordBatchTooLargeException); seglog's writer cuts its batches so that it never
builds one it would then refuse, and a single record too large for a limit is refused naming it.
"""

from __future__ import annotations

import errno
import os
import shutil
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from indexer.clock import MockClock
from indexer.config import LogConfig
from indexer.errors import RecordBatchTooLargeError, RecordTooLargeError, StorageError
from indexer.log import Log
from indexer.records.batch_header import RECORD_BATCH_OVERHEAD
from indexer.records.file_records import FileRecords
from tests.budget import scaled
from tests.indexer.conftest import T0


def stored_batches(log: Log) -> list[tuple[int, int, int]]:
    """(size, record count, segment base offset) of every batch on disk, in order."""
    found = []
    for segment in log.segments:
        scan = FileRecords.open(segment.log.path).scan()
        assert scan.error is None
        counts = scan.last_offsets - scan.base_offsets + 1
        found += [(int(s), int(c), segment.base_offset) for s, c in zip(scan.sizes, counts, strict=True)]
    return found


def json_values(n: int, seed: int = 0) -> list[bytes]:
    rng = np.random.default_rng(seed)
    return [
        b'{"user":%d,"event":"page_view","url":"/p/%d","price":%.2f}'
        % (rng.integers(1 << 20), rng.integers(1 << 16), rng.random() * 100)
        for _ in range(n)
    ]


def test_segment_bytes_below_max_message_bytes_cuts_smaller_batches(open_log: Any) -> None:
    """Issue 10 item 5: segment.bytes 262144 with batches allowed up to 1 MiB."""
    log = open_log(**{"segment.bytes": 262144, "batch.size": 1048588})
    values = json_values(5000)
    info = log.append({"value": values})
    assert info.num_records == 5000 and log.num_segments >= 2
    batches = stored_batches(log)
    assert max(size for size, _, _ in batches) <= 262144
    log.update_high_watermark(log.log_end_offset)
    assert log.read_records(0).column("value").to_pylist() == values


@pytest.mark.parametrize("codec", ["lz4", "gzip"])
def test_compressed_batches_that_do_not_fit_a_segment_are_cut_again(open_log: Any, codec: str) -> None:
    # incompressible values: a batch planned up to max.message.bytes stays that large compressed
    log = open_log(**{"segment.bytes": 20_000, "batch.size": 1048588, "compression.type": codec})
    values = [os.urandom(300) for _ in range(400)]
    log.append({"value": values})
    assert max(size for size, _, _ in stored_batches(log)) <= 20_000
    log.update_high_watermark(log.log_end_offset)
    assert log.read_records(0).column("value").to_pylist() == values


def test_batch_size_is_the_target_and_a_larger_record_gets_a_batch_of_its_own(open_log: Any) -> None:
    log = open_log(**{"batch.size": 1000})
    values = [b"a" * 100] * 30 + [b"b" * 3000] + [b"c" * 100] * 5
    log.append({"value": values})
    batches = stored_batches(log)
    assert [count for size, count, _ in batches if size > 1000] == [1]  # the 3000-byte record, alone
    assert all(size <= 1000 for size, count, _ in batches if count > 1)
    counts = [count for _, count, _ in batches]
    assert counts[-2:] == [1, 5] and sum(counts[:-2]) == 30 and len(counts) > 4


def test_batch_size_zero_writes_a_batch_per_record(open_log: Any) -> None:
    log = open_log(**{"batch.size": 0})
    log.append({"value": [b"x"] * 7})
    assert [count for _, count, _ in stored_batches(log)] == [1] * 7


def test_a_record_too_large_names_the_limit_it_breaks(open_log: Any) -> None:
    by_message = open_log("m-0", **{"max.message.bytes": 1000, "segment.bytes": 5000})
    with pytest.raises(RecordTooLargeError, match=r"record 1, .* larger than max.message.bytes = 1000") as info:
        by_message.append({"value": [b"ok", b"x" * 2000]})
    assert (info.value.index, info.value.limit) == (1, 1000)
    by_segment = open_log("s-0", **{"max.message.bytes": 5000, "segment.bytes": 1000})
    with pytest.raises(RecordBatchTooLargeError, match=r"record 2, .* larger than segment.bytes = 1000"):
        by_segment.append({"value": [b"ok", b"ok", b"x" * 2000]})
    assert (by_message.log_end_offset, by_segment.log_end_offset) == (0, 0)
    # Limits below an empty batch's size (allowed: segment.bytes >= 14, as in Kafka) name themselves too.
    tiny_segment = open_log("ts-0", **{"segment.bytes": 14})
    with pytest.raises(RecordBatchTooLargeError, match=r"record 0, .* larger than segment.bytes = 14"):
        tiny_segment.append({"value": [b"a"]})
    tiny_message = open_log("tm-0", **{"max.message.bytes": 10})
    with pytest.raises(RecordTooLargeError, match=r"record 0, .* larger than max.message.bytes = 10"):
        tiny_message.append({"value": [b"a"]}, compression="gzip")


@settings(max_examples=scaled(40, ci=15, soak=500), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(0, 3000), min_size=1, max_size=200),
    max_message=st.integers(RECORD_BATCH_OVERHEAD + 30, 6000),
    segment=st.integers(500, 8000),
    batch_size=st.integers(0, 10_000),
    codec=st.sampled_from(["none", "lz4", "zstd"]),
)
def test_every_stored_batch_fits_every_limit(
    tmp_path_factory: pytest.TempPathFactory,
    sizes: list[int],
    max_message: int,
    segment: int,
    batch_size: int,
    codec: str,
) -> None:
    """Any limits, any records: the append stores everything in batches within max.message.bytes
    and segment.bytes (and batch.size unless alone), or refuses the first record no batch can hold,
    naming the limit, and writes nothing."""
    config = {
        "max.message.bytes": max_message,
        "segment.bytes": segment,
        "batch.size": batch_size,
        "compression.type": codec,
    }
    values = [bytes([i % 251]) * n for i, n in enumerate(sizes)]
    directory = tmp_path_factory.mktemp("limits") / "t-0"
    with Log.open(directory, LogConfig.from_mapping(config), clock=MockClock(T0)) as log:
        try:
            log.append({"value": values})
        except RecordTooLargeError as e:
            assert e.index is not None and e.limit == max_message
            assert log.log_end_offset == 0 and log.size_in_bytes == 0
            return
        except RecordBatchTooLargeError as e:
            assert "segment.bytes" in str(e) and segment < max_message
            assert log.log_end_offset == 0 and log.size_in_bytes == 0
            return
        batches = stored_batches(log)
        assert max(size for size, _, _ in batches) <= min(max_message, segment)
        if codec == "none":
            assert all(size <= batch_size for size, count, _ in batches if count > 1)
        log.update_high_watermark(log.log_end_offset)
        assert log.read_records(0).column("value").to_pylist() == values


# -- flush ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("new_segment", [False, True])
def test_flush_of_a_vanished_partition_directory_fails_and_keeps_the_recovery_point(
    open_log: Any, new_segment: bool
) -> None:
    """Kafka's flush skips a missing directory (LocalLogTest.testFlushingNonExistentDir); seglog's
    fails: the files it would fsync are no longer reachable (docs/design.md)."""
    log = open_log()
    log.append({"value": [b"a"] * 3})
    log.flush()
    log.append({"value": [b"b"] * 3})
    if new_segment:
        log.roll()  # flushes up to the new segment
        log.append({"value": [b"c"] * 3})
    before = log.recovery_point
    shutil.rmtree(log.directory)
    with pytest.raises(StorageError) as info:
        log.flush()
    assert info.value.errno == errno.ENOENT and info.value.path == str(log.directory)
    assert log.recovery_point == before < log.log_end_offset
    with pytest.raises(StorageError):
        log.close()  # close flushes too; it still releases the files and the lock
    assert log.closed
