"""The committed end offset of each partition of a log directory: what a crash must never lose.

Two records say what was committed, and the larger wins for each partition:

* ``replication-offset-checkpoint``: the high watermarks (what readers could see);
* the streaming sink's commit records ``seglog-sink.<id>.json`` (:mod:`indexer.commit_log`):
  the sink writes them *before* publishing the high watermark, so after a crash between the two
  they are ahead of the checkpoint (streaming/sink.py, steps 5 and 6).

Data at or above this offset that a dead writer left behind was never committed: the daemon's first
borrow of the partition truncates it (:class:`maintenance.access.BorrowedLogs`, whichever job
borrows), and so does ``seglog append`` before it writes (:func:`cut_dead_writers_tail`), as the sink
itself would before its next batch, except a range that a sink's fence
(:mod:`indexer.sink_fence`) marks as written for a micro-batch that may still commit
(:func:`kept_offset`). Data below it that a recovery cut off is reported as committed data lost by
``seglog recover``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from indexer.checkpoint import read_checkpoint
from indexer.commit_log import SinkCommit, sink_commits
from indexer.errors import StorageError
from indexer.file_names import REPLICATION_OFFSET_CHECKPOINT_FILE, TopicPartition, partition_dir_name
from indexer.log import Log
from indexer.salvage import LostRange, merge_lost_ranges
from indexer.sink_fence import FenceFile, sink_fences

logger = logging.getLogger(__name__)


def sink_committed_offsets(log_dir: Path, commits: dict[str, SinkCommit] | None = None) -> dict[TopicPartition, int]:
    """Per partition, the largest end offset any sink commit record in ``log_dir`` (or ``commits``) holds."""
    out: dict[TopicPartition, int] = {}
    for commit in (sink_commits(log_dir) if commits is None else commits).values():
        for tp, offset in commit.end_offsets.items():
            out[tp] = max(out.get(tp, 0), int(offset))
    return out


def committed_offsets(log_dir: Path, commits: dict[str, SinkCommit] | None = None) -> dict[TopicPartition, int]:
    """Per partition, max(high watermark checkpoint, sink commit records); absent = nothing known.

    Raises:
        StorageError: ``replication-offset-checkpoint`` cannot be read (it cannot count as empty: a
            sink's records alone may lie below what a writer committed).
    """
    out = read_checkpoint(log_dir, REPLICATION_OFFSET_CHECKPOINT_FILE)
    for tp, offset in sink_committed_offsets(log_dir, commits).items():
        out[tp] = max(out.get(tp, 0), offset)
    return out


def kept_offset(log_dir: Path, tp: TopicPartition, partition_dir: Path) -> int | None:
    """The offset below which nothing of ``tp`` may be truncated; None: nothing may be.

    The larger of the committed offset (:func:`committed_offsets`) and what each sink's fence in
    ``partition_dir`` keeps (:meth:`indexer.sink_fence.FenceToken.kept_end`): the range a write task
    finished for a micro-batch whose driver has not committed it yet, which the driver will commit or
    a retry reuse; or the whole tail while an attempt is writing. None when neither a high watermark
    nor a sink record knows ``tp``, or a fence cannot be read.

    Call it with the partition's writer lock held (a borrowed partition): then no task can claim or
    finish a fence meanwhile, and a commit record read here can only have moved on to a fence's end.
    """
    commits = sink_commits(log_dir)
    kept = committed_offsets(log_dir, commits).get(tp)
    if kept is None:
        return None
    for sink_id in sink_fences(partition_dir):
        try:
            token = FenceFile(partition_dir, sink_id).read()
        except StorageError as e:
            logger.warning("keeping the whole tail of %s: %s", partition_dir, e)
            return None
        if token is not None:
            kept = max(kept, token.kept_end(commits.get(sink_id, SinkCommit(sink_id)), tp))
    return kept


def cut_dead_writers_tail(log_dir: Path, tp: TopicPartition, log: Log) -> int:
    """Truncate what a writer that died holding ``tp`` left above :func:`kept_offset` (never committed:
    a half-written batch or an append whose commit never came), logging it; how many offsets went.

    Every writer that takes over such a partition asks this before it writes (the daemon's first
    borrow, ``seglog append``): one appending after the tail, or moving the high watermark over it,
    would make records visible that were never committed. ``log`` is open for writing (its lock held).

    Raises:
        StorageError: ``replication-offset-checkpoint`` cannot be read, or the truncation fails.
    """
    end = kept_offset(log_dir, tp, log.directory)
    if end is None or not log.log_start_offset <= end < log.log_end_offset:
        return 0
    dropped = log.log_end_offset - end
    log.truncate_to(end)
    logger.warning(
        "%s: truncated %d uncommitted offsets above %d left by a dead writer", partition_dir_name(*tp), dropped, end
    )
    return dropped


def lost_offset_ranges(ranges: list[LostRange], log_end_offset: int, committed: int | None) -> list[dict[str, Any]]:
    """The offsets a partition lost, as ``{"first", "last", "committed"}`` ranges (``last``
    inclusive; None: records from ``first`` on, how many the files no longer say).

    ``ranges`` are what recovery removed; a log that ends below ``committed`` lost the rest up to it.
    A range crossing ``committed`` is split into its committed and uncommitted parts. A removed end
    of the log is bounded by ``committed``: what lay beyond it was never committed, and how many
    offsets it held is unknown (its bytes are in quarantine).
    """
    known = list(ranges)
    if committed is not None and log_end_offset < committed:
        known.append(LostRange(log_end_offset, committed))
    bound = committed if committed is not None else 0
    out: list[dict[str, Any]] = []
    for r in merge_lost_ranges(known):
        end = r.end if r.end is not None else max(bound, r.first)
        if r.first < min(end, bound):
            out.append({"first": r.first, "last": min(end, bound) - 1, "committed": True})
        if end > max(r.first, bound):
            out.append({"first": max(r.first, bound), "last": end - 1, "committed": False})
        if r.end is None and committed is None:
            out.append({"first": r.first, "last": None, "committed": False})
    return out
