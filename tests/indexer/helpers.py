"""Helpers shared by the index tests (and a lock holder process, shared with the maintenance tests)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from indexer.abstract_index import AbstractIndex
from indexer.errors import IndexFullError, IndexOffsetOverflowError, InvalidOffsetError
from indexer.records.columns import to_append_table
from indexer.records.encoder import encode_batches
from indexer.records.file_records import FileRecords

IndexT = TypeVar("IndexT", bound=AbstractIndex)


def producer_batch(first: int, count: int, producer: int) -> bytes:
    """One data batch of ``count`` records from offset ``first`` (values ``v<offset>``, timestamps
    1000 + offset): transactional of ``producer``, or without a producer when ``producer`` < 0."""
    table = to_append_table(
        {
            "value": [f"v{first + i}".encode() for i in range(count)],
            "timestamp": [1000 + first + i for i in range(count)],
        },
        now_ms=0,
    )
    encoded = encode_batches(
        table,
        first,
        producer_id=producer,
        producer_epoch=0 if producer >= 0 else -1,
        base_sequence=0 if producer >= 0 else -1,
        is_transactional=producer >= 0,
    )
    return bytes(encoded.buffer.tobytes())


def index_error(action: Callable[[], Any]) -> type[Exception] | None:
    """The type of the error an index rejects ``action`` with (``None``: it succeeded)."""
    try:
        action()
    except (IndexFullError, InvalidOffsetError, IndexOffsetOverflowError, ValueError) as e:
        return type(e)
    return None


def check_bulk_append(
    one: IndexT,
    many: IndexT,
    pairs: list[tuple[int, int]],
    prefix: int,
    singles: Callable[[IndexT, list[tuple[int, int]]], None],
    bulk: Callable[[IndexT, np.ndarray, np.ndarray], None],
) -> bool | None:
    """Check an index's bulk append against its appends one by one, on two empty indexes of one size.

    Both get ``pairs[:prefix]`` one by one; then ``one`` gets the rest one by one and ``many`` in one
    ``bulk`` call. Asserts they fail alike; with no error the files are equal, else ``many`` has nothing
    beyond the prefix. Returns whether the rest was appended (None: the prefix itself is invalid).
    """
    head, rest = pairs[:prefix], pairs[prefix:]
    if index_error(lambda: singles(one, head)) is not None:
        return None
    singles(many, head)
    before = many.entries
    single = index_error(lambda: singles(one, rest))
    firsts = np.array([a for a, _ in rest], np.int64)
    seconds = np.array([b for _, b in rest], np.int64)
    assert index_error(lambda: bulk(many, firsts, seconds)) is single
    if single is None:
        assert many.path.read_bytes() == one.path.read_bytes()
        assert many.entries == one.entries
        return True
    assert many.entries == before
    assert many.path.read_bytes()[many.ENTRY_SIZE * before :] == bytes(many.ENTRY_SIZE * (many.max_entries - before))
    return False


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


_LOCK_HOLDER = """
import sys, time
from indexer.lock import FileLock
lock = FileLock(sys.argv[1], role=sys.argv[2] or None)
lock.acquire()
print("locked", flush=True)
time.sleep(float(sys.argv[3]))
released = time.monotonic()  # read before letting go: anyone who gets the lock gets it later
lock.release()
print("released", released, flush=True)
time.sleep(60)
"""


def start_lock_holder(path: Path, role: str = "", hold_s: float = 60.0) -> subprocess.Popen[str]:
    """A process holding the lock at ``path`` for ``hold_s`` seconds (then alive without it). Once it
    lets go it prints ``released <t>``: ``t``, its ``time.monotonic()`` (one clock for every process on
    Linux) just before it did, is earlier than any moment at which another process holds the lock."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _LOCK_HOLDER, str(path), role, str(hold_s)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "locked"
    return proc
