"""A damaged ``.txnindex`` is rebuilt from the ``.log``, never emptied: every layer that repairs it
(the loader, ``seglog recover``, the maintenance ``index`` job) leaves the entries Kafka's segment
recovery writes, so ``read_committed`` reads keep leaving out the aborted transaction's records.

The partition is :data:`~tests.indexer.test_read_committed.LAYOUT` in three segments (bases 0, 7,
12): producer 7's aborted transaction begins at offset 2 in segment 0 and its ABORT marker (7) is in
segment 7, while producer 8's transaction (from 5) is still open, so the entry of segment 7 is
``(7, first 2, last 7, lso 5)``, and its first offset lies in an earlier segment.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from indexer.clock import MockClock
from indexer.config import LogConfig, Settings
from indexer.file_names import transaction_index_file
from indexer.index_check import segment_index_problem
from indexer.log import Log
from indexer.records.isolation import IsolationLevel
from indexer.transaction_index import AbortedTxn, TransactionIndex
from maintenance.access import BorrowedLogs
from maintenance.jobs import JOBS
from maintenance.recovery import recover_log_dir
from tests.indexer.test_read_committed import ABORTED, COMMITTED_OFFSETS, write_transactional_partition
from tests.maintenance.conftest import START_MS

BASES = (0, 7, 12)
MARKER_SEGMENT = 7

# What the loader's check finds (Kafka's, and a torn entry), then what only a check against the log finds.
DAMAGES: dict[str, Callable[[bytes], bytes | None]] = {
    "unknown-version": lambda good: b"\x07" * 34,
    "last-offset-below-base": lambda good: AbortedTxn(7, 2, 3, 5).to_bytes(),
    "torn-entry": lambda good: good[:20],
}
AGAINST_LOG: dict[str, Callable[[bytes], bytes | None]] = {
    "emptied": lambda good: b"",
    "deleted": lambda good: None,
    "wrong-marker": lambda good: AbortedTxn(7, 2, 9, 5).to_bytes(),
}


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The partition, opened and closed once by the engine (so its offset and time indexes exist)."""
    log_dir = tmp_path_factory.mktemp("template") / "logs"
    write_transactional_partition(log_dir / "tx-0", BASES)
    (log_dir / "replication-offset-checkpoint").write_text("0\n1\ntx 0 14\n")
    Log.open(log_dir / "tx-0", LogConfig(), clock=MockClock(START_MS)).close()
    return log_dir


def damaged_copy(template: Path, tmp_path: Path, damage: str) -> Path:
    log_dir = tmp_path / "logs"
    shutil.copytree(template, log_dir)
    path = transaction_index_file(log_dir / "tx-0", MARKER_SEGMENT)
    damaged = {**DAMAGES, **AGAINST_LOG}[damage](path.read_bytes())
    if damaged is None:
        path.unlink()
    else:
        path.write_bytes(damaged)
    return log_dir


def assert_rebuilt(log_dir: Path) -> None:
    """The ``.txnindex`` holds the broker's entry again, and read_committed reads leave out 2..4."""
    index = TransactionIndex(transaction_index_file(log_dir / "tx-0", MARKER_SEGMENT), MARKER_SEGMENT)
    try:
        assert index.all_aborted_txns() == ABORTED
    finally:
        index.close()
    with Log.open(log_dir / "tx-0", LogConfig(), read_only=True, high_watermark=14) as log:
        committed = log.read_records(0, isolation_level=IsolationLevel.READ_COMMITTED)
        assert committed.column("offset").to_pylist() == COMMITTED_OFFSETS
        # From inside the aborted transaction, in the segment of its marker, and from the marker on.
        for start in (3, 7, 8):
            read = log.read_records(start, isolation_level=IsolationLevel.READ_COMMITTED)
            assert read.column("offset").to_pylist() == [o for o in COMMITTED_OFFSETS if o >= start], start
    assert segment_index_problem(log_dir / "tx-0", MARKER_SEGMENT, next_base_offset=12, against_log=True) is None


@pytest.mark.parametrize("damage", sorted({**DAMAGES, **AGAINST_LOG}))
def test_the_index_job_rebuilds_a_damaged_transaction_index(template: Path, tmp_path: Path, damage: str) -> None:
    """The ``index`` job found the ``.txnindex`` of segment 7 failing its check and emptied it: read_committed
    reads then returned the aborted records 2..4 (a torn, emptied, deleted or wrong file was not even found)."""
    log_dir = damaged_copy(template, tmp_path, damage)
    report = JOBS["index"].fn(BorrowedLogs(log_dir, Settings(), clock=MockClock(START_MS)))
    assert report.errors == [], report.errors
    assert any("txnindex" in finding for finding in report.findings), report.findings
    assert_rebuilt(log_dir)


@pytest.mark.parametrize("damage", sorted({**DAMAGES, **AGAINST_LOG}))
def test_recovery_rebuilds_a_damaged_transaction_index(template: Path, tmp_path: Path, damage: str) -> None:
    """``seglog recover`` (every segment recovered) emptied a ``.txnindex`` failing Kafka's check, and
    kept a wrong one that passed it."""
    log_dir = damaged_copy(template, tmp_path, damage)
    outcome = recover_log_dir(log_dir, Settings(), progress=False)
    assert [p.status for p in outcome.partitions] == ["recovered"]
    assert_rebuilt(log_dir)


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_loading_rebuilds_a_damaged_transaction_index(template: Path, tmp_path: Path, damage: str) -> None:
    """Opening the partition (the loader's index check) recovered the segment and emptied its ``.txnindex``."""
    log_dir = damaged_copy(template, tmp_path, damage)
    Log.open(
        log_dir / "tx-0", LogConfig(), had_clean_shutdown=True, recovery_point=14, clock=MockClock(START_MS)
    ).close()
    assert_rebuilt(log_dir)


def test_a_transaction_begun_before_the_first_segment_is_said_and_indexed_from_what_is_left(
    template: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Segment 0 gone (retention): producer 7's transaction began there, its records 2..4 with it, so its
    ABORT marker in segment 7 hides nothing that is left; as Kafka replaying from the log start, the
    rebuilt file has no entry for it, and one WARNING names the file and the marker."""
    log_dir = damaged_copy(template, tmp_path, "unknown-version")
    for path in (log_dir / "tx-0").glob("00000000000000000000.*"):
        path.unlink()
    caplog.set_level(logging.WARNING)
    Log.open(log_dir / "tx-0", LogConfig(), clock=MockClock(START_MS)).close()
    path = transaction_index_file(log_dir / "tx-0", MARKER_SEGMENT)
    assert path.read_bytes() == b""
    lines = [r.getMessage() for r in caplog.records if "ABORT marker" in r.getMessage()]
    assert len(lines) == 1 and str(path) in lines[0] and "offset 7" in lines[0], lines
    with Log.open(log_dir / "tx-0", LogConfig(), read_only=True, high_watermark=14) as log:
        committed = log.read_records(7, isolation_level=IsolationLevel.READ_COMMITTED)
        assert committed.column("offset").to_pylist() == [8, 9, 12, 13]
