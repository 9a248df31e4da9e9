"""Kafka's text checkpoint files (``CheckpointFile``, ``OffsetCheckpointFile``,
``LeaderEpochCheckpointFile``), read and written byte-compatibly.

Format (UTF-8, every line ending in ``\\n``; on read a line ends at ``\\n``, ``\\r`` or ``\\r\\n``
as in Java's ``BufferedReader.readLine``)::

    <version>                      int32, 0 for both kinds
    <N>                            int32, number of entry lines
    <entry>                        N lines; fields separated by one space when written, by any run of
                                   ASCII whitespace on read
        offset checkpoints:        <topic> <partition int32> <offset int64>
        leader-epoch-checkpoint:   <epoch int32> <start offset int64>

An empty file, or one holding only the version line, reads as no entries (spec 6.4). Offset
checkpoints live in a log directory (``recovery-point-offset-checkpoint``,
``log-start-offset-checkpoint``, ``replication-offset-checkpoint``); ``leader-epoch-checkpoint``
lives in each partition directory (spec 6.5).

Writes go to ``<file>.tmp``, which is fsynced and atomically renamed over ``<file>``, then the
directory is fsynced: a crash leaves either the old or the new file, plus at worst a stale
``.tmp`` that the next write replaces; a write that fails (a full disk) deletes its ``.tmp``.
Several processes that own different partitions of one log directory share its offset checkpoints
through :func:`update_checkpoint`, a read-merge-write under the log directory's ``.lock``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Generic, NamedTuple, TypeVar

from indexer.errors import StorageError
from indexer.file_names import (
    LOG_START_OFFSET_CHECKPOINT_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
    TopicPartition,
)
from indexer.limits import INT32_MAX, INT64_MAX
from indexer.lock import FileLock

logger = logging.getLogger(__name__)

CURRENT_VERSION = 0
TMP_SUFFIX = ".tmp"
DEFAULT_LOCK_TIMEOUT_S = 30.0

_INT = re.compile(r"[+-]?[0-9]+", re.ASCII)
_WHITESPACE = re.compile(r"\s+", re.ASCII)
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_INT32 = (-INT32_MAX - 1, INT32_MAX)
_INT64 = (-INT64_MAX - 1, INT64_MAX)

T = TypeVar("T")

# One mutex per checkpoint path in this process: two CheckpointFile objects on the same path must not
# interleave their writes to the shared ".tmp" file (Kafka synchronises on one object per file).
_path_mutexes: dict[Path, threading.Lock] = {}
_path_mutexes_guard = threading.Lock()


def _mutex_for(path: Path) -> threading.Lock:
    with _path_mutexes_guard:
        return _path_mutexes.setdefault(path, threading.Lock())


def _parse_int(text: str, bounds: tuple[int, int]) -> int | None:
    """Java ``Integer.parseInt``/``Long.parseLong`` on ASCII digits: None when not a number or out of range."""
    if not _INT.fullmatch(text):
        return None
    value = int(text)
    return value if bounds[0] <= value <= bounds[1] else None


def _split_fields(line: str) -> list[str]:
    """Java ``Pattern.compile("\\\\s+").split(line)``: a leading empty field is kept, trailing ones dropped."""
    fields = _WHITESPACE.split(line)
    while fields and fields[-1] == "":
        fields.pop()
    return fields


def fsync_directory(directory: Path) -> None:
    """fsync a directory so a rename or a new file in it survives a crash."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, data: bytes, *, sync: bool = True, tmp: Path | None = None) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old file or the new one, never a
    mix: write ``tmp`` (default ``<path>.tmp``), fsync it, rename it over ``path``, fsync the
    directory (the fsyncs only with ``sync``). Every file seglog replaces goes through here. A
    ``tmp`` that cannot be written or renamed (a full disk) is deleted: it would hold the pages it
    got, and a process-named one would never be replaced.

    Raises:
        OSError: as the system reported it (callers name the file in their own error).
    """
    tmp = path.with_name(path.name + TMP_SUFFIX) if tmp is None else tmp
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if sync:
        fsync_directory(path.parent)


class CheckpointFile(Generic[T]):
    """A versioned list of entries, one per line (Kafka ``CheckpointFile``).

    Unlike Kafka's, the constructor does not create a missing file (read-only readers must be able to
    open checkpoints of a directory they cannot write): reading a missing file gives no entries, just
    as reading the empty file Kafka would have created. Thread-safe within a process; across processes
    writers must hold the log directory's lock (see :func:`update_checkpoint`).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        version: int,
        to_line: Callable[[T], str],
        from_line: Callable[[str], T | None],
    ) -> None:
        self.path = Path(path).absolute()
        self.version = version
        self._to_line = to_line
        self._from_line = from_line
        self._mutex = _mutex_for(self.path)

    def read_entries(self) -> list[T]:
        """Parse the file (spec 6.4).

        Raises:
            StorageError: the file cannot be read, has another version, a malformed line or a wrong
                entry count; the message names the file (Kafka's wording).
        """
        with self._mutex:
            try:
                raw = self.path.read_bytes()
            except FileNotFoundError:
                return []
            except OSError as e:
                raise StorageError(
                    f"Error while reading checkpoint file {self.path}: {e.strerror}",
                    path=self.path,
                    errno=e.errno,
                ) from e
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise StorageError(f"Checkpoint file {self.path} is not UTF-8 text: {e}", path=self.path) from e
        lines = _LINE_BREAK.split(text)
        if lines[-1] == "":  # readLine() returns null after a final line terminator
            lines.pop()
        if not lines:
            return []
        read_version = self._to_int(lines[0])
        if read_version != self.version:
            raise StorageError(
                f"Unrecognised version:{read_version}, expected version: {self.version} "
                f"in checkpoint file at: {self.path}",
                path=self.path,
            )
        if len(lines) == 1:
            return []
        expected = self._to_int(lines[1])
        entries: list[T] = []
        for line in lines[2:]:
            entry = self._from_line(line)
            if entry is None:
                raise self._malformed(line)
            entries.append(entry)
        if len(entries) != expected:
            raise StorageError(
                f"Expected [{expected}] entries in checkpoint file [{self.path}], but found only [{len(entries)}]",
                path=self.path,
            )
        return entries

    def write_entries(self, entries: Iterable[T], *, sync: bool = True) -> None:
        """Replace the file's contents atomically (``.tmp``, fsync, rename, directory fsync).

        Raises:
            StorageError: writing, syncing or renaming failed (the old file is intact).
        """
        lines = [self._to_line(entry) for entry in entries]
        body = "".join(f"{line}\n" for line in [str(self.version), str(len(lines)), *lines]).encode("utf-8")
        with self._mutex:
            try:
                write_atomically(self.path, body, sync=sync)
            except OSError as e:
                raise StorageError(
                    f"Error while writing to checkpoint file {self.path}: {e.strerror}",
                    path=e.filename or self.path,
                    errno=e.errno,
                ) from e

    def _to_int(self, line: str) -> int:
        value = _parse_int(line, _INT32)
        if value is None:
            raise self._malformed(line)
        return value

    def _malformed(self, line: str) -> StorageError:
        return StorageError(f"Malformed line in checkpoint file [{self.path}]: {line}", path=self.path)


