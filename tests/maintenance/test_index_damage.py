"""A damaged index entry never hides records (issue 10 item 1), and the index job and ``recover --dry-run`` see it.

One multi-segment partition is written once; each example copies it, damages one entry of one
index (offset, position or timestamp; ``.index`` or ``.timeindex``; any segment) and checks the
invariants against the model of what was appended: every read by offset and by timestamp
returns exactly the model's records, a read-only reader writes nothing, ``recover --dry-run``
and the ``index`` job report the damaged index (when the damage leaves an index no broker could
have written: :func:`kafka_could_write` is the brute-force model of that), and after the job
the engine's validator finds nothing wrong.
"""

from __future__ import annotations

import os
import random
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from indexer.checkpoint import OffsetCheckpointFile
from indexer.clock import MockClock
from indexer.file_names import RECOVERY_POINT_CHECKPOINT_FILE
from indexer.index_check import scan_headers, segment_index_problem
from indexer.log import Log
from indexer.records.file_records import BatchScan
from maintenance.access import BorrowedLogs
from maintenance.jobs import JOBS
from maintenance.recovery import recover_log_dir
from seglog.cli import main
from tests.budget import fuzz_settings
from tests.maintenance.conftest import START_MS, settings_for, small_config

CONFIG = small_config(segment_bytes=1500, index_interval_bytes=300, retention_ms=-1)
BATCHES = 40


@dataclass(frozen=True)
class Written:
    """The template partition and the model: offset -> (timestamp, value)."""

    directory: Path
    records: dict[int, tuple[int, bytes]]
    bases: list[int]


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Written:
    directory = tmp_path_factory.mktemp("template") / "t-0"
    clock = MockClock(START_MS)
    rng = random.Random(7)
    records: dict[int, tuple[int, bytes]] = {}
    log = Log.open(directory, CONFIG, clock=clock)
    for i in range(BATCHES):
        n = rng.randint(2, 4)
        stamps = [START_MS + 1000 * i + rng.randint(-1500, 1500) for _ in range(n)]
        values = [f"r{i}-{j}".encode() * 5 for j in range(n)]
        first = log.log_end_offset
        log.append({"value": values, "timestamp": stamps})
        records.update({first + j: (stamps[j], values[j]) for j in range(n)})
        clock.advance(1000)
    bases = [s.base_offset for s in log.segments.values()]
    log.close()
    assert len(bases) >= 4
    return Written(directory, records, bases)


def kafka_could_write(kind: str, entries: list[tuple[int, int]], scan: BatchScan, next_base: int | None) -> bool:
    """Whether ``entries`` (``(offset, position)`` or ``(timestamp, offset)``) is an index some broker
    writes for these batches: a scalar model of the validator's rules, one entry at a time."""
    positions = [int(p) for p in scan.positions]
    lasts = [int(o) for o in scan.last_offsets]
    limit = next_base if next_base is not None else 2**63
    for k, (a, b) in enumerate(entries):
        if kind == "index":
            offset, position = a, b
            if k and (offset <= entries[k - 1][0] or position <= entries[k - 1][1]):
                return False
            if position not in positions or offset >= limit:
                return False
            at = positions.index(position)
            following = entries[k + 1][1] if k + 1 < len(entries) else 2**63
            if not any(lasts[j] == offset and positions[j] < following for j in range(at, len(lasts))):
                return False
        else:
            timestamp, offset = a, b
            if k and (timestamp <= entries[k - 1][0] or offset < entries[k - 1][1]):
                return False
            holder = [j for j in range(len(lasts)) if int(scan.base_offsets[j]) <= offset <= lasts[j]]
            if offset >= limit or not holder or int(scan.max_timestamps[holder[0]]) != timestamp:
                return False
    return True


def read_entries(path: Path, kind: str, base: int) -> list[tuple[int, int]]:
    raw = path.read_bytes()
    if kind == "index":
        return [(base + r, p) for r, p in struct.iter_unpack(">ii", raw)]
    return [(t, base + r) for t, r in struct.iter_unpack(">qi", raw)]


def write_entries(path: Path, kind: str, base: int, entries: list[tuple[int, int]]) -> None:
    if kind == "index":
        path.write_bytes(b"".join(struct.pack(">ii", o - base, p) for o, p in entries))
    else:
        path.write_bytes(b"".join(struct.pack(">qi", t, o - base) for t, o in entries))


def snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir() if p.is_file() and not p.name.startswith(".")}


def check_reads(log: Log, model: dict[int, tuple[int, bytes]]) -> None:
    """Every read by offset (a few records from each offset) and by timestamp is the model's."""
    offsets = sorted(model)
    for start in offsets:
        table = log.read_records(start, 3)
        expected = offsets[offsets.index(start) : offsets.index(start) + 3]
        assert table.column("offset").to_pylist() == expected, start
        assert table.column("value").to_pylist() == [model[o][1] for o in expected], start
    for ts in sorted({t + d for t, _ in model.values() for d in (-1, 0, 1)}):
        hits = [o for o in offsets if model[o][0] >= ts]
        assert log.offset_for_timestamp(ts) == (hits[0] if hits else None), ts


