"""An index that is opened and memory-mapped on first use (Kafka's ``LazyIndex``, KAFKA-7283).

A broker with thousands of segments would otherwise map every index file at start-up. Until
:meth:`LazyIndex.get` is called the wrapper holds only the path: renames move the file (or nothing
when it does not exist yet), deletes unlink it, and ``close()`` does nothing, so closing a
never-loaded index neither creates nor trims its file. ``get()`` opens the index and, when writable,
creates and pre-allocates a missing file, which is why a fresh segment has no ``.index`` or
``.timeindex`` until something touches them.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

from indexer._files import delete_if_exists, replace_file
from indexer.abstract_index import AbstractIndex
from indexer.offset_index import OffsetIndex
from indexer.time_index import TimeIndex

logger = logging.getLogger(__name__)

IndexT = TypeVar("IndexT", bound=AbstractIndex)


class LazyIndex(Generic[IndexT]):
    """Holds a path until :meth:`get` opens the index, then delegates to it.

    Thread-safety: ``get()`` is double-checked under the wrapper's lock, so concurrent callers
    share one index; the other methods take the same lock and then follow the wrapped index's own
    rules once loaded.
    """

    def __init__(self, path: str | os.PathLike[str], factory: Callable[[Path], IndexT]) -> None:
        self._lock = threading.Lock()
        self._path = Path(path)
        self._factory = factory
        self._index: IndexT | None = None

    @classmethod
    def for_offset(
        cls, path: str | os.PathLike[str], base_offset: int, max_index_size: int = -1, writable: bool = True
    ) -> LazyIndex[OffsetIndex]:
        """A lazily opened :class:`OffsetIndex` (``.index``)."""
        return LazyIndex(path, lambda p: OffsetIndex(p, base_offset, max_index_size, writable))

    @classmethod
    def for_time(
        cls, path: str | os.PathLike[str], base_offset: int, max_index_size: int = -1, writable: bool = True
    ) -> LazyIndex[TimeIndex]:
        """A lazily opened :class:`TimeIndex` (``.timeindex``)."""
        return LazyIndex(path, lambda p: TimeIndex(p, base_offset, max_index_size, writable))

    @property
    def path(self) -> Path:
        """The index file (the loaded index's path once loaded)."""
        index = self._index
        return self._path if index is None else index.path

    @property
    def is_loaded(self) -> bool:
        return self._index is not None

    def get(self) -> IndexT:
        """The index, opening (and, when writable, creating) it on the first call. Thread-safe."""
        index = self._index
        if index is not None:
            return index
        with self._lock:
            if self._index is None:
                self._index = self._factory(self._path)
                logger.debug("Loaded lazy index %s", self._path.absolute())
            return self._index

    def update_parent_dir(self, directory: str | os.PathLike[str]) -> None:
        """Point at the same file name in ``directory``."""
        with self._lock:
            if self._index is not None:
                self._index.update_parent_dir(directory)
            else:
                self._path = Path(directory) / self._path.name

    def rename_to(self, path: str | os.PathLike[str]) -> None:
        """Move the file to ``path``; before loading a missing source is no error. Path updated anyway."""
        with self._lock:
            if self._index is not None:
                self._index.rename_to(path)
                return
            try:
                replace_file(self._path, path, "index file", missing_ok=True)
            finally:
                self._path = Path(path)

    def delete_if_exists(self) -> bool:
        """Delete the file (unmapping it if loaded); whether it existed."""
        with self._lock:
            if self._index is not None:
                return self._index.delete_if_exists()
            return delete_if_exists(self._path, "index file")

    def close(self) -> None:
        """Trim and unmap a loaded index; a never-loaded one is left alone (no file is created)."""
        with self._lock:
            if self._index is not None:
                self._index.close()

    def close_handler(self) -> None:
        """Unmap a loaded index without trimming; nothing if never loaded."""
        with self._lock:
            if self._index is not None:
                self._index.close_handler()

    def __repr__(self) -> str:
        state = "loaded" if self._index is not None else "not loaded"
        return f"LazyIndex({str(self.path)!r}, {state})"