class _TopicPartitionOffset(NamedTuple):
    topic: str
    partition: int
    offset: int


def _int32_int64(first: str, second: str) -> tuple[int, int] | None:
    """The two numbers ending an entry line (``partition offset``, ``epoch startOffset``), or None.

    Kafka lets a NumberFormatException escape on a bad number; we report it as the malformed line it is.
    """
    a = _parse_int(first, _INT32)
    b = _parse_int(second, _INT64)
    return None if a is None or b is None else (a, b)


def _offset_entry_from_line(line: str) -> _TopicPartitionOffset | None:
    fields = _split_fields(line)
    numbers = _int32_int64(fields[1], fields[2]) if len(fields) == 3 else None
    return None if numbers is None else _TopicPartitionOffset(fields[0], *numbers)


def _offset_entry_to_line(entry: _TopicPartitionOffset) -> str:
    return f"{entry.topic} {entry.partition} {entry.offset}"


class OffsetCheckpointFile:
    """``topic partition offset`` checkpoints of a log directory (Kafka ``OffsetCheckpointFile``).

    Entries are written sorted by (topic, partition) so identical maps give identical files (Kafka
    writes them in hash order; readers do not care). Thread-safe within a process.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._file: CheckpointFile[_TopicPartitionOffset] = CheckpointFile(
            path, version=CURRENT_VERSION, to_line=_offset_entry_to_line, from_line=_offset_entry_from_line
        )

    @property
    def path(self) -> Path:
        return self._file.path

    def read(self) -> dict[TopicPartition, int]:
        """``{(topic, partition): offset}``; a missing or empty file gives ``{}``; duplicates: last wins.

        Raises:
            StorageError: unreadable or malformed file (see :meth:`CheckpointFile.read_entries`).
        """
        return {(e.topic, e.partition): e.offset for e in self._file.read_entries()}

    def write(self, offsets: Mapping[TopicPartition, int], *, sync: bool = True) -> None:
        """Replace the file with ``offsets`` atomically.

        Raises:
            StorageError: the write failed; the previous file is intact.
        """
        entries = []
        for (topic, partition), offset in sorted(offsets.items()):
            if not topic or _WHITESPACE.search(topic):
                raise ValueError(f"topic {topic!r} cannot be written to checkpoint file {self.path}")
            entries.append(_TopicPartitionOffset(topic, int(partition), int(offset)))
        self._file.write_entries(entries, sync=sync)


class EpochEntry(NamedTuple):
    """A leader epoch and the first offset written in it (Kafka ``EpochEntry``)."""

    epoch: int
    start_offset: int


def _epoch_entry_from_line(line: str) -> EpochEntry | None:
    fields = _split_fields(line)
    numbers = _int32_int64(fields[0], fields[1]) if len(fields) == 2 else None
    return None if numbers is None else EpochEntry(*numbers)


def _epoch_entry_to_line(entry: EpochEntry) -> str:
    return f"{entry.epoch} {entry.start_offset}"


class LeaderEpochCheckpointFile:
    """A partition's ``leader-epoch-checkpoint``: epochs and their start offsets (spec 6.5).

    Thread-safe within a process; the file belongs to the partition's writer.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._file: CheckpointFile[EpochEntry] = CheckpointFile(
            path, version=CURRENT_VERSION, to_line=_epoch_entry_to_line, from_line=_epoch_entry_from_line
        )

    @property
    def path(self) -> Path:
        return self._file.path

    def read(self) -> list[EpochEntry]:
        """Entries in file order (ascending epochs when Kafka wrote them).

        Raises:
            StorageError: unreadable or malformed file.
        """
        return self._file.read_entries()

    def write(self, entries: Iterable[EpochEntry], *, sync: bool = True) -> None:
        """Replace the file with ``entries`` (in the given order) atomically.

        Raises:
            StorageError: the write failed; the previous file is intact.
        """
        self._file.write_entries([EpochEntry(int(e), int(o)) for e, o in entries], sync=sync)


