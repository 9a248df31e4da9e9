"""Exclusive advisory locks on files (Kafka's ``FileLock``), used for the per-partition writer lock
(``<partition dir>/.seglog.lock``) and the log directory's ``.lock`` while checkpoints are written.

The lock is ``fcntl.flock(LOCK_EX | LOCK_NB)`` on a file descriptor opened for this lock only.
``flock`` locks belong to the open file description, so two ``FileLock`` objects on the same path
conflict within one process as well as across processes, and the kernel drops the lock when the
holder dies, even by SIGKILL: a crash never leaves a stale lock behind. The descriptor is
close-on-exec, so child processes do not inherit the lock. A holder may delete the file it holds
(``release(remove=True)``): whoever locks a file checks that the path still names it, else opens the
path again, so a removed file is never held beside its successor.

File content, rewritten by each new holder and emptied on release (read to name the holder in
:class:`~indexer.errors.LogLockedError`, and, left in a free lock, to tell that its holder died)::

    pid=<int> host=<hostname> since_ms=<wall-clock ms>[ role=<role>]\\n

``role`` marks holders that never append (:data:`MAINTENANCE_ROLE`, :data:`RECOVERY_ROLE`): one of
them killed while holding leaves a partition to recover, not a writer's uncommitted tail
(:func:`left_by_writer`).
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import socket
import threading
import time
from pathlib import Path
from types import TracebackType

from indexer.errors import LogLockedError, StorageError

logger = logging.getLogger(__name__)

_POLL_INTERVAL_S = 0.005

#: The ``role`` of the maintenance jobs borrowing a partition (``seglog maintain``, ``seglog run``'s own).
MAINTENANCE_ROLE = "maintenance"
#: The ``role`` of ``seglog recover`` holding a partition.
RECOVERY_ROLE = "recovery"
#: How long a holder other than a borrower waits for a lock that maintenance borrows (``seglog
#: maintain``, a ``seglog run`` writing on the executors): a borrower gives it back after one
#: partition's work, any other holder keeps it for its lifetime.
BORROWER_WAIT_S = 60.0


def holder_fields(holder: str) -> dict[str, str]:
    """The ``key=value`` fields of a holder line (``pid``, ``host``, ``since_ms``, ``role``)."""
    return dict(part.partition("=")[::2] for part in holder.split())


def left_by_writer(holder: str) -> bool:
    """Whether ``holder``, the line found in a free lock file, was left by a writer that died holding
    the partition (so data above its committed offset may be a half-written batch), rather than by
    a holder that never appends (a ``role``: maintenance, recovery) or by nobody (empty)."""
    return bool(holder.strip()) and "role" not in holder_fields(holder)


def is_held(path: str | os.PathLike[str]) -> bool:
    """Whether someone holds the lock at ``path`` now, asked at once (no wait for a borrower) and
    writing nothing (a missing file: nobody), for readers that must not take a live writer's
    unfinished files (an active segment's pre-allocated index) for damage.

    Raises:
        StorageError: the lock file exists but cannot be opened or locked.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    except OSError as e:
        raise StorageError(f"cannot open lock file {path}: {e.strerror}", path=path, errno=e.errno) from e
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return True
        raise StorageError(f"cannot lock {path}: {e.strerror}", path=path, errno=e.errno) from e
    finally:
        os.close(fd)  # drops the shared lock, if taken
    return False


class FileLock:
    """An exclusive lock on ``path`` held until :meth:`release` (or process death).

    ``what`` names the locked resource in error messages (default: ``partition <parent dir>``);
    ``role`` marks a holder that is not a writer (:data:`MAINTENANCE_ROLE`, :data:`RECOVERY_ROLE`).
    Taking or probing the lock waits up to :data:`BORROWER_WAIT_S` (logged once at INFO) while a
    maintenance borrower holds it, unless this object is a borrower itself (borrowers skip taken
    partitions); other holders fail it at once (or after ``timeout``).
    Thread-safe; not reentrant: acquiring a lock this object already holds is a ``RuntimeError``.
    """

    def __init__(self, path: str | os.PathLike[str], *, what: str | None = None, role: str | None = None) -> None:
        self.path = Path(path)
        self.what = what if what is not None else f"partition {self.path.parent}"
        self.role = role
        self._fd: int | None = None
        self._mutex = threading.Lock()

    @property
    def locked(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None

    def acquire(self, timeout: float | None = 0.0) -> None:
        """Take the lock; ``timeout`` 0 tries once, ``None`` waits forever, else waits that many seconds
        (and up to :data:`BORROWER_WAIT_S` while a maintenance borrower holds it, see the class).

        Raises:
            LogLockedError: another holder (in this or another process) keeps the lock; the message names
                its pid and host.
            StorageError: the lock file cannot be opened.
        """
        with self._mutex:
            if self._fd is not None:
                raise RuntimeError(f"lock {self.path} is already held by this FileLock")
            while True:
                fd = self._open()
                try:
                    self._lock(fd, fcntl.LOCK_EX, timeout)
                    if self._names(fd):
                        self._write_holder(fd)
                        break
                except BaseException:
                    os.close(fd)
                    raise
                os.close(fd)  # its holder removed the file meanwhile: the lock is the new file's
            self._fd = fd
        logger.debug("acquired lock %s", self.path)

    def release(self, *, clear_holder: bool = True, remove: bool = False) -> None:
        """Give the lock up (no-op if not held). The file stays, its holder line cleared unless
        ``clear_holder`` is false (a writer letting go as a crash would: the next holder must recover),
        or, with ``remove``, is deleted while still held (a holder that leaves nothing to guard behind:
        a waiter that opened it before then finds it gone and takes the lock of a new file)."""
        with self._mutex:
            fd, self._fd = self._fd, None
            if fd is None:
                return
            try:
                if remove:
                    self.path.unlink()
                elif clear_holder:
                    os.ftruncate(fd, 0)
            except OSError as e:  # the lock is still released below; the file left is only informational
                logger.warning("could not %s lock file %s: %s", "remove" if remove else "clear", self.path, e)
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
        logger.debug("released lock %s", self.path)

    def probe(self) -> None:
        """Raise :class:`LogLockedError` if someone holds the lock; write and create nothing.

        For read-only callers (a dry run, a read-only file system): the file is opened read-only and
        only a shared lock is tried (and dropped at once); a missing file means nobody holds it.
        """
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return
        except OSError as e:
            raise StorageError(f"cannot open lock file {self.path}: {e.strerror}", path=self.path, errno=e.errno) from e
        try:
            self._lock(fd, fcntl.LOCK_SH, 0.0)
        finally:
            os.close(fd)  # drops the shared lock, if taken

    def holder(self) -> str:
        """The holder line currently in the lock file ("" if none or unreadable)."""
        try:
            return self.path.read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            return ""

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"FileLock({str(self.path)!r}, locked={self.locked})"

    def _open(self) -> int:
        try:
            return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as e:
            hint = (
                " (only readers work here: seglog read, describe, dump, recover --dry-run)"
                if e.errno in (errno.EROFS, errno.EACCES)
                else ""
            )
            raise StorageError(
                f"cannot open lock file {self.path}: {e.strerror}{hint}", path=self.path, errno=e.errno
            ) from e

    def _lock(self, fd: int, mode: int, timeout: float | None) -> None:
        """``flock(mode)`` on ``fd``, retried until ``timeout`` (and while a borrower holds it, see the class)."""
        start = time.monotonic()
        deadline = None if timeout is None else start + timeout
        borrower_wait = 0.0 if self.role == MAINTENANCE_ROLE else BORROWER_WAIT_S
        waiting_for_borrower = False
        while True:
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
                return
            except OSError as e:
                if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise StorageError(f"cannot lock {self.path}: {e.strerror}", path=self.path, errno=e.errno) from e
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                # No line yet, or no longer: the holder is between taking or giving the lock and its line.
                line = self.holder()
                borrowed = not line or holder_fields(line).get("role") == MAINTENANCE_ROLE
                if not borrowed or now >= start + borrower_wait:
                    raise LogLockedError(f"{self.what} is locked by {self._describe_holder()}", path=self.path)
                if not waiting_for_borrower:
                    logger.info(
                        "%s is borrowed by %s: waiting up to %.0f s for it",
                        self.what,
                        self._describe_holder(),
                        borrower_wait,
                    )
                    waiting_for_borrower = True
            time.sleep(_POLL_INTERVAL_S)

    def _names(self, fd: int) -> bool:
        """Whether :attr:`path` still names the file open on ``fd`` (not removed or replaced since)."""
        try:
            current = os.stat(self.path)
        except FileNotFoundError:
            return False
        except OSError as e:
            raise StorageError(f"cannot stat lock file {self.path}: {e.strerror}", path=self.path, errno=e.errno) from e
        opened = os.fstat(fd)
        return (current.st_dev, current.st_ino) == (opened.st_dev, opened.st_ino)

    def _write_holder(self, fd: int) -> None:
        role = f" role={self.role}" if self.role else ""
        line = f"pid={os.getpid()} host={socket.gethostname()} since_ms={time.time_ns() // 1_000_000}{role}\n"
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, line.encode("utf-8"), 0)
        except OSError as e:  # a read-only lock file still locks; the holder is just not named
            logger.warning("could not record the holder in lock file %s: %s", self.path, e)

    def _describe_holder(self) -> str:
        fields = holder_fields(self.holder())
        pid = fields.get("pid")
        if not pid:
            return "another holder (pid unknown)"
        extra = [f"host {fields['host']}"] if "host" in fields else []
        if "since_ms" in fields and fields["since_ms"].isdigit():
            since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(fields["since_ms"]) / 1000))
            extra.append(f"since {since}")
        if "role" in fields:
            extra.append(fields["role"])
        if pid.isdigit() and int(pid) == os.getpid():
            extra.append("this process")
        return f"pid {pid} ({', '.join(extra)})" if extra else f"pid {pid}"
