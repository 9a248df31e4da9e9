"""The transaction index, ``<base>.txnindex`` (Kafka's ``TransactionIndex`` and ``AbortedTxn``).

An append-only file of 34-byte records, one per aborted transaction whose ABORT marker is in this
segment (the transaction itself may start in an earlier segment). All integers big-endian::

    offset  size  field
    0       2     version             int16, written as 0 (Kafka reads only byte 0, signed)
    2       8     producer_id         int64
    10      8     first_offset        int64, first offset of the aborted transaction
    18      8     last_offset         int64, offset of the ABORT marker
    26      8     last_stable_offset  int64, the partition's LSO when the abort was written

The file is created by the first append only. A trailing partial record is ignored. Fetches at
READ_COMMITTED use :meth:`TransactionIndex.collect_aborted_txns` to learn which records to drop.
There is no checksum: after a crash recovery rebuilds the index from the log.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import NamedTuple

import numpy as np

from indexer._files import IndexFile, pwrite_all
from indexer.errors import CorruptIndexError, StorageError, storage_errors

logger = logging.getLogger(__name__)

ABORTED_TXN_SIZE = 34
CURRENT_VERSION = 0

# Big-endian record layout; "version" is the int16 as written, "version_byte" the byte Kafka checks.
_RECORD = np.dtype(
    [
        ("version", ">i2"),
        ("producer_id", ">i8"),
        ("first_offset", ">i8"),
        ("last_offset", ">i8"),
        ("lso", ">i8"),
    ]
)
assert _RECORD.itemsize == ABORTED_TXN_SIZE


class AbortedTxn(NamedTuple):
    """One aborted transaction: producer, first offset, ABORT marker offset and the LSO at the abort."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int
    version: int = CURRENT_VERSION

    def to_bytes(self) -> bytes:
        """The 34-byte on-disk record."""
        record = np.array(
            [(self.version, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset)],
            dtype=_RECORD,
        )
        return record.tobytes()

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> AbortedTxn:
        """Parse one 34-byte record; ``version`` is byte 0 read as a signed byte, as Kafka does."""
        if len(data) != ABORTED_TXN_SIZE:
            raise ValueError(f"an aborted transaction record is {ABORTED_TXN_SIZE} bytes, got {len(data)}")
        record = np.frombuffer(data, dtype=_RECORD)[0]
        version = int(np.frombuffer(data, dtype=np.int8, count=1)[0])
        return cls(
            int(record["producer_id"]),
            int(record["first_offset"]),
            int(record["last_offset"]),
            int(record["lso"]),
            version,
        )


class TxnIndexSearchResult(NamedTuple):
    """Aborted transactions overlapping a fetch, and whether later segments need not be searched."""

    aborted_transactions: list[AbortedTxn]
    is_complete: bool


class _Records(NamedTuple):
    """The complete records of the file as columns (native int64), plus Kafka's version byte."""

    version: np.ndarray
    producer_id: np.ndarray
    first_offset: np.ndarray
    last_offset: np.ndarray
    lso: np.ndarray

    def txn(self, i: int) -> AbortedTxn:
        return AbortedTxn(
            int(self.producer_id[i]),
            int(self.first_offset[i]),
            int(self.last_offset[i]),
            int(self.lso[i]),
            int(self.version[i]),
        )

    def txns(self, stop: int) -> list[AbortedTxn]:
        return [self.txn(i) for i in range(stop)]


