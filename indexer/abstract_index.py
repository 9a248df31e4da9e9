"""The common machinery of ``.index`` and ``.timeindex`` files (Kafka's ``AbstractIndex``).

An index file is an array of fixed-width big-endian entries (8 bytes in ``.index``, 12 in
``.timeindex``; the subclasses give the layouts), memory-mapped whole. There is no header and no
checksum: after a crash the segment's recovery rebuilds the file.

Lifecycle, as in Kafka (spec section 1.1):

* A *new* file (opened writable and missing) is pre-allocated, sparse and zero-filled, to
  ``round_down(max_index_size, entry_size)`` bytes and starts with 0 entries.
* An *existing* file is assumed to be fully valid: every complete slot counts as an entry, so an
  un-trimmed index left by a crash has trailing all-zero entries until recovery rewrites it. Opened
  read-only (a reader beside a live writer), only the slots before the zero-filled tail are mapped,
  unless ``whole_file=True`` (validators, which must see a damaged file as it is).
* ``trim_to_valid_size()`` (segment roll, ``close()``, end of recovery) shrinks the file to
  ``entries * entry_size``; ``reset()`` empties it and grows it back to ``max_index_size``.
* A file is never made shorter than bytes a reader in another process may have mapped (entries
  removed by a truncation, or any slot of a file this process did not create): a page of the
  reader's mapping past the new end would kill it with SIGBUS. ``reset()`` of such a file, and a
  resize below those bytes, write a new file (``<name>.tmp``) and rename it over the old one, which
  the reader keeps mapped until it lets go (:meth:`AbstractIndex._replace_file`).

Searches are those of spec section 2 (largest lower bound / smallest upper bound, by key or by
value, with the 8 KiB warm section of KAFKA-6432) and run as numba kernels directly over the mapped
bytes (:mod:`indexer._index_kernels`): a single lookup copies nothing.

Deliberate differences from Kafka: ``writable=False`` never creates, resizes or writes the file
(Kafka calls ``createNewFile`` even for read-only opens) and raises :class:`StorageError` for a
missing file; mutating a read-only index raises ``ValueError``; an invalid ``max_index_size`` for a
new file is rejected without leaving an empty file behind; shrinking below the entries in use
raises ``ValueError`` before touching the file; ``close()`` after ``close_handler()`` is a no-op and
every other use of a closed index raises ``ValueError`` (Kafka: ``NullPointerException``).
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import threading
from abc import abstractmethod
from pathlib import Path
from typing import ClassVar, NamedTuple

import numpy as np

from indexer import _index_kernels as kernels
from indexer._files import IndexFile, pwrite_all
from indexer.checkpoint import fsync_directory
from indexer.errors import CorruptIndexError, IndexFullError, IndexOffsetOverflowError, storage_errors
from indexer.file_names import index_temp_file
from indexer.limits import INT32_MAX

logger = logging.getLogger(__name__)

WARM_SECTION_BYTES = 8192
"""Bytes at the end of an index searched first (KAFKA-6432): every warm lookup touches all its pages."""

_EMPTY_WORDS = np.zeros(0, np.uint32)
_EMPTY_WORDS.setflags(write=False)
_NO_TRACE = np.zeros(0, np.int64)  # also the empty int64 array of a tree-less _SearchTree
# Below this many targets per entry, lookup_many searches the mapped bytes per target instead of
# building the search tree (when no current one is cached).
_DECODE_RATIO = 16


class _SearchTree(NamedTuple):
    """What ``lookup_many`` caches: the B+-tree of one state of the index (see ``_lookup_many``).

    ``tree`` is None (and ``starts``, ``values`` empty) when the index is empty or its keys are
    not strictly increasing (an un-recovered index with zero slots); such an index is searched per
    target, as Kafka does.
    """

    generation: int
    entries: int
    tree: np.ndarray | None
    starts: np.ndarray
    values: np.ndarray


def round_down_to_multiple(number: int, factor: int) -> int:
    """``factor * (number / factor)`` with Java's truncating division (``round_down(-1, 8) == 0``)."""
    quotient = abs(number) // factor
    return factor * (quotient if number >= 0 else -quotient)


