"""Helpers shared by the index tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from indexer.abstract_index import AbstractIndex
from indexer.errors import IndexFullError, IndexOffsetOverflowError, InvalidOffsetError
from indexer.records.file_records import FileRecords

IndexT = TypeVar("IndexT", bound=AbstractIndex)


def index_error(action: Callable[[], Any]) -> type[Exception] | None:
    """The type of the error an index rejects ``action`` with (``None``: it succeeded)."""
    try:
        action()
    except (IndexFullError, InvalidOffsetError, IndexOffsetOverflowError, ValueError) as e:
        return type(e)
    return None


def real_broker_indexes(
    vectors_dir: Path, index_class: type[IndexT], suffix: str, entry_bytes: int
) -> Iterator[tuple[int, IndexT]]:
    """``(base offset, index)`` of every broker-written ``*<suffix>`` file of the vectors (there are
    more than 40), opened read-only; each passed ``sanity_check`` and holds ``size // entry_bytes`` entries."""
    files = sorted(vectors_dir.glob(f"*/*/*{suffix}"))
    assert len(files) > 40
    for path in files:
        base = int(path.name.split(".")[0])
        with index_class(path, base, writable=False) as idx:
            idx.sanity_check()
            assert idx.entries == path.stat().st_size // entry_bytes
            yield base, idx


@dataclass(frozen=True)
class Batch:
    """One record batch as stored in a segment."""

    segment: str  # .log file name
    position: int
    size: int
    base_offset: int
    last_offset: int
    raw: bytes


def segment_batches(path: Path) -> list[Batch]:
    """Every batch of the ``.log`` at ``path``, in order; asserts the whole file is CRC-valid batches."""
    with FileRecords.open(path, mutable=False) as records:
        scan = records.scan()
        assert scan.error is None and scan.valid_bytes == records.size_in_bytes(), f"{path}: invalid bytes"
        return [
            Batch(path.name, p, s, base, last, records.read(p, s))
            for p, s, base, last in zip(
                scan.positions.tolist(),
                scan.sizes.tolist(),
                scan.base_offsets.tolist(),
                scan.last_offsets.tolist(),
                strict=True,
            )
        ]


def log_batches(directory: Path) -> list[Batch]:
    """Every batch of every ``.log`` of the partition ``directory``, in offset order (see :func:`segment_batches`)."""
    return [batch for path in sorted(directory.glob("*.log")) for batch in segment_batches(path)]
