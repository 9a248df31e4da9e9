"""The committed end offset of each partition of a log directory: what a crash must never lose.

Two records say what was committed, and the larger wins for each partition:

* ``replication-offset-checkpoint``: the high watermarks (what readers could see);
* the streaming sink's commit records ``seglog-sink.<id>.json`` (:mod:`indexer.commit_log`):
  the sink writes them *before* publishing the high watermark, so after a crash between the two
  they are ahead of the checkpoint (streaming/sink.py, steps 5 and 6).

Data at or above this offset that a dead writer left behind was never committed: the ``index`` job
truncates it, as the sink itself would before its next batch. Data below it that a recovery cut off
is reported as committed data lost by ``seglog recover``.
"""

from __future__ import annotations

import logging
from pathlib import Path

from indexer.checkpoint import OffsetCheckpointFile
from indexer.commit_log import COMMIT_FILE_PREFIX, COMMIT_FILE_SUFFIX, SinkCommitLog
from indexer.errors import StorageError
from indexer.file_names import REPLICATION_OFFSET_CHECKPOINT_FILE, TopicPartition

logger = logging.getLogger(__name__)



def sink_committed_offsets(log_dir: Path) -> dict[TopicPartition, int]:
    """Per partition, the largest end offset any sink commit record in ``log_dir`` holds."""
    out: dict[TopicPartition, int] = {}
    for path in sorted(log_dir.glob(f"{COMMIT_FILE_PREFIX}*{COMMIT_FILE_SUFFIX}")):
        sink_id = path.name[len(COMMIT_FILE_PREFIX) : -len(COMMIT_FILE_SUFFIX)]
        try:
            commit = SinkCommitLog(log_dir, sink_id).read()
        except (StorageError, ValueError) as e:
            logger.warning("ignoring sink commit record %s: %s", path, e)
            continue
        for tp, offset in commit.end_offsets.items():
            out[tp] = max(out.get(tp, 0), int(offset))
    return out


def committed_offsets(log_dir: Path) -> dict[TopicPartition, int]:
    """Per partition, max(high watermark checkpoint, sink commit records); absent = nothing known."""
    path = log_dir / REPLICATION_OFFSET_CHECKPOINT_FILE
    try:
        out = dict(OffsetCheckpointFile(path).read())
    except StorageError as e:
        logger.warning("ignoring unreadable checkpoint file %s: %s", path, e)
        out = {}
    for tp, offset in sink_committed_offsets(log_dir).items():
        out[tp] = max(out.get(tp, 0), offset)
    return out
