"""The groups with members on the running servers of a group offsets directory, for ``seglog groups``.

A group's members live in its server's memory (:mod:`seglog.serve.groups`); ``seglog groups`` runs in
another process. So each server publishes its groups that have members in ``group-members.<token>``
beside ``group-offsets-checkpoint`` (one JSON document: each group's state, protocol type, the
topics its members subscribe to, and each member's id, client id, host and assignment), and holds
an exclusive ``flock`` on ``group-members.<token>.lock`` while it runs. The kernel drops the lock
when the server dies, even by SIGKILL: a document whose lock is free is a dead server's and is
ignored (a crashed server never blocks a deletion), and the next server started on the directory
removes its files. A server that stops removes its own.

Why a deletion cannot race a joining member: the server publishes a member before it answers the
member's JoinGroup, and ``seglog groups delete-offsets`` reads the published groups and deletes
under one lock, the offsets file's (``group-offsets-checkpoint.lock``, which every offsets write
holds). A consumer reads its committed offsets only after its JoinGroup (and SyncGroup) answer. So
either the deletion comes first and the member finds no offset, or the member is published first
and the deletion is refused, as Kafka's coordinator refuses it (GROUP_SUBSCRIBED_TO_TOPIC,
NON_EMPTY_GROUP).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from indexer.checkpoint import TMP_SUFFIX, write_atomically
from indexer.errors import LogLockedError, StorageError
from indexer.file_names import TopicPartition
from indexer.lock import FileLock

logger = logging.getLogger(__name__)

PREFIX = "group-members."
LOCK_SUFFIX = ".lock"


@dataclass(frozen=True, slots=True)
class LiveMember:
    """A member of a group on a running server (DescribeGroups' fields)."""

    member_id: str
    client_id: str
    host: str
    instance_id: str | None
    assignment: tuple[TopicPartition, ...]  # empty until the group is Stable


@dataclass(frozen=True, slots=True)
class LiveGroup:
    """A group with members on a running server."""

    group_id: str
    state: str
    protocol_type: str | None
    subscribed: frozenset[str] | None  # the members' topics; None: not known, every topic counts
    members: tuple[LiveMember, ...]
    server: str = ""  # which server (its lock's holder line), for messages


def _to_json(group: LiveGroup) -> dict[str, Any]:
    doc = asdict(group)
    doc["subscribed"] = None if group.subscribed is None else sorted(group.subscribed)
    del doc["server"]
    return doc


def _from_json(doc: dict[str, Any], server: str) -> LiveGroup:
    members = tuple(
        LiveMember(
            str(m["member_id"]),
            str(m["client_id"]),
            str(m["host"]),
            None if m["instance_id"] is None else str(m["instance_id"]),
            tuple((str(t), int(p)) for t, p in m["assignment"]),
        )
        for m in doc["members"]
    )
    subscribed = None if doc["subscribed"] is None else frozenset(str(t) for t in doc["subscribed"])
    return LiveGroup(str(doc["group_id"]), str(doc["state"]), doc["protocol_type"], subscribed, members, server)


class PublishedGroups:
    """This server's document of its groups with members, and the lock that says it runs.

    :meth:`write` must run under the offsets file lock (see the module docstring): the server calls
    it through :meth:`~seglog.serve.group_offsets.GroupOffsets.locked`.
    """

    def __init__(self, directory: Path) -> None:
        self.path = directory / f"{PREFIX}{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self._lock: FileLock | None = None
        self._closed = False
        self._mutex = threading.Lock()  # a write still running in its thread when the server closes

    def write(self, groups: Iterable[LiveGroup]) -> None:
        """Replace the document with ``groups`` (taking the lock first, on the first write); nothing
        once closed.

        Raises:
            StorageError: the lock or the document cannot be written.
        """
        data = json.dumps({"groups": [_to_json(g) for g in groups]}, sort_keys=True).encode()
        with self._mutex:
            if self._closed:
                return
            if self._lock is None:
                self._lock = self._take_lock()
            try:
                write_atomically(self.path, data, sync=False)  # liveness, not data: a crash drops the lock too
            except OSError as e:
                raise StorageError(f"cannot write {self.path}: {e.strerror}", path=self.path, errno=e.errno) from e

    def _take_lock(self) -> FileLock:
        """Remove the files of dead servers, then hold this server's lock, taken under a temporary name
        and renamed into place: a lock file that others can see is always held (and names its holder)
        while its server runs."""
        remove_dead(self.path.parent)
        final = self.path.with_name(self.path.name + LOCK_SUFFIX)
        lock = FileLock(final.with_name(final.name + TMP_SUFFIX), what=f"the group members of {self.path}")
        lock.acquire()
        try:
            os.rename(lock.path, final)
        except OSError as e:
            lock.release()
            raise StorageError(f"cannot create {final}: {e.strerror}", path=final, errno=e.errno) from e
        lock.path = final
        return lock

    def close(self) -> None:
        """Remove the document, then the lock (the server stops: it has no members any more); later
        writes do nothing."""
        with self._mutex:
            self._closed = True
            if self._lock is None:
                return
            for path in (self.path, self._lock.path):
                try:
                    path.unlink(missing_ok=True)
                except OSError as e:
                    logger.warning("cannot remove %s: %s", path, e.strerror)
            self._lock.release()
            self._lock = None


def _documents(directory: Path) -> list[tuple[Path, FileLock]]:
    return [
        (path, FileLock(path.with_name(path.name + LOCK_SUFFIX), what=f"the group members of {path}"))
        for path in sorted(directory.glob(f"{PREFIX}*"))
        if not path.name.endswith((LOCK_SUFFIX, TMP_SUFFIX))
    ]


def _held(lock: FileLock) -> bool:
    try:
        lock.probe()
    except LogLockedError:
        return True
    return False


def remove_dead(directory: Path) -> None:
    """Remove the documents (and lock files) of servers that died without removing them."""
    for path, lock in _documents(directory):
        if not _held(lock):
            for dead in (path, lock.path):
                try:
                    dead.unlink(missing_ok=True)
                except OSError as e:
                    logger.warning("cannot remove %s (of a server that stopped): %s", dead, e.strerror)


def live_groups(directory: Path) -> dict[str, LiveGroup]:
    """The groups with members on the servers running on ``directory`` (a group on two servers, which
    its members should not do, is merged). Call it under the offsets file lock to act on it.

    Raises:
        StorageError: a running server's document cannot be read.
    """
    found: dict[str, LiveGroup] = {}
    for path, lock in _documents(directory):
        if not _held(lock):
            continue  # a dead server's
        try:
            groups = [_from_json(g, lock.holder()) for g in json.loads(path.read_bytes())["groups"]]
        except FileNotFoundError:
            continue  # it stopped meanwhile
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise StorageError(f"cannot read the group members a running server published in {path}: {e}") from e
        for group in groups:
            other = found.get(group.group_id)
            if other is not None:
                subscribed = None
                if other.subscribed is not None and group.subscribed is not None:
                    subscribed = other.subscribed | group.subscribed
                group = LiveGroup(
                    group.group_id,
                    group.state,
                    group.protocol_type,
                    subscribed,
                    other.members + group.members,
                    f"{other.server}; {group.server}",
                )
            found[group.group_id] = group
    return found
