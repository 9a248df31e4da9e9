"""Quarantine: every byte recovery removes from a ``.log`` is kept beside it, never just deleted.

seglog has no replica to re-fetch lost data from, so a damaged range, a torn tail, bytes past a
truncation and whole segments dropped by Kafka-style truncation are copied (or, for a whole
``.log``, renamed) into ``<base>.log.<position>.quarantine`` files in the partition directory
before the segment changes (:mod:`indexer.file_names` holds the name rule). The loader never takes
them for segments. They stay until ``seglog quarantine purge`` removes them, or the maintenance
service does once they are older than ``quarantine.retention.ms`` (default -1: never), both through
:func:`indexer.data_loss.purge_quarantine`, which first records the offsets they make lost for good.

Writing is crash-safe and idempotent: a file is written to ``.tmp``, fsynced and renamed; writing
the same bytes for the same place again finds the existing file and keeps it, so a recovery
interrupted and rerun leaves exactly one copy. Different bytes for the same place (the segment was
rewritten and damaged again) get the next free ``.<n>`` name: nothing is overwritten.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from indexer import file_names
from indexer.checkpoint import fsync_directory
from indexer.errors import storage_errors
from indexer.records.file_records import FileRecords
from indexer.salvage import write_ranges

_TMP_SUFFIX = ".tmp"
_CHUNK = 8 << 20


@dataclass(frozen=True, slots=True)
class QuarantineFile:
    """One quarantine file: which segment and ``.log`` position its bytes came from."""

    path: Path
    base_offset: int
    position: int
    size: int
    modified_ms: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "base_offset": self.base_offset,
            "position": self.position,
            "size": self.size,
            "modified_ms": self.modified_ms,
        }


def _digest_of_file(path: Path) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.digest()


def _digest_of_range(source: FileRecords, position: int, length: int) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    done = 0
    while done < length:
        chunk = source.read(position + done, min(length - done, _CHUNK))
        if not chunk:
            break
        h.update(chunk)
        done += len(chunk)
    return h.digest()


def quarantine_range(source: FileRecords, base_offset: int, position: int, length: int) -> Path:
    """Keep ``length`` bytes of segment ``base_offset``'s ``.log`` from ``position`` in a quarantine
    file (fsynced, directory fsynced); returns its path. Idempotent (see the module docstring).

    Raises:
        StorageError: the bytes cannot be read or written.
    """
    directory = source.path.parent
    digest: bytes | None = None
    copy = 0
    while True:
        path = file_names.quarantine_file(directory, base_offset, position, copy)
        if not path.exists():
            break
        if path.stat().st_size == length:
            if digest is None:
                digest = _digest_of_range(source, position, length)
            with storage_errors(path, "read"):
                if _digest_of_file(path) == digest:
                    return path
        copy += 1
    tmp = path.with_name(path.name + _TMP_SUFFIX)
    write_ranges(source, [(position, length)], tmp)
    with storage_errors(tmp, "rename", target=path):
        os.replace(tmp, path)
        fsync_directory(directory)
    return path


def quarantine_whole_file(log_path: Path, base_offset: int) -> Path:
    """Move a whole ``.log`` into quarantine (a rename: position 0); returns the new path.

    Raises:
        StorageError: the rename failed.
    """
    directory = log_path.parent
    copy = 0
    while (path := file_names.quarantine_file(directory, base_offset, 0, copy)).exists():
        copy += 1
    with storage_errors(log_path, "rename", target=path):
        os.replace(log_path, path)
        fsync_directory(directory)
    return path


def list_quarantine(partition_dir: Path) -> list[QuarantineFile]:
    """The quarantine files of one partition directory, by segment and position.

    Raises:
        StorageError: the directory cannot be listed.
    """
    out = []
    with storage_errors(partition_dir, "list"), os.scandir(partition_dir) as entries:
        for entry in entries:
            if not entry.is_file(follow_symlinks=False) or not file_names.is_quarantine_file(Path(entry.name)):
                continue
            try:
                base, position = file_names.parse_quarantine_file_name(entry.name)
            except ValueError:
                continue
            stat = entry.stat()
            out.append(QuarantineFile(Path(entry.path), base, position, stat.st_size, stat.st_mtime_ns // 1_000_000))
    return sorted(out, key=lambda q: (q.base_offset, q.position, q.path.name))
