"""Helpers shared by the index tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from indexer.abstract_index import AbstractIndex
from indexer.errors import IndexFullError, IndexOffsetOverflowError, InvalidOffsetError

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