class AbstractIndex(IndexFile):
    """A memory-mapped file of fixed-width entries with warm/cold binary search.

    Thread-safety (as Kafka on Linux): every mutation (``append``, ``truncate*``, ``resize``,
    ``reset``, ``flush``, ``close*``) takes the index's own re-entrant lock, so mutations are
    serialised. Reads (``lookup``, ``entry``, searches, ``lookup_many``) take no lock: they read the
    entry count, then the current mapping, and search at most the slots that mapping holds, so a
    concurrent append or resize gives them an older or newer answer but never a bad memory access.
    A mapping replaced by ``resize`` or ``close_handler`` while a reader still uses it is unmapped
    when that reader lets go of it. The file never gets shorter than slots a reader, in this process
    or another, may still look at: a trim after a truncation, and ``reset``, put a new file in its
    place (:meth:`_replace_file`) and the old one stays mapped, unlinked, while readers use it.

    Crash behaviour: entries are written into the shared mapping; the kernel writes them back
    lazily unless ``flush()`` is called. A crash leaves the pre-allocated length, with trailing
    zero slots that reopening counts as entries (see the module docstring).
    """

    ENTRY_SIZE: ClassVar[int]
    _LAYOUT: ClassVar[int]
    _KIND: ClassVar[str]  # "index" or "time index": names the file in entry, full and corruption messages
    _OFFSET_BY_VALUE: ClassVar[bool]  # whether the offset is the value (.timeindex) or the key (.index)
    _FILE_KIND = "index file"  # in rename and delete messages, for both kinds (as before)

    def __init__(
        self,
        path: str | os.PathLike[str],
        base_offset: int,
        max_index_size: int = -1,
        writable: bool = True,
        *,
        whole_file: bool = False,
    ) -> None:
        self._lock = threading.RLock()
        self._path = Path(path)
        self._base_offset = int(base_offset)
        self._max_index_size = int(max_index_size)
        self._writable = bool(writable)
        self._whole_file = bool(whole_file)
        self._mm: mmap.mmap | None = None
        self._words: np.ndarray | None = None
        # Bumped (after the entry count changes) by every truncation: the entries below the count
        # may then be rewritten, so a search tree of an earlier generation must not be reused.
        self._generation = 0
        self._search_tree: _SearchTree | None = None
        newly_created, last_slot = self._open_and_map()
        # Bytes of this file a reader in another process may have mapped (all of an existing file,
        # then every entry before a truncation): the file is never cut below them (_replace_file).
        self._exposed = 0 if newly_created or not self._writable else self._length
        # A new file renamed into place empty (the start of a rebuild) since the last sync(): its
        # directory is fsynced with it.
        self._renamed = False
        self._max_entries = self._length // self.ENTRY_SIZE
        self._entries = 0 if newly_created else self._length // self.ENTRY_SIZE
        self._reload_last_entry(last_slot)
        logger.debug(
            "Loaded %s file %s with max_entries = %d, max_index_size = %d, entries = %d, last entry = %s",
            self._KIND,
            self._path.absolute(),
            self._max_entries,
            self._max_index_size,
            self._entries,
            self._read_last_entry(last_slot),
        )

    # ------------------------------------------------------------------ mapping

    def _open_and_map(self) -> tuple[bool, bytes | None]:
        """Open (creating and pre-allocating if writable and missing) and map the file; whether it
        was created, and the bytes of the last slot of an existing writable file.

        That slot (the last entry, as Kafka counts a reopened file's entries) is read with
        ``pread``: after a crash it lies in the file's pre-allocated, sparse tail, and on tmpfs a
        read through the mapping allocates the page, which kills the process with SIGBUS when the
        file system is full.
        """
        path = self._path
        newly_created = False
        last_slot = None
        with storage_errors(path, "open index file"):
            if self._writable:
                try:
                    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
                    newly_created = True
                except FileExistsError:
                    fd = os.open(path, os.O_RDWR)
            else:
                fd = os.open(path, os.O_RDONLY)
            try:
                if newly_created:
                    if self._max_index_size < self.ENTRY_SIZE:
                        os.unlink(path)
                        raise ValueError(f"Invalid max index size: {self._max_index_size} for new index file {path}")
                    os.ftruncate(fd, round_down_to_multiple(self._max_index_size, self.ENTRY_SIZE))
                self._length = os.fstat(fd).st_size
                if not self._writable and not self._whole_file:
                    self._length = self._written_length(fd, self._length)
                if not self._writable and self._whole_file:
                    self._mm, self._words = None, self._read_words(fd, self._length)
                else:
                    self._mm, self._words = self._map(fd, self._length, self._writable)
                if self._writable and not newly_created and self._length >= self.ENTRY_SIZE:
                    last = round_down_to_multiple(self._length, self.ENTRY_SIZE) - self.ENTRY_SIZE
                    last_slot = os.pread(fd, self.ENTRY_SIZE, last)
            finally:
                os.close(fd)
        return newly_created, last_slot

    def _written_length(self, fd: int, size: int) -> int:
        """The bytes of the file before its zero-filled pre-allocated tail, found by binary search.

        A read-only reader beside a live writer maps only these: the writer trims the file to its
        entries on roll, and a mapped page wholly past the new end would fault (SIGBUS) on access.
        Entries after the first are never all zero (their keys increase), and an all-zero first entry
        (the base offset at position 0, or timestamp 0) tells a search nothing it would not assume
        without it, so the first all-zero slot is where the entries worth mapping end.
        """
        if size % self.ENTRY_SIZE:  # not a writer's pre-allocated file: keep it whole for sanity_check
            return size
        slots = size // self.ENTRY_SIZE
        low, high = 0, slots  # the first all-zero slot lies in [low, high]; high = none
        while low < high:
            mid = (low + high) // 2
            if any(os.pread(fd, self.ENTRY_SIZE, mid * self.ENTRY_SIZE)):
                low = mid + 1
            else:
                high = mid
        return high * self.ENTRY_SIZE

    @staticmethod
    def _read_words(fd: int, length: int) -> np.ndarray:
        """Read ``length`` bytes of ``fd`` with ``pread`` and view them as native uint32 words.

        How a whole file is looked at (the index validator reads every slot, pre-allocated ones
        too): a mapping would fault on each page of the sparse tail, and on tmpfs a fault on a hole
        allocates the page, which kills the process with SIGBUS when the file system is full (and
        fills it otherwise); ``pread`` returns a hole's zeros without allocating anything.
        """
        if length < 4:
            return _EMPTY_WORDS
        data = bytearray(length)
        view, done = memoryview(data), 0
        while done < length:
            n = os.preadv(fd, [view[done:]], done)
            if n == 0:
                break
            done += n
        words = np.frombuffer(data, dtype=np.uint32, count=done // 4)
        words.setflags(write=False)
        return words

    @staticmethod
    def _map(fd: int, length: int, writable: bool) -> tuple[mmap.mmap | None, np.ndarray]:
        """Map ``length`` bytes of ``fd`` and view them as read-only native uint32 words for the kernels."""
        if length == 0:  # mmap cannot map 0 bytes
            return None, _EMPTY_WORDS
        mm = mmap.mmap(fd, length, access=mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ)
        if length < 4:
            return mm, _EMPTY_WORDS
        words = np.frombuffer(mm, dtype=np.uint32, count=length // 4)
        words.setflags(write=False)
        return mm, words

    def _release(self, mm: mmap.mmap | None) -> None:
        """Unmap ``mm`` now, or when the last concurrent reader drops its view of it."""
        if mm is None:
            return
        try:
            mm.close()
        except BufferError:
            logger.debug("Index %s: old mapping still in use by a reader; unmapped when released", self._path)

    def _require_open(self) -> None:
        if self._words is None:
            raise ValueError(f"index file {self._path.absolute()} is closed")

    def _require_writable(self, action: str) -> None:
        self._require_open()
        if not self._writable:
            raise ValueError(f"cannot {action} index file {self._path.absolute()}: it is open read-only")

    def _snapshot(self) -> tuple[np.ndarray, int]:
        """Words and entry count for a lock-free read (count first: a resize in between only clamps it)."""
        entries = self._entries
        words = self._words
        if words is None:
            raise ValueError(f"index file {self._path.absolute()} is closed")
        return words, entries

    # ------------------------------------------------------------------ properties

    @property
    def base_offset(self) -> int:
        return self._base_offset

    @property
    def max_index_size(self) -> int:
        """The configured maximum size in bytes (``segment.index.bytes``) used on creation and reset."""
        return self._max_index_size

    @property
    def writable(self) -> bool:
        return self._writable

    @property
    def entries(self) -> int:
        """Number of entries in use."""
        return self._entries

    @property
    def max_entries(self) -> int:
        """Slots the current file length holds."""
        return self._max_entries

    @property
    def length(self) -> int:
        """Current file (and mapping) length in bytes."""
        return self._length

    @property
    def size_in_bytes(self) -> int:
        """Bytes used by entries: ``entries * ENTRY_SIZE``."""
        return self.ENTRY_SIZE * self._entries

    @property
    def warm_entries(self) -> int:
        """Slots in the warm section: ``8192 // ENTRY_SIZE``."""
        return WARM_SECTION_BYTES // self.ENTRY_SIZE

    @property
    def is_closed(self) -> bool:
        return self._words is None

    def is_full(self) -> bool:
        """True if no slot is free."""
        return self._entries >= self._max_entries

    # ------------------------------------------------------------------ offsets

    def relative_offset(self, offset: int) -> int:
        """``offset - base_offset``, or :class:`IndexOffsetOverflowError` outside ``[0, 2**31-1]``."""
        relative = offset - self._base_offset
        if relative < 0 or relative > INT32_MAX:
            path = self._path.absolute()
            raise IndexOffsetOverflowError(f"Integer overflow for offset: {offset} ({path})", path=path, offset=offset)
        return relative

    def can_append_offset(self, offset: int) -> bool:
        """Whether ``offset`` can be stored relative to this index's base offset."""
        return 0 <= offset - self._base_offset <= INT32_MAX

    # ------------------------------------------------------------------ searches

    def largest_lower_bound_slot_for(
        self, target: int, *, by_value: bool = False, trace: np.ndarray | None = None
    ) -> int:
        """Slot of the largest entry <= ``target`` (key or value), or -1; warm/cold search. Lock-free.

        ``trace`` (optional int64 array) records the probed slots: ``trace[0]`` = number of probes,
        ``trace[1:]`` = the slots in order, as many as fit.
        """
        return self._slot_for(target, by_value, False, trace)

    def smallest_upper_bound_slot_for(
        self, target: int, *, by_value: bool = False, trace: np.ndarray | None = None
    ) -> int:
        """Slot of the smallest entry >= ``target`` (key or value), or -1; warm/cold search. Lock-free."""
        return self._slot_for(target, by_value, True, trace)

    def _slot_for(self, target: int, by_value: bool, upper_bound: bool, trace: np.ndarray | None) -> int:
        words, entries = self._snapshot()
        trace = _NO_TRACE if trace is None else trace
        layout, base, warm = self._LAYOUT, self._base_offset, self.warm_entries
        return int(kernels.slot_for(words, entries, layout, base, target, by_value, upper_bound, warm, trace))

    def _search(self, target: int, by_value: bool, upper_bound: bool) -> tuple[int, int, int]:
        """(slot, key, value) of the warm/cold search; key/value are 0 when slot is -1."""
        words, entries = self._snapshot()
        slot, key, value = kernels.lookup_entry(
            words,
            entries,
            self._LAYOUT,
            self._base_offset,
            target,
            by_value,
            upper_bound,
            self.warm_entries,
            _NO_TRACE,
        )
        return slot, key, value

    def _lookup_many(self, targets: np.ndarray, miss_key: int, miss_value: int) -> tuple[np.ndarray, np.ndarray]:
        """Floor-by-key of every target: keys and values as int64 arrays shaped like ``targets``.

        Searches a cache-friendly B+-tree of the entries (:func:`kernels.build_search_tree`),
        cached on the index and keyed by ``(generation, entries)``: an append changes the count, a
        truncation the generation, so a stale tree is never used. The tree is immutable and
        replaced by one attribute store, so concurrent lock-free readers see either tree, whole.
        With few targets and no current tree, the mapping is searched per target instead.
        """
        array = np.asarray(targets)
        if array.dtype.kind not in "iu":
            raise TypeError(f"lookup_many needs an integer array, got dtype {array.dtype}")
        flat = np.ascontiguousarray(array.ravel().astype(np.int64, casting="same_kind", copy=False))
        generation = self._generation  # read before the count: see _truncate_to_entries
        words, entries = self._snapshot()
        cached = self._search_tree
        if cached is None or cached.generation != generation or cached.entries != entries:
            if flat.size * _DECODE_RATIO < entries:
                cached = None
            else:
                cached = self._build_search_tree(words, entries, generation)
                self._search_tree = cached
        keys: np.ndarray
        values: np.ndarray
        if cached is not None and cached.tree is not None:
            keys, values = kernels.floor_many_tree(
                cached.tree, cached.starts, cached.values, flat, miss_key, miss_value
            )
        else:  # few targets, an empty or an un-recovered index: Kafka's search per target
            keys, values = kernels.lookup_many(
                words, entries, self._LAYOUT, self._base_offset, flat, self.warm_entries, miss_key, miss_value
            )
        return keys.reshape(array.shape), values.reshape(array.shape)

    def _build_search_tree(self, words: np.ndarray, entries: int, generation: int) -> _SearchTree:
        """Decode the first ``entries`` slots of ``words`` and build their search tree."""
        keys, values = kernels.decode_entries(words, entries, self._LAYOUT, self._base_offset)
        if keys.size == 0 or not np.all(keys[1:] > keys[:-1]):
            return _SearchTree(generation, entries, None, _NO_TRACE, _NO_TRACE)
        tree, starts = kernels.build_search_tree(keys)
        return _SearchTree(generation, entries, tree, starts, values)

    def to_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Every entry at once as int64 arrays (one compiled pass), e.g. for dump and checks. Lock-free.

        ``(offsets, positions)`` for ``.index``, ``(timestamps, offsets)`` for ``.timeindex``.
        """
        words, entries = self._snapshot()
        keys, values = kernels.decode_entries(words, entries, self._LAYOUT, self._base_offset)
        return keys, values

    @staticmethod
    def _bulk_columns(first: np.ndarray, second: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``append_many``'s two columns as int64 arrays; ``ValueError`` unless both are 1-d of one length."""
        first = np.asarray(first, dtype=np.int64)
        second = np.asarray(second, dtype=np.int64)
        if first.ndim != 1 or second.shape != first.shape:
            raise ValueError(f"append_many needs two 1-d arrays of one length, got {first.shape} and {second.shape}")
        return first, second

    @staticmethod
    def _first_failure(failures: np.ndarray) -> tuple[int, int] | None:
        """``(call, check)`` of the earliest failing call of a bulk append, or None: ``failures[check, call]``
        is true where a call fails a check, checks in the order the single append makes them."""
        failing = np.flatnonzero(failures.any(axis=0))
        if not failing.size:
            return None
        call = int(failing[0])
        return call, int(np.argmax(failures[:, call]))

    def _check_slot(self, n: int) -> None:
        if n < 0 or n >= self._entries:
            raise IndexError(
                f"Attempt to fetch the {n}th entry from {self._KIND} {self._path.absolute()}, "
                f"which has size {self._entries}"
            )

    def _check_length(self) -> None:
        """The part of ``sanity_check`` both kinds share: a length that is a whole number of entries."""
        if self._length % self.ENTRY_SIZE != 0:
            path = self._path.absolute()
            raise CorruptIndexError(
                f"{self._KIND.capitalize()} file {path} is corrupt, found {self._length} bytes which is "
                f"neither positive nor a multiple of {self.ENTRY_SIZE}",
                path=path,
            )

    def _full_error(self, size: int) -> IndexFullError:
        path = self._path.absolute()
        return IndexFullError(f"Attempt to append to a full {self._KIND} (size = {size}): {path}", path=path)

    # ------------------------------------------------------------------ mutations

    def resize(self, new_size: int) -> bool:
        """Set the file and mapping length to ``round_down(new_size, ENTRY_SIZE)``; False if unchanged.

        Entries are kept. Below bytes a reader in another process may have mapped, the file is
        replaced by a new one rather than cut (:meth:`_replace_file`). Thread-safe. Raises
        ``ValueError`` on a read-only index or when the new size would drop entries in use;
        :class:`StorageError` on an I/O failure.
        """
        with self._lock:
            self._require_writable("resize")
            rounded = round_down_to_multiple(new_size, self.ENTRY_SIZE)
            if self._length == rounded:
                logger.debug("Index %s was not resized because it already has size %d", self._path.absolute(), rounded)
                return False
            if rounded < self._entries * self.ENTRY_SIZE:
                raise ValueError(
                    f"cannot resize index file {self._path.absolute()} to {rounded} bytes: "
                    f"it holds {self._entries} entries of {self.ENTRY_SIZE} bytes"
                )
            if rounded < self._exposed:
                self._replace_file(rounded)
                logger.debug(
                    "Replaced %s by a file of %d bytes, %d entries", self._path.absolute(), rounded, self._entries
                )
                return True
            with storage_errors(self._path, "resize index file"):
                fd = os.open(self._path, os.O_RDWR)
                try:
                    os.ftruncate(fd, rounded)
                    mm, words = self._map(fd, rounded, True)
                finally:
                    os.close(fd)
            self._install_mapping(mm, words, rounded)
            logger.debug("Resized %s to %d bytes, %d entries", self._path.absolute(), rounded, self._entries)
            self._reload_last_entry()
            return True

    def trim_to_valid_size(self) -> None:
        """Drop the unwritten pre-allocated tail: resize to ``entries * ENTRY_SIZE``. Thread-safe.

        A no-op on a closed or read-only index.
        """
        with self._lock:
            if self._words is not None and self._writable:
                self.resize(self.ENTRY_SIZE * self._entries)

    def sync(self) -> None:
        """fsync the file (entries and size), and its directory when a rebuild renamed a new file into
        place since the last sync: what makes a rebuilt index durable. Kafka leaves a rebuilt index
        to the next flush, as recovery does not move the recovery point and a crash rebuilds it again;
        a rebuild below the recovery point (:meth:`LogSegment.sync_indexes`' callers) is never redone,
        so it is synced before the segment is reported repaired. Thread-safe.

        Raises:
            StorageError: an fsync failed.
        """
        with self._lock:
            self._require_writable("sync")
            with storage_errors(self._path, "fsync index file"):
                fd = os.open(self._path, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
                if self._renamed:
                    fsync_directory(self._path.parent)
            self._renamed = False

    def reset(self) -> None:
        """Remove every entry and grow the file back to ``max_index_size``. Thread-safe.

        A file a reader in another process may have mapped is replaced by a new, empty one
        (:meth:`_replace_file`): the rebuild that follows (recovery) never writes into, nor shrinks,
        the file that reader sees.
        """
        with self._lock:
            self.truncate()
            if self._exposed:
                self._replace_file(max(0, round_down_to_multiple(self._max_index_size, self.ENTRY_SIZE)))
            else:
                self.resize(self._max_index_size)

    def _replace_file(self, length: int) -> None:
        """Put a new file of ``length`` bytes holding the entries in use in place of the index file;
        the caller holds the lock.

        The new file is written as ``<name>.tmp`` (:func:`~indexer.file_names.index_temp_file`),
        fsynced when it holds entries (it replaces an index that may be below the recovery point),
        and renamed over the old one, the directory then fsynced too (an empty file, the start of a
        rebuild, is made durable with its entries by :meth:`sync`). A
        reader in another process keeps the old file, unlinked, for as long as it maps it, and sees
        the new one at its next open: cut in place, a page of its mapping past the new end would kill
        it with SIGBUS at its next lookup. A process killed before the rename leaves the ``.tmp``,
        which the log loader deletes.
        """
        words, entries = self._snapshot()
        content = words.view(np.uint8)[: entries * self.ENTRY_SIZE].data
        temp = index_temp_file(self._path)
        with storage_errors(self._path, "replace index file"):
            fd = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o666)
            try:
                try:
                    os.ftruncate(fd, length)
                    pwrite_all(fd, content, 0)
                    if entries:
                        os.fsync(fd)
                    os.replace(temp, self._path)
                except BaseException:
                    with contextlib.suppress(OSError):
                        os.unlink(temp)
                    raise
                if entries:
                    fsync_directory(self._path.parent)
                else:
                    self._renamed = True
                mm, words = self._map(fd, length, True)
            finally:
                os.close(fd)
        self._install_mapping(mm, words, length)
        self._exposed = 0

    def _install_mapping(self, mm: mmap.mmap | None, words: np.ndarray, length: int) -> None:
        """Make ``mm`` (``words``, ``length`` bytes) the index's mapping and release the one it
        replaces (unmapped when the last concurrent reader lets go of it); caller holds the lock."""
        old = self._mm
        self._mm, self._words = mm, words
        self._length = length
        self._max_entries = length // self.ENTRY_SIZE
        self._release(old)

    def truncate(self) -> None:
        """Remove every entry (the file keeps its length and bytes). Thread-safe."""
        self._truncate_to_entries(0)

    def truncate_to(self, offset: int) -> None:
        """Remove the entries whose offset is >= ``offset``; past the end this is a no-op. Thread-safe."""
        with self._lock:
            self._require_writable("truncate")
            slot, key, value = self._search(offset, self._OFFSET_BY_VALUE, False)
            if slot < 0:
                new_entries = 0
            elif (value if self._OFFSET_BY_VALUE else key) == offset:
                new_entries = slot
            else:
                new_entries = slot + 1
            self._truncate_to_entries(new_entries)

    @abstractmethod
    def sanity_check(self) -> None:
        """Raise :class:`~indexer.errors.CorruptIndexError` on an obviously corrupt file."""

    @abstractmethod
    def _read_last_entry(self, slot: bytes | None = None) -> tuple[int, int]:
        """The last entry (from ``slot``, its bytes, when given; else from the mapping), or the
        subclass's empty-index entry."""

    @abstractmethod
    def _reload_last_entry(self, slot: bytes | None = None) -> None:
        """Re-read the cached last entry (after opening, truncation or resize)."""

    def _write_entries(self, entries: int, packed: np.ndarray) -> None:
        """Write ``packed`` (whole big-endian entries) into the slots from ``entries`` on; caller holds the lock.

        Only the bytes move: the caller updates the entry count and the cached last entry. The bytes
        go in with ``pwrite`` rather than through the mapping, which sees them at once (both are the
        file's page cache): storing into fresh pages of the mapping takes a page fault, and a block
        reservation, per 4 KiB (27,000 offset-index entries: 3.3 ms through the map, 0.1 ms by pwrite).
        """
        data = np.ascontiguousarray(packed).reshape(-1).view(np.uint8).data
        with storage_errors(self._path, "append to index file"):
            fd = os.open(self._path, os.O_WRONLY)
            try:
                pwrite_all(fd, data, entries * self.ENTRY_SIZE)
            finally:
                os.close(fd)

    def _write_entry(self, entry: bytes) -> None:
        """Write one packed entry into the next free slot; caller holds the lock and counts it.

        With ``pwrite``, not a store into the mapping: the slot may lie in a page of the
        pre-allocated (sparse) file that has no block yet, and on a full disk a store there kills the
        process with SIGBUS, where ``pwrite`` fails with ``ENOSPC`` (a :class:`StorageError`).
        """
        self._write_entries(self._entries, np.frombuffer(entry, dtype=np.uint8))

    def _truncate_to_entries(self, entries: int) -> None:
        """Set the entry count; the bytes after it are left as they are (as Kafka). Thread-safe."""
        with self._lock:
            self._require_writable("truncate")
            self._exposed = max(self._exposed, self._entries * self.ENTRY_SIZE)
            self._entries = entries
            # After the count: a reader that sees the new generation also sees the new count.
            self._generation += 1
            self._reload_last_entry()
            logger.debug("Truncated index %s to %d entries", self._path.absolute(), entries)

    def flush(self) -> None:
        """Write the mapped pages to disk (``msync``). Thread-safe; a no-op when read-only or empty."""
        with self._lock:
            self._require_open()
            if self._mm is not None and self._writable:
                with storage_errors(self._path, "flush index file"):
                    self._mm.flush()

    def close(self) -> None:
        """Trim to the valid size, then unmap. Thread-safe; a no-op on a closed index."""
        with self._lock:
            self.trim_to_valid_size()
            self.close_handler()

    def close_handler(self) -> None:
        """Unmap without trimming or writing (KAFKA-4614). Later use raises ``ValueError``. Thread-safe."""
        with self._lock:
            old = self._mm
            self._mm = None
            self._words = None
            self._search_tree = None
            self._release(old)

    def _close_before_delete(self) -> None:
        self.close_handler()

    def __repr__(self) -> str:
        state = "closed" if self._words is None else f"{self._entries}/{self._max_entries} entries"
        return f"{type(self).__name__}({str(self._path)!r}, base_offset={self._base_offset}, {state})"


def plain_binary_search_slot_for(
    index: AbstractIndex,
    target: int,
    *,
    by_value: bool = False,
    upper_bound: bool = False,
    trace: np.ndarray | None = None,
) -> int:
    """The slot the warm/cold search returns, found by one binary search over every slot.

    This is Kafka's search before KAFKA-6432. It returns the same slot as
    ``index.largest_lower_bound_slot_for`` (``upper_bound=False``) or
    ``index.smallest_upper_bound_slot_for`` (``upper_bound=True``), but probes pages spread over the
    whole file; it exists so tests and benchmarks can compare which pages the two strategies touch.
    """
    words, entries = index._snapshot()
    trace = _NO_TRACE if trace is None else trace
    layout, base = index._LAYOUT, index.base_offset
    return int(kernels.plain_slot_for(words, entries, layout, base, target, by_value, upper_bound, trace))
