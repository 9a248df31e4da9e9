"""A ``.log`` file: Kafka's ``FileRecords`` and ``FileLogInputStream``.

A ``.log`` file is record batches back to back with no file header and no padding (spec 3):
each entry starts with ``offset int64 | size int32`` (big-endian; ``size`` counts the bytes after
it) and has its magic at byte 16. Magic 2 entries are v2 batches (61-byte header, CRC-32C over
bytes 21..end); magic 0/1 entries are legacy messages (CRC-32 over bytes 16..end).

``FileRecords`` owns one file descriptor. Its *logical* size, ``size_in_bytes()``, is where the
next append goes; with preallocation the file on disk is larger, and ``trim()`` / ``close()`` cut
it back. Reads use ``os.pread`` and never move a file pointer.

Thread-safety: appends, truncation, flush, rename and close must be serialised by the caller (the
log's lock). Reads (``read``, ``batches``, ``search_for_offset_with_size``) are safe concurrently
with appends: they only look below the logical size they observed, and bytes below it are never
rewritten. A read racing ``close`` (its segment deleted) raises :class:`StorageError`, never
returning bytes of the file that took the closed descriptor's number. ``scan`` maps the file and
must not race a truncation (recovery holds the lock).

Crash behaviour: an append is a plain ``pwrite``; until ``flush()`` (fsync) a crash may leave a
torn or zero-filled tail, which ``scan``/``batches`` report as the end of the valid bytes, and
recovery truncates.
"""

from __future__ import annotations

import contextlib
import errno as errno_module
import logging
import os
import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, NamedTuple

import numpy as np

from indexer._files import pwrite_all
from indexer._workers import in_threads
from indexer.errors import CorruptRecordError, StorageError, storage_errors
from indexer.limits import INT32_MAX
from indexer.records import _batch_scan
from indexer.records.batch_header import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    CREATE_TIME,
    HEADER_SIZE_UP_TO_MAGIC,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V0,
    MAGIC_V2,
    MIN_LEGACY_RECORD_SIZE,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    NO_TIMESTAMP_TYPE,
    RECORD_BATCH_OVERHEAD,
    SIZE_OFFSET,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
    BatchHeader,
    compression_name,
    crc32c,
    crc_mismatch_error,
    parse_batch_header,
)
from indexer.records.legacy import (
    LEGACY_CRC_OFFSET,
    RECORD_OVERHEAD_V1,
    iter_legacy_entries,
    legacy_base_offset,
)

logger = logging.getLogger(__name__)

MAX_FILE_SIZE = INT32_MAX  # positions are int32
CRC_PARALLEL_MIN_BYTES = 64 << 20  # scans with at least this many bytes of batches check CRCs on two threads
PREAD_SCAN_CHUNK_BYTES = 8 << 20  # scan reads the file in chunks of this size
PREAD_SCAN_HOP_MIN_BYTES = 8 << 10  # ... or, without CRCs, hops header to header over v2 batches this large
_SCAN_COLUMNS = ("positions", "sizes", "base_offsets", "last_offsets", "max_timestamps", "magics", "attributes")
_OFFSET_SIZE = struct.Struct(">qi")
_LEGACY_FIELDS = struct.Struct(">IbBq")  # crc, magic, attributes, v1 timestamp


class LogOffsetPosition(NamedTuple):
    """Where a batch sits: its last offset, file position and size (Kafka's ``LogOffsetPosition``)."""

    offset: int
    position: int
    size: int


@dataclass(frozen=True, slots=True)
class BatchScan:
    """Result of ``FileRecords.scan``: one array element per valid batch, in file order.

    ``valid_bytes`` is the file position just after the last valid batch (``start`` if none);
    ``error`` is the ``CorruptRecordError``/``InvalidRecordError`` that stopped the scan, or None when
    it reached ``end`` or a partial trailing entry (which is not an error: a crash mid-append).
    For legacy entries ``max_timestamps`` is the message timestamp (-1 for v0).
    """

    positions: np.ndarray
    sizes: np.ndarray
    base_offsets: np.ndarray
    last_offsets: np.ndarray
    max_timestamps: np.ndarray
    magics: np.ndarray
    attributes: np.ndarray
    valid_bytes: int
    error: CorruptRecordError | None

    def __len__(self) -> int:
        return len(self.positions)