class TransactionIndex(IndexFile):
    """``<base>.txnindex``: the aborted transactions whose ABORT marker is in the segment.

    ``writable=False`` opens the file read-only and refuses every mutation (``ValueError``).

    Thread-safety: every method takes the index's lock (appends are rare, reads small). Crash
    behaviour: appends are plain writes, durable after ``flush()``; a torn last record is ignored
    on reading and recovery rebuilds the index.
    """

    _FILE_KIND = "transaction index"
    _MAY_BE_MISSING = True  # created by the first append

    def __init__(self, path: str | os.PathLike[str], base_offset: int, writable: bool = True) -> None:
        self._lock = threading.RLock()
        self._path = Path(path)
        self._base_offset = int(base_offset)
        self._writable = bool(writable)
        self._fd: int | None = None
        # Last offset appended by this object (None after opening or reset): appends must increase it.
        self._last_offset: int | None = None

    @property
    def base_offset(self) -> int:
        return self._base_offset

    def _open(self, create: bool) -> int | None:
        """The open descriptor, opening it if the file exists (or ``create``); None if there is no file."""
        if self._fd is not None:
            return self._fd
        if not create and not self._path.exists():
            return None
        with storage_errors(self._path, "open transaction index"):
            flags = (os.O_RDWR | os.O_CREAT) if self._writable else os.O_RDONLY
            self._fd = os.open(self._path, flags, 0o666)
        return self._fd

    def _require_writable(self, action: str) -> None:
        if not self._writable:
            raise ValueError(f"cannot {action} transaction index {self._path.absolute()}: it is open read-only")

    def _read(self) -> _Records:
        """Every complete record of the file, vectorised (a missing file has none)."""
        fd = self._open(create=False)
        if fd is None:
            data = b""
        else:
            with storage_errors(self._path, "read transaction index"):
                size = os.fstat(fd).st_size
                count = size // ABORTED_TXN_SIZE
                data = os.pread(fd, count * ABORTED_TXN_SIZE, 0)
                if len(data) != count * ABORTED_TXN_SIZE:
                    raise StorageError(
                        f"Short read of transaction index {self._path.absolute()}: {len(data)} of "
                        f"{count * ABORTED_TXN_SIZE} bytes",
                        path=self._path,
                    )
        records = np.frombuffer(data, dtype=_RECORD)
        version_bytes = np.frombuffer(data, dtype=np.int8)[::ABORTED_TXN_SIZE]
        return _Records(
            version_bytes.astype(np.int64),
            records["producer_id"].astype(np.int64),
            records["first_offset"].astype(np.int64),
            records["last_offset"].astype(np.int64),
            records["lso"].astype(np.int64),
        )

    def _check_versions(self, records: _Records, stop: int) -> None:
        """Kafka reads records one by one and fails on the first with version > 0: check ``[0, stop)``."""
        bad = np.flatnonzero(records.version[:stop] > CURRENT_VERSION)
        if bad.size:
            raise CorruptIndexError(
                f"Unexpected aborted transaction version {int(records.version[bad[0]])} in transaction index "
                f"{self._path.absolute()} at position {int(bad[0]) * ABORTED_TXN_SIZE}, current version is "
                f"{CURRENT_VERSION}",
                path=self._path.absolute(),
            )

    def is_empty(self) -> bool:
        """True if the file is missing or holds no complete record."""
        with self._lock:
            return self._read().last_offset.size == 0

    def append(self, txn: AbortedTxn) -> None:
        """Append ``txn`` at the end, creating the file if needed.

        Raises ``ValueError`` if ``txn.last_offset`` does not exceed the last offset appended by
        this object (unknown after reopening, so the first append is unchecked, as in Kafka).
        """
        with self._lock:
            self._require_writable("append to")
            if self._last_offset is not None and self._last_offset >= txn.last_offset:
                raise ValueError(
                    "The last offset of appended transactions must increase sequentially, but "
                    f"{txn.last_offset} is not greater than current last offset {self._last_offset} "
                    f"of index {self._path.absolute()}"
                )
            fd = self._open(create=True)
            assert fd is not None
            data = txn.to_bytes()
            with storage_errors(self._path, "append to transaction index"):
                pwrite_all(fd, data, os.fstat(fd).st_size)
            self._last_offset = txn.last_offset

    def all_aborted_txns(self) -> list[AbortedTxn]:
        """Every record, in file order."""
        with self._lock:
            records = self._read()
            count = records.last_offset.size
            self._check_versions(records, count)
            return records.txns(count)

    def collect_aborted_txns(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearchResult:
        """Aborted transactions overlapping ``[fetch_offset, upper_bound_offset)``.

        Records are taken in order when ``last_offset >= fetch_offset`` and ``first_offset <
        upper_bound_offset``; the walk stops after the first record whose last stable offset is >=
        ``upper_bound_offset`` with ``is_complete=True`` (no later segment can matter).
        """
        with self._lock:
            records = self._read()
            count = records.last_offset.size
            complete_at = np.flatnonzero(records.lso >= upper_bound_offset)
            stop = int(complete_at[0]) + 1 if complete_at.size else count
            self._check_versions(records, stop)
            wanted = (records.last_offset[:stop] >= fetch_offset) & (records.first_offset[:stop] < upper_bound_offset)
            txns = [records.txn(int(i)) for i in np.flatnonzero(wanted)]
            return TxnIndexSearchResult(txns, bool(complete_at.size))

    def truncate_to(self, offset: int) -> None:
        """Drop the first record with ``last_offset >= offset`` and everything after it."""
        with self._lock:
            self._require_writable("truncate")
            records = self._read()
            count = records.last_offset.size
            hits = np.flatnonzero(records.last_offset >= offset)
            stop = int(hits[0]) if hits.size else count
            self._check_versions(records, min(stop + 1, count))
            if not hits.size:
                return
            fd = self._open(create=False)
            assert fd is not None  # a record was read, so the file is open
            with storage_errors(self._path, "truncate transaction index"):
                os.ftruncate(fd, stop * ABORTED_TXN_SIZE)
            self._last_offset = int(records.last_offset[stop - 1]) if stop > 0 else None

    def reset(self) -> None:
        """Empty the file if it exists (it is not created) and forget the last offset."""
        with self._lock:
            self._require_writable("reset")
            fd = self._open(create=False)
            if fd is not None:
                with storage_errors(self._path, "truncate transaction index"):
                    os.ftruncate(fd, 0)
            self._last_offset = None

    def sanity_check(self, base_offset: int | None = None) -> None:
        """:class:`CorruptIndexError` if a record ends before the segment's base offset.

        ``base_offset`` defaults to the one the index was opened with.
        """
        start = self._base_offset if base_offset is None else base_offset
        with self._lock:
            records = self._read()
            count = records.last_offset.size
            bad = np.flatnonzero(records.last_offset < start)
            stop = int(bad[0]) if bad.size else count
            self._check_versions(records, min(stop + 1, count))
            if bad.size:
                raise CorruptIndexError(
                    f"Last offset of aborted transaction {records.txn(stop)} in index "
                    f"{self._path.absolute()} is less than start offset {start}",
                    path=self._path.absolute(),
                )

    def flush(self) -> None:
        """fsync the file if it is open (a missing file is not created)."""
        with self._lock:
            if self._fd is not None:
                with storage_errors(self._path, "flush transaction index"):
                    os.fsync(self._fd)

    def close(self) -> None:
        """Close the file descriptor; a later call reopens it (as Kafka's channel)."""
        with self._lock:
            if self._fd is not None:
                fd, self._fd = self._fd, None
                with storage_errors(self._path, "close transaction index"):
                    os.close(fd)

    def _close_before_delete(self) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"TransactionIndex({str(self._path)!r}, base_offset={self._base_offset})"
