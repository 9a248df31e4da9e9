"""``Log.read_records(isolation_level=READ_COMMITTED)``: aborted transactions' batches are left out,
reads stop at the last stable offset; checked on a broker-shaped transactional partition and, for the
batch rule itself, against a record-by-record replay of Kafka's consumer walk (hypothesis)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from indexer.config import LogConfig
from indexer.file_names import log_file, transaction_index_file
from indexer.log import Log
from indexer.records.batch_header import TRANSACTIONAL_FLAG_MASK
from indexer.records.control import encode_end_txn_marker_batch
from indexer.records.isolation import IsolationLevel, aborted_batch_mask
from indexer.transaction_index import AbortedTxn, TransactionIndex
from tests.indexer.helpers import producer_batch

# (first offset, records or marker, producer id, transactional): the partition a broker would write for
# producer 7 aborting a transaction while producer 8's transaction stays open, then both committing.
LAYOUT: list[tuple[int, int | str, int]] = [
    (0, 2, -1),  # plain records 0-1
    (2, 3, 7),  # txn of producer 7: 2-4 (aborted)
    (5, 2, 8),  # txn of producer 8: 5-6 (committed later)
    (7, "abort", 7),
    (8, 2, 7),  # producer 7's next txn: 8-9 (committed)
    (10, "commit", 8),
    (11, "commit", 7),
    (12, 2, -1),  # plain records 12-13
]
ABORTED = [AbortedTxn(producer_id=7, first_offset=2, last_offset=7, last_stable_offset=5)]
COMMITTED_OFFSETS = [0, 1, 5, 6, 8, 9, 12, 13]
ALL_OFFSETS = [0, 1, 2, 3, 4, 5, 6, 8, 9, 12, 13]


def write_transactional_partition(directory: Path, bases: tuple[int, ...] = (0,)) -> None:
    """:data:`LAYOUT` in segments starting at ``bases`` (one segment by default), each ``.txnindex``
    holding the aborted transactions whose ABORT marker is in its segment (as a broker leaves them)."""
    directory.mkdir(parents=True)
    pieces: dict[int, list[bytes]] = {base: [] for base in bases}
    for first, what, producer in LAYOUT:
        segment = max(b for b in bases if b <= first)
        if isinstance(what, str):
            pieces[segment].append(
                encode_end_txn_marker_batch(
                    base_offset=first,
                    producer_id=producer,
                    producer_epoch=0,
                    coordinator_epoch=0,
                    commit=what == "commit",
                    timestamp_ms=1000 + first,
                )
            )
            continue
        pieces[segment].append(producer_batch(first, what, producer))
    for base, data in pieces.items():
        log_file(directory, base).write_bytes(b"".join(data))
    for txn in ABORTED:
        base = max(b for b in bases if b <= txn.last_offset)
        index = TransactionIndex(transaction_index_file(directory, base), base)
        index.append(txn)
        index.close()


def _offsets(table: pa.Table) -> list[int]:
    return [int(o) for o in table.column("offset").to_pylist()]


def test_read_committed_leaves_out_aborted_batches(tmp_path: Path) -> None:
    directory = tmp_path / "tx-0"
    write_transactional_partition(directory)
    with Log.open(directory, LogConfig(), read_only=True) as log:
        assert log.log_end_offset == 14
        assert _offsets(log.read_records(0)) == ALL_OFFSETS
        committed = log.read_records(0, isolation_level=IsolationLevel.READ_COMMITTED)
        assert _offsets(committed) == COMMITTED_OFFSETS
        assert committed.column("value").to_pylist()[2] == b"v5"
        # Starting inside the aborted transaction, and bounded reads.
        assert _offsets(log.read_records(3, isolation_level=IsolationLevel.READ_COMMITTED)) == [5, 6, 8, 9, 12, 13]
        assert _offsets(log.read_records(0, 3, isolation_level=IsolationLevel.READ_COMMITTED)) == [0, 1, 5]
        assert _offsets(log.read_records(8, max_offset=10, isolation_level=IsolationLevel.READ_COMMITTED)) == [8, 9]


def _kafka_consumer_walk(
    base: np.ndarray, pids: np.ndarray, txn: np.ndarray, markers: np.ndarray, aborted: list[AbortedTxn]
) -> np.ndarray:
    """Kafka's ``CompletedFetch`` walk (aborted producer set fed by first offsets, ABORT markers remove)."""
    pending = sorted(aborted, key=lambda t: t.first_offset)
    active: set[int] = set()
    skipped = np.zeros(base.shape[0], bool)
    for i in range(base.shape[0]):
        while pending and pending[0].first_offset <= base[i]:
            active.add(pending.pop(0).producer_id)
        if markers[i]:
            active.discard(int(pids[i]))
        elif txn[i] and int(pids[i]) in active:
            skipped[i] = True
    return skipped


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.booleans(), st.integers(0, 2)), min_size=1, max_size=40))
def test_batch_mask_matches_kafka_consumer_walk(steps: list[tuple[int, bool, int]]) -> None:
    """Random interleavings of producers' transactions (each batch: producer, transactional, and 0 = data,
    1 = ABORT, 2 = COMMIT closing that producer's open transaction) agree with Kafka's walk."""
    base, pids, txn, markers = [], [], [], []
    open_since: dict[int, int] = {}
    aborted: list[AbortedTxn] = []
    for offset, (producer, transactional, action) in enumerate(steps):
        if action and producer in open_since:
            if action == 1:
                aborted.append(AbortedTxn(producer, open_since[producer], offset, 0))
            del open_since[producer]
            base.append(offset), pids.append(producer), txn.append(True), markers.append(action == 1)
            continue
        if transactional:
            open_since.setdefault(producer, offset)
        base.append(offset), pids.append(producer), txn.append(transactional), markers.append(False)
    arrays = np.array(base, np.int64), np.array(pids, np.int64), np.array(txn), np.array(markers)
    attributes = np.where(arrays[2], TRANSACTIONAL_FLAG_MASK, 0).astype(np.int64)
    mask = aborted_batch_mask(arrays[0], arrays[1], attributes, aborted)
    expected = _kafka_consumer_walk(*arrays, aborted)
    data = ~arrays[3]  # markers are control batches, left out in any case
    assert (mask[data] == expected[data]).all()