class FileBatch:
    """One entry of a ``.log`` file, its header read lazily (Kafka's ``FileChannelRecordBatch``).

    ``batches()`` reads up to 61 header bytes per entry; the rest is read by ``raw()`` and the
    CRC checks. For legacy entries producer fields are -1 and ``records_count`` is None when
    compressed (as Kafka's ``countOrNull``); ``base_offset`` of a compressed legacy wrapper
    decompresses it once. Safe to use from several threads (it only reads).
    """

    __slots__ = ("_records", "_head", "position", "size_in_bytes", "magic", "_base_offset")

    def __init__(self, records: FileRecords, position: int, head: bytes, size_in_bytes: int, magic: int):
        self._records = records
        self._head = head
        self.position = position
        self.size_in_bytes = size_in_bytes
        self.magic = magic
        self._base_offset: int | None = None

    def __repr__(self) -> str:
        return (
            f"FileBatch(magic={self.magic}, offset={self._offset_field}, position={self.position}, "
            f"size={self.size_in_bytes})"
        )

    @property
    def _offset_field(self) -> int:
        return int(_OFFSET_SIZE.unpack_from(self._head, 0)[0])

    def _header_error(self) -> CorruptRecordError:
        return CorruptRecordError(
            f"Record batch is corrupt (the size {self.size_in_bytes} is smaller than the minimum allowed "
            f"overhead {RECORD_BATCH_OVERHEAD}) in file {self._records.path} at position {self.position}",
            path=self._records.path,
            position=self.position,
        )

    @property
    def header(self) -> BatchHeader | None:
        """The parsed v2 header (None for legacy entries).

        Raises:
            CorruptRecordError: a magic 2 entry smaller than the 61-byte header.
        """
        if self.magic < MAGIC_V2:
            return None
        if self.size_in_bytes < RECORD_BATCH_OVERHEAD:
            raise self._header_error()
        return parse_batch_header(self._head, position=self.position)

    def _legacy(self) -> tuple[int, int, int, int]:
        """Legacy ``(crc, magic, attributes, timestamp)`` (timestamp -1 for v0)."""
        head = self._head
        if self.magic == MAGIC_V0 or len(head) < LOG_OVERHEAD + RECORD_OVERHEAD_V1:
            crc, magic, attributes = struct.unpack_from(">IbB", head, LEGACY_CRC_OFFSET)
            return crc, magic, attributes, NO_TIMESTAMP
        return _LEGACY_FIELDS.unpack_from(head, LEGACY_CRC_OFFSET)

    @property
    def base_offset(self) -> int:
        if self.magic >= MAGIC_V2:
            return self._offset_field
        if self._base_offset is None:
            if self.compression_id == 0:
                self._base_offset = self._offset_field
            else:
                entry = next(iter_legacy_entries(self.raw(), base_position=self.position, path=self._records.path))
                self._base_offset = legacy_base_offset(entry, path=self._records.path)
        return self._base_offset

    @property
    def last_offset(self) -> int:
        header = self.header
        return self._offset_field if header is None else header.last_offset

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def max_timestamp(self) -> int:
        header = self.header
        return self._legacy()[3] if header is None else header.max_timestamp

    @property
    def crc(self) -> int:
        """The stored checksum (CRC-32C for v2, CRC-32 for legacy), unsigned."""
        header = self.header
        return self._legacy()[0] if header is None else header.crc

    @property
    def attributes(self) -> int:
        header = self.header
        return self._legacy()[2] if header is None else header.attributes

    @property
    def compression_id(self) -> int:
        return self.attributes & COMPRESSION_CODEC_MASK

    @property
    def compression_name(self) -> str:
        return compression_name(self.attributes)

    @property
    def timestamp_type(self) -> int:
        if self.magic == MAGIC_V0:
            return NO_TIMESTAMP_TYPE
        return LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return self.magic >= MAGIC_V2 and bool(self.attributes & TRANSACTIONAL_FLAG_MASK)

    @property
    def is_control(self) -> bool:
        return self.magic >= MAGIC_V2 and bool(self.attributes & CONTROL_FLAG_MASK)

    @property
    def partition_leader_epoch(self) -> int:
        header = self.header
        return NO_PARTITION_LEADER_EPOCH if header is None else header.partition_leader_epoch

    @property
    def producer_id(self) -> int:
        header = self.header
        return NO_PRODUCER_ID if header is None else header.producer_id

    @property
    def producer_epoch(self) -> int:
        header = self.header
        return NO_PRODUCER_EPOCH if header is None else header.producer_epoch

    @property
    def base_sequence(self) -> int:
        header = self.header
        return NO_SEQUENCE if header is None else header.base_sequence

    @property
    def last_sequence(self) -> int:
        header = self.header
        return NO_SEQUENCE if header is None else header.last_sequence

    @property
    def records_count(self) -> int | None:
        header = self.header
        if header is None:
            return None if self.compression_id else 1
        return header.records_count

    def raw(self) -> bytes:
        """The whole entry as stored (``size_in_bytes`` bytes)."""
        return self._records.read(self.position, self.size_in_bytes)

    def compute_crc(self) -> int:
        """The checksum the stored bytes should carry."""
        data = memoryview(self.raw())
        if self.magic >= MAGIC_V2:
            return crc32c(data[ATTRIBUTES_OFFSET:])
        return zlib.crc32(data[MAGIC_OFFSET:])

    def is_valid(self) -> bool:
        """True if the entry is large enough for its header and its CRC matches."""
        if not MAGIC_V0 <= self.magic <= MAGIC_V2:
            return False
        if self.magic == MAGIC_V2 and self.size_in_bytes < RECORD_BATCH_OVERHEAD:
            return False
        return self.compute_crc() == self.crc

    def ensure_valid(self) -> None:
        """Raises CorruptRecordError (with path, position and offset) unless ``is_valid()``."""
        path = self._records.path
        if not MAGIC_V0 <= self.magic <= MAGIC_V2:
            raise CorruptRecordError(
                f"Invalid magic {self.magic} in file {path} at position {self.position}",
                path=path,
                position=self.position,
            )
        if self.magic == MAGIC_V2 and self.size_in_bytes < RECORD_BATCH_OVERHEAD:
            raise self._header_error()
        computed = self.compute_crc()
        if computed != self.crc:
            raise crc_mismatch_error(self.crc, computed, path=path, position=self.position, offset=self._offset_field)


