"""Fencing of the executor-side sink: which task attempt may write a partition.

A Spark task attempt that writes partition ``<topic>-<p>`` for micro-batch N first *claims* the
partition: under the partition's writer lock it replaces the partition's fence
(:mod:`indexer.sink_fence`, the record's format) with its token (query id, batch id, attempt id,
the offset it starts at). It then checks, still under the lock, that the file holds its token before
every append and before any truncation, and marks it ``done`` with the end offset once the partition
is fsynced.

The writer lock alone does not keep a stale attempt out: an executor declared lost may still be
running (a long GC pause, a network partition) and, on a shared filesystem such as NFS, lose its lock
(the server's lease expires) while it goes on writing. The fence makes such a zombie stop at its next
check instead of extending, interleaving with or cutting a newer attempt's bytes; what it may still do
between a check and the write that follows is made harmless by deterministic encoding (every attempt
of a micro-batch writes the same bytes at the same positions; see docs/streaming.md).
"""

from __future__ import annotations

from indexer.errors import FencedError
from indexer.sink_fence import FenceFile, FenceToken


def same_attempt(token: FenceToken, other: FenceToken | None) -> bool:
    """Whether ``other`` is ``token``'s very attempt (whatever its state)."""
    return other is not None and (other.query_id, other.batch_id, other.attempt) == (
        token.query_id,
        token.batch_id,
        token.attempt,
    )


def same_batch(token: FenceToken, other: FenceToken | None) -> bool:
    """Whether ``other`` was written by an attempt of ``token``'s micro-batch of the same query."""
    return other is not None and (other.query_id, other.batch_id) == (token.query_id, token.batch_id)


class PartitionFence(FenceFile):
    """Reads, claims and checks one partition's fence. The caller holds the partition's writer lock."""

    def check(self, token: FenceToken) -> None:
        """Raise :class:`FencedError` unless the file holds ``token``'s attempt.

        Raises:
            FencedError: another attempt claimed the partition since ``token`` did.
        """
        current = self.read()
        if not same_attempt(token, current):
            raise FencedError(
                f"{self.path.parent}: attempt {token.attempt} of batch {token.batch_id} was fenced off by "
                f"{'nobody' if current is None else f'attempt {current.attempt} of batch {current.batch_id}'}",
                path=self.path,
            )
