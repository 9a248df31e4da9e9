"""The sink's commit record: which Spark batch last committed, and where each partition then ended.

One JSON file per sink in the log directory, ``<log_dir>/seglog-sink.<sink_id>.json``::

    {
      "version": 1,
      "sink_id": "events",
      "query_id": "dfe183bc-4458-4fbd-8d4a-1c1f8d60c048",   # Spark's checkpoint identity
      "batch_id": 41,                                       # last committed micro-batch, -1 = none
      "committed_at_ms": 1700000000000,
      "end_offsets": {"events": {"0": 1234, "1": 1199}},    # per topic, per partition: exclusive end
      "earlier_queries": {"5b1e...": 17}                    # last committed batch of each earlier query
    }

``earlier_queries`` keeps, for every query that committed to the sink before the current one, its
last committed batch: a query that comes back (an old checkpoint resumed, a backfill rerun under its
name) finds its committed batches skipped, not written a second time after another query's. Records
written without it read as having no earlier query.

Writing it is the sink's commit point. A write goes to ``<file>.tmp``, is fsynced, renamed over the
file and the directory is fsynced, so a crash leaves the old record or the new one, never a mix.
It is a file, not a directory, beside the partition directories: Kafka's ``LogManager`` (and ours)
loads every directory of a log dir as a ``<topic>-<partition>`` and ignores plain files.

While a sink is open it holds ``<log_dir>/seglog-sink.<sink_id>.lock`` (:class:`~indexer.lock.FileLock`):
two writers of one record would each commit from what they read before the other's commit.

Like the checkpoint files, it is a file of the log directory, so it lives in the engine: the sink
(:mod:`streaming.sink`) writes it and maintenance (:mod:`maintenance.committed`) reads it.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from indexer.checkpoint import write_atomically
from indexer.errors import StorageError, storage_errors
from indexer.file_names import TopicPartition

logger = logging.getLogger(__name__)

COMMIT_FILE_PREFIX = "seglog-sink."
COMMIT_FILE_SUFFIX = ".json"
SINK_LOCK_SUFFIX = ".lock"
FORMAT_VERSION = 1
NO_BATCH = -1

_SINK_ID = re.compile(r"[A-Za-z0-9._-]{1,200}")


def commit_file(log_dir: str | os.PathLike[str], sink_id: str) -> Path:
    """Path of the commit record of ``sink_id`` in ``log_dir``."""
    if not _SINK_ID.fullmatch(sink_id) or sink_id in (".", ".."):
        raise ValueError(f"sink id {sink_id!r} must be 1-200 ASCII letters, digits, '.', '_' or '-'")
    return Path(log_dir) / f"{COMMIT_FILE_PREFIX}{sink_id}{COMMIT_FILE_SUFFIX}"


def sink_lock_file(log_dir: str | os.PathLike[str], sink_id: str) -> Path:
    """Path of the lock a sink of ``sink_id`` holds in ``log_dir`` while it is open: one writer per sink id."""
    return commit_file(log_dir, sink_id).with_suffix(SINK_LOCK_SUFFIX)


@dataclass(frozen=True)
class SinkCommit:
    """One commit record; ``end_offsets`` maps (topic, partition) to the committed end offset (exclusive)."""

    sink_id: str
    query_id: str | None = None
    batch_id: int = NO_BATCH
    end_offsets: Mapping[TopicPartition, int] = field(default_factory=dict)
    committed_at_ms: int = 0
    earlier_queries: Mapping[str, int] = field(default_factory=dict)

    def is_committed(self, query_id: str, batch_id: int) -> bool:
        """True if batch ``batch_id`` of the Spark query ``query_id`` already committed (as the current
        query or as an earlier one)."""
        if query_id == self.query_id:
            return batch_id <= self.batch_id
        return batch_id <= self.earlier_queries.get(query_id, NO_BATCH)

    def successor(
        self, query_id: str, batch_id: int, end_offsets: Mapping[TopicPartition, int], committed_at_ms: int
    ) -> SinkCommit:
        """The record that commits batch ``batch_id`` of ``query_id`` after this one: when another query
        takes over the sink, this record's query and last batch join :attr:`earlier_queries`."""
        earlier = dict(self.earlier_queries)
        if self.query_id is not None and self.query_id != query_id and self.batch_id != NO_BATCH:
            earlier[self.query_id] = self.batch_id
            logger.info(
                "sink %s: query %s takes over from query %s (its last batch %d)",
                self.sink_id,
                query_id,
                self.query_id,
                self.batch_id,
            )
        earlier.pop(query_id, None)
        return SinkCommit(self.sink_id, query_id, batch_id, end_offsets, committed_at_ms, earlier)

    def to_json(self) -> dict[str, Any]:
        by_topic: dict[str, dict[str, int]] = {}
        for (topic, partition), offset in sorted(self.end_offsets.items()):
            by_topic.setdefault(topic, {})[str(partition)] = int(offset)
        return {
            "version": FORMAT_VERSION,
            "sink_id": self.sink_id,
            "query_id": self.query_id,
            "batch_id": self.batch_id,
            "committed_at_ms": self.committed_at_ms,
            "end_offsets": by_topic,
            "earlier_queries": {str(query): int(batch) for query, batch in sorted(self.earlier_queries.items())},
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], *, path: Path) -> SinkCommit:
        """Parse a record; anything malformed raises :class:`StorageError` naming ``path``."""
        try:
            if doc["version"] != FORMAT_VERSION:
                raise StorageError(
                    f"sink commit record {path} has version {doc['version']!r}, expected {FORMAT_VERSION}", path=path
                )
            end_offsets = {
                (str(topic), int(partition)): int(offset)
                for topic, partitions in doc["end_offsets"].items()
                for partition, offset in partitions.items()
            }
            query_id = doc["query_id"]
            return cls(
                sink_id=str(doc["sink_id"]),
                query_id=None if query_id is None else str(query_id),
                batch_id=int(doc["batch_id"]),
                end_offsets=end_offsets,
                committed_at_ms=int(doc["committed_at_ms"]),
                earlier_queries={str(q): int(b) for q, b in doc.get("earlier_queries", {}).items()},
            )
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise StorageError(f"sink commit record {path} is malformed: {e!r}", path=path) from e


