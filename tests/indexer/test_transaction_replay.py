"""The ``.txnindex`` rebuild (:mod:`indexer.transaction_replay`) writes what Kafka's segment recovery
writes: random interleavings of producers' transactions, cut into random segments, are recovered by
the loader (every segment's ``.txnindex`` rewritten from the log) and each file is compared with a
record-by-record model of Kafka's ``ProducerStateManager`` (first offsets in earlier segments, last
stable offsets from other producers' open transactions, empty transactions, plain batches)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from indexer.config import LogConfig
from indexer.file_names import log_file, transaction_index_file
from indexer.index_check import segment_index_problems
from indexer.log import Log
from indexer.records.control import encode_end_txn_marker_batch
from indexer.transaction_index import AbortedTxn, TransactionIndex
from tests.indexer.helpers import producer_batch

# One step: (producer 0..3 or -1 for a plain batch, 0 = data, 1 = ABORT, 2 = COMMIT).
STEPS = st.lists(st.tuples(st.integers(-1, 3), st.integers(0, 2)), min_size=1, max_size=40)


def kafka_model(steps: list[tuple[int, int]]) -> list[AbortedTxn]:
    """Kafka's replay, one offset per step: a data batch opens its producer's transaction, a marker
    ends an open one (an ABORT gives an entry whose LSO is the earliest other open transaction's first
    offset, else the marker + 1) and is ignored otherwise."""
    ongoing: dict[int, int] = {}
    entries = []
    for offset, (producer, action) in enumerate(steps):
        if producer < 0 or action == 0:
            if producer >= 0:
                ongoing.setdefault(producer, offset)
            continue
        if producer in ongoing:
            first = ongoing.pop(producer)
            lso = min(ongoing.values(), default=offset + 1)
            if action == 1:
                entries.append(AbortedTxn(producer, first, offset, lso))
    return entries


def batch_bytes(offset: int, producer: int, action: int) -> bytes:
    if producer >= 0 and action:
        return encode_end_txn_marker_batch(
            base_offset=offset,
            producer_id=producer,
            producer_epoch=0,
            coordinator_epoch=0,
            commit=action == 2,
            timestamp_ms=1000 + offset,
        )
    return producer_batch(offset, 1, producer)


@settings(max_examples=60, deadline=None)
@given(steps=STEPS, cuts=st.sets(st.integers(1, 39), max_size=4))
def test_recovery_rebuilds_every_txnindex_as_kafka(steps: list[tuple[int, int]], cuts: set[int]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        check_rebuild(Path(tmp) / "tx-0", steps, cuts)


def check_rebuild(directory: Path, steps: list[tuple[int, int]], cuts: set[int]) -> None:
    """Write ``steps`` cut at ``cuts`` into ``directory``, let the loader recover it, compare with Kafka."""
    directory.mkdir()
    bases = sorted({0, *(c for c in cuts if c < len(steps))})
    for base, end in zip(bases, [*bases[1:], len(steps)], strict=True):
        log_file(directory, base).write_bytes(b"".join(batch_bytes(o, *steps[o]) for o in range(base, end)))
    Log.open(directory, LogConfig()).close()  # no offset index anywhere: every segment is recovered
    expected = kafka_model(steps)
    for base, end in zip(bases, [*bases[1:], len(steps)], strict=True):
        index = TransactionIndex(transaction_index_file(directory, base), base, writable=False)
        try:
            assert index.all_aborted_txns() == [t for t in expected if base <= t.last_offset < end], base
        finally:
            index.close()
        following = end if end < len(steps) else None
        assert segment_index_problems(directory, base, next_base_offset=following, against_log=True) == []