@dataclass(frozen=True, slots=True)
class FileSlice:
    """``size`` bytes of a ``.log`` file from ``position``, not read (Kafka's ``FileRecords.slice``): what a
    fetch sends straight from the file (``sendfile``) rather than through a buffer."""

    records: FileRecords
    position: int
    size: int

    def __len__(self) -> int:
        return self.size

    def read(self) -> bytes:
        """The bytes (short if the file was cut meanwhile)."""
        return self.records.read(self.position, self.size)

    def open(self) -> BinaryIO:
        """A file object of its own (a duplicated descriptor) on the ``.log`` file: it stays valid after
        the segment is closed or deleted, for a send that outlives the read.

        Raises:
            StorageError: the file is closed or the descriptor cannot be duplicated.
        """
        fd = self.records._check_open()
        with storage_errors(self.records.path, "open"):
            dup = os.dup(fd)
        try:
            self.records._check_same_file(fd)
        except StorageError:
            os.close(dup)
            raise
        return os.fdopen(dup, "rb", buffering=0)


class FileRecords:
    """A ``.log`` file of record batches: appends at the logical end, positioned reads, batch walks.

    Open with :meth:`open`. See the module docstring for thread-safety and crash behaviour.
    """

    def __init__(self, path: Path, fd: int, size: int, mutable: bool):
        self._path = path
        self._fd = fd
        self._size = size
        self._mutable = mutable

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        mutable: bool = True,
        file_already_exists: bool = True,
        init_file_size: int = 0,
        preallocate: bool = False,
    ) -> FileRecords:
        """Open (or create) the ``.log`` file at ``path`` (Kafka's ``FileRecords.open``).

        ``mutable=False`` opens read-only, which works without write permission on the file or its
        directory. A writable open creates the file if missing; with ``preallocate`` and
        ``file_already_exists=False`` it must not exist yet, is extended to ``init_file_size`` bytes
        and starts with logical size 0. Otherwise the logical size is the file's size.

        Raises:
            StorageError: the file cannot be opened or created.
        """
        path = Path(path)
        preallocated = mutable and preallocate and not file_already_exists
        if not mutable:
            flags = os.O_RDONLY
        elif preallocated:
            flags = os.O_RDWR | os.O_CREAT | os.O_EXCL
        else:
            flags = os.O_RDWR | os.O_CREAT
        with storage_errors(path, "open"):
            fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0), 0o644)
            try:
                if preallocated:
                    os.ftruncate(fd, init_file_size)
                    size = 0
                else:
                    size = min(os.fstat(fd).st_size, MAX_FILE_SIZE)
            except BaseException:
                os.close(fd)
                raise
        return cls(path, fd, size, mutable)

    @property
    def path(self) -> Path:
        return self._path

    @property
    def mutable(self) -> bool:
        return self._mutable

    def size_in_bytes(self) -> int:
        """Logical size: the bytes appended (or found at open); thread-safe."""
        return self._size

    def __repr__(self) -> str:
        return f"FileRecords(path={str(self._path)!r}, size={self._size})"

    def __enter__(self) -> FileRecords:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _check_open(self) -> int:
        if self._fd < 0:
            raise StorageError(f"File {self._path} is closed", path=self._path, errno=errno_module.EBADF)
        return self._fd

    def _check_same_file(self, fd: int) -> None:
        """Raises :class:`StorageError` when the file was closed after ``fd`` was taken from it (a reader
        racing the deletion of its segment): the number of a closed descriptor goes to the next file
        opened, so what was just read through it may be that file's bytes."""
        if self._fd != fd:
            raise StorageError(
                f"File {self._path} was closed while it was read", path=self._path, errno=errno_module.EBADF
            )

    # ---- writes (caller holds the log lock) ------------------------------------------------

    def append(self, data: bytes | bytearray | memoryview | np.ndarray) -> int:
        """Write ``data`` at the logical end and return its length. Caller holds the log lock.

        Raises:
            ValueError: the file would grow past 2**31-1 bytes (positions are int32).
            StorageError: the write failed (the logical size is unchanged).
        """
        if isinstance(data, np.ndarray):
            view = np.ascontiguousarray(data).reshape(-1).view(np.uint8).data
        else:
            view = memoryview(data).cast("B")
        n = len(view)
        if n > MAX_FILE_SIZE - self._size:
            raise ValueError(
                f"Append of size {n} bytes is too large for segment with current file position at "
                f"{self._size} ({self._path})"
            )
        fd = self._check_open()
        with storage_errors(self._path, "append to"):
            pwrite_all(fd, view, self._size)
        self._size += n
        return n

    def append_positioned(self, size: int, fill: Callable[[Callable[[np.ndarray, int], None]], None]) -> int:
        """Append ``size`` bytes that ``fill`` writes in pieces, in any order; return ``size``.

        ``fill(write)`` calls ``write(data, position)`` (``position`` relative to the append's start;
        thread-safe: ``pwrite``) until every byte of the range is written, so an encoder can write
        chunks from several threads as they are ready. The blocks are reserved first
        (``posix_fallocate``), so a full disk is an ``ENOSPC`` :class:`StorageError` before anything
        is written. If ``fill`` raises, the file is cut back to its logical size. A crash while
        ``fill`` runs leaves a zero or half-written tail beyond the last whole batch, which recovery
        truncates, as after a torn ``write``. Caller holds the log lock.

        Raises:
            ValueError: the file would grow past 2**31-1 bytes, or a piece falls outside the range.
            StorageError: reserving or writing failed (the logical size is unchanged).
        """
        if size > MAX_FILE_SIZE - self._size:
            raise ValueError(
                f"Append of size {size} bytes is too large for segment with current file position at "
                f"{self._size} ({self._path})"
            )
        if size == 0:
            return 0
        fd = self._check_open()
        start = self._size

        def write(data: np.ndarray, position: int) -> None:
            if position < 0 or position + data.nbytes > size:
                raise ValueError(f"a piece of {data.nbytes} bytes at {position} is outside the append of {size} bytes")
            with storage_errors(self._path, "append to"):
                pwrite_all(fd, np.ascontiguousarray(data).reshape(-1).view(np.uint8).data, start + position)

        with storage_errors(self._path, "append to"):
            os.posix_fallocate(fd, start, size)
        try:
            fill(write)
        except BaseException:
            with storage_errors(self._path, "truncate"):
                os.ftruncate(fd, start)
            raise
        self._size += size
        return size

    def truncate_to(self, target_size: int) -> int:
        """Cut the file to ``target_size`` bytes; return how many bytes were removed. Caller holds the lock.

        Raises:
            ValueError: ``target_size`` is negative or beyond the logical size (Kafka's message).
            StorageError: the truncation failed.
        """
        original = self._size
        if target_size > original or target_size < 0:
            raise ValueError(
                f"Attempt to truncate log segment {self._path} to {target_size} bytes failed, "
                f"size of this log segment is {original} bytes."
            )
        fd = self._check_open()
        with storage_errors(self._path, "truncate"):
            if target_size < os.fstat(fd).st_size:
                os.ftruncate(fd, target_size)
        self._size = target_size
        return original - target_size

    def trim(self) -> None:
        """Cut preallocated space: truncate the file to the logical size."""
        self.truncate_to(self._size)

    def flush(self) -> None:
        """fsync the file's data and metadata (Kafka's ``channel.force(true)``)."""
        fd = self._check_open()
        with storage_errors(self._path, "flush"):
            os.fsync(fd)

    def close(self) -> None:
        """Flush, trim to the logical size and close (read-only: just close). Idempotent."""
        if self._fd < 0:
            return
        try:
            if self._mutable:
                self.flush()
                self.trim()
        finally:
            self.close_handlers()

    def close_handlers(self) -> None:
        """Release the file descriptor without flushing or trimming (used when the disk failed)."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)

    def rename_to(self, path: str | os.PathLike[str]) -> None:
        """Atomically rename the file (replacing ``path``); the open descriptor stays valid.

        Raises:
            StorageError: the rename failed; the object keeps its old path.
        """
        target = Path(path)
        with storage_errors(self._path, "rename", target=target):
            os.replace(self._path, target)
        self._path = target

    def delete_if_exists(self) -> bool:
        """Close the descriptor and delete the file; False if it was already gone."""
        self.close_handlers()
        try:
            os.unlink(self._path)
        except FileNotFoundError:
            return False
        except OSError as e:
            raise StorageError(f"Failed to delete {self._path}: {e.strerror}", path=self._path, errno=e.errno) from e
        return True

    @property
    def last_modified_ms(self) -> int:
        """The file's modification time in epoch milliseconds."""
        with storage_errors(self._path, "stat"):
            return os.stat(self._path).st_mtime_ns // 1_000_000

    def set_last_modified(self, ms: int) -> None:
        """Set the file's modification time (epoch milliseconds); the access time is kept."""
        with storage_errors(self._path, "set the modification time of"):
            atime_ns = os.stat(self._path).st_atime_ns
            os.utime(self._path, ns=(atime_ns, ms * 1_000_000))

    # ---- reads (thread-safe) ----------------------------------------------------------------

    def read(self, position: int, size: int) -> bytes:
        """Up to ``size`` bytes from ``position``, short when the logical end comes first.

        Raises:
            ValueError: a negative position or size.
            StorageError: the read failed, or the file was closed before or while it was read.
        """
        if position < 0 or size < 0:
            raise ValueError(f"Invalid read of {size} bytes at position {position} in {self._path}")
        n = max(0, min(size, self._size - position))
        fd = self._check_open()
        parts: list[bytes] = []
        got = 0
        with storage_errors(self._path, "read"):
            while got < n:
                chunk = os.pread(fd, n - got, position + got)
                if not chunk:
                    break
                parts.append(chunk)
                got += len(chunk)
        self._check_same_file(fd)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def slice(self, position: int, size: int) -> FileSlice:
        """Up to ``size`` bytes from ``position`` as a :class:`FileSlice`, short when the logical end comes
        first (what :meth:`read` would return, without reading it).

        Raises:
            ValueError: a negative position or size.
        """
        if position < 0 or size < 0:
            raise ValueError(f"Invalid slice of {size} bytes at position {position} in {self._path}")
        return FileSlice(self, position, max(0, min(size, self._size - position)))

    def _end(self, end: int | None) -> int:
        return self._size if end is None else min(end, self._size)

    def batches(self, start: int = 0, end: int | None = None, *, whole: bool = False) -> Iterator[FileBatch]:
        """The entries from ``start`` (a batch boundary) up to ``end`` (default: the logical size).

        Follows ``FileLogInputStream.nextBatch`` (spec 3.7): stops silently when fewer than 18 bytes
        remain or the next entry does not fit before ``end``, unless ``whole``: then bytes before
        ``end`` that are not a whole entry (a cut, or a size field past ``end``) raise, as readers
        need for the bytes below what the log committed. Nothing is validated beyond the size.

        Raises:
            CorruptRecordError: an entry's size field is below 14, or (``whole``) the bytes from a
                position on are not a whole entry (names the file and position).
        """
        end = self._end(end)
        position = start
        while position < end - HEADER_SIZE_UP_TO_MAGIC:
            head = self.read(position, min(RECORD_BATCH_OVERHEAD, end - position))
            if len(head) <= HEADER_SIZE_UP_TO_MAGIC:
                break  # truncated underneath us
            offset, size = _OFFSET_SIZE.unpack_from(head, 0)
            if size < MIN_LEGACY_RECORD_SIZE:
                raise CorruptRecordError(
                    f"Found record size {size} smaller than minimum record overhead "
                    f"({MIN_LEGACY_RECORD_SIZE}) in file {self._path} at position {position}.",
                    path=self._path,
                    position=position,
                    offset=offset,
                )
            if position > end - LOG_OVERHEAD - size:
                break
            magic = struct.unpack_from(">b", head, MAGIC_OFFSET)[0]
            total = LOG_OVERHEAD + size
            yield FileBatch(self, position, head[:total], total, magic)
            position += total
        if whole and position < end:
            raise self.not_whole_error(position, end)

    def not_whole_error(self, position: int, end: int) -> CorruptRecordError:
        """The error for bytes ``[position, end)`` that should be whole entries and are not."""
        return CorruptRecordError(
            f"the {end - position} bytes at position {position} of {self._path} are not a whole record batch "
            f"(damaged or cut)",
            path=self._path,
            position=position,
        )

    def search_for_offset_with_size(
        self, target_offset: int, start_position: int, batches: Iterator[FileBatch] | None = None
    ) -> LogOffsetPosition | None:
        """The first batch from ``start_position`` whose last offset is >= ``target_offset``.

        Kafka's ``searchForOffsetWithSize`` (used by ``translateOffset``): batch granularity, so the
        position is the start of the batch *containing* the offset. None if no such batch.
        ``batches``: the walk to search instead of ``batches(start_position)`` (one already started).
        """
        for batch in self.batches(start_position) if batches is None else batches:
            last_offset = batch.last_offset
            if last_offset >= target_offset:
                return LogOffsetPosition(last_offset, batch.position, batch.size_in_bytes)
        return None

    def scan(self, start: int = 0, end: int | None = None, *, verify_crc: bool = True) -> BatchScan:
        """Walk every entry header from ``start`` to ``end`` at once: the recovery hot path.

        The bytes are read with ``pread`` in chunks of :data:`PREAD_SCAN_CHUNK_BYTES`, each walked by
        a numba kernel, then a second compiled loop checks every v2 CRC-32C with the CPU's CRC
        instruction (legacy entries: CRC-32 in Python); without CRCs, large v2 batches are walked
        header to header. The scan stops at the first problem and returns it in ``BatchScan.error``
        rather than raising, with everything valid before it.

        Never a memory map: a truncation by another process (a writer, a recovery) would fault a
        mapped reader (SIGBUS), while a read just ends where the bytes end (as at a torn tail; the
        caller compares sizes to tell that the file changed). Large sequential reads are also what
        a disk serves best: a 512 MiB segment out of the page cache is scanned with its CRCs at
        about the speed of reading it, against half that speed page fault by page fault through a
        map, and as fast as a map when cached.

        Raises:
            StorageError: the file cannot be read.
        """
        return self._scan_read(self._check_open(), start, self._end(end), verify_crc)

    def int64_fields(self, positions: np.ndarray, field_offset: int) -> np.ndarray:
        """The big-endian int64 at ``field_offset`` of each batch starting at ``positions`` (an 8-byte
        ``pread`` each, in a compiled loop), e.g. the producer ids of chosen v2 batches
        (:data:`PRODUCER_ID_OFFSET`) for the producer-state replay of :mod:`indexer.transaction_replay`.

        Raises:
            StorageError: the file ended before one of them (it changed since it was scanned).
        """
        fd = self._check_open()
        wanted = np.ascontiguousarray(positions, dtype=np.int64)
        found = _batch_scan.pread_i64_fields(fd, wanted, field_offset)
        if found.size < wanted.size:
            raise StorageError(
                f"Short read of the batch at position {int(wanted[found.size])} of {self._path}",
                path=self._path,
            )
        return found

    def scan_bytes(self, data: bytes, position: int) -> BatchScan:
        """The entry headers of ``data``, this file's bytes from ``position`` as a reader already holds
        them, walked as :meth:`scan` walks the file (no CRC pass), without reading them again."""
        buf = np.frombuffer(data, dtype=np.uint8)
        return self._scan_buffer(buf, position, position, position + len(data), False)[0]

    def _scan_read(self, fd: int, start: int, end: int, verify_crc: bool) -> BatchScan:
        """``scan`` with ``pread``: chunk by chunk, each chunk ending where its last whole entry ends.

        Without the CRC pass only headers matter: v2 batches of :data:`PREAD_SCAN_HOP_MIN_BYTES` or
        more are walked header to header by a compiled loop, reading 61 bytes per batch rather than
        the whole range (a 16 MiB fetch of 64 KiB batches: 256 reads of 61 bytes); smaller entries
        are read in chunks, and the hops start again where a chunk's entries average that size.
        """
        parts: list[BatchScan] = []
        position, chunk, hop = start, PREAD_SCAN_CHUNK_BYTES, not verify_crc
        while end - position > HEADER_SIZE_UP_TO_MAGIC:
            if hop:
                hop = False
                columns, hopped_to = _batch_scan.hop_v2_headers(fd, position, end, PREAD_SCAN_HOP_MIN_BYTES)
                self._check_same_file(fd)
                if columns.shape[1]:
                    positions, sizes, base_offsets, last_offsets, max_timestamps, magics, attributes, _ = columns
                    position = int(hopped_to)
                    parts.append(
                        BatchScan(
                            positions,
                            sizes,
                            base_offsets,
                            last_offsets,
                            max_timestamps,
                            magics,
                            attributes,
                            position,
                            None,
                        )
                    )
                continue
            buf = np.empty(min(end - position, chunk), dtype=np.uint8)
            with storage_errors(self._path, "read"):
                got = os.preadv(fd, [buf.data], position)
            self._check_same_file(fd)
            if got < buf.size:  # the file shrank underneath us: its bytes end here
                end, buf = position + got, buf[:got]
            part, stop, status = self._scan_buffer(buf, position, position, position + buf.size, verify_crc)
            parts.append(part)
            if (
                part.error is not None
                or position + got >= end
                or status
                not in (
                    _batch_scan.STOP_PARTIAL,
                    _batch_scan.STOP_END,
                )
            ):
                break
            # the chunk cut an entry: go on from its start; one larger than a chunk is read whole
            chunk = PREAD_SCAN_CHUNK_BYTES
            if stop == position:
                chunk = LOG_OVERHEAD + int.from_bytes(buf[SIZE_OFFSET:LOG_OVERHEAD].tobytes(), "big", signed=True)
            hop = not verify_crc and len(part) > 0 and (stop - position) >= PREAD_SCAN_HOP_MIN_BYTES * len(part)
            position = stop
        if not parts:
            return _empty_scan(start)
        if len(parts) == 1:
            return parts[0]
        joined = {f: np.concatenate([getattr(p, f) for p in parts]) for f in _SCAN_COLUMNS}
        return BatchScan(**joined, valid_bytes=parts[-1].valid_bytes, error=parts[-1].error)

    def _scan_buffer(
        self, buf: np.ndarray, origin: int, start: int, end: int, verify_crc: bool
    ) -> tuple[BatchScan, int, int]:
        """Scan the file bytes ``[start, end)`` held by ``buf`` from file position ``origin`` on.

        Returns the scan (file positions), the file position where the walk stopped and why
        (a ``_batch_scan.STOP_*`` code).
        """
        table, stop_position, status, detail = _batch_scan.scan_entries(buf, start - origin, end - origin)
        columns = list(table)
        stop = int(stop_position) + origin
        error = self._stop_error(int(status), stop, int(detail))
        count = len(columns[0])
        failed = _first_bad_crc(buf, columns[0], columns[1], columns[5], columns[7]) if verify_crc else None
        if failed is not None:
            count, computed = failed
            position = int(columns[0][count]) + origin
            error = CorruptRecordError(
                f"Record is corrupt (stored crc = {int(columns[7][count])}, computed crc = {computed}) "
                f"in file {self._path} at position {position}",
                path=self._path,
                position=position,
                offset=int(columns[2][count]),
            )
        wrappers = _compressed_legacy_entries(buf, columns, count)
        columns[0] += origin
        legacy_error = self._fix_legacy_base_offsets(wrappers, columns)
        if legacy_error is not None:
            count, error = legacy_error
        positions, sizes, base_offsets, last_offsets, max_timestamps, magics, attributes, _ = (
            column[:count].copy() if count < len(column) else column for column in columns
        )
        valid_bytes = int(positions[-1] + sizes[-1]) if count else start
        if error is not None:
            logger.debug("Scan of %s stopped at position %d: %s", self._path, valid_bytes, error)
        scan = BatchScan(
            positions, sizes, base_offsets, last_offsets, max_timestamps, magics, attributes, valid_bytes, error
        )
        return scan, stop, int(status)

    def _stop_error(self, status: int, position: int, detail: int) -> CorruptRecordError | None:
        path = self._path
        if status == _batch_scan.STOP_SIZE_TOO_SMALL:
            message = (
                f"Found record size {detail} smaller than minimum record overhead ({MIN_LEGACY_RECORD_SIZE}) "
                f"in file {path}."
            )
            return CorruptRecordError(message, path=path, position=position)
        if status == _batch_scan.STOP_V2_TOO_SMALL:
            message = (
                f"Record batch is corrupt (the size {detail} is smaller than the minimum allowed overhead "
                f"{RECORD_BATCH_OVERHEAD}) in file {path} at position {position}"
            )
            return CorruptRecordError(message, path=path, position=position)
        if status == _batch_scan.STOP_V1_TOO_SMALL:
            message = (
                f"Record is corrupt (size {detail} is smaller than the v1 overhead {RECORD_OVERHEAD_V1}) "
                f"in file {path} at position {position}"
            )
            return CorruptRecordError(message, path=path, position=position)
        if status == _batch_scan.STOP_BAD_MAGIC:
            return CorruptRecordError(
                f"Invalid magic {detail} in file {path} at position {position}", path=path, position=position
            )
        return None

    def _fix_legacy_base_offsets(
        self, wrappers: list[tuple[int, bytes]], columns: list[np.ndarray]
    ) -> tuple[int, CorruptRecordError] | None:
        """Set the base offsets of compressed legacy wrappers (rare) by decompressing them.

        Returns ``(index, error)`` for the first wrapper that does not decode, else None.
        """
        for index, raw in wrappers:
            position = int(columns[0][index])
            try:
                entry = next(iter_legacy_entries(raw, base_position=position, path=self._path))
                columns[2][index] = legacy_base_offset(entry, path=self._path)
            except CorruptRecordError as e:  # includes InvalidRecordError
                return index, e
        return None