# What each offset checkpoint of a log directory holds, for the line naming one that cannot be read.
_HOLDS = {
    REPLICATION_OFFSET_CHECKPOINT_FILE: (
        "the committed offsets (high watermarks) of the partitions in {dir}: without them readers cannot tell "
        "committed records from uncommitted ones, and a writer would forget them"
    ),
    RECOVERY_POINT_CHECKPOINT_FILE: (
        "the recovery points of the partitions in {dir}: a process writing it back would drop every other partition's"
    ),
    LOG_START_OFFSET_CHECKPOINT_FILE: (
        "the raised log start offsets of the partitions in {dir}: a process writing it back would drop every other "
        "partition's, making records below them readable again"
    ),
}

#: The checkpoints a process that writes no checkpoint may read as empty when they cannot be read.
LENIENT_FOR_READERS = frozenset({RECOVERY_POINT_CHECKPOINT_FILE, LOG_START_OFFSET_CHECKPOINT_FILE})


def unreadable_checkpoint(path: Path, error: StorageError) -> StorageError:
    """The one line for offset checkpoint ``path`` of a log directory that cannot be read (``error``, from
    :meth:`OffsetCheckpointFile.read`): the file, what it holds and ``seglog recover``, which rewrites it."""
    holds = _HOLDS.get(path.name, "offsets of the partitions in {dir}").format(dir=path.parent)
    return StorageError(
        f"{error}: it holds {holds}; restore it, or rewrite it from the logs with "
        f"`seglog recover --log-dir {path.parent}`",
        path=path,
        errno=error.errno,
    )


