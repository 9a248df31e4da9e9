"""Corruption fuzzing of whole partition directories (indexer/log_loader.py end to end).

A pristine directory (written through ``Log``, or a copy of a broker-written vector) is damaged:
bit flips inside a batch's CRC-covered bytes, torn writes (a segment cut inside a batch), garbage
appended, zero-filled / missing / wrong-sized / garbage indexes, stray ``.deleted``, ``.cleaned`` and
``.swap`` files. Then it is loaded after an "unclean shutdown" with recovery point 0, and:

* the dry run (``check``) decided exactly what the load did;
* every batch before the first damaged byte is kept, byte for byte, and nothing at or after it;
* every byte left in every ``.log`` is a CRC-valid batch;
* the indexes agree with the log: offset-index entries sit at batch starts, carry that batch's last
  offset and strictly increase; time-index timestamps strictly increase and name batch last offsets;
* every kept record reads back through ``Log`` (offsets, keys, values).

Bytes 0-20 of a v2 batch header (base offset, length, leader epoch, magic, the CRC itself) are not
covered by the CRC; Kafka cannot see a flip of the base offset or leader epoch either, so flips are
aimed at bytes 21.. of a batch (the length and magic fields are damaged by the torn/garbage cases).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from indexer import file_names
from indexer.clock import MockClock
from indexer.config import LogConfig
from indexer.log import Log
from indexer.log_loader import LogLoader, RecoveryReport
from indexer.records.decoder import decode_records
from tests.budget import scaled
from tests.indexer.helpers import Batch, log_batches, segment_batches

# Kafka's truncation (recovery.strategy=truncate); salvage, the default, is tested in test_salvage.py.
CONFIG = LogConfig(segment_bytes=1500, index_interval_bytes=200, file_delete_delay_ms=0, recovery_strategy="truncate")
FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
FEW = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
SLOW = settings(
    max_examples=scaled(300, ci=100, soak=5000),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@dataclass(frozen=True)
class Pristine:
    directory: Path
    segments: list[str]
    batches: list[Batch]
    config: LogConfig


def describe(directory: Path, config: LogConfig) -> Pristine:
    segments = sorted(p.name for p in directory.glob("*.log"))
    return Pristine(directory, segments, log_batches(directory), config)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Pristine:
    directory = tmp_path_factory.mktemp("pristine") / "t-0"
    log = Log.open(directory, CONFIG, clock=MockClock())
    rng = np.random.default_rng(7)
    for i in range(40):
        rows = int(rng.integers(1, 6))
        log.append(
            {
                "key": [f"k{i}.{j}".encode() for j in range(rows)],
                "value": [bytes(rng.integers(0, 256, int(rng.integers(0, 90)), dtype=np.uint8)) for _ in range(rows)],
                "timestamp": [1_700_000_000_000 + 1000 * i + j for j in range(rows)],
            },
            compression="gzip" if i % 7 == 3 else None,
        )
    log.close()
    (directory / file_names.PARTITION_LOCK_FILE).unlink()
    pristine = describe(directory, CONFIG)
    assert len(pristine.segments) >= 4
    return pristine


@pytest.fixture(scope="module", params=["mixed-codecs-epochs/lsx1-0", "multi-segment-3x/invoice-2"])
def vector(vectors_dir: Path, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Pristine:
    """A broker-written partition: one gzip/plain segment with leader epochs, or four ~1 MB segments."""
    source = vectors_dir / request.param
    directory = tmp_path_factory.mktemp("vector") / source.name
    shutil.copytree(source, directory)
    for path in [directory, *directory.iterdir()]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return describe(directory, LogConfig(recovery_strategy="truncate"))


# -- damage ------------------------------------------------------------------------------------

LOG_DAMAGE = ("none", "bitflip", "torn", "garbage")
SIDE_DAMAGE = (
    "zero-tail-index", "missing-index", "missing-timeindex", "odd-size-index", "garbage-index",
    "garbage-timeindex", "stray-deleted", "incomplete-split", "completed-swap",
)  # fmt: skip


@st.composite
def damages(draw: st.DrawFn, pristine: Pristine) -> tuple[tuple, list[tuple]]:
    kind = draw(st.sampled_from(LOG_DAMAGE))
    batch = draw(st.integers(0, len(pristine.batches) - 1))
    b = pristine.batches[batch]
    if kind == "bitflip":
        log_damage: tuple = (
            kind,
            b.segment,
            draw(st.integers(b.position + 21, b.position + b.size - 1)),
            draw(st.integers(0, 7)),
        )
    elif kind == "torn":
        log_damage = (kind, b.segment, draw(st.integers(b.position + 1, b.position + b.size - 1)))
    elif kind == "garbage":
        log_damage = (kind, b.segment, draw(st.binary(min_size=1, max_size=200)))
    else:
        log_damage = (kind,)
    side = draw(
        st.lists(
            st.tuples(st.sampled_from(SIDE_DAMAGE), st.sampled_from(pristine.segments), st.binary(max_size=40)),
            max_size=3,
        )
    )
    return log_damage, side


def apply(directory: Path, log_damage: tuple, side: list[tuple]) -> tuple[str, int] | None:
    """Damage ``directory``; returns the first damaged byte as (segment name, position), or None."""
    cut: tuple[str, int] | None = None
    if log_damage[0] == "bitflip":
        _, name, position, bit = log_damage
        data = bytearray((directory / name).read_bytes())
        data[position] ^= 1 << bit
        (directory / name).write_bytes(bytes(data))
        cut = (name, position)
    elif log_damage[0] == "torn":
        _, name, position = log_damage
        with (directory / name).open("r+b") as f:
            f.truncate(position)
        cut = (name, position)
    elif log_damage[0] == "garbage":
        _, name, junk = log_damage
        size = (directory / name).stat().st_size
        with (directory / name).open("ab") as f:
            f.write(junk)
        cut = (name, size)
    swapped = False
    for kind, segment, junk in side:
        base = file_names.offset_from_file_name(segment)
        index = file_names.offset_index_file(directory, base)
        time_index = file_names.time_index_file(directory, base)
        if kind == "zero-tail-index":
            with index.open("ab") as f:
                f.write(b"\0" * 8 * (1 + len(junk) % 4))
        elif kind == "missing-index":
            index.unlink(missing_ok=True)
        elif kind == "missing-timeindex":
            time_index.unlink(missing_ok=True)
        elif kind == "odd-size-index":
            with index.open("ab") as f:
                f.write(b"\1" * (1 + len(junk) % 7))
        elif kind == "garbage-index":
            index.write_bytes(junk[: len(junk) // 8 * 8])
        elif kind == "garbage-timeindex":
            time_index.write_bytes(junk[: len(junk) // 12 * 12])
        elif kind == "stray-deleted":
            (directory / f"{segment}.deleted").write_bytes(junk)
        elif kind == "incomplete-split":  # a split that crashed before all its .cleaned files became .swap
            (directory / f"{base:020d}.log.cleaned").write_bytes(junk)
            (directory / f"{base + 1:020d}.log.swap").write_bytes(junk)
        elif kind == "completed-swap" and not swapped and (directory / segment).exists():
            # A crash after a clean/split renamed its output .swap. One operation at a time, replacing one
            # contiguous range: two swaps with a segment between them would delete that segment (as Kafka).
            swapped = True
            for path in (directory / segment, index, time_index):
                if path.exists():
                    shutil.copy(path, str(path) + ".swap")
    return cut


# -- checks ------------------------------------------------------------------------------------


def decisions(report: RecoveryReport) -> list[tuple]:
    return [(s.kind, Path(s.path).name, s.bytes_truncated, s.batches_dropped, s.segment_bytes) for s in report.steps]


def expected_batches(pristine: Pristine, cut: tuple[str, int] | None) -> list[Batch]:
    if cut is None:
        return list(pristine.batches)
    name, position = cut
    return [b for b in pristine.batches if b.segment < name or (b.segment == name and b.position + b.size <= position)]


def check_indexes(directory: Path, name: str, batches: list[Batch]) -> None:
    base = file_names.offset_from_file_name(name)
    by_position = {b.position: b.last_offset for b in batches}
    lasts = {b.last_offset for b in batches}
    raw = file_names.offset_index_file(directory, base).read_bytes()
    entries = np.frombuffer(raw, dtype=[("rel", ">i4"), ("pos", ">i4")])
    offsets = entries["rel"].astype(np.int64) + base
    assert np.all(np.diff(offsets) > 0), f"{name}: offset index not increasing"
    for offset, position in zip(offsets.tolist(), entries["pos"].tolist(), strict=True):
        assert by_position.get(position) == offset, f"{name}: entry ({offset}, {position}) is not a batch start"
    raw = file_names.time_index_file(directory, base).read_bytes()
    entries = np.frombuffer(raw, dtype=[("ts", ">i8"), ("rel", ">i4")])
    assert np.all(np.diff(entries["ts"].astype(np.int64)) > 0), f"{name}: time index not increasing"
    assert set((entries["rel"].astype(np.int64) + base).tolist()) <= lasts, f"{name}: time index offsets"


def records_of(batches: list[Batch]) -> pa.Table:
    tables = [decode_records(b.raw) for b in batches]
    table = pa.concat_tables(tables) if tables else decode_records(b"")
    return table.select(["offset", "key", "value"])


def run_case(pristine: Pristine, workdir: Path, log_damage: tuple, side: list[tuple]) -> None:
    directory = workdir / pristine.directory.name
    shutil.rmtree(directory, ignore_errors=True)
    shutil.copytree(pristine.directory, directory)
    cut = apply(directory, log_damage, side)
    kwargs = {"recovery_point": 0, "had_clean_shutdown": False}
    planned = LogLoader(directory, pristine.config, clock=MockClock(), **kwargs).check()
    clock = MockClock()
    loaded = LogLoader(directory, pristine.config, clock=clock, **kwargs).load()
    for segment in loaded.segments:
        segment.close()
    clock.advance(pristine.config.file_delete_delay_ms)
    assert decisions(planned) == decisions(loaded.report)
    assert planned.next_offset == loaded.next_offset

    expected = expected_batches(pristine, cut)
    kept: list[Batch] = []
    for path in sorted(directory.glob("*.log")):
        batches = segment_batches(path)
        check_indexes(directory, path.name, batches)
        kept.extend(batches)
    assert [(b.segment, b.position, b.raw) for b in kept] == [(b.segment, b.position, b.raw) for b in expected]
    if expected:
        assert loaded.next_offset == expected[-1].last_offset + 1
    if len(expected) < len(pristine.batches):
        assert loaded.report.data_lost
    if cut is None:
        assert not loaded.report.data_lost

    log = Log.open(directory, pristine.config, read_only=True, clock=MockClock())
    try:
        read = log.read_records(log.log_start_offset, max_offset=log.log_end_offset).select(["offset", "key", "value"])
    finally:
        log.close()
    assert read.equals(records_of(expected))


@FAST
@given(data=st.data())
def test_recovery_keeps_exactly_the_undamaged_prefix(written: Pristine, tmp_path: Path, data: st.DataObject) -> None:
    run_case(written, tmp_path, *data.draw(damages(written)))


@FEW
@given(data=st.data())
def test_recovery_of_a_damaged_broker_vector(vector: Pristine, tmp_path: Path, data: st.DataObject) -> None:
    run_case(vector, tmp_path, *data.draw(damages(vector)))


@pytest.mark.slow
@pytest.mark.timeout(600)
@SLOW
@given(data=st.data())
def test_recovery_keeps_exactly_the_undamaged_prefix_long(
    written: Pristine, tmp_path: Path, data: st.DataObject
) -> None:
    run_case(written, tmp_path, *data.draw(damages(written)))


@pytest.mark.parametrize(
    "log_damage",
    [("bitflip", 1, 30, 0), ("torn", 2, 5), ("garbage", 3, b"\xff" * 13)],
)
def test_each_kind_of_damage_in_a_middle_segment(written: Pristine, tmp_path: Path, log_damage: tuple) -> None:
    """The same property on fixed examples, each damaging a segment that has later ones to lose."""
    kind, segment_index, *rest = log_damage
    name = written.segments[segment_index]
    first = next(b for b in written.batches if b.segment == name)
    if kind == "garbage":
        damage = (kind, name, rest[0])
    else:
        damage = (kind, name, first.position + rest[0], *rest[1:])
    run_case(written, tmp_path, damage, [("missing-index", written.segments[-1], b"")])
