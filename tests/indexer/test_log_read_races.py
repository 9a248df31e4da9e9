"""Reads racing retention: a read never skips offsets (Kafka's contract for a concurrent deletion).

A read of an offset below the new log start offset raises OffsetOutOfRangeError; a read of an offset
that exists returns it. The tests run the writer's retention (and, harder, the physical deletion of
the files) at every step of a read in turn, deterministically: each public step the read takes on
the segment map or on a segment is counted, and the deletion runs inside the k-th step, for every k.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from indexer.clock import MockClock
from indexer.config import LogConfig
from indexer.errors import OffsetOutOfRangeError
from indexer.log import Log
from indexer.records.file_records import FileRecords
from indexer.segment import LogSegment
from indexer.segments import LogSegments
from indexer.transaction_index import AbortedTxn

T0 = 1_700_000_000_000
RECORDS_PER_BATCH = 4
BATCHES = 24  # 96 records, 4 batches (16 records) per segment: 6 segments
CONFIG = {"segment.bytes": 4 * 130, "index.interval.bytes": 1, "file.delete.delay.ms": 60_000, "retention.ms": -1}

# The steps a read takes, where the deletion is injected. Methods of the segment map (lookups) and
# of a segment (reads); FileRecords.read is the lowest: a deletion can land between two chunks.
STEPS: list[tuple[type, str]] = [
    (LogSegments, "floor_segment"),
    (LogSegments, "higher_segment"),
    (LogSegments, "higher_segments"),
    (LogSegments, "next_segment"),
    (LogSegments, "values"),
    (LogSegments, "get"),
    (LogSegment, "translate_offset"),
    (LogSegment, "read"),
    (LogSegment, "find_offset_by_timestamp"),
    (FileRecords, "read"),
]


def build_log(directory: Path, clock: MockClock) -> Log:
    log = Log.open(directory, LogConfig.from_mapping(CONFIG), clock=clock)
    for b in range(BATCHES):
        first = b * RECORDS_PER_BATCH
        log.append(
            {
                "value": [b"v" * 40] * RECORDS_PER_BATCH,
                "timestamp": [T0 + 1000 * (first + i) for i in range(RECORDS_PER_BATCH)],
            }
        )
    log.update_high_watermark(log.log_end_offset)
    assert log.num_segments >= 5
    return log


@contextlib.contextmanager
def deletion_at_step(k: int, delete: Callable[[], None]) -> Iterator[list[int]]:
    """Run ``delete()`` inside the ``k``-th step (see STEPS) taken while the block runs.

    Yields a one-element list holding the number of steps taken so far.
    """
    taken = [0]
    busy = [False]
    originals: list[tuple[type, str, Any]] = []

    def wrap(original: Any) -> Any:
        def step(*args: Any, **kwargs: Any) -> Any:
            if busy[0]:
                return original(*args, **kwargs)
            taken[0] += 1
            if taken[0] == k:
                busy[0] = True
                try:
                    delete()
                finally:
                    busy[0] = False
            return original(*args, **kwargs)

        return step

    for owner, name in STEPS:
        original = owner.__dict__.get(name)
        if original is None:
            continue
        originals.append((owner, name, original))
        setattr(owner, name, wrap(original))
    try:
        yield taken
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)


def retention_to(log: Log, offset: int, *, delete_files: bool) -> Callable[[], None]:
    """The writer: DeleteRecords up to ``offset``, retention of the segments below it, and (with
    ``delete_files``) the physical deletion of their files as if ``file.delete.delay.ms`` passed."""

    def delete() -> None:
        log.maybe_increment_log_start_offset(offset)
        assert log.apply_retention()
        if delete_files:
            log.delete_pending_files(now_ms=log.clock.milliseconds() + 10**9)

    return delete


def each_interleaving(
    tmp_path: Path, read: Callable[[Log, int], None], *, delete_files: bool, deleted_segments: int
) -> int:
    """Run ``read(log, start)`` with the deletion injected at step 1, 2, ... until the read ends
    before reaching the step; returns how many interleavings were run."""
    k = 0
    while True:
        k += 1
        clock = MockClock(T0 + 10**7)
        log = build_log(tmp_path / f"t{k}" / "t-0", clock)
        try:
            start = log.log_start_offset
            new_start = log.segments.values()[deleted_segments].base_offset
            with deletion_at_step(k, retention_to(log, new_start, delete_files=delete_files)) as taken:
                read(log, start)
            if taken[0] < k:
                return k - 1
        finally:
            log.close()


def offsets_read(log: Log, start: int, max_records: int) -> list[int] | None:
    """The offsets ``read_records`` returns, or None for OffsetOutOfRangeError."""
    try:
        table = log.read_records(start, max_records=max_records)
    except OffsetOutOfRangeError:
        assert start < log.log_start_offset
        return None
    return table.column("offset").to_pylist()


@pytest.mark.parametrize("delete_files", [False, True], ids=["renamed", "files-deleted"])
@pytest.mark.parametrize("max_records", [5, 40], ids=["within-a-segment", "across-segments"])
def test_read_records_racing_retention_never_skips_offsets(
    tmp_path: Path, delete_files: bool, max_records: int
) -> None:
    """The flaky stress failure "read from 45 returned [69, 70, ...]", made deterministic: the
    deletion lands between the read's start check and its segment walk (and at every other step)."""
    outcomes: list[str] = []

    def read(log: Log, start: int) -> None:
        offsets = offsets_read(log, start, max_records)
        if offsets is None:
            outcomes.append("out of range")
            return
        assert offsets, f"read from {start} returned nothing though the offset existed when asked"
        assert offsets == list(range(start, start + len(offsets))), f"read from {start} returned {offsets[:5]}..."
        outcomes.append("read")

    steps = each_interleaving(tmp_path, read, delete_files=delete_files, deleted_segments=2)
    assert steps >= 4
    assert "out of range" in outcomes and "read" in outcomes


