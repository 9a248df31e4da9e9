"""One log directory: its partitions, its checkpoint files and its clean-shutdown marker (Kafka's
``LogManager``, for a single ``log.dir``).

Layout (spec, top of the document)::

    <log dir>/
      recovery-point-offset-checkpoint   log-start-offset-checkpoint   replication-offset-checkpoint
      .kafka_cleanshutdown   (only between a clean close and the next open)   .lock
      <topic>-<partition>/   one directory per partition (see indexer.log)

On open the clean-shutdown marker is deleted at once and remembered (KAFKA-10471: a crash while
loading must count as unclean next time); the recovery-point and log-start-offset checkpoints are
read (an unreadable one is logged and treated as empty). Partitions are opened lazily, on first
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

import logging
import os
import threading
from pathlib import Path
from types import TracebackType

from indexer import file_names
from indexer.checkpoint import OffsetCheckpointFile, fsync_directory, update_checkpoint
from indexer.clock import Clock, SystemClock
from indexer.config import Settings
from indexer.errors import LogLockedError, SeglogError, StorageError, storage_errors
from indexer.file_names import TopicPartition
from indexer.lock import FileLock
from indexer.log import Log

logger = logging.getLogger(__name__)

CLEAN_SHUTDOWN_CONTENT = b'{"version":0,"brokerEpoch":0}'


def write_clean_shutdown_marker(log_dir: Path) -> None:
    """Write ``log_dir``'s clean-shutdown marker atomically: the one way every layer writes it.

    A temporary file is written and fsynced, renamed over the marker and the directory fsynced,
    so a crash leaves either no marker or a whole one.

    Raises:
        StorageError: an I/O error (naming the marker file).
    """
    marker = Path(log_dir) / file_names.CLEAN_SHUTDOWN_FILE
    tmp = marker.with_name(marker.name + ".tmp")
    with storage_errors(marker, "write the clean-shutdown marker"):
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, CLEAN_SHUTDOWN_CONTENT)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, marker)
        fsync_directory(Path(log_dir))


class LogManager:
    """The partitions of one log directory, opened on demand.

    ``read_only=True`` opens every log read-only (no locks, no recovery, no writes: a reader beside a
    live writer, or a directory without write permission), leaves the marker in place and writes
    no checkpoint. Thread-safe.
    """

    def __init__(
        self,
        log_dir: str | os.PathLike[str],
        settings: Settings,
        *,
        clock: Clock | None = None,
        read_only: bool = False,
    ) -> None:
        self.log_dir = Path(log_dir)
        self.settings = settings
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.read_only = read_only
        self._lock = threading.RLock()
        self._logs: dict[TopicPartition, Log] = {}
        self._closed = False
        self._clean_close = True
        self._lock_path = self.log_dir / file_names.LOG_DIR_LOCK_FILE
        marker = self.log_dir / file_names.CLEAN_SHUTDOWN_FILE
        if read_only:
            self.had_clean_shutdown = marker.exists()
        else:
            with storage_errors(self.log_dir, "create the log directory"):
                self.log_dir.mkdir(parents=True, exist_ok=True)
            self.had_clean_shutdown = self._delete_clean_shutdown_marker(marker)
        self._recovery_points = self._read_checkpoint(file_names.RECOVERY_POINT_CHECKPOINT_FILE)
        self._log_start_offsets = self._read_checkpoint(file_names.LOG_START_OFFSET_CHECKPOINT_FILE)
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
            LogLockedError: another process is the partition's writer (writable managers only).
            StorageError: the partition cannot be loaded.
        """
        return self._get(topic, partition, create=False)

    def get_or_create_log(self, topic: str, partition: int) -> Log:
        """The partition's log, created (``<topic>-<partition>``, an empty segment at 0) if missing.

        Raises:
            InvalidTopicError: the topic name breaks Kafka's rules.
            ValueError: a negative partition, or a read-only manager asked to create one.
            LogLockedError: another process is the partition's writer.
        """
        log = self._get(topic, partition, create=True)
        assert log is not None
        return log

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
                    raise ValueError(
                        f"cannot create partition {name} in read-only log directory {self.log_dir}"
                    )
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
        # A writer that died keeps its holder line in the lock file: its partition is not clean. (A live
        # writer's line is there too; Log.open then fails with LogLockedError anyway.)
        holder = ""
        if self.had_clean_shutdown and directory.is_dir():
            holder = FileLock(directory / file_names.PARTITION_LOCK_FILE).holder()
            if holder:
                logger.warning(
                    "[LogManager dir=%s] %s-%d: lock file names %r: not clean", self.log_dir, *tp, holder
                )
        clean = self.had_clean_shutdown and not holder
        return Log.open(
            directory,
            config,
            recovery_point=self._recovery_points.get(tp, 0),
            log_start_offset=self._log_start_offsets.get(tp, 0),
            had_clean_shutdown=clean,
            clock=self.clock,
            high_watermark=high_watermark,
        )

    # -- checkpoints ---------------------------------------------------------------------------

    def _read_checkpoint(self, name: str) -> dict[TopicPartition, int]:
        try:
            return OffsetCheckpointFile(self.log_dir / name).read()
        except StorageError as e:
            logger.warning("[LogManager dir=%s] ignoring unreadable checkpoint: %s", self.log_dir, e)
            return {}

    def high_watermark(self, topic: str, partition: int) -> int | None:
        """The partition's high watermark as last checkpointed (for readers in other processes)."""
        return self._read_checkpoint(file_names.REPLICATION_OFFSET_CHECKPOINT_FILE).get((topic, partition))

    def _writable_logs(self) -> dict[TopicPartition, Log]:
        with self._lock:
            return {tp: log for tp, log in self._logs.items() if not log.read_only and not log.closed}

    def _update(self, name: str, updates: dict[TopicPartition, int], remove: list[TopicPartition]) -> None:
        if self.read_only:
            raise ValueError(f"cannot write checkpoints of read-only log directory {self.log_dir}")
        if updates or remove:
            update_checkpoint(self.log_dir / name, updates, lock_path=self._lock_path, remove=remove)

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
        self.close()

    def _delete_clean_shutdown_marker(self, marker: Path) -> bool:
        try:
            marker.unlink()
        except FileNotFoundError:
            return False
        except OSError as e:
            raise StorageError(
                f"cannot delete clean-shutdown marker {marker}: {e.strerror}", path=marker
            ) from e
        with storage_errors(self.log_dir, "fsync the log directory"):
            fsync_directory(self.log_dir)
        return True

    def _write_clean_shutdown_marker(self) -> None:
        write_clean_shutdown_marker(self.log_dir)