def read_checkpoint(log_dir: str | os.PathLike[str], name: str, *, reader: bool = False) -> dict[TopicPartition, int]:
    """Offset checkpoint ``name`` of ``log_dir`` (``{}`` when missing): every process reads the three
    log-directory checkpoints through here.

    Strict by default, for two reasons. A process that writes checkpoints back (a writer, the
    maintenance daemon) must not take an unreadable file for an empty one: :func:`update_checkpoint`
    never replaces it, and the offsets it would start from (a high watermark at the log start offset,
    no raised log start) would hide committed records or expose deleted ones. And nobody may take an
    unreadable ``replication-offset-checkpoint`` for an empty one: a read-only open without a high
    watermark shows everything up to the log end, uncommitted records included, and a writer's
    shows nothing. ``seglog recover`` (which rewrites an unreadable file) and ``seglog describe``
    (which names it) catch the error to report it.

    ``reader=True``, for a process that writes no checkpoint, reads ``recovery-point-offset-checkpoint``
    and ``log-start-offset-checkpoint`` leniently (:data:`LENIENT_FOR_READERS`): unreadable, they count
    as empty, with a warning. Safe because a reader does not recover (no recovery point needed) and,
    without the log start offsets, only shows committed records below a raised log start that are
    still on disk: nothing uncommitted, nothing hidden.

    Raises:
        StorageError: the file exists but cannot be read (:func:`unreadable_checkpoint`: one line naming
            it and ``seglog recover``).
    """
    path = Path(log_dir) / name
    try:
        return OffsetCheckpointFile(path).read()
    except StorageError as e:
        if reader and name in LENIENT_FOR_READERS:
            logger.warning("ignoring unreadable checkpoint file %s (a reader needs none of it): %s", path, e)
            return {}
        raise unreadable_checkpoint(path, e) from e


def update_checkpoint(
    path: str | os.PathLike[str],
    updates: Mapping[TopicPartition, int],
    *,
    lock_path: str | os.PathLike[str],
    remove: Iterable[TopicPartition] = (),
    expected: Mapping[TopicPartition, int | None] | None = None,
    timeout: float | None = DEFAULT_LOCK_TIMEOUT_S,
    replace_unreadable: bool = False,
) -> dict[TopicPartition, int]:
    """Read-merge-write an offset checkpoint shared by several processes; returns what was written.

    Each process owns some partitions of a log directory and checkpoints only those: entries of other
    partitions are kept as found, ``updates`` replace or add entries, ``remove`` drops entries (a
    partition that no longer qualifies, e.g. for ``log-start-offset-checkpoint``). The log
    directory's lock (``lock_path``, normally ``<log dir>/.lock``) is held only for the
    read-merge-write, so no process loses another's entries. An existing file that cannot be read is
    never replaced (every other partition's entries would be lost with it) unless
    ``replace_unreadable``: only ``seglog recover`` does that, after rebuilding every entry from the
    logs.

    ``expected`` makes the change of each partition it names conditional: the entry (None: no entry)
    the change was computed from. A partition whose entry differs, because another process has
    written it since, is left as found: a process that held a partition for a while (the maintenance
    daemon) never puts back an older high watermark over a writer's newer one.

    Raises:
        LogLockedError: the directory lock was not free within ``timeout`` seconds.
        StorageError: the write failed, or the file cannot be read (:func:`unreadable_checkpoint`).
    """
    checkpoint = OffsetCheckpointFile(path)
    lock = FileLock(lock_path, what=f"log directory {Path(lock_path).parent}")
    lock.acquire(timeout=timeout)
    try:
        try:
            merged = checkpoint.read()
        except StorageError as e:
            if not replace_unreadable:
                raise unreadable_checkpoint(checkpoint.path, e) from e
            logger.warning("replacing unreadable checkpoint file %s: %s", checkpoint.path, e)
            merged = {}
        found = dict(merged)
        expected = expected or {}

        def still(tp: TopicPartition) -> bool:
            return tp not in expected or found.get(tp) == expected[tp]

        for tp in remove:
            if still(tp):
                merged.pop(tp, None)
        merged.update((tp, offset) for tp, offset in updates.items() if still(tp))
        checkpoint.write(merged)
        return merged
    finally:
        lock.release()