@pytest.mark.parametrize("delete_files", [False, True], ids=["renamed", "files-deleted"])
def test_fetch_racing_retention_returns_the_offset_or_out_of_range(tmp_path: Path, delete_files: bool) -> None:
    """``Log.read`` (a consumer fetch): the first batch returned holds the offset asked for."""

    def read(log: Log, start: int) -> None:
        try:
            fetched = log.read(start, 10_000)
        except OffsetOutOfRangeError:
            assert start < log.log_start_offset
            return
        assert fetched.records, f"fetch from {start} returned nothing"
        base = int.from_bytes(fetched.records[:8], "big")
        last_delta = int.from_bytes(fetched.records[23:27], "big")
        assert base <= start <= base + last_delta, f"fetch from {start} returned the batch {base}"

    assert each_interleaving(tmp_path, read, delete_files=delete_files, deleted_segments=2) >= 3


@pytest.mark.parametrize("delete_files", [False, True], ids=["renamed", "files-deleted"])
def test_offset_for_timestamp_racing_retention_never_answers_below_the_log_start(
    tmp_path: Path, delete_files: bool
) -> None:
    """The answer is the earliest offset at or after the log start offset the search ended with."""

    def read(log: Log, start: int) -> None:
        target = start + 3  # timestamps rise with offsets: T0 + 1000 * offset
        found = log.offset_for_timestamp(T0 + 1000 * target)
        assert found == max(target, log.log_start_offset)

    assert each_interleaving(tmp_path, read, delete_files=delete_files, deleted_segments=1) >= 3


def test_read_only_reader_beside_a_writer_whose_retention_deletes(tmp_path: Path) -> None:
    """A read-only log (another process's view: no lock, the files as they were when opened) keeps
    reading the segments it opened when the writer renames and deletes their files."""
    outcomes: list[str] = []

    def read(writer: Log, start: int) -> None:
        with Log.open(writer.directory, writer.config, read_only=True) as reader:
            offsets = offsets_read(reader, start, 40)
        assert offsets is not None and offsets == list(range(start, start + 40))
        outcomes.append("read")

    steps = each_interleaving(tmp_path, read, delete_files=True, deleted_segments=2)
    assert steps >= 4 and len(outcomes) == steps + 1


@pytest.mark.parametrize("delete_files", [False, True], ids=["renamed", "files-deleted"])
def test_read_only_open_beside_a_writer_whose_retention_deletes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, delete_files: bool
) -> None:
    """Retention runs after the read-only open listed the directory, before it opened the first
    segment: the open lists again and sees the log as the writer left it (no error, no hole)."""
    clock = MockClock(T0 + 10**7)
    writer = build_log(tmp_path / "t-0", clock)
    try:
        bases = [s.base_offset for s in writer.segments]
        open_segment = LogSegment.open.__func__  # type: ignore[attr-defined]
        delete = retention_to(writer, bases[2], delete_files=delete_files)
        pending = [delete]

        def racing_open(cls: type[LogSegment], *args: Any, **kwargs: Any) -> LogSegment:
            if kwargs.get("read_only") and pending:
                pending.pop()()
            return open_segment(cls, *args, **kwargs)

        monkeypatch.setattr(LogSegment, "open", classmethod(racing_open))
        with Log.open(writer.directory, writer.config, read_only=True) as reader:
            assert [s.base_offset for s in reader.segments] == bases[2:]
            assert reader.log_start_offset == bases[2]
            with pytest.raises(OffsetOutOfRangeError):
                reader.read_records(bases[0])
            offsets = reader.read_records(bases[2], max_records=40).column("offset").to_pylist()
            assert offsets == list(range(bases[2], bases[2] + 40))
        assert not pending
    finally:
        writer.close()