def _compressed_legacy_entries(buf: np.ndarray, columns: list[np.ndarray], count: int) -> list[tuple[int, bytes]]:
    """``(index, bytes)`` of each compressed legacy entry, copied out of the map.

    Copies, so that no view of the map outlives the scan: the traceback of a decoding error would
    otherwise pin the map and keep it from closing.
    """
    magics, attributes = columns[5][:count], columns[6][:count]
    compressed = np.flatnonzero((magics < MAGIC_V2) & ((attributes & COMPRESSION_CODEC_MASK) != 0))
    return [
        (index, buf[columns[0][index] : columns[0][index] + columns[1][index]].tobytes())
        for index in compressed.tolist()
    ]


def _empty_scan(start: int) -> BatchScan:
    empty = np.empty(0, dtype=np.int64)
    return BatchScan(empty, empty, empty, empty, empty, empty, empty, start, None)


def _first_bad_crc(
    buf: np.ndarray, positions: np.ndarray, sizes: np.ndarray, magics: np.ndarray, crcs: np.ndarray
) -> tuple[int, int] | None:
    """``(index, computed crc)`` of the first entry whose CRC does not match, or None.

    v2 batches: CRC-32C of bytes 21..end, all in one compiled loop when the hardware routine is
    available (``_batch_scan.HARDWARE_CRC32C``), else one ``crc32c`` call per batch. Legacy
    entries (rare): CRC-32 of bytes 16..end, one ``zlib`` call each. Never a call per record.
    """
    count = len(positions)
    first_bad_v2 = count
    if _batch_scan.HARDWARE_CRC32C:
        # Large scans check halves on two threads (the kernel releases the GIL); the first bad entry
        # is the first half's, if any.
        bounds = [0, count] if int(sizes.sum()) < CRC_PARALLEL_MIN_BYTES else [0, count // 2, count]
        found = [-1] * (len(bounds) - 1)

        def check(k: int) -> None:
            found[k] = _batch_scan.first_bad_v2_crc(buf, positions, sizes, magics, crcs, bounds[k], bounds[k + 1])

        in_threads(len(found), check, workers=2)
        first_bad_v2 = next((i for i in found if i >= 0), count)
        candidates = np.flatnonzero(magics[:first_bad_v2] < MAGIC_V2).tolist()
    else:
        candidates = list(range(count))
    for index in candidates:
        computed = _entry_crc(buf, int(positions[index]), int(sizes[index]), int(magics[index]))
        if computed != crcs[index]:
            return index, computed
    if first_bad_v2 < count:
        index = first_bad_v2
        return index, _entry_crc(buf, int(positions[index]), int(sizes[index]), MAGIC_V2)
    return None


def _entry_crc(buf: np.ndarray, position: int, size: int, magic: int) -> int:
    end = position + size
    if magic == MAGIC_V2:
        return crc32c(buf[position + ATTRIBUTES_OFFSET : end].data)
    return zlib.crc32(buf[position + MAGIC_OFFSET : end].data)
