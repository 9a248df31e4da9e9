"""Committed consumer-group offsets, kept durably in one checkpoint file of the log directory.

A broker keeps them in the ``__consumer_offsets`` topic; ``seglog serve`` never writes a log, so it
keeps them in ``group-offsets-checkpoint`` (in the log directory unless told otherwise), written the
way Kafka writes its checkpoint files (:class:`indexer.checkpoint.CheckpointFile`: a version line, a
count line, one entry per line; replaced atomically through ``.tmp``, fsync, rename and a directory
fsync), so a crash leaves the previous or the new file, never a mix. An entry line is a JSON object
(``group``, ``topic``, ``partition``, ``offset``, ``leader_epoch``, ``metadata``): group ids and
metadata are free text, which Kafka's space-separated lines could not hold.

An OffsetCommit (or DeleteGroups) is answered only after its file is on disk. Writes run in a worker
thread, one at a time (an ``asyncio.Lock``), so the event loop keeps serving while the file is fsynced.
Each write holds ``group-offsets-checkpoint.lock`` (an exclusive ``flock``, :class:`indexer.lock.FileLock`),
reads the file again and changes only its own group in it: several servers on one log directory
(``seglog serve`` twice, on other ports) keep each other's groups instead of writing back the
offsets each read at its start. What is answered (OffsetFetch, ListGroups) is the file as it is:
when another process replaced it (``seglog groups delete-offsets``, another server), it is read
again.

Offsets never expire. A broker removes an empty group's offsets ``offsets.retention.minutes`` (7
days) after its last member left; a read-only endpoint, perhaps started now and then over a copy,
keeps a consumer's position however long it was away. ``seglog groups`` lists them and deletes
what an operator no longer wants.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path
from typing import NamedTuple, TypeVar

from indexer.checkpoint import CheckpointFile
from indexer.errors import StorageError
from indexer.file_names import TopicPartition
from indexer.lock import FileLock
from seglog.serve.catalog import stat_key

logger = logging.getLogger(__name__)

GROUP_OFFSETS_FILE = "group-offsets-checkpoint"
CURRENT_VERSION = 0
LOCK_TIMEOUT_S = 10.0  # another server's write holds the file lock for one fsynced replace


class CommittedOffset(NamedTuple):
    """A group's committed position in one partition."""

    offset: int
    leader_epoch: int = -1
    metadata: str = ""


_T = TypeVar("_T")
_Offsets = dict[str, dict[TopicPartition, CommittedOffset]]  # group -> partition -> committed offset


class _Entry(NamedTuple):
    group: str
    topic: str
    partition: int
    committed: CommittedOffset


def _to_line(entry: _Entry) -> str:
    return json.dumps(
        {
            "group": entry.group,
            "topic": entry.topic,
            "partition": entry.partition,
            "offset": entry.committed.offset,
            "leader_epoch": entry.committed.leader_epoch,
            "metadata": entry.committed.metadata,
        },
        sort_keys=True,
    )


def _from_line(line: str) -> _Entry | None:
    try:
        obj = json.loads(line)
        committed = CommittedOffset(int(obj["offset"]), int(obj["leader_epoch"]), str(obj["metadata"]))
        return _Entry(str(obj["group"]), str(obj["topic"]), int(obj["partition"]), committed)
    except (ValueError, KeyError, TypeError):
        return None  # CheckpointFile reports the malformed line