def test_aborted_transactions_racing_retention_are_all_found_or_out_of_range(tmp_path: Path) -> None:
    """A read_committed fetch's aborted transactions: a marker missed in a segment removed meanwhile
    would pass aborted records as committed. Each segment's .txnindex lists one transaction."""
    k = 0
    while True:
        k += 1
        log = Log.open(tmp_path / f"t{k}" / "t-0", LogConfig.from_mapping({"retention.ms": -1}), clock=MockClock(T0))
        try:
            txns = []
            for base in (0, 10, 20):
                if base:
                    log.roll()
                log.append({"value": [b"v"] * 10})
                txn = AbortedTxn(base + 1, base + 1, base + 8, base)  # LSO below 10: never complete early
                log.active_segment.txn_index.append(txn)
                txns.append(txn)
            log.update_high_watermark(log.log_end_offset)
            with deletion_at_step(k, retention_to(log, 20, delete_files=False)) as taken:
                try:
                    assert log.collect_aborted_transactions(0, 30) == txns
                except OffsetOutOfRangeError:
                    assert log.log_start_offset == 20
            if taken[0] < k:
                break
        finally:
            log.close()
    assert k > 2


@contextlib.contextmanager
def descriptor_reused_at_pread(k: int, delete: Callable[[], None], junk: Path) -> Iterator[list[int]]:
    """Run ``delete()`` inside the ``k``-th ``os.pread`` while the block runs, after the read took its
    descriptor, then open ``junk`` until the descriptor's number is a descriptor of ``junk``: the
    pread then reads another file, as when a segment's deletion closes it under a read in flight.

    Yields a one-element list holding the number of preads so far.
    """
    real_pread = os.pread
    taken = [0]
    opened: list[int] = []

    def pread(fd: int, size: int, position: int) -> bytes:
        taken[0] += 1
        if taken[0] == k:
            delete()
            while not opened or opened[-1] < fd:
                opened.append(os.open(junk, os.O_RDONLY))
        return real_pread(fd, size, position)

    os.pread = pread
    try:
        yield taken
    finally:
        os.pread = real_pread
        for fd in opened:
            os.close(fd)


@pytest.mark.parametrize("fetch", [False, True], ids=["read_records", "fetch"])
def test_a_read_whose_descriptor_goes_to_another_file_never_returns_its_bytes(tmp_path: Path, fetch: bool) -> None:
    """The deletion of a segment's files closes its descriptor between a read taking it and reading
    through it, and the number goes to the next file opened: the read gives the offset asked for or
    OffsetOutOfRangeError, never the other file's bytes (which read as damage: "not a whole batch")."""
    junk = tmp_path / "junk"
    junk.write_bytes(b"\xff" * 4096)
    outcomes: set[str] = set()
    k = 0
    while True:
        k += 1
        log = build_log(tmp_path / f"t{k}" / "t-0", MockClock(T0 + 10**7))
        try:
            start = log.log_start_offset
            delete = retention_to(log, log.segments.values()[2].base_offset, delete_files=True)
            with descriptor_reused_at_pread(k, delete, junk) as taken:
                try:
                    if fetch:
                        records = log.read(start, 10_000).records
                        assert isinstance(records, bytes)
                        offsets = [int.from_bytes(records[:8], "big")]
                    else:
                        offsets = log.read_records(start, max_records=40).column("offset").to_pylist()
                    assert offsets and offsets[0] == start
                    assert offsets == list(range(start, start + len(offsets)))
                    outcomes.add("read")
                except OffsetOutOfRangeError:
                    assert start < log.log_start_offset
                    outcomes.add("out of range")
            if taken[0] < k:
                break
        finally:
            log.close()
    assert k > 2 and outcomes == {"read", "out of range"}
