"""Deleting and renaming the files of a segment's indexes (Kafka's ``Files.deleteIfExists`` and
``Utils.atomicMoveWithFallback``), with ``OSError`` turned into :class:`~indexer.errors.StorageError`,
:func:`pwrite_all`, and :class:`IndexFile`, the file handling the index classes share."""

from __future__ import annotations

import logging
import os
import threading
from abc import ABC, abstractmethod
from pathlib import Path
from types import TracebackType
from typing import ClassVar, Self

from indexer.errors import storage_errors

logger = logging.getLogger(__name__)


def pwrite_all(fd: int, data: bytes | memoryview, position: int) -> None:
    """Write all of ``data`` at ``position`` of ``fd`` (``pwrite`` may write less than asked).

    ``OSError`` is left to the caller's :func:`~indexer.errors.storage_errors`, which names the file.
    """
    view = memoryview(data).cast("B")
    while view:
        written = os.pwrite(fd, view, position)
        view, position = view[written:], position + written


def delete_if_exists(path: Path, kind: str) -> bool:
    """Unlink ``path``; whether it existed. ``kind`` ("index file", ...) names it in errors.

    Raises:
        StorageError: any failure other than a missing file.
    """
    with storage_errors(path, f"delete {kind}"):
        try:
            os.unlink(path)
        except FileNotFoundError:
            return False
    return True


def replace_file(source: Path, target: str | os.PathLike[str], kind: str, *, missing_ok: bool = False) -> None:
    """Atomically move ``source`` to ``target``, replacing it; ``kind`` names the file in errors.

    With ``missing_ok`` a missing ``source`` is no error (a file not created yet); a missing
    target directory still is.

    Raises:
        StorageError: the move failed.
    """
    with storage_errors(source, f"rename {kind}", target=target):
        try:
            os.replace(source, target)
        except FileNotFoundError:
            if not missing_ok or source.exists():
                raise
            logger.debug("%s %s does not exist yet; nothing to rename", kind, source.absolute())


class IndexFile(ABC):
    """The path handling of an index file: rename, delete, follow a renamed directory, ``with`` closes.

    Subclasses set ``_lock`` (re-entrant) and ``_path`` in ``__init__``, name the file kind for
    messages in ``_FILE_KIND`` and set ``_MAY_BE_MISSING`` when the file is created only by its
    first write (a rename of a missing file then only updates the path). Every method here is
    thread-safe: it takes ``_lock``.
    """

    _FILE_KIND: ClassVar[str]
    _MAY_BE_MISSING: ClassVar[bool] = False
    _lock: threading.RLock
    _path: Path

    @property
    def path(self) -> Path:
        """The file (updated by ``rename_to`` and ``update_parent_dir``)."""
        return self._path

    @abstractmethod
    def close(self) -> None:
        """Release the file; ``with`` calls this on exit."""

    @abstractmethod
    def _close_before_delete(self) -> None:
        """Release the file without writing anything more to it (it is about to be deleted)."""

    def delete_if_exists(self) -> bool:
        """Release and delete the file; whether it existed. Thread-safe."""
        with self._lock:
            self._close_before_delete()
            return delete_if_exists(self._path, self._FILE_KIND)

    def rename_to(self, path: str | os.PathLike[str]) -> None:
        """Atomically move the file to ``path``, replacing it; the path is updated even if that fails.

        Thread-safe. A missing file is an error unless ``_MAY_BE_MISSING``.
        """
        with self._lock:
            try:
                replace_file(self._path, path, self._FILE_KIND, missing_ok=self._MAY_BE_MISSING)
            finally:
                self._path = Path(path)

    def update_parent_dir(self, directory: str | os.PathLike[str]) -> None:
        """Point at the same file name in ``directory`` (after the directory itself was renamed)."""
        with self._lock:
            self._path = Path(directory) / self._path.name

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