class SinkCommitLog:
    """Reads and atomically replaces one sink's commit record.

    Not thread-safe: the sink serialises its batches. A crash during :meth:`write` leaves the
    previous record intact (plus possibly a stale ``.tmp`` that the next write replaces).
    """

    def __init__(self, log_dir: str | os.PathLike[str], sink_id: str) -> None:
        self.sink_id = sink_id
        self.path = commit_file(log_dir, sink_id)

    def read(self) -> SinkCommit:
        """The current record, or an empty one (batch -1, no offsets) if the sink never committed.

        Raises:
            StorageError: the file exists but cannot be read or parsed.
        """
        try:
            with storage_errors(self.path, "read sink commit record"):
                raw = self.path.read_bytes()
        except StorageError as e:
            if e.errno == errno.ENOENT:
                return SinkCommit(sink_id=self.sink_id)
            raise
        try:
            doc = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise StorageError(f"sink commit record {self.path} is not valid JSON: {e}", path=self.path) from e
        if not isinstance(doc, dict):
            raise StorageError(f"sink commit record {self.path} is not a JSON object", path=self.path)
        commit = SinkCommit.from_json(doc, path=self.path)
        if commit.sink_id != self.sink_id:
            raise StorageError(
                f"sink commit record {self.path} belongs to sink {commit.sink_id!r}, not {self.sink_id!r}",
                path=self.path,
            )
        return commit

    def write(self, commit: SinkCommit) -> None:
        """Replace the record atomically (tmp, fsync, rename, directory fsync).

        Raises:
            StorageError: the write failed; the previous record is intact.
        """
        body = (json.dumps(commit.to_json(), indent=2, sort_keys=True) + "\n").encode("utf-8")
        with storage_errors(self.path, "write sink commit record"):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(self.path, body)
        logger.debug("sink %s committed batch %d of query %s", self.sink_id, commit.batch_id, commit.query_id)


def sink_commits(log_dir: str | os.PathLike[str]) -> dict[str, SinkCommit]:
    """Every sink's commit record in ``log_dir``, by sink id; unreadable ones are logged and left out."""
    out: dict[str, SinkCommit] = {}
    for path in sorted(Path(log_dir).glob(f"{COMMIT_FILE_PREFIX}*{COMMIT_FILE_SUFFIX}")):
        sink_id = path.name[len(COMMIT_FILE_PREFIX) : -len(COMMIT_FILE_SUFFIX)]
        try:
            out[sink_id] = SinkCommitLog(log_dir, sink_id).read()
        except (StorageError, ValueError) as e:
            logger.warning("ignoring sink commit record %s: %s", path, e)
    return out
