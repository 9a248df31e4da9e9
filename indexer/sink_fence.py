"""The executor-side sink's fence record: per partition, which task attempt last claimed it for which
micro-batch and, once it finished, the range of offsets it wrote.

One JSON file per sink in each partition directory, ``<partition dir>/.seglog-sink.<sink_id>.fence``::

    {"version": 1, "query_id": "dfe183bc-...", "batch_id": 41, "attempt": "3f2a.../17",
     "start": 1234, "end": 1300, "state": "done"}

``state`` is ``writing`` from the claim until the partition is fsynced, then ``done`` with ``end``
(exclusive; -1 while writing). The file is replaced atomically (tmp, fsync, rename, directory fsync)
so a crash leaves the old token or the new one. It is a dot file inside the partition directory: the
log loader and Kafka ignore it.

Like the sink's commit record (:mod:`indexer.commit_log`) it is a file of the log directory, so its
format lives in the engine: the sink's write protocol (:mod:`streaming.fence`,
:mod:`streaming.executor_writes`) writes it under the partition's writer lock, and maintenance reads
it (:func:`FenceToken.kept_end`) so that it never truncates a range that may still commit.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from indexer.checkpoint import write_atomically
from indexer.commit_log import SinkCommit
from indexer.errors import StorageError, storage_errors
from indexer.file_names import TopicPartition
from indexer.limits import INT64_MAX

FORMAT_VERSION = 1
WRITING, DONE = "writing", "done"
FENCE_FILE_PREFIX = ".seglog-sink."
FENCE_FILE_SUFFIX = ".fence"


def fence_file(partition_dir: str | os.PathLike[str], sink_id: str) -> Path:
    """Path of ``sink_id``'s fence in a partition directory."""
    return Path(partition_dir) / f"{FENCE_FILE_PREFIX}{sink_id}{FENCE_FILE_SUFFIX}"


def sink_fences(partition_dir: str | os.PathLike[str]) -> dict[str, Path]:
    """Every sink's fence in a partition directory, by sink id."""
    return {
        path.name[len(FENCE_FILE_PREFIX) : -len(FENCE_FILE_SUFFIX)]: path
        for path in sorted(Path(partition_dir).glob(f"{FENCE_FILE_PREFIX}*{FENCE_FILE_SUFFIX}"))
    }


@dataclass(frozen=True)
class FenceToken:
    """Who writes a partition for which micro-batch, from which offset; ``end`` once ``done``."""

    query_id: str
    batch_id: int
    attempt: str
    start: int
    end: int = -1
    state: str = WRITING

    def kept_end(self, commit: SinkCommit, tp: TopicPartition) -> int:
        """The offset below which nothing of partition ``tp`` may be truncated on this token's account,
        given the sink's commit record ``commit``; -1 when the token keeps nothing.

        The token's micro-batch may still commit while the record has not committed it and still ends
        ``tp`` where the token starts (the driver commits only ranges that start at the committed end,
        and a later attempt reuses a ``done`` range only from there). Then:

        * ``done``: ``end``: the range is complete and a retry or a replay of the batch reuses it as it
          is, so cutting it would make the driver commit offsets that are gone;
        * ``writing``: everything (:data:`~indexer.limits.INT64_MAX`): the attempt died or is still
          running (a zombie that lost its lock on a shared filesystem); only the sink's next attempt,
          which fences it off first, may cut its bytes.
        """
        if commit.is_committed(self.query_id, self.batch_id) or commit.end_offsets.get(tp, self.start) != self.start:
            return -1
        return self.end if self.state == DONE else INT64_MAX


class FenceFile:
    """Reads and atomically replaces one sink's fence in one partition directory. Writers hold the
    partition's writer lock."""

    def __init__(self, partition_dir: str | os.PathLike[str], sink_id: str) -> None:
        self.path = fence_file(partition_dir, sink_id)

    def read(self) -> FenceToken | None:
        """The current token, None if no attempt ever claimed the partition.

        Raises:
            StorageError: the file exists but cannot be read or parsed.
        """
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise StorageError(f"cannot read fence {self.path}: {e.strerror}", path=self.path, errno=e.errno) from e
        try:
            doc: dict[str, Any] = json.loads(raw)
            if doc.pop("version") != FORMAT_VERSION:
                raise ValueError("unknown version")
            return FenceToken(**doc)
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise StorageError(f"fence {self.path} is malformed: {e!r}", path=self.path) from e

    def write(self, token: FenceToken) -> None:
        """Replace the token atomically (tmp, fsync, rename, directory fsync)."""
        body = json.dumps({"version": FORMAT_VERSION, **asdict(token)}, sort_keys=True).encode("utf-8")
        with storage_errors(self.path, "write fence"):
            write_atomically(self.path, body)