@fuzz_settings(30, ci=12, soak=1000)
@given(data=st.data())
def test_a_damaged_index_entry_hides_nothing_and_is_reported(
    written: Written, tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    log_dir = tmp_path_factory.mktemp("damaged")
    directory = log_dir / written.directory.name
    shutil.copytree(written.directory, directory)
    i = data.draw(st.integers(0, len(written.bases) - 1), label="segment")
    base = written.bases[i]
    next_base = written.bases[i + 1] if i + 1 < len(written.bases) else None
    kind = data.draw(st.sampled_from(["index", "timeindex"]), label="kind")
    path = directory / f"{base:020d}.{kind}"
    entries = read_entries(path, kind, base)
    if not entries:
        return
    slot = data.draw(st.integers(0, len(entries) - 1), label="entry")
    field = data.draw(st.integers(0, 1), label="field (0: offset/timestamp, 1: position/offset)")
    delta = data.draw(st.integers(-300, 300).filter(bool), label="delta")
    entry = list(entries[slot])
    entry[field] += delta
    entries[slot] = (entry[0], entry[1])
    write_entries(path, kind, base, entries)
    scan = scan_headers(directory / f"{base:020d}.log")
    detectable = not kafka_could_write(kind, entries, scan, next_base)

    before = snapshot(directory)
    dry_run = recover_log_dir(log_dir, settings_for(CONFIG), dry_run=True, progress=False)
    if detectable:
        assert dry_run.partitions[0].indexes_rebuilt >= 1
    end = max(written.records) + 1
    with Log.open(directory, CONFIG, read_only=True, high_watermark=end, clock=MockClock(START_MS)) as reader:
        check_reads(reader, written.records)
    assert snapshot(directory) == before  # neither the dry run nor the read-only reader wrote

    if next_base is not None:  # the index job checks sealed segments
        report = JOBS["index"].fn(BorrowedLogs(log_dir, settings_for(CONFIG), clock=MockClock(START_MS)))
        if detectable:
            assert any(str(path) in finding for finding in report.findings), report
        assert segment_index_problem(directory, base, next_base_offset=next_base, against_log=True) is None
    with Log.open(directory, CONFIG, high_watermark=end, clock=MockClock(START_MS)) as writer:
        check_reads(writer, written.records)
    assert segment_index_problem(directory, base, next_base_offset=next_base, against_log=True) is None


def test_recover_from_the_recovery_point_rebuilds_a_damaged_index_below_it(
    written: Written, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Segments below the recovery point are not recovered, but their damaged indexes are rebuilt."""
    log_dir = tmp_path_factory.mktemp("below")
    directory = log_dir / written.directory.name
    shutil.copytree(written.directory, directory)
    base, next_base = written.bases[1], written.bases[2]
    path = directory / f"{base:020d}.index"
    entries = read_entries(path, "index", base)
    entries[0] = (entries[0][0], entries[0][1] + 100)  # the damage: a position moved by 100 bytes
    write_entries(path, "index", base, entries)
    end = max(written.records) + 1
    OffsetCheckpointFile(log_dir / RECOVERY_POINT_CHECKPOINT_FILE).write({("t", 0): end})
    assert segment_index_problem(directory, base, next_base_offset=next_base, against_log=True) is not None
    outcome = recover_log_dir(log_dir, settings_for(CONFIG), from_recovery_point=True, progress=False)
    assert [(p.status, p.segments_recovered, p.indexes_rebuilt) for p in outcome.partitions] == [("recovered", 1, 1)]
    assert segment_index_problem(directory, base, next_base_offset=next_base, against_log=True) is None


@pytest.mark.parametrize("command", [["maintain", "--once", "index"], ["recover", "--from-recovery-point"]])
def test_a_rebuilt_index_below_the_recovery_point_is_durable_before_it_is_reported(
    written: Written, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    """The ``index`` job and ``seglog recover --from-recovery-point`` rebuilt a damaged index below the
    recovery point into a new (empty) file renamed into place, wrote its entries and reported it
    repaired without an fsync of the file or of its directory: after a power loss it could be garbage
    again, and nothing recovers below the recovery point. Now every rebuild ends with both fsyncs
    (every fsync is recorded by path, then made for real)."""
    log_dir = tmp_path_factory.mktemp("durable")
    directory = log_dir / written.directory.name
    shutil.copytree(written.directory, directory)
    base = written.bases[1]
    path = directory / f"{base:020d}.index"
    entries = read_entries(path, "index", base)
    entries[0] = (entries[0][0], entries[0][1] + 100)
    write_entries(path, "index", base, entries)
    OffsetCheckpointFile(log_dir / RECOVERY_POINT_CHECKPOINT_FILE).write({("t", 0): max(written.records) + 1})
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
        real_replace(source, target)
        events.append(("replace", str(Path(target).absolute())))

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    keys = ("segment.bytes", "index.interval.bytes", "segment.index.bytes", "retention.ms")
    config = [f"--config={key}={CONFIG.to_dict()[key]}" for key in keys]
    assert main([command[0], "--log-dir", str(log_dir), *command[1:], *config]) == 0
    assert segment_index_problem(directory, base, next_base_offset=written.bases[2], against_log=True) is None
    for index in (path, path.with_suffix(".timeindex")):
        renamed = max(i for i, event in enumerate(events) if event == ("replace", str(index.absolute())))
        after = events[renamed + 1 :]
        assert ("fsync", str(index.absolute())) in after, (index, events)
        assert ("fsync", str(directory.absolute())) in after, (index, events)
