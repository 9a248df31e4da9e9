"""Per-partition fencing tokens of the executor-side sink: which task attempt may write a partition.

A Spark task attempt that writes partition ``<topic>-<p>`` for micro-batch N first *claims* the
partition: under the partition's writer lock it replaces ``<partition dir>/.seglog-sink.<sink_id>.fence``
with its token (query id, batch id, attempt id, the offset it starts at). It then checks, still under
the lock, that the file holds its token before every append and before any truncation, and marks it
``done`` with the end offset once the partition is fsynced::

    {"version": 1, "query_id": "dfe183bc-...", "batch_id": 41, "attempt": "3f2a.../17",
     "start": 1234, "end": 1300, "state": "done"}

The writer lock alone does not keep a stale attempt out: an executor declared lost may still be
running (a long GC pause, a network partition) and, on a shared filesystem such as NFS, lose its lock
(the server's lease expires) while it goes on writing. The fence makes such a zombie stop at its next
check instead of extending, interleaving with or cutting a newer attempt's bytes; what it may still do
between a check and the write that follows is made harmless by deterministic encoding (every attempt
of a micro-batch writes the same bytes at the same positions; see docs/streaming.md).

The file is replaced atomically (tmp, fsync, rename, directory fsync) so a crash leaves the old token
or the new one. It is a dot file inside the partition directory: the log loader and Kafka ignore it.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from indexer.checkpoint import TMP_SUFFIX, fsync_directory
from indexer.errors import FencedError, StorageError, storage_errors

FORMAT_VERSION = 1
WRITING, DONE = "writing", "done"


def fence_file(partition_dir: str | os.PathLike[str], sink_id: str) -> Path:
    """Path of ``sink_id``'s fence in a partition directory."""
    return Path(partition_dir) / f".seglog-sink.{sink_id}.fence"


@dataclass(frozen=True)
class FenceToken:
    """Who writes a partition for which micro-batch, from which offset; ``end`` once ``done``."""

    query_id: str
    batch_id: int
    attempt: str
    start: int
    end: int = -1
    state: str = WRITING

    def same_attempt(self, other: FenceToken | None) -> bool:
        """Whether ``other`` is this very attempt's token (whatever its state)."""
        return other is not None and (other.query_id, other.batch_id, other.attempt) == (
            self.query_id,
            self.batch_id,
            self.attempt,
        )

    def same_batch(self, other: FenceToken | None) -> bool:
        """Whether ``other`` was written by an attempt of the same micro-batch of the same query."""
        return other is not None and (other.query_id, other.batch_id) == (self.query_id, self.batch_id)


class PartitionFence:
    """Reads, claims and checks one partition's fence. The caller holds the partition's writer lock."""

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
        tmp = self.path.with_name(self.path.name + TMP_SUFFIX)
        with storage_errors(tmp, "write fence"):
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            try:
                os.write(fd, body)
                os.fsync(fd)
            finally:
                os.close(fd)
        with storage_errors(tmp, "rename fence", target=self.path):
            os.replace(tmp, self.path)
            fsync_directory(self.path.parent)

    def check(self, token: FenceToken) -> None:
        """Raise :class:`FencedError` unless the file holds ``token``'s attempt.

        Raises:
            FencedError: another attempt claimed the partition since ``token`` did.
        """
        current = self.read()
        if not token.same_attempt(current):
            raise FencedError(
                f"{self.path.parent}: attempt {token.attempt} of batch {token.batch_id} was fenced off by "
                f"{'nobody' if current is None else f'attempt {current.attempt} of batch {current.batch_id}'}",
                path=self.path,
            )