class GroupOffsets:
    """Every group's committed offsets: read at start, replaced atomically on each commit.

    Raises (constructor): StorageError naming the file if it exists but cannot be read or parsed.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self._file: CheckpointFile[_Entry] = CheckpointFile(
            Path(directory) / GROUP_OFFSETS_FILE, version=CURRENT_VERSION, to_line=_to_line, from_line=_from_line
        )
        self._file_lock = FileLock(
            self._file.path.with_name(f"{GROUP_OFFSETS_FILE}.lock"), what=f"the group offsets in {directory}"
        )
        self._stat = stat_key(self.path)
        self._offsets = self._read()
        self._write_lock: asyncio.Lock | None = None

    @property
    def path(self) -> Path:
        return self._file.path

    def groups(self) -> list[str]:
        """Groups with committed offsets."""
        self._refresh()
        return sorted(self._offsets)

    def get(self, group: str) -> dict[TopicPartition, CommittedOffset]:
        """The group's committed offsets (a copy)."""
        self._refresh()
        return dict(self._offsets.get(group, {}))

    def _refresh(self) -> None:
        """Read the file again if another process replaced it since this one last read or wrote it; if
        it cannot be read, keep the offsets read before (said once per change of the file)."""
        current = stat_key(self.path)
        if current == self._stat:
            return
        self._stat = current
        try:
            self._offsets = self._read()
        except StorageError as e:
            logger.warning("%s; answering the group offsets read before", e)

    async def commit(self, group: str, offsets: Mapping[TopicPartition, CommittedOffset]) -> None:
        """Store ``offsets`` for ``group``; returns once the file holding them is durable.

        Raises:
            StorageError: the write failed; the previous offsets stay in force (file and memory).
        """

        def change(current: _Offsets) -> None:
            current.setdefault(group, {}).update(offsets)

        await self._replace(change)

    async def delete(
        self,
        group: str,
        partitions: Collection[TopicPartition] | None = None,
        *,
        check: Callable[[], object] | None = None,
    ) -> None:
        """Forget ``group``'s offsets of ``partitions`` (of every partition if None; a group left
        without offsets is forgotten); returns once the file without them is durable. ``check`` runs
        first under the file lock, and may refuse by raising (nothing is written then).

        Raises:
            StorageError: the write failed; the offsets stay in force (file and memory).
        """

        def change(current: _Offsets) -> None:
            if check is not None:
                check()
            had = current.pop(group, {})
            kept = {} if partitions is None else {tp: c for tp, c in had.items() if tp not in partitions}
            if kept:
                current[group] = kept

        await self._replace(change)

    def _lock(self) -> asyncio.Lock:
        """The lock that keeps one write at a time (made on first use, inside the event loop)."""
        if self._write_lock is None:
            self._write_lock = asyncio.Lock()
        return self._write_lock

    def _read(self) -> _Offsets:
        offsets: _Offsets = {}
        for entry in self._file.read_entries():
            offsets.setdefault(entry.group, {})[(entry.topic, entry.partition)] = entry.committed
        return offsets

    async def locked(self, work: Callable[[], _T]) -> _T:
        """``work()`` in a worker thread under the file lock, after this process's writes before it (one
        at a time): what must not interleave with another process's offsets write (the group members
        a server publishes, :mod:`seglog.serve.live_groups`).

        Raises:
            LogLockedError: another process held the file lock for :data:`LOCK_TIMEOUT_S`.
            StorageError: the lock file cannot be opened; or what ``work`` raises.
        """
        async with self._lock():
            return await asyncio.to_thread(self._under_file_lock, work)

    def _under_file_lock(self, work: Callable[[], _T]) -> _T:
        self._file_lock.acquire(timeout=LOCK_TIMEOUT_S)
        try:
            return work()
        finally:
            self._file_lock.release()

    async def _replace(self, change: Callable[[_Offsets], object]) -> None:
        """Apply ``change`` to the offsets on file and write them back, under the file lock; then they
        are this server's offsets (with what other servers wrote meanwhile)."""
        self._offsets, self._stat = await self.locked(functools.partial(self._replace_file, change))

    def _replace_file(self, change: Callable[[_Offsets], object]) -> tuple[_Offsets, tuple[int, int, int] | None]:
        """The offsets written and the file's :func:`stat_key` then (no one else writes under the lock)."""
        offsets = self._read()
        change(offsets)
        self._file.write_entries(self._entries(offsets))
        return offsets, stat_key(self.path)

    @staticmethod
    def _entries(offsets: Mapping[str, Mapping[TopicPartition, CommittedOffset]]) -> Iterable[_Entry]:
        return [
            _Entry(group, topic, partition, committed)
            for group in sorted(offsets)
            for (topic, partition), committed in sorted(offsets[group].items())
        ]
