"""``Log.collect_aborted_transactions`` and ``Log.last_stable_offset``: the read_committed API of the
engine, on a synthetic multi-segment ``.txnindex`` and on the broker-written ``transactions-commit``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from indexer.checkpoint import OffsetCheckpointFile
from indexer.config import LogConfig
from indexer.file_names import REPLICATION_OFFSET_CHECKPOINT_FILE, parse_topic_partition_name
from indexer.log import Log
from indexer.transaction_index import AbortedTxn

# Three segments at 0, 10 and 20 (10 records each). Each entry lives in the segment holding its ABORT
# marker (last_offset); the transaction itself may start in an earlier segment.
SEGMENT_TXNS = {
    0: [AbortedTxn(1, 0, 4, 0), AbortedTxn(2, 3, 8, 5)],
    10: [AbortedTxn(3, 6, 12, 9), AbortedTxn(4, 13, 15, 14)],
    20: [AbortedTxn(5, 21, 24, 22)],
}
ALL_TXNS = [txn for base in sorted(SEGMENT_TXNS) for txn in SEGMENT_TXNS[base]]


@pytest.fixture
def txn_log(tmp_path: Path) -> Iterator[Path]:
    directory = tmp_path / "t-0"
    with Log.open(directory, LogConfig()) as log:
        for base in (0, 10, 20):
            if base:
                log.roll()
            log.append({"value": [b"v"] * 10})
            for txn in SEGMENT_TXNS[base]:
                log.active_segment.txn_index.append(txn)
        log.update_high_watermark(log.log_end_offset)
        log.flush()
    yield directory


def brute_force(start: int, upper: int) -> list[AbortedTxn]:
    """Kafka's walk, record by record over the segments in order (the reference)."""
    found: list[AbortedTxn] = []
    first_base = max(base for base in SEGMENT_TXNS if base <= start)
    for base in sorted(b for b in SEGMENT_TXNS if b >= first_base):
        for txn in SEGMENT_TXNS[base]:
            if txn.last_offset >= start and txn.first_offset < upper:
                found.append(txn)
            if txn.last_stable_offset >= upper:
                return found
    return found


@pytest.mark.parametrize("read_only", [False, True])
def test_collect_walks_segments_until_a_complete_answer(txn_log: Path, read_only: bool) -> None:
    # Clean shutdown: nothing is recovered (a recovery keeps only the entries of the batches it keeps).
    with Log.open(txn_log, LogConfig(), read_only=read_only, had_clean_shutdown=True, high_watermark=30) as log:
        assert log.num_segments == 3
        assert log.collect_aborted_transactions(0, 30) == ALL_TXNS
        # Starts in segment 10: segment 0's entries are not searched, even if they overlap.
        assert log.collect_aborted_transactions(10, 30) == SEGMENT_TXNS[10] + SEGMENT_TXNS[20]
        # Complete in segment 0: txn 2's LSO 5 >= 5, so later segments are not searched.
        assert log.collect_aborted_transactions(0, 5) == [AbortedTxn(1, 0, 4, 0), AbortedTxn(2, 3, 8, 5)]
        # Only the range's overlaps: txn 1 ends before 5.
        assert log.collect_aborted_transactions(5, 9) == [AbortedTxn(2, 3, 8, 5), AbortedTxn(3, 6, 12, 9)]
        assert log.collect_aborted_transactions(25, 30) == []
        for start in range(0, 30):
            for upper in range(start, 31):
                assert log.collect_aborted_transactions(start, upper) == brute_force(start, upper), (start, upper)


def test_last_stable_offset_is_the_high_watermark(txn_log: Path) -> None:
    with Log.open(txn_log, LogConfig(), had_clean_shutdown=True, high_watermark=17) as log:
        assert log.last_stable_offset == 17
        log.update_high_watermark(log.log_end_offset)
        assert log.last_stable_offset == log.high_watermark == 30


def test_no_txnindex_means_nothing_aborted(tmp_path: Path) -> None:
    with Log.open(tmp_path / "t-0", LogConfig()) as log:
        assert log.collect_aborted_transactions(0, 0) == []
        log.append({"value": [b"x"] * 3})
        assert log.collect_aborted_transactions(0, 3) == []
        assert not list(tmp_path.glob("t-0/*.txnindex"))


def test_transactions_commit_vector(vectors_dir: Path) -> None:
    """A broker directory of committed transactions: transactional batches and COMMIT markers, no
    ``.txnindex`` entry, so nothing is aborted, and the LSO is the checkpointed high watermark."""
    log_dir = vectors_dir / "transactions-commit"
    high_watermarks = OffsetCheckpointFile(log_dir / REPLICATION_OFFSET_CHECKPOINT_FILE).read()
    transactional = 0
    for directory in sorted(p for p in log_dir.iterdir() if p.is_dir()):
        tp = parse_topic_partition_name(directory.name)
        if not list(directory.glob("*.log")):
            continue
        with Log.open(directory, LogConfig(), read_only=True, high_watermark=high_watermarks.get(tp)) as log:
            assert log.last_stable_offset == log.high_watermark
            assert log.collect_aborted_transactions(log.log_start_offset, log.high_watermark) == []
            for segment in log.segments.values():
                transactional += sum(batch.is_transactional for batch in segment.log.batches())
    assert transactional > 0  # the vector does hold transactions (committed ones)
