"""Consumer isolation levels and the read_committed rule: which batches belong to aborted transactions.

Kafka's consumer (``CompletedFetch.nextFetchedBatch`` at ``READ_COMMITTED``) is handed the aborted
transactions of a fetch (producer id, first offset) and walks the batches in order: a producer's
transaction counts as aborted from its first offset until its ABORT marker, and a *transactional*
batch of that producer inside that span is skipped. The ``.txnindex`` entry also names the marker's
offset (``last_offset``), so the walk is the interval test "transactional batch of producer P whose
base offset lies in ``[first_offset, last_offset]`` of an aborted transaction of P" (a producer has
at most one transaction open at a time, so its aborted spans never overlap). It runs vectorised over
every batch of a read at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

import numpy as np

from indexer.records.batch_header import TRANSACTIONAL_FLAG_MASK
from indexer.transaction_index import AbortedTxn

# (producer id, offset) pairs compare field by field, numerically, in sorts and searchsorted.
_KEY = np.dtype([("producer_id", np.int64), ("offset", np.int64)])


class IsolationLevel(Enum):
    """Kafka's ``isolation.level`` of a consumer (``read_uncommitted`` is Kafka's default)."""

    READ_UNCOMMITTED = "read_uncommitted"
    READ_COMMITTED = "read_committed"


def aborted_batch_mask(
    base_offsets: np.ndarray,
    producer_ids: np.ndarray,
    attributes: np.ndarray,
    aborted: Sequence[AbortedTxn],
) -> np.ndarray:
    """True for each batch a ``read_committed`` consumer skips (see the module docstring)."""
    n = base_offsets.shape[0]
    if not aborted or n == 0:
        return np.zeros(n, bool)
    spans = np.array([(t.producer_id, t.first_offset) for t in aborted], _KEY)
    lasts = np.array([t.last_offset for t in aborted], np.int64)
    order = np.argsort(spans, order=("producer_id", "offset"), kind="stable")
    spans, lasts = spans[order], lasts[order]
    keys = np.empty(n, _KEY)
    keys["producer_id"], keys["offset"] = producer_ids, base_offsets
    # The aborted span of the same producer starting at or before each batch, if any.
    found = np.searchsorted(spans, keys, side="right") - 1
    at = np.maximum(found, 0)
    mask: np.ndarray = (
        (found >= 0)
        & (spans["producer_id"][at] == producer_ids)
        & (base_offsets <= lasts[at])
        & ((attributes & TRANSACTIONAL_FLAG_MASK) != 0)
    )
    return mask
