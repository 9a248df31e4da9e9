"""One log directory: its partitions, its checkpoint files and its clean-shutdown marker (Kafka's
``LogManager``, for a single ``log.dir``).

Layout (spec, top of the document)::

    <log dir>/
      recovery-point-offset-checkpoint   log-start-offset-checkpoint   replication-offset-checkpoint
      .kafka_cleanshutdown   (only between a clean close and the next open)   .lock
      <topic>-<partition>/   one directory per partition (see indexer.log)

On open the clean-shutdown marker is deleted at once and remembered (KAFKA-10471: a crash while
loading must count as unclean next time), after the recovery-point and log-start-offset checkpoints
are read: a writable manager refuses one it cannot read, a read-only one takes it for empty
(:func:`indexer.checkpoint.read_checkpoint`). Partitions are opened lazily, on first
use, each with its checkpointed recovery point and log start offset and the high watermark of
``replication-offset-checkpoint``.

Several processes may own different partitions of one log directory (each partition has its own
writer lock). Each writes only its own partitions' checkpoint entries, merged with the others'
under the directory's ``.lock`` (:func:`indexer.checkpoint.update_checkpoint`).

Beyond Kafka (listed in docs/design.md): because a log directory may be shared, a partition counts
as cleanly shut down only if the marker was present *and* its writer lock file holds no holder
line (a writer that died without releasing leaves its ``pid=...`` line behind); and :meth:`close`
writes the marker only when every log it opened closed cleanly.

Thread-safety: every public method is thread-safe (one lock guards the partition map); the logs
themselves are thread-safe. Crash behaviour: checkpoints are replaced atomically, so a crash leaves
the previous checkpoint; without the marker the next open recovers every partition from its
recovery point.
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType

from indexer import file_names, topics
from indexer.checkpoint import (
    fsync_directory,
    read_checkpoint,
    update_checkpoint,
    write_atomically,
)
from indexer.clock import Clock, SystemClock
from indexer.config import Settings
from indexer.data_loss import CheckpointedEnd, checkpointed_end
from indexer.errors import (
    InvalidPartitionsError,
    LogDirectoryNotFoundError,
    LogLockedError,
    NotALogDirectoryError,
    ReadOnlyLogDirectoryError,
    SeglogError,
    StorageError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
    storage_errors,
)
from indexer.file_names import TopicPartition
from indexer.limits import INT32_MAX, MAX_NEW_PARTITIONS, integer_argument
from indexer.lock import FileLock
from indexer.log import Log, create_empty_partition
from indexer.log_loader import died_holding_reason

logger = logging.getLogger(__name__)

CLEAN_SHUTDOWN_CONTENT = b'{"version":0,"brokerEpoch":0}'
DEFAULT_NUM_PARTITIONS = 1  # Kafka's num.partitions broker default: the count of a topic a write creates
# New partitions are created this many at a time, their directories fsynced by this many threads at once
# (the file system commits concurrent fsyncs together: 500 directories in 0.05-0.1 s, 0.5-1.2 s one by one).
_CREATE_CHUNK = 1024
_FSYNC_THREADS = 16
_PROGRESS_S = 5.0  # a topic creation longer than this says how far it got (INFO), every as long

# Files only a partition directory holds: finding one in a "log directory" means the user passed a
# partition directory (or a copy of one). Segment files are named by a 20-digit offset.
_PARTITION_FILE_SUFFIXES = (
    file_names.LOG_FILE_SUFFIX,
    file_names.INDEX_FILE_SUFFIX,
    file_names.TIME_INDEX_FILE_SUFFIX,
)
_PARTITION_FILES = (
    file_names.PARTITION_LOCK_FILE,
    file_names.LEADER_EPOCH_CHECKPOINT_FILE,
    file_names.PARTITION_METADATA_FILE,
)


def _is_partition_file(name: str) -> bool:
    stem, dot, _suffix = name.partition(".")
    return name in _PARTITION_FILES or (
        bool(dot) and len(stem) >= 20 and stem.isdigit() and name.endswith(_PARTITION_FILE_SUFFIXES)
    )


def holds_partition_files(names: Iterable[str]) -> bool:
    """Whether a directory holding the files ``names`` holds a segment, index or partition file (a
    partition directory's): ``--log-dir`` is refused when it does; ``seglog recover`` leaves a
    ``<name>-<number>`` directory alone when it does not (and no checkpoint names it)."""
    return any(_is_partition_file(n) for n in names)


def check_log_dir(log_dir: str | os.PathLike[str], *, must_exist: bool = True) -> Path:
    """``log_dir`` as a :class:`Path` if it can be a log directory; the one test every layer uses.

    Raises:
        LogDirectoryNotFoundError: ``must_exist`` and there is no such directory.
        NotALogDirectoryError: it is empty (``Path("")`` is the current directory: an unset variable
            must not make it one), a file, or a partition directory (it holds segment, index or
            partition files): the message says which directory to pass instead.
    """
    if not os.fspath(log_dir):
        raise NotALogDirectoryError(
            "the log directory is an empty path (an unset variable?), not the current directory: name it, "
            "e.g. --log-dir data/logs"
        )
    path = Path(log_dir)
    if not path.exists():
        if must_exist:
            raise LogDirectoryNotFoundError(f"log directory {path} does not exist", path=path)
        return path
    if not path.is_dir():
        raise NotALogDirectoryError(f"{path} is a file, not a log directory", path=path)
    try:
        names = os.listdir(path)
    except OSError as e:
        raise StorageError(f"cannot list log directory {path}: {e.strerror}", path=path, errno=e.errno) from e
    if holds_partition_files(names):
        parent = path.absolute().parent
        try:
            topic, partition = file_names.parse_topic_partition_name(path.absolute().name)
            what = f"the directory of partition {partition} of topic {topic!r}"
        except ValueError:
            what = "a partition directory (it holds segment files)"
        raise NotALogDirectoryError(
            f"{path} is {what}, not a log directory: pass the directory that holds it, --log-dir {parent}", path=path
        )
    return path


def missing_log_dir_note(log_dir: Path, once_there: str) -> str | None:
    """The line a service logs once at WARNING, after its start line, when ``log_dir`` does not exist
    (yet), saying what it does ``once_there``; None when it exists. The one rule of the services (the
    maintenance daemon, ``seglog serve``): started in any order, before the writer that creates the
    directory (Kafka creates a missing log directory at startup), they wait for it, and a wrong path
    is one line, never silence; one-shot commands refuse a missing directory (:func:`check_log_dir`).
    Asked before the service starts: a writer may create the directory meanwhile."""
    if log_dir.exists():
        return None
    return f"log directory {log_dir} does not exist yet: {once_there} once it appears"


def check_log_dir_writable(log_dir: str | os.PathLike[str], refused: str, *, creating: bool = False) -> None:
    """Raise :class:`ReadOnlyLogDirectoryError` when this process cannot write in ``log_dir`` (a
    read-only file system, or no write permission): the one test a command that changes a log
    directory asks before it touches a partition, so a read-only place is one line naming the
    directory and what is ``refused`` there, not an error per partition. A missing directory passes
    (:func:`check_log_dir` decides about it), but for a writer ``creating`` it: then the nearest
    existing directory above it, where it would be created, is tested.

    Raises:
        ReadOnlyLogDirectoryError: the directory cannot be written (or, ``creating``, created).
        StorageError: its file system cannot be asked.
    """
    path = Path(log_dir)
    place = path
    if creating:
        place = next((p for p in (path, *path.absolute().parents) if p.exists()), path)
        if not place.is_dir():  # a file in the way: creating the directory says so
            return
    try:
        read_only_fs = bool(os.statvfs(place).f_flag & os.ST_RDONLY)
    except FileNotFoundError:
        return
    except OSError as e:
        raise StorageError(f"cannot stat the file system of {place}: {e.strerror}", path=place, errno=e.errno) from e
    if read_only_fs:
        why = "on a read-only file system"
    elif not os.access(place, os.W_OK | os.X_OK):
        why = "not writable by this process"
    else:
        return
    what = f"log directory {path} is" if place == path else f"log directory {path} cannot be created: {place} is"
    raise ReadOnlyLogDirectoryError(
        f"{what} {why}: {refused} (only readers work here: seglog read, describe, dump, recover --dry-run)",
        path=path,
        errno=errno.EROFS if read_only_fs else errno.EACCES,
    )


def check_topic_request(topic: str, num_partitions: int) -> None:
    """The checks of a topic name and partition count that need no log directory, for a command to run
    before its writable :class:`LogManager` creates the directory: a refused name or count then leaves
    nothing behind. (:meth:`LogManager.create_topic` runs them again.)

    Whether a count is too many to create at once depends on the topic's count now: a command creating a
    topic checks that too (:func:`check_new_partitions` with ``old=0``).

    Raises:
        InvalidTopicError: the name breaks Kafka's rules.
        InvalidPartitionsError: the count is below 1 or above an int32.
    """
    file_names.validate_topic(topic)
    _check_partition_count(num_partitions)


def check_new_partitions(topic: str, old: int, new: int) -> None:
    """Refuse to take ``topic`` from ``old`` partitions (0: a new topic) to ``new`` when that makes more
    than :data:`~indexer.limits.MAX_NEW_PARTITIONS` at once, as Kafka's controller refuses such a request:
    the one rule of every creation and growth, checked before anything is recorded or created (a typo of
    a count would otherwise make millions of directories).

    Raises:
        InvalidPartitionsError: too many new partitions.
    """
    if new - old > MAX_NEW_PARTITIONS:
        raise InvalidPartitionsError(
            f"topic {topic!r} would get {new - old} new partitions at once, more than {MAX_NEW_PARTITIONS} (Kafka's "
            f"controller refuses a larger request too): create or grow it by at most {MAX_NEW_PARTITIONS} at a "
            "time with `seglog topic create` then `seglog topic alter`"
        )


def _check_partition_count(num_partitions: int) -> int:
    """``num_partitions`` as an ``int`` within Kafka's bounds of a topic's partition count: at least 1, at
    most an int32.

    Raises:
        InvalidArgumentError: not an integer.
        InvalidPartitionsError: outside them.
    """
    num_partitions = integer_argument("num_partitions", num_partitions)
    if num_partitions < 1:
        raise InvalidPartitionsError(f"a topic needs at least 1 partition, got {num_partitions}")
    if num_partitions > INT32_MAX:
        raise InvalidPartitionsError(
            f"a topic has at most {INT32_MAX} partitions (Kafka's int32), got {num_partitions}"
        )
    return num_partitions


def write_clean_shutdown_marker(log_dir: Path) -> None:
    """Write ``log_dir``'s clean-shutdown marker atomically: the one way every layer writes it.

    A temporary file is written and fsynced, renamed over the marker and the directory fsynced,
    so a crash leaves either no marker or a whole one.

    Raises:
        StorageError: an I/O error (naming the marker file).
    """
    marker = Path(log_dir) / file_names.CLEAN_SHUTDOWN_FILE
    # A temporary name of its own: managers of one shared log directory may close at the same time.
    tmp = marker.with_name(f"{marker.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with storage_errors(marker, "write the clean-shutdown marker"):
        write_atomically(marker, CLEAN_SHUTDOWN_CONTENT, tmp=tmp)


class LogManager:
    """The partitions of one log directory, opened on demand.

    ``read_only=True`` opens every log read-only (no locks, no recovery, no writes: a reader beside a
    live writer, or a directory without write permission), leaves the marker in place and writes
    no checkpoint. A writable manager on a directory it cannot write in raises
    :class:`~indexer.errors.ReadOnlyLogDirectoryError` at once (:func:`check_log_dir_writable`).
    Thread-safe.
    """

    def __init__(
        self,
        log_dir: str | os.PathLike[str],
        settings: Settings,
        *,
        clock: Clock | None = None,
        read_only: bool = False,
    ) -> None:
        self.log_dir = check_log_dir(log_dir, must_exist=False)
        self.settings = settings
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.read_only = read_only
        self._lock = threading.RLock()
        self._logs: dict[TopicPartition, Log] = {}
        self._closed = False
        self._clean_close = True
        self._lock_path = self.log_dir / file_names.LOG_DIR_LOCK_FILE
        marker = self.log_dir / file_names.CLEAN_SHUTDOWN_FILE
        # Before the marker goes: a writable manager refuses a checkpoint it cannot read and changes nothing.
        self._recovery_points = self._read_checkpoint(file_names.RECOVERY_POINT_CHECKPOINT_FILE)
        self._log_start_offsets = self._read_checkpoint(file_names.LOG_START_OFFSET_CHECKPOINT_FILE)
        if read_only:
            self.had_clean_shutdown = marker.exists()
        else:
            check_log_dir_writable(
                self.log_dir, "a writer can append, create or checkpoint nothing there", creating=True
            )
            with storage_errors(self.log_dir, "create the log directory"):
                self.log_dir.mkdir(parents=True, exist_ok=True)
            self.had_clean_shutdown = self._delete_clean_shutdown_marker(marker)
        logger.info(
            "[LogManager dir=%s] opened (%s shutdown, %d checkpointed partitions%s)",
            self.log_dir,
            "clean" if self.had_clean_shutdown else "unclean",
            len(self._recovery_points),
            ", read-only" if read_only else "",
        )

    # -- partitions ----------------------------------------------------------------------------

    def partitions(self) -> list[TopicPartition]:
        """Every ``<topic>-<partition>`` directory in the log dir, sorted (:func:`file_names.partition_dirs`)."""
        return [tp for tp, _path in file_names.partition_dirs(self.log_dir)]

    def get_log(self, topic: str, partition: int) -> Log | None:
        """The partition's log, opened (and recovered) on first use; None if it does not exist.

        Raises:
            InvalidArgumentError: ``partition`` is not an integer in 0..2**31 - 1 (Kafka's int32).
            LogLockedError: another process is the partition's writer (writable managers only).
            StorageError: the partition cannot be loaded.
        """
        return self._get(topic, partition, create=False)

    def get_or_create_log(self, topic: str, partition: int) -> Log:
        """The partition's log, created (``<topic>-<partition>``, an empty segment at 0) if missing.

        Raises:
            InvalidTopicError: the topic name breaks Kafka's rules.
            UnknownTopicOrPartitionError: the topic's recorded partition count does not include
                ``partition`` (grow it with :meth:`add_partitions`).
            InvalidArgumentError: ``partition`` is not an integer in 0..2**31 - 1 (Kafka's int32).
            ValueError: a read-only manager asked to create a partition.
            LogLockedError: another process is the partition's writer.
        """
        partition = file_names.partition_number(partition)
        count = topics.read_topics(self.log_dir).get(topic) if (topic, partition) not in self._logs else None
        if count is not None:
            self._check_partition_of(topic, partition, count)
        log = self._get(topic, partition, create=True)
        assert log is not None
        return log

    def partition_count_for_write(self, topic: str, partition: int) -> int:
        """The partition count ``topic`` has once a write to ``partition`` created it if missing, creating
        nothing: its count, or for a topic that does not exist the count Kafka's broker auto-creates one
        with (``num.partitions``, :data:`DEFAULT_NUM_PARTITIONS`), which ``partition`` must be below, as a
        produce to a partition past it fails in Kafka. A typo in a partition number thus never creates
        thousands of partitions; a topic of more is created explicitly (:meth:`create_topic`). A
        read-only manager answers it before a writer creates the log directory.

        Raises:
            InvalidTopicError: the topic name breaks Kafka's rules.
            InvalidArgumentError: ``partition`` is not an integer in 0..2**31 - 1 (Kafka's int32).
            UnknownTopicOrPartitionError: ``partition`` is outside the topic's count, or outside the
                count a write gives a new topic (the message says how to create or grow the topic).
        """
        partition = file_names.partition_number(partition)
        count = self.topic_partitions(topic)
        if count is not None:
            self._check_partition_of(topic, partition, count)
            return count
        if partition >= DEFAULT_NUM_PARTITIONS:
            raise UnknownTopicOrPartitionError(
                f"topic {topic!r} does not exist in {self.log_dir}, and a write creates a topic with "
                f"{DEFAULT_NUM_PARTITIONS} partition (Kafka's num.partitions default), so partition {partition} "
                f"would not exist: create the topic with its partitions first, `seglog topic create --log-dir "
                f"{self.log_dir} --topic {topic} --partitions N` (N > {partition})"
            )
        return DEFAULT_NUM_PARTITIONS

    def _check_partition_of(self, topic: str, partition: int, count: int) -> None:
        if partition >= count:
            raise UnknownTopicOrPartitionError(
                f"topic {topic!r} has {count} partitions (0..{count - 1}) in {self.log_dir}; partition {partition} "
                f"does not exist (add partitions with `seglog topic alter --log-dir {self.log_dir} --topic {topic} "
                f"--partitions {partition + 1}`)"
            )

    def all_logs(self) -> list[Log]:
        """The logs this manager has opened so far, in (topic, partition) order."""
        with self._lock:
            return [self._logs[tp] for tp in sorted(self._logs)]

    def load_all(self) -> list[Log]:
        """Open every partition of the directory; partitions whose writer is another process are
        skipped (logged) when this manager is writable. Returns the logs opened by this manager."""
        for topic, partition in self.partitions():
            try:
                self.get_log(topic, partition)
            except LogLockedError as e:
                logger.info("[LogManager dir=%s] skipping %s-%d: %s", self.log_dir, topic, partition, e)
        return self.all_logs()

    def _get(self, topic: str, partition: int, *, create: bool) -> Log | None:
        partition = file_names.partition_number(partition)
        name = file_names.partition_dir_name(topic, partition)
        with self._lock:
            if self._closed:
                raise ValueError(f"log manager of {self.log_dir} is closed")
            log = self._logs.get((topic, partition))
            if log is not None:
                return log
            directory = self.log_dir / name
            if not directory.is_dir():
                if not create:
                    return None
                if self.read_only:
                    raise ValueError(f"cannot create partition {name} in read-only log directory {self.log_dir}")
            log = self._open(topic, partition, directory)
            self._logs[(topic, partition)] = log
            return log

    def _open(self, topic: str, partition: int, directory: Path) -> Log:
        tp = (topic, partition)
        config = self.settings.log_config(topic)
        high_watermark = self._read_checkpoint(file_names.REPLICATION_OFFSET_CHECKPOINT_FILE).get(tp)
        if self.read_only:
            return Log.open(
                directory,
                config,
                recovery_point=self._recovery_points.get(tp, 0),
                log_start_offset=self._log_start_offsets.get(tp, 0),
                clock=self.clock,
                read_only=True,
                high_watermark=high_watermark,
            )
        # A process that died holding the partition keeps its holder line in the lock file: the partition
        # is not clean, and the line says why (read without a clean-shutdown marker too: whoever left
        # the directory unclean may have held another partition). A live writer's line is there too;
        # Log.open then fails with LogLockedError anyway.
        holder = FileLock(directory / file_names.PARTITION_LOCK_FILE).holder() if directory.is_dir() else ""
        if holder and self.had_clean_shutdown:
            logger.warning("[LogManager dir=%s] %s-%d: lock file names %r: not clean", self.log_dir, *tp, holder)
        clean = self.had_clean_shutdown and not holder
        log = Log.open(
            directory,
            config,
            recovery_point=self._recovery_points.get(tp, 0),
            log_start_offset=self._log_start_offsets.get(tp, 0),
            had_clean_shutdown=clean,
            clock=self.clock,
            high_watermark=high_watermark,
            recovery_reason=died_holding_reason(holder),
        )
        if high_watermark is None and log.log_end_offset == 0:
            self._start_high_watermarks([tp])
        return log

    # -- topics --------------------------------------------------------------------------------

    def topics(self) -> dict[str, int]:
        """Every topic of the directory with its partition count: the recorded ones, and those only
        partition directories show (inferred, recorded when this manager is writable)."""
        on_disk = sorted({topic for topic, _ in self.partitions()} | set(self._recorded()))
        return {topic: count for topic in on_disk if (count := self.topic_partitions(topic)) is not None}

    def topic_partitions(self, topic: str) -> int | None:
        """The topic's partition count, None when the topic does not exist.

        The count recorded in ``seglog-topics.json``; for a topic that only has partition directories
        (written before the file existed), 1 + its highest partition number, recorded now when this
        manager is writable, so the count never changes behind a writer's back.
        """
        file_names.validate_topic(topic)
        recorded = self._recorded().get(topic)
        if recorded is not None or self.read_only:
            return recorded if recorded is not None else self._inferred(topic)
        with self._lock, topics.locked(self.log_dir):
            counts = topics.read_topics(self.log_dir)
            if topic not in counts:
                inferred = self._inferred(topic)
                if inferred is None:
                    return None
                counts[topic] = inferred
                topics.write_topics(self.log_dir, counts)
                logger.info(
                    "[LogManager dir=%s] topic %s: recorded %d partitions found on disk", self.log_dir, topic, inferred
                )
            return counts[topic]

    def create_topic(self, topic: str, num_partitions: int | None = None, *, exist_ok: bool = False) -> int:
        """Create ``topic`` with all its partitions (as Kafka does) and record the count; returns it.

        ``num_partitions`` defaults to Kafka's ``num.partitions`` default (1), or to the existing
        count with ``exist_ok``. An existing topic is an error unless ``exist_ok``; then a given
        ``num_partitions`` must equal its count (a different count would re-hash keys). The count is
        recorded first, then the partitions are created (:meth:`_create_partitions`): a creation
        interrupted part-way is completed by the next call for the topic with its count (``exist_ok``,
        or the same ``num_partitions`` again: the interrupted command run again).

        Raises:
            TopicExistsError: the topic exists with all its partitions and not ``exist_ok``.
            InvalidPartitionsError: ``num_partitions`` < 1 or above 2**31 - 1, differs from the existing
                count, or would make more than :data:`~indexer.limits.MAX_NEW_PARTITIONS` partitions.
            ValueError: a read-only manager.
        """
        if self.read_only:
            raise ValueError(f"cannot create topic {topic!r} in read-only log directory {self.log_dir}")
        with self._lock:
            existing = self.topic_partitions(topic)
            if (
                existing is not None
                and not exist_ok
                and (num_partitions != existing or next(self._missing(topic, existing), None) is None)
            ):
                raise TopicExistsError(f"topic {topic!r} already exists in {self.log_dir} with {existing} partitions")
            count = self.partition_count(topic, num_partitions)
            self._check_partition_paths(topic, count)
            if existing is not None:
                self._create_partitions(topic, existing, "create")
                return existing
            self._record(topic, count, grow_only=False)
            self._create_partitions(topic, count, "create")
            logger.info("[LogManager dir=%s] created topic %s with %d partitions", self.log_dir, topic, count)
            return count

    def partition_count(self, topic: str, num_partitions: int | None = None) -> int:
        """The partition count ``create_topic(topic, num_partitions, exist_ok=True)`` gives ``topic``,
        creating nothing (a writer that checks its input first, then creates): the topic's count if it
        exists, which a given ``num_partitions`` must equal, else ``num_partitions`` or Kafka's default.

        Raises:
            InvalidTopicError: the topic name breaks Kafka's rules.
            InvalidPartitionsError: ``num_partitions`` < 1 or above 2**31 - 1, differs from the existing
                count, or would make a new topic of more than :data:`~indexer.limits.MAX_NEW_PARTITIONS`.
        """
        file_names.validate_topic(topic)
        if num_partitions is not None:
            num_partitions = _check_partition_count(num_partitions)
        existing = self.topic_partitions(topic)
        if existing is None:
            count = num_partitions if num_partitions is not None else DEFAULT_NUM_PARTITIONS
            check_new_partitions(topic, 0, count)
            return count
        if num_partitions is not None and num_partitions != existing:
            way = (
                f"To grow it: `seglog topic alter --log-dir {self.log_dir} --topic {topic} "
                f"--partitions {num_partitions}`"
                if num_partitions > existing
                else f"A topic never shrinks: use {existing} partitions"
            )
            raise InvalidPartitionsError(
                f"topic {topic!r} has {existing} partitions in {self.log_dir}, not {num_partitions}: a topic's "
                f"partition count is fixed at creation (keys would hash to other partitions). {way}"
            )
        return existing

    def add_partitions(self, topic: str, num_partitions: int) -> int:
        """Grow ``topic`` to ``num_partitions`` partitions (Kafka's CreatePartitions); returns the old count.

        Keys written before hash to other partitions afterwards, as in Kafka: that is the point of
        asking for it explicitly. The new count is recorded first, then the partitions are created;
        asked again for the count of a growth that was interrupted part-way, it creates the rest.

        Raises:
            UnknownTopicOrPartitionError: the topic does not exist.
            InvalidPartitionsError: ``num_partitions`` is not above the current count, above 2**31 - 1, or
                more than :data:`~indexer.limits.MAX_NEW_PARTITIONS` above it.
        """
        num_partitions = _check_partition_count(num_partitions)
        if self.read_only:
            raise ValueError(f"cannot change topic {topic!r} in read-only log directory {self.log_dir}")
        with self._lock:
            old = self.topic_partitions(topic)
            if old is None:
                raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist in {self.log_dir}")
            if old == num_partitions and next(self._missing(topic, old), None) is not None:
                self._create_partitions(topic, old, "alter")
                return old
            check_new_partitions(topic, old, num_partitions)
            self._check_partition_paths(topic, num_partitions)
            self._record(topic, num_partitions, grow_only=True)
            self._create_partitions(topic, num_partitions, "alter")
            logger.info(
                "[LogManager dir=%s] topic %s grown from %d to %d partitions", self.log_dir, topic, old, num_partitions
            )
            return old

    def _recorded(self) -> dict[str, int]:
        return topics.read_topics(self.log_dir)

    def _inferred(self, topic: str) -> int | None:
        numbers = [p for t, p in self.partitions() if t == topic]
        return max(numbers) + 1 if numbers else None

    def _record(self, topic: str, count: int, *, grow_only: bool) -> None:
        with topics.locked(self.log_dir):
            counts = topics.read_topics(self.log_dir)
            old = counts.get(topic)
            if grow_only and old is not None and count <= old:
                raise InvalidPartitionsError(
                    f"topic {topic!r} has {old} partitions; the new count must be larger, got {count} "
                    "(Kafka topics gain partitions, never lose them)"
                )
            if not grow_only and old is not None:
                raise TopicExistsError(f"topic {topic!r} was created meanwhile with {old} partitions")
            counts[topic] = count
            topics.write_topics(self.log_dir, counts)

    def _check_partition_paths(self, topic: str, count: int) -> None:
        """Refuse, before the count is recorded, a partition among 0..count-1 whose directory's name is
        taken by something else (a file): the topic would be recorded without it."""
        for partition in range(count):
            path = self.log_dir / file_names.partition_dir_name(topic, partition)
            if path.exists() and not path.is_dir():
                raise StorageError(
                    f"{path} is a file where the directory of partition {partition} of topic {topic!r} goes: "
                    "move it away",
                    path=path,
                    errno=errno.EEXIST,
                )

    def _missing(self, topic: str, count: int) -> Iterator[Path]:
        """The directories of ``topic``'s partitions 0..count-1 that do not exist, in order (lazily: a
        count may be large)."""
        for partition in range(count):
            path = self.log_dir / file_names.partition_dir_name(topic, partition)
            if not path.is_dir():
                yield path

    def _create_partitions(self, topic: str, count: int, action: str) -> None:
        """Create the partitions among 0..count-1 that have no directory yet, durably (each an empty
        segment at 0, :func:`~indexer.log.create_empty_partition`; their directories fsynced, many at
        once, then the log directory's); existing ones are left alone (another process may be their
        writer). A creation longer than :data:`_PROGRESS_S` says how far it got at INFO; one that fails
        or is interrupted says at WARNING that ``seglog topic ACTION`` (``create`` or ``alter``) run
        again creates the rest."""
        missing = self._missing(topic, count)
        created = 0
        started = last_said = time.monotonic()
        try:
            with ThreadPoolExecutor(max_workers=_FSYNC_THREADS, thread_name_prefix="seglog-fsync") as pool:
                while chunk := list(itertools.islice(missing, _CREATE_CHUNK)):
                    for directory in chunk:
                        create_empty_partition(directory)
                    with storage_errors(self.log_dir, "fsync the new partition directories"):
                        list(pool.map(fsync_directory, chunk))
                        fsync_directory(self.log_dir)
                    self._start_high_watermarks(file_names.parse_topic_partition_name(d.name) for d in chunk)
                    created += len(chunk)
                    if time.monotonic() - last_said >= _PROGRESS_S:
                        last_said = time.monotonic()
                        logger.info(
                            "[LogManager dir=%s] topic %s: created %d partitions, up to %s of 0..%d",
                            self.log_dir,
                            topic,
                            created,
                            chunk[-1].name,
                            count - 1,
                        )
        except BaseException as e:
            logger.warning(
                "[LogManager dir=%s] topic %s is recorded with %d partitions, but creating their directories "
                "stopped (%s) after %d: run `seglog topic %s --log-dir %s --topic %s --partitions %d` again to "
                "create the rest",
                self.log_dir,
                topic,
                count,
                type(e).__name__,
                created,
                action,
                self.log_dir,
                topic,
                count,
            )
            raise
        if created:
            logger.debug(
                "[LogManager dir=%s] topic %s: %d partitions created in %.2f s",
                self.log_dir,
                topic,
                created,
                time.monotonic() - started,
            )

    # -- checkpoints ---------------------------------------------------------------------------

    def _read_checkpoint(self, name: str) -> dict[TopicPartition, int]:
        """Checkpoint ``name`` as this manager may read it (:func:`indexer.checkpoint.read_checkpoint`:
        leniently only what a read-only manager needs none of)."""
        return read_checkpoint(self.log_dir, name, reader=self.read_only)

    def high_watermark(self, topic: str, partition: int) -> int | None:
        """The partition's high watermark as last checkpointed (for readers in other processes).

        Raises:
            InvalidArgumentError: ``partition`` is not an integer in 0..2**31 - 1 (Kafka's int32).
            StorageError: ``replication-offset-checkpoint`` cannot be read (names it and ``seglog recover``).
        """
        partition = file_names.partition_number(partition)
        return self._read_checkpoint(file_names.REPLICATION_OFFSET_CHECKPOINT_FILE).get((topic, partition))

    def checkpointed_end(self, topic: str, partition: int) -> CheckpointedEnd | None:
        """The offset the partition's log must reach by its checkpoints as last written (its high
        watermark, else its recovery point: :func:`indexer.data_loss.checkpointed_end`), for readers
        that say when the log ends below it. Read it before opening the log: checkpoints only grow.

        Raises:
            InvalidArgumentError: ``partition`` is not an integer in 0..2**31 - 1 (Kafka's int32).
            StorageError: ``replication-offset-checkpoint`` cannot be read (names it and ``seglog recover``).
        """
        high_watermark = self.high_watermark(topic, partition)
        recovery_point = self._read_checkpoint(file_names.RECOVERY_POINT_CHECKPOINT_FILE).get((topic, partition))
        return checkpointed_end(high_watermark, recovery_point)

    def _writable_logs(self) -> dict[TopicPartition, Log]:
        with self._lock:
            return {tp: log for tp, log in self._logs.items() if not log.read_only and not log.closed}

    def _update(
        self,
        name: str,
        updates: dict[TopicPartition, int],
        remove: list[TopicPartition],
        expected: dict[TopicPartition, int | None] | None = None,
    ) -> None:
        if self.read_only:
            raise ValueError(f"cannot write checkpoints of read-only log directory {self.log_dir}")
        if updates or remove:
            update_checkpoint(self.log_dir / name, updates, lock_path=self._lock_path, remove=remove, expected=expected)

    def _start_high_watermarks(self, partitions: Iterable[TopicPartition]) -> None:
        """Give new, empty ``partitions`` their high watermark 0 in ``replication-offset-checkpoint``
        (an entry another process wrote meanwhile is kept). A partition without an entry is read to
        its log end (a finished broker directory, whose checkpoint was not copied): without one, the
        records of a first append whose writer died before its commit would be shown to every reader.

        Raises:
            StorageError: the checkpoint cannot be read or written.
        """
        start = dict.fromkeys(partitions, 0)
        self._update(file_names.REPLICATION_OFFSET_CHECKPOINT_FILE, start, [], dict.fromkeys(start))

    def checkpoint_recovery_points(self) -> None:
        """Write this manager's logs' recovery points to ``recovery-point-offset-checkpoint``.

        Raises:
            StorageError: the write failed (the previous file is intact).
        """
        logs = self._writable_logs()
        updates = {tp: log.recovery_point for tp, log in logs.items()}
        self._update(file_names.RECOVERY_POINT_CHECKPOINT_FILE, updates, [])
        with self._lock:
            self._recovery_points.update(updates)

    def checkpoint_log_start_offsets(self) -> None:
        """Write ``log-start-offset-checkpoint``: entries only for logs whose start offset lies above
        their first segment's base (spec 6.4); stale entries of this manager's other logs are removed.

        Raises:
            StorageError: the write failed (the previous file is intact).
        """
        logs = self._writable_logs()
        updates: dict[TopicPartition, int] = {}
        for tp, log in logs.items():
            first_base = log.segments.first_segment_base_offset()
            if first_base is not None and log.log_start_offset > first_base:
                updates[tp] = log.log_start_offset
        remove = [tp for tp in logs if tp not in updates]
        self._update(file_names.LOG_START_OFFSET_CHECKPOINT_FILE, updates, remove)
        with self._lock:
            for tp in remove:
                self._log_start_offsets.pop(tp, None)
            self._log_start_offsets.update(updates)

    def checkpoint_high_watermarks(self) -> None:
        """Write this manager's logs' high watermarks to ``replication-offset-checkpoint``.

        Raises:
            StorageError: the write failed (the previous file is intact).
        """
        updates = {tp: log.high_watermark for tp, log in self._writable_logs().items()}
        self._update(file_names.REPLICATION_OFFSET_CHECKPOINT_FILE, updates, [])

    def checkpoint_all(self) -> None:
        """All three checkpoints."""
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()
        self.checkpoint_high_watermarks()

    # -- flush and close -----------------------------------------------------------------------

    def flush_all(self) -> None:
        """fsync every open writable log up to its end (moving recovery points). Thread-safe."""
        for log in self._writable_logs().values():
            log.flush()

    def close(self) -> None:
        """Flush and close every log, write the checkpoints, then the clean-shutdown marker if every
        log closed cleanly (spec 6.1). Idempotent.

        Raises:
            StorageError: a checkpoint or the marker could not be written (the logs are closed anyway).
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            logs = dict(self._logs)
        if self.read_only:
            for log in logs.values():
                log.close()
            return
        logs = {tp: log for tp, log in logs.items() if not log.closed}  # some caller closed it already
        for tp, log in sorted(logs.items()):
            try:
                log.flush()
            except SeglogError as e:
                self._clean_close = False
                logger.error("[LogManager dir=%s] flush of %s failed at shutdown: %s", self.log_dir, tp, e)
        checkpoint_error: StorageError | None = None
        try:
            self.checkpoint_all()  # before closing: the flushed logs' offsets are final
        except StorageError as e:
            checkpoint_error, self._clean_close = e, False
        for tp, log in sorted(logs.items()):
            try:
                log.close()
            except SeglogError as e:
                self._clean_close = False
                logger.error("[LogManager dir=%s] close of %s failed: %s", self.log_dir, tp, e)
        if checkpoint_error is not None:
            raise checkpoint_error
        if self._clean_close:
            self._write_clean_shutdown_marker()
        state = "clean" if self._clean_close else "unclean: no marker written"
        logger.info("[LogManager dir=%s] closed %d logs (%s)", self.log_dir, len(logs), state)

    def __enter__(self) -> LogManager:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """:meth:`close`; when the block failed and the close fails too (a full disk fails both an
        append and the checkpoints), the close's error is logged and the block's propagates: it is
        the one that says what went wrong."""
        if exc is None:
            self.close()
            return
        try:
            self.close()
        except SeglogError as e:
            logger.error("[LogManager dir=%s] closing after %s: %s", self.log_dir, type(exc).__name__, e)

    def _delete_clean_shutdown_marker(self, marker: Path) -> bool:
        try:
            marker.unlink()
        except FileNotFoundError:
            return False
        except OSError as e:
            raise StorageError(f"cannot delete clean-shutdown marker {marker}: {e.strerror}", path=marker) from e
        with storage_errors(self.log_dir, "fsync the log directory"):
            fsync_directory(self.log_dir)
        return True

    def _write_clean_shutdown_marker(self) -> None:
        write_clean_shutdown_marker(self.log_dir)
