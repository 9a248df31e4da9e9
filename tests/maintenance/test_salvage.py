"""Salvage through ``seglog recover``: random damage anywhere in a multi-segment log.

A model knows every batch the log held. Random damage (bit flips, zeroed ranges, garbage) hits
random places; a batch is damaged when a byte of it changed, except in its partition leader epoch
(bytes 12-15: neither covered by the CRC nor used by anyone). After ``seglog recover``:

* every batch that is not damaged is kept, byte for byte and in order; nothing else is in a ``.log``,
  and every ``.log`` byte is a CRC-valid batch;
* the quarantine files hold exactly the removed bytes: per segment, the byte ranges of the damaged
  file outside the kept batches, each in the file named after its position;
* the report's lost offsets are exactly the damaged batches' offsets, merged into ranges, all
  committed (the high watermark was the log end), and the exit status says so (3); the dry run
  reported the same offsets and quarantine files and wrote nothing;
* ``seglog read`` returns exactly the kept records, and a second ``seglog recover`` finds nothing.

Where only a batch's base offset changed (outside the CRC) and nothing around it contradicts the
new value (e.g. the last batch of the log), no reader can tell: there the test checks only that
every intact batch is kept and that nothing but that batch joined them.
"""

from __future__ import annotations

import base64
import json
import os
import random
import re
import shutil
import signal
import subprocess
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from indexer import file_names, salvage
from indexer.checkpoint import OffsetCheckpointFile
from indexer.clock import MockClock
from indexer.commit_log import SinkCommit, SinkCommitLog
from indexer.config import Settings
from indexer.data_loss import read_accepted_losses
from indexer.errors import StorageError
from indexer.log import Log
from indexer.log_manager import LogManager
from indexer.records.batch_header import RECORD_BATCH_OVERHEAD
from indexer.records.file_records import FileRecords
from maintenance.recovery import EXIT_COMMITTED_DATA_LOST
from seglog.cli import main
from tests.budget import fuzz_settings, scaled
from tests.cli import append_file, maintain_once, read_records
from tests.indexer.helpers import Batch, log_batches
from tests.kafka_python import DefaultRecordBatch, MemoryRecords
from tests.maintenance.conftest import REPO, SEGLOG, settings_for, small_config

TOPIC = "t"
PARTITION_DIR = f"{TOPIC}-0"
EPOCH = range(12, 16)  # partitionLeaderEpoch: outside the CRC, read by nobody


@dataclass(frozen=True)
class Template:
    log_dir: Path
    segments: list[str]
    batches: list[Batch]
    values: dict[int, bytes]  # offset -> value
    sizes: dict[str, int]  # segment -> .log size


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Template:
    """One partition of ~6 segments of batches of 1-5 records, every offset committed."""
    log_dir = tmp_path_factory.mktemp("salvage") / "logs"
    rng = np.random.default_rng(11)
    values: dict[int, bytes] = {}
    settings = settings_for(small_config(segment_bytes=2000))
    with LogManager(log_dir, settings, clock=MockClock(1_700_000_000_000)) as manager:
        log = manager.get_or_create_log(TOPIC, 0)
        for _ in range(48):
            rows = [
                bytes(rng.integers(0, 256, int(rng.integers(10, 120)), dtype=np.uint8))
                for _ in range(int(rng.integers(1, 6)))
            ]
            info = log.append({"value": rows})
            values.update(zip(range(info.first_offset, info.last_offset + 1), rows, strict=True))
        log.update_high_watermark(log.log_end_offset)
    partition = log_dir / PARTITION_DIR
    segments = sorted(p.name for p in partition.glob("*.log"))
    assert len(segments) >= 4
    sizes = {name: (partition / name).stat().st_size for name in segments}
    return Template(log_dir, segments, log_batches(partition), values, sizes)


@st.composite
def damages(draw: st.DrawFn, template: Template) -> list[tuple[str, int, bytes]]:
    """1-3 damages: ``(segment, position, new bytes)``."""
    out = []
    for _ in range(draw(st.integers(1, 3))):
        segment = draw(st.sampled_from(template.segments))
        size = template.sizes[segment]
        length = draw(st.integers(1, 64))
        position = draw(st.integers(0, size - 1))
        length = min(length, size - position)
        kind = draw(st.sampled_from(["bitflip", "zero", "garbage"]))
        if kind == "garbage":
            data = draw(st.binary(min_size=length, max_size=length))
        elif kind == "zero":
            data = bytes(length)
        else:  # the same bit flipped in every byte of the range
            data = bytes([1 << draw(st.integers(0, 7))]) * length
        out.append((kind + ":" + segment, position, data))
    return out


def _apply(partition: Path, damage: list[tuple[str, int, bytes]]) -> dict[str, bytes]:
    """Damage the files; return each segment's damaged bytes."""
    damaged: dict[str, bytes] = {}
    for tag, position, data in damage:
        kind, segment = tag.split(":")
        path = partition / segment
        raw = bytearray(path.read_bytes())
        for i, b in enumerate(data):
            raw[position + i] = raw[position + i] ^ b if kind == "bitflip" else b
        path.write_bytes(bytes(raw))
    for path in partition.glob("*.log"):
        damaged[path.name] = path.read_bytes()
    return damaged


def _is_damaged(batch: Batch, now: bytes) -> bool:
    changed = np.flatnonzero(
        np.frombuffer(batch.raw, dtype=np.uint8)
        != np.frombuffer(now[batch.position : batch.position + batch.size], dtype=np.uint8)
    )
    return bool(np.any(~np.isin(changed, EPOCH)))


def _base_offset_only(batch: Batch, now: bytes) -> bool:
    """Whether the only bytes of ``batch`` that changed are in its base offset (and leader epoch)."""
    changed = np.flatnonzero(np.frombuffer(batch.raw, dtype=np.uint8) != np.frombuffer(now, dtype=np.uint8))
    return bool(changed.size and np.all(np.isin(changed, [*range(8), *EPOCH])) and np.any(changed < 8))


def _ranges(offsets: list[int]) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for o in offsets:
        if out and out[-1]["last"] == o - 1:
            out[-1]["last"] = o
        else:
            out.append({"first": o, "last": o, "committed": True})
    return out


def _removed(batches: list[Batch], size: int) -> list[tuple[int, int]]:
    out, position = [], 0
    for b in batches:
        if b.position > position:
            out.append((position, b.position - position))
        position = b.position + b.size
    if position < size:
        out.append((position, size - position))
    return out


def _recover(log_dir: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, object]]:
    status = main(["recover", "--log-dir", str(log_dir), "--json", "--no-progress"])
    return status, json.loads(capsys.readouterr().out)


@fuzz_settings(30, ci=15, soak=1000)
@given(data=st.data())
def test_salvage_keeps_every_undamaged_batch(
    template: Template,
    tmp_path_factory: pytest.TempPathFactory,
    capsys: pytest.CaptureFixture[str],
    data: st.DataObject,
) -> None:
    log_dir = tmp_path_factory.mktemp("trial") / "logs"
    shutil.copytree(template.log_dir, log_dir)
    partition = log_dir / PARTITION_DIR
    damaged = _apply(partition, data.draw(damages(template)))
    intact = [b for b in template.batches if not _is_damaged(b, damaged[b.segment])]
    lost = [o for b in template.batches if b not in intact for o in range(b.base_offset, b.last_offset + 1)]

    before = {p.name: p.read_bytes() for p in partition.iterdir()}
    assert main(["recover", "--log-dir", str(log_dir), "--dry-run", "--json", "--no-progress"]) in (0, 3)
    planned = json.loads(capsys.readouterr().out)["partitions"][0]
    assert {p.name: p.read_bytes() for p in partition.iterdir()} == before  # a dry run writes nothing

    status, report = _recover(log_dir, capsys)

    [result] = report["partitions"]  # type: ignore[index]
    assert planned["lost_offsets"] == result["lost_offsets"]
    assert sorted(planned["quarantined"]) == sorted(result["quarantined"])
    after = log_batches(partition)  # every .log byte a CRC-valid batch
    now = {b: damaged[b.segment][b.position : b.position + b.size] for b in template.batches}
    if any(_base_offset_only(b, now[b]) for b in template.batches):
        # A base offset (outside the CRC) damaged where no neighbour contradicts it cannot be told
        # from a true one (docs/recovery.md): every intact batch is kept, nothing else but that batch.
        kept = [(b.segment, b.raw) for b in after]
        assert [k for k in kept if k in {(b.segment, now[b]) for b in intact}] == [(b.segment, now[b]) for b in intact]
        assert set(kept) <= {(b.segment, now[b]) for b in template.batches}
        return
    assert result["lost_offsets"] == _ranges(lost), result["steps"]
    assert status == (EXIT_COMMITTED_DATA_LOST if lost else 0)
    # byte for byte as on disk before recovery (a flipped leader epoch is no damage)
    assert [(b.segment, b.raw) for b in after] == [
        (b.segment, damaged[b.segment][b.position : b.position + b.size]) for b in intact
    ]
    expected_quarantine = {}
    for segment in template.segments:
        kept = [b for b in intact if b.segment == segment]
        raw = damaged[segment]
        if raw != b"".join(b.raw for b in kept):
            for position, length in _removed(kept, len(raw)):
                expected_quarantine[f"{segment}.{position}{file_names.QUARANTINE_FILE_SUFFIX}"] = raw[
                    position : position + length
                ]
    found = {p.name: p.read_bytes() for p in partition.iterdir() if file_names.is_quarantine_file(p)}
    assert found == expected_quarantine
    assert sorted(result["quarantined"]) == sorted(expected_quarantine)  # type: ignore[index]

    records = read_records(capsys, log_dir, TOPIC, "--from-beginning", "--encoding", "base64")
    expected = [o for b in intact for o in range(b.base_offset, b.last_offset + 1)]
    assert [r["offset"] for r in records] == expected
    assert all(base64.b64decode(r["value"]) == template.values[r["offset"]] for r in records)

    # A loss not accepted is not forgotten: a log that now ends below its committed offset is reported
    # again (a gap inside the log is not; its bytes are in quarantine), and nothing more is removed.
    end, committed = result["log_end_offset"], result["committed_offset"]  # type: ignore[index]
    still_lost = [{"first": end, "last": committed - 1, "committed": True}] if end < committed else []
    status, again = _recover(log_dir, capsys)
    assert again["partitions"][0]["lost_offsets"] == still_lost  # type: ignore[index]
    assert status == (EXIT_COMMITTED_DATA_LOST if still_lost else 0)
    assert {p.name: p.read_bytes() for p in partition.iterdir() if file_names.is_quarantine_file(p)} == found


@fuzz_settings(30, ci=15, soak=1000)
@given(data=st.data())
def test_the_windowed_search_plans_what_one_window_over_the_whole_file_plans(
    template: Template,
    tmp_path_factory: pytest.TempPathFactory,
    data: st.DataObject,
) -> None:
    """``plan_salvage`` reads the file in windows of ``SEARCH_WINDOW_BYTES``: with any window (down
    to one batch header, batches and candidates straddling windows) and any damage, it plans
    exactly what one window holding the whole file plans."""
    log_dir = tmp_path_factory.mktemp("window") / "logs"
    shutil.copytree(template.log_dir, log_dir)
    partition = log_dir / PARTITION_DIR
    _apply(partition, data.draw(damages(template)))
    window = data.draw(st.integers(RECORD_BATCH_OVERHEAD, 400))
    bases = [int(name.split(".")[0]) for name in template.segments]
    for base, next_base in zip(bases, [*bases[1:], None], strict=True):
        with FileRecords.open(file_names.log_file(partition, base), mutable=False) as records:
            scan = records.scan()
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(salvage, "SEARCH_WINDOW_BYTES", 1 << 40)
                whole = salvage.plan_salvage(records, base, next_base, scan)
                patch.setattr(salvage, "SEARCH_WINDOW_BYTES", window)
                read = salvage.plan_salvage(records, base, next_base, scan)
        assert (read.size, read.removed, read.lost) == (whole.size, whole.removed, whole.lost)
        assert read.kept.positions.tolist() == whole.kept.positions.tolist()


def test_a_dry_run_plans_the_salvage_of_a_large_segment_in_bounded_memory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``seglog recover --dry-run`` (and ``describe --verify``) read the whole damaged ``.log`` into
    memory to plan its salvage: a 100 MiB segment cost 100 MiB more (a 289 MiB one: 504 MB peak RSS
    instead of 217 MB). The search now reads windows of ``SEARCH_WINDOW_BYTES``; the plan is the
    same as the real recovery's."""
    log_dir = tmp_path / "logs"
    value = os.urandom(1000)
    with LogManager(log_dir, Settings()) as manager:  # one segment (1 GiB by default)
        log = manager.get_or_create_log(TOPIC, 0)
        for _ in range(110):
            log.append({"value": [value] * 1000})
        log.update_high_watermark(log.log_end_offset)
    segment = file_names.log_file(log_dir / PARTITION_DIR, 0)
    size = segment.stat().st_size
    with open(segment, "r+b") as f:
        f.seek(size // 2)
        f.write(b"\xff" * 64)
    tracemalloc.start()
    try:
        assert main(["recover", "--log-dir", str(log_dir), "--dry-run", "--json", "--no-progress"]) == 3
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20 < size // 3, (peak, size)  # the map-less scan's chunks, and one window
    planned = json.loads(capsys.readouterr().out)["partitions"][0]
    status, report = _recover(log_dir, capsys)
    [recovered] = report["partitions"]  # type: ignore[index]
    assert status == 3 and planned["lost_offsets"] == recovered["lost_offsets"] != []
    assert planned["quarantined"] == recovered["quarantined"]


# -- batches rearranged: duplicated, swapped, moved ---------------------------------------------


@st.composite
def rearrangements(draw: st.DrawFn, template: Template) -> tuple[str, str, int, int, int | None]:
    """``(kind, segment, i, j, flip)``: in one segment, batch ``i`` duplicated at batch ``j``'s place, or
    batches ``i`` and ``j`` swapped, or batch ``i`` moved to ``j``'s place; then, unless ``flip`` is
    None, one CRC-covered byte flipped in the batch now at place ``flip`` (a swap and a bad byte)."""
    segment = draw(st.sampled_from(template.segments))
    count = sum(1 for b in template.batches if b.segment == segment)
    i = draw(st.integers(0, count - 1))
    j = draw(st.integers(0, count))
    kind = draw(st.sampled_from(["duplicate", "swap", "move"]))
    return kind, segment, i, j, draw(st.none() | st.integers(0, 10**6))


def _rearrange(partition: Path, template: Template, kind: str, segment: str, i: int, j: int, flip: int | None) -> None:
    batches = [b.raw for b in template.batches if b.segment == segment]
    j = min(j, len(batches) - 1) if kind == "swap" else j
    if kind == "duplicate":
        batches.insert(j, batches[i])
    elif kind == "swap":
        batches[i], batches[j] = batches[j], batches[i]
    else:
        batches.insert(j, batches.pop(i))
    if flip is not None:
        hit = bytearray(batches[flip % len(batches)])
        hit[21 + flip % (len(hit) - 21)] ^= 0x10  # attributes on: covered by the CRC
        batches[flip % len(batches)] = bytes(hit)
    (partition / segment).write_bytes(b"".join(batches))


@fuzz_settings(30, ci=15, soak=1000)
@given(data=st.data())
def test_every_offset_is_readable_once_or_named_lost_after_batches_are_rearranged(
    template: Template,
    tmp_path_factory: pytest.TempPathFactory,
    capsys: pytest.CaptureFixture[str],
    data: st.DataObject,
) -> None:
    """Batches duplicated, swapped or moved inside a segment (a misdirected write, a bad copy) are all
    CRC-valid: salvage keeps the longest increasing chain. Every offset is then either read exactly
    once, in order, with its value, or named lost (committed: exit 3), the dry run saying the same.
    A swap made salvage drop a batch and report 'offsets lost: none', exit 0."""
    log_dir = tmp_path_factory.mktemp("rearranged") / "logs"
    shutil.copytree(template.log_dir, log_dir)
    partition = log_dir / PARTITION_DIR
    _rearrange(partition, template, *data.draw(rearrangements(template)))
    assert main(["recover", "--log-dir", str(log_dir), "--dry-run", "--json", "--no-progress"]) in (0, 3)
    planned = json.loads(capsys.readouterr().out)["partitions"][0]
    status, report = _recover(log_dir, capsys)
    [result] = report["partitions"]  # type: ignore[index]
    assert planned["lost_offsets"] == result["lost_offsets"]
    end = max(template.values)  # an open range: the end of the log was lost (bounded: no base offset is hit)
    lost = {o for r in result["lost_offsets"] for o in range(r["first"], (end if r["last"] is None else r["last"]) + 1)}
    records = read_records(capsys, log_dir, TOPIC, "--from-beginning", "--encoding", "base64")
    offsets = [r["offset"] for r in records]
    assert offsets == sorted(set(offsets))
    assert all(base64.b64decode(r["value"]) == template.values[r["offset"]] for r in records)
    assert sorted(lost | set(offsets)) == sorted(template.values) and not lost & set(offsets), result["steps"]
    assert status == (EXIT_COMMITTED_DATA_LOST if lost else 0)


# -- every codec, keys and headers: damage of any kind ------------------------------------------


@dataclass(frozen=True)
class Coded:
    log_dir: Path
    records: dict[int, tuple[object, ...]]  # offset -> (key, value, headers, timestamp)


def _records(partition: Path) -> list[dict[str, object]]:
    """Every record the partition's log holds, read as ``seglog read`` reads: read after read from the
    first offset not yet returned (a read ends early at damage or at offsets in no segment file, and
    the next one raises), up to the log end."""
    rows: list[dict[str, object]] = []
    with Log.open(partition, small_config(), read_only=True) as log:
        offset = log.log_start_offset
        while offset < log.log_end_offset:
            read = log.read_records(offset, max_offset=log.log_end_offset).to_pylist()
            if not read:  # the offsets left are a loss recover named and the user accepted
                break
            rows += read
            offset = int(read[-1]["offset"]) + 1  # type: ignore[call-overload]
    return rows


@pytest.fixture(scope="module", params=["none", "gzip", "snappy", "lz4", "zstd"])
def coded(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Coded:
    """A committed partition of ~1.5 KB segments in one codec, records with keys and headers."""
    log_dir = tmp_path_factory.mktemp(f"coded-{request.param}") / "logs"
    rng = np.random.default_rng(3)
    settings = settings_for(small_config(segment_bytes=1500, compression_type=request.param))
    with LogManager(log_dir, settings, clock=MockClock(1_700_000_000_000)) as manager:
        log = manager.get_or_create_log(TOPIC, 0)
        for i in range(40):
            n = 1 + i % 4
            log.append(
                {
                    "key": [f"k{i}-{j}".encode() for j in range(n)],
                    "value": [f"v{i}-{j}".encode() * int(rng.integers(1, 30)) for j in range(n)],
                    "headers": [[{"key": "h", "value": f"{i}-{j}".encode()}] for j in range(n)],
                }
            )
        log.update_high_watermark(log.log_end_offset)
    rows = _records(log_dir / PARTITION_DIR)
    return Coded(log_dir, {r["offset"]: (r["key"], r["value"], r["headers"], r["timestamp"]) for r in rows})  # type: ignore[misc]


def _damage_any(partition: Path, data: st.DataObject) -> bool:
    """1-3 damages anywhere: bit flips, zeroed ranges, garbage, a cut, a batch duplicated or swapped.
    Returns whether a byte of a batch's base offset (outside the CRC) changed: a batch so damaged
    that nothing around it contradicts it cannot be told from an intact one (docs/recovery.md)."""
    segments = sorted(p.name for p in partition.glob("*.log"))
    hit_base = False
    for _ in range(data.draw(st.integers(1, 3))):
        path = partition / data.draw(st.sampled_from(segments))
        raw = bytearray(path.read_bytes())
        if not raw:
            continue
        with FileRecords.open(path, mutable=False) as records:
            scan = records.scan(0, verify_crc=False)
        kind = data.draw(st.sampled_from(["flip", "zero", "garbage", "cut", "duplicate", "swap"]))
        at = data.draw(st.integers(0, len(raw) - 1))
        end = min(at + data.draw(st.integers(1, 64)), len(raw))
        if kind in ("flip", "zero", "garbage"):
            end = at + 1 if kind == "flip" else end
            before = bytes(raw[at:end])
            if kind == "flip":
                raw[at] ^= 1 << data.draw(st.integers(0, 7))
            else:
                raw[at:end] = (
                    bytes(end - at) if kind == "zero" else data.draw(st.binary(min_size=end - at, max_size=end - at))
                )
            changed = [at + k for k in range(end - at) if raw[at + k] != before[k]]
            hit_base |= any(0 <= c - p < 8 for c in changed for p in scan.positions)
        elif kind == "cut":
            del raw[at:]
        elif len(scan) >= 2:
            i = data.draw(st.integers(0, len(scan) - 2))
            a, b = int(scan.positions[i]), int(scan.positions[i + 1])
            c = b + int(scan.sizes[i + 1])
            raw[a:c] = raw[a:c] + raw[a:b] if kind == "duplicate" else raw[b:c] + raw[a:b]
        path.write_bytes(bytes(raw))
    return hit_base


@fuzz_settings(30, ci=10, soak=1000)
@given(data=st.data())
def test_every_codec_keeps_each_intact_record_once_or_names_it_lost(
    coded: Coded, tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str], data: st.DataObject
) -> None:
    """Whatever the damage, in every codec: the dry run writes nothing and predicts the recovery;
    afterwards every ``.log`` is CRC-valid batches (kafka-python agrees), and every offset is either
    read exactly once, in order, with its key, value, headers and timestamp, or named lost (and
    the exit status says whether committed records were)."""
    log_dir = tmp_path_factory.mktemp("coded-trial") / "logs"
    shutil.copytree(coded.log_dir, log_dir)
    partition = log_dir / PARTITION_DIR
    hit_base = _damage_any(partition, data)
    before = {p.name: p.read_bytes() for p in partition.iterdir()}
    assert main(["recover", "--log-dir", str(log_dir), "--dry-run", "--json", "--no-progress"]) in (0, 3)
    planned = json.loads(capsys.readouterr().out)["partitions"][0]
    assert {p.name: p.read_bytes() for p in partition.iterdir()} == before
    status, report = _recover(log_dir, capsys)
    [result] = report["partitions"]  # type: ignore[index]
    assert planned["lost_offsets"] == result["lost_offsets"]
    ranges = [(r["first"], r["last"]) for r in result["lost_offsets"]]  # a damaged base offset: billions
    if status == EXIT_COMMITTED_DATA_LOST:  # readers stop at lost offsets no segment holds until the loss is accepted
        assert main(["recover", "--log-dir", str(log_dir), "--accept-data-loss", "--no-progress"]) == 0
        capsys.readouterr()

    def is_lost(offset: int) -> bool:
        return any(first <= offset and (last is None or offset <= last) for first, last in ranges)

    for path in sorted(partition.glob("*.log")):
        log_batches(path.parent)  # every byte a CRC-valid batch
        assert all(batch.validate_crc() for batch in _kafka_batches(path.read_bytes()))
    rows = _records(partition)
    offsets = [r["offset"] for r in rows]
    assert offsets == sorted(set(offsets)) and not any(map(is_lost, offsets)), result["steps"]
    pristine = list(coded.records.values())
    if hit_base:  # a batch may be kept under damaged offsets: its records are still intact ones
        assert all((r["key"], r["value"], r["headers"], r["timestamp"]) in pristine for r in rows)
        return
    assert all((r["key"], r["value"], r["headers"], r["timestamp"]) == coded.records[r["offset"]] for r in rows)
    unaccounted = [o for o in coded.records if o not in set(offsets) and not is_lost(o)]
    assert not unaccounted, (unaccounted, result)
    assert status == (EXIT_COMMITTED_DATA_LOST if any(r["committed"] for r in result["lost_offsets"]) else 0)


def _kafka_batches(raw: bytes) -> list[DefaultRecordBatch]:
    """The batches of a ``.log`` as kafka-python's reader walks them."""
    records, out = MemoryRecords(raw), []
    while (batch := records.next_batch()) is not None:
        out.append(batch)
    return out


# -- SIGKILL during salvage ---------------------------------------------------------------------


def _state(partition: Path) -> dict[str, bytes]:
    """Every ``.log`` and quarantine file (``.deleted`` leftovers await their delayed deletion)."""
    return {
        p.name: p.read_bytes()
        for p in partition.iterdir()
        if p.name.endswith(file_names.LOG_FILE_SUFFIX) or file_names.is_quarantine_file(p)
    }


@pytest.fixture(scope="module")
def damaged_big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Eight ~1 MB segments, each damaged in the middle of a batch (every one needs a rewrite)."""
    log_dir = tmp_path_factory.mktemp("crash") / "logs"
    rng = np.random.default_rng(5)
    config = small_config(segment_bytes=1 << 20, index_interval_bytes=4096, segment_index_bytes=1 << 16)
    with LogManager(log_dir, settings_for(config), clock=MockClock(1_700_000_000_000)) as manager:
        log = manager.get_or_create_log(TOPIC, 0)
        for _ in range(160):
            log.append({"value": [bytes(rng.integers(0, 256, 100, dtype=np.uint8)) for _ in range(500)]})
        log.update_high_watermark(log.log_end_offset)
    for batch_index, path in enumerate(sorted((log_dir / PARTITION_DIR).glob("*.log"))):
        with FileRecords.open(path, mutable=False) as records:
            scan = records.scan()
        raw = bytearray(path.read_bytes())
        middle = int(scan.positions[len(scan) // 2]) + 100 + batch_index
        raw[middle : middle + 16] = bytes(b ^ 0xFF for b in raw[middle : middle + 16])
        path.write_bytes(bytes(raw))
    return log_dir


@pytest.mark.slow
def test_sigkill_during_salvage_then_rerun_gives_the_same_result(
    damaged_big: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reference = tmp_path / "reference" / "logs"
    shutil.copytree(damaged_big, reference)
    assert main(["recover", "--log-dir", str(reference), "--no-progress"]) == EXIT_COMMITTED_DATA_LOST
    capsys.readouterr()
    expected = _state(reference / PARTITION_DIR)
    segments = len(list((damaged_big / PARTITION_DIR).glob("*.log")))
    assert sum(file_names.is_quarantine_file(Path(name)) for name in expected) == segments
    rng = random.Random(3)
    interrupted = 0
    for trial in range(scaled(4, ci=3, soak=40)):
        log_dir = tmp_path / f"trial-{trial}" / "logs"
        shutil.copytree(damaged_big, log_dir)
        # The first trial kills at the first segment's salvage, so at least one kill lands mid-salvage.
        salvaged_before_kill = rng.randrange(segments) if trial else 0
        proc = subprocess.Popen(
            [*SEGLOG, "-v", "recover", "--log-dir", str(log_dir), "--no-progress"],
            cwd=REPO,
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
        )
        assert proc.stderr is not None
        seen = 0
        for line in proc.stderr:
            if "salvage-segment" in line:
                seen += 1
                if seen > salvaged_before_kill:
                    break
        time.sleep(rng.uniform(0, 0.05) if trial else 0)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        interrupted += _state(log_dir / PARTITION_DIR) != expected
        assert main(["recover", "--log-dir", str(log_dir), "--no-progress"]) in (0, EXIT_COMMITTED_DATA_LOST)
        capsys.readouterr()
        partition = log_dir / PARTITION_DIR
        assert _state(partition) == expected, (trial, salvaged_before_kill)
        assert not [p for p in partition.iterdir() if p.name.endswith((".cleaned", ".swap", ".tmp"))]
    assert interrupted  # the kills landed before the end of the salvage


# -- accepting committed data loss (issue 10, item 3) -------------------------------------------


def test_accept_data_loss_records_it_and_lets_the_sink_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from streaming.sink import SegmentLogSink

    log_dir = tmp_path / "logs"
    with LogManager(log_dir, settings_for(small_config(segment_bytes=2000)), clock=MockClock()) as manager:
        log = manager.get_or_create_log(TOPIC, 0)
        for i in range(20):
            log.append({"value": [f"v{i}-{j}".encode() for j in range(4)]})
        end = log.log_end_offset
        log.update_high_watermark(end)
    SinkCommitLog(log_dir, "events").write(SinkCommit("events", "query-1", 7, {(TOPIC, 0): end}))
    last = sorted((log_dir / PARTITION_DIR).glob("*.log"))[-1]
    raw = bytearray(last.read_bytes())
    raw[-30:] = bytes(30)  # the end of the last committed batch is gone
    last.write_bytes(bytes(raw))

    assert main(["recover", "--log-dir", str(log_dir), "--no-progress"]) == EXIT_COMMITTED_DATA_LOST
    out = capsys.readouterr().out
    assert "lost committed offsets" in out and "--accept-data-loss" in out
    settings = settings_for(small_config(segment_bytes=2000))
    row = pa.table({"value": [b"after"]})
    with pytest.raises(StorageError, match=rf"below its checkpointed high watermark {end}.*--accept-data-loss"):
        with SegmentLogSink(log_dir, topic=TOPIC, num_partitions=1, settings=settings, sink_id="events") as sink:
            sink.write_batch(row, 8, query_id="query-1")

    assert main(["recover", "--log-dir", str(log_dir), "--accept-data-loss", "--json", "--no-progress"]) == 0
    report = json.loads(capsys.readouterr().out)
    [accepted] = read_accepted_losses(log_dir)
    [lost] = [r for r in report["partitions"][0]["lost_offsets"] if r["committed"]]
    assert accepted["lost"] == [{"first": lost["first"], "last": end - 1}]
    assert (accepted["topic"], accepted["partition"], accepted["committed_offset"]) == (TOPIC, 0, end)
    assert accepted["command"] == "seglog recover --accept-data-loss" and accepted["accepted_at_ms"] > 0
    assert report["partitions"][0]["accepted_data_loss"] is True

    # The lost offsets stay a gap: the sink starts and writes after them, the read skips them.
    with SegmentLogSink(log_dir, topic=TOPIC, num_partitions=1, settings=settings, sink_id="events") as sink:
        sink.write_batch(row, 8, query_id="query-1")
    offsets = [r["offset"] for r in read_records(capsys, log_dir, TOPIC, "--from-beginning")]
    assert offsets == [*range(lost["first"]), end]
    assert main(["recover", "--log-dir", str(log_dir), "--no-progress"]) == 0  # nothing left to report
    assert len(read_accepted_losses(log_dir)) == 1
    capsys.readouterr()
    assert main(["describe", "--log-dir", str(log_dir), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["partitions"][0]["accepted_data_loss"] == [accepted]


def _appended_log_with_a_cut_tail(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, int]:
    """A log directory written by ``seglog append`` (no sink: the high watermark is the only record
    of what was committed) whose last committed batch was cut; returns it and its committed end."""
    log_dir = tmp_path / "logs"
    source = tmp_path / "records.jsonl"
    source.write_text("".join(json.dumps({"value": f"v{i}" * 20}) + "\n" for i in range(300)))
    assert append_file(log_dir, TOPIC, source, "--config", "segment.bytes=2000") == 0
    capsys.readouterr()
    last = sorted((log_dir / PARTITION_DIR).glob("*.log"))[-1]
    last.write_bytes(last.read_bytes()[:-30])
    return log_dir, 300


def test_recover_accepting_a_loss_leaves_no_file_open(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A one-shot command releases everything before it returns: the segments recovery deleted (renamed
    ``.deleted``, their removal due after ``file.delete.delay.ms``) each kept a descriptor for a minute."""
    log_dir, _end = _appended_log_with_a_cut_tail(tmp_path, capsys)
    second = sorted((log_dir / PARTITION_DIR).glob("*.log"))[1]
    raw = bytearray(second.read_bytes())
    raw[100:110] = bytes(10)  # damage in the second segment: Kafka's truncation drops every later one
    second.write_bytes(bytes(raw))

    def open_files() -> list[str]:
        names = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                names.append(os.readlink(f"/proc/self/fd/{fd}"))
            except FileNotFoundError:  # the descriptor listdir itself used
                pass
        return sorted(names)

    before = open_files()
    command = ["recover", "--log-dir", str(log_dir), "--no-progress", "--accept-data-loss", "--strategy", "truncate"]
    assert main(command) == 0
    capsys.readouterr()
    assert len(list((log_dir / PARTITION_DIR).glob("*.quarantine"))) > 2  # the later segments went
    left = [name for name in open_files() if name not in before]
    assert not [name for name in left if str(log_dir) in name], left


def test_a_loss_not_accepted_is_reported_until_accepted_and_its_offsets_never_reused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log_dir, end = _appended_log_with_a_cut_tail(tmp_path, capsys)
    assert main(["recover", "--log-dir", str(log_dir), "--json", "--no-progress"]) == EXIT_COMMITTED_DATA_LOST
    [lost] = json.loads(capsys.readouterr().out)["partitions"][0]["lost_offsets"]
    assert lost["last"] == end - 1 and lost["committed"]

    # Recovery kept the committed offset: the loss is reported again, and a writer refuses the
    # partition rather than give the lost offsets to other records.
    assert main(["recover", "--log-dir", str(log_dir), "--json", "--no-progress"]) == EXIT_COMMITTED_DATA_LOST
    assert json.loads(capsys.readouterr().out)["partitions"][0]["lost_offsets"] == [lost]
    more = tmp_path / "more.jsonl"
    more.write_text('{"value": "after"}\n')
    assert append_file(log_dir, TOPIC, more) == 1
    message = f"ends at offset {lost['first']}, below its checkpointed high watermark {end}.*--accept-data-loss"
    assert re.search(message, capsys.readouterr().err)
    active = max((log_dir / PARTITION_DIR).glob("*.index"))
    assert active.stat().st_size == 0  # the refused open left the files as a closed log does (trimmed)
    assert main(["describe", "--log-dir", str(log_dir), "--json", "--verify"]) == 1
    described = json.loads(capsys.readouterr().out)["partitions"][0]
    assert described["missing_committed"] == {"first": lost["first"], "last": end - 1, "checkpoint": "high watermark"}

    # Accepted later, the loss is recorded and writers go on after the gap.
    assert main(["recover", "--log-dir", str(log_dir), "--no-progress", "--accept-data-loss"]) == 0
    capsys.readouterr()
    [accepted] = read_accepted_losses(log_dir)
    assert accepted["lost"] == [{"first": lost["first"], "last": end - 1}]
    empty = [log_dir / PARTITION_DIR / f"{end:020d}{suffix}" for suffix in (".log", ".index", ".timeindex")]
    assert all(path.exists() for path in empty)  # a whole segment: the next open has nothing to rebuild
    assert append_file(log_dir, TOPIC, more) == 0
    assert capsys.readouterr().out.strip() == f"{PARTITION_DIR} {end}..{end}"
    assert main(["recover", "--log-dir", str(log_dir), "--no-progress"]) == 0


@pytest.mark.parametrize("opener", ["recover", "roll", "checkpoint-high-watermark"])
def test_recovery_and_maintenance_never_invent_a_high_watermark(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], opener: str
) -> None:
    """Without a high-watermark entry readers see the whole log; recovery and the daemon, which open
    the partition and write its checkpoints back, must not hide it behind a high watermark of 0. (An
    unreadable file is no missing entry: tests/maintenance/test_unreadable_checkpoints.py.)"""
    log_dir = tmp_path / "logs"
    source = tmp_path / "records.jsonl"
    source.write_text("".join(json.dumps({"value": f"v{i}", "timestamp": 1_000 + i}) + "\n" for i in range(50)))
    assert append_file(log_dir, TOPIC, source) == 0
    hw_file = log_dir / file_names.REPLICATION_OFFSET_CHECKPOINT_FILE
    hw_file.unlink()
    if opener == "recover":
        assert main(["recover", "--log-dir", str(log_dir), "--no-progress"]) == 0
    else:  # the roll job has work here (segment.ms), so the daemon opens the partition
        assert maintain_once(log_dir, opener, "--config", "segment.ms=1") == 0
    capsys.readouterr()
    assert len(read_records(capsys, log_dir, TOPIC, "--from-beginning")) == 50
    assert (TOPIC, 0) not in OffsetCheckpointFile(hw_file).read()


def test_opening_a_log_after_a_crash_salvages_too(template: Template, tmp_path: Path) -> None:
    """The loader behind ``LogManager``/``Log.open`` (the sink, the daemon) salvages as well."""
    log_dir = tmp_path / "logs"
    shutil.copytree(template.log_dir, log_dir)
    victim = template.batches[len(template.batches) // 2]
    path = log_dir / PARTITION_DIR / victim.segment
    raw = bytearray(path.read_bytes())
    raw[victim.position + 40] ^= 0xFF
    path.write_bytes(bytes(raw))
    (log_dir / file_names.CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)  # a crash, and no recovery point:
    (log_dir / file_names.RECOVERY_POINT_CHECKPOINT_FILE).unlink()  # every segment is re-read
    with LogManager(log_dir, settings_for(small_config()), clock=MockClock()) as manager:
        log = manager.get_or_create_log(TOPIC, 0)
        read = log.read_records(0, max_offset=log.log_end_offset)
    assert log.log_end_offset == template.batches[-1].last_offset + 1
    expected = [o for b in template.batches if b != victim for o in range(b.base_offset, b.last_offset + 1)]
    assert read.column("offset").to_pylist() == expected
    quarantined = log_dir / PARTITION_DIR / f"{victim.segment}.{victim.position}{file_names.QUARANTINE_FILE_SUFFIX}"
    assert quarantined.read_bytes() == bytes(raw[victim.position : victim.position + victim.size])


def test_quarantine_is_removed_only_by_purge_or_after_quarantine_retention(
    template: Template, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log_dir = tmp_path / "logs"
    shutil.copytree(template.log_dir, log_dir)
    partition = log_dir / PARTITION_DIR
    _apply(partition, [("zero:" + template.segments[1], 70, bytes(20)), ("zero:" + template.segments[3], 9, bytes(4))])
    assert main(["recover", "--log-dir", str(log_dir), "--no-progress"]) == EXIT_COMMITTED_DATA_LOST
    capsys.readouterr()
    quarantined = sorted(p.name for p in partition.iterdir() if file_names.is_quarantine_file(p))
    assert len(quarantined) == 2

    assert main(["describe", "--log-dir", str(log_dir), "--json"]) == 0
    described = json.loads(capsys.readouterr().out)["partitions"][0]["quarantine"]
    assert sorted(Path(q["path"]).name for q in described) == quarantined
    assert main(["quarantine", "list", "--log-dir", str(log_dir), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["partitions"][0]["files"]
    assert sorted(Path(q["path"]).name for q in listed) == quarantined

    # The retention job keeps them by default (quarantine.retention.ms = -1), deletes them when due.
    assert maintain_once(log_dir, "retention") == 0
    assert main(["quarantine", "purge", "--log-dir", str(log_dir), "--all", "--dry-run"]) == 0
    assert main(["quarantine", "purge", "--log-dir", str(log_dir), "--older-than-ms", "3600000"]) == 0
    capsys.readouterr()
    assert sorted(p.name for p in partition.iterdir() if file_names.is_quarantine_file(p)) == quarantined
    assert maintain_once(log_dir, "retention", "--json", "--config", "quarantine.retention.ms=0") == 0
    assert not [p for p in partition.iterdir() if file_names.is_quarantine_file(p)]

    shutil.rmtree(log_dir)  # and once more, purged by hand
    shutil.copytree(template.log_dir, log_dir)
    _apply(partition, [("zero:" + template.segments[1], 70, bytes(20))])
    assert main(["recover", "--log-dir", str(log_dir), "--no-progress"]) == EXIT_COMMITTED_DATA_LOST
    capsys.readouterr()
    # Mistakes delete nothing: a negative age (it would select every file), a topic or partition
    # that does not exist (a typo must not read as "nothing quarantined there").
    assert main(["quarantine", "purge", "--log-dir", str(log_dir), "--older-than-ms", "-1"]) == 2
    assert "expected an integer >= 0" in capsys.readouterr().err
    for selection in (["--topic", "tt"], ["--topic", TOPIC, "--partition", "7"]):
        assert main(["quarantine", "purge", "--log-dir", str(log_dir), *selection, "--all"]) == 1
        assert f"does not exist in {log_dir}; its partitions: {PARTITION_DIR}" in capsys.readouterr().err
    assert main(["quarantine", "purge", "--log-dir", str(log_dir), "--older-than-ms", "0", "--dry-run"]) == 0
    assert "would delete: 1 quarantine files" in capsys.readouterr().out
    assert main(["quarantine", "purge", "--log-dir", str(log_dir), "--topic", TOPIC, "--all"]) == 0
    assert "deleted: 1 quarantine files" in capsys.readouterr().out
    assert not [p for p in partition.iterdir() if file_names.is_quarantine_file(p)]


def test_a_damaged_base_offset_after_damage_does_not_push_out_the_next_batch(
    template: Template, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Flip the last byte of a batch and the lowest bit of the next batch's base offset (outside the
    CRC): the next batch now claims one offset of the batch after it, which is intact and kept."""
    segment = template.segments[2]
    batches = [b for b in template.batches if b.segment == segment]
    victim = batches[2]
    log_dir = tmp_path / "logs"
    shutil.copytree(template.log_dir, log_dir)
    partition = log_dir / PARTITION_DIR
    _apply(partition, [(f"bitflip:{segment}", victim.position - 1, b"\x01" + bytes(7) + b"\x01")])
    status, report = _recover(log_dir, capsys)
    lost = range(batches[1].base_offset, victim.last_offset + 1)
    assert report["partitions"][0]["lost_offsets"] == _ranges(list(lost))  # type: ignore[index]
    kept = [(b.base_offset, b.last_offset) for b in log_batches(partition) if b.segment == segment]
    assert kept == [(b.base_offset, b.last_offset) for b in batches if b not in (batches[1], victim)]


def test_a_zeroed_range_ending_in_the_next_batchs_base_offset_invents_no_record(
    template: Template, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Zeros from inside a batch up to the middle of the next one's baseOffset (outside the CRC), as
    a power loss leaves them: the next batch, CRC-valid, claimed the offsets of the batch before it
    and was kept, so reads returned its records under other offsets, and the loss named the wrong
    offsets. It is now removed with the damaged batch, both named lost."""
    segment = template.segments[0]  # based at 0: a zeroed base offset still fits the segment
    batches = [b for b in template.batches if b.segment == segment]
    damaged, victim = batches[0], batches[1]
    log_dir = tmp_path / "logs"
    shutil.copytree(template.log_dir, log_dir)
    partition = log_dir / PARTITION_DIR
    _apply(partition, [(f"zero:{segment}", damaged.position + 40, bytes(victim.position + 8 - damaged.position - 40))])
    status, report = _recover(log_dir, capsys)
    assert status == EXIT_COMMITTED_DATA_LOST
    lost = range(damaged.base_offset, victim.last_offset + 1)
    assert report["partitions"][0]["lost_offsets"] == _ranges(list(lost))  # type: ignore[index]
    records = read_records(capsys, log_dir, TOPIC, "--from-beginning", "--encoding", "base64")
    assert all(base64.b64decode(r["value"]) == template.values[r["offset"]] for r in records)
    assert [r["offset"] for r in records] == [o for o in sorted(template.values) if o not in lost]


@pytest.mark.parametrize("purger", ["seglog quarantine purge", "retention job"])
def test_a_salvage_gap_stays_visible_after_its_quarantine_is_purged(
    template: Template,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    purger: str,
) -> None:
    """A writer's open after a crash salvages a damaged batch inside segment 0 and the last batch of
    segment 1, leaving offset gaps whose bytes only the quarantine files account for. Once they were
    purged nothing said which offsets were gone: ``describe`` named no loss, reads passed the gap
    inside segment 0 in silence and failed at the one after segment 1 as if a segment's files were
    missing (``recover`` then asked to accept it). The purge now records the offsets it makes lost for
    good in ``seglog-accepted-data-loss.jsonl`` (before deleting anything) and says them: ``describe``
    lists them, and reads and ``recover`` go on past them as before the purge."""
    log_dir = tmp_path / "logs"
    shutil.copytree(template.log_dir, log_dir)
    partition = log_dir / PARTITION_DIR
    first = [b for b in template.batches if b.segment == template.segments[0]]
    second = [b for b in template.batches if b.segment == template.segments[1]]
    victims = [first[len(first) // 2], second[-1]]
    for victim in victims:
        path = partition / victim.segment
        raw = bytearray(path.read_bytes())
        raw[victim.position + 40] ^= 0xFF
        path.write_bytes(bytes(raw))
    (log_dir / file_names.CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)  # a crash: every segment re-read
    (log_dir / file_names.RECOVERY_POINT_CHECKPOINT_FILE).unlink()
    with LogManager(log_dir, settings_for(small_config()), clock=MockClock()) as manager:
        manager.get_or_create_log(TOPIC, 0)
    assert len([p for p in partition.iterdir() if file_names.is_quarantine_file(p)]) == 2
    expected = [o for b in template.batches if b not in victims for o in range(b.base_offset, b.last_offset + 1)]
    assert [
        r["offset"] for r in read_records(capsys, log_dir, TOPIC, "--from-beginning", "--encoding", "base64")
    ] == expected

    if purger == "seglog quarantine purge":
        assert main(["quarantine", "purge", "--log-dir", str(log_dir), "--all", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["partitions"][0]["lost"] == [
            {"first": v.base_offset, "last": v.last_offset} for v in victims
        ]
    else:
        # retention.ms=-1: the template's records are from 2023, which the job would delete first
        retain = ["--config", "retention.ms=-1"]
        assert maintain_once(log_dir, "retention", "--config", "quarantine.retention.ms=0", *retain) == 0
    lost_text = ", ".join(f"{v.base_offset}..{v.last_offset}" for v in victims)
    said = caplog.text + capsys.readouterr().err
    assert f"t-0: offsets {lost_text} are lost for good" in said, said
    assert not [p for p in partition.iterdir() if file_names.is_quarantine_file(p)]
    [entry] = read_accepted_losses(log_dir)
    assert entry["lost"] == [{"first": v.base_offset, "last": v.last_offset} for v in victims]
    assert entry["command"].startswith("seglog quarantine purge" if purger != "retention job" else "seglog maintain")

    assert main(["describe", "--log-dir", str(log_dir), "--verify"]) == 0
    assert f"accepted data loss: offsets {lost_text} at " in capsys.readouterr().out
    assert [
        r["offset"] for r in read_records(capsys, log_dir, TOPIC, "--from-beginning", "--encoding", "base64")
    ] == expected
    assert main(["recover", "--log-dir", str(log_dir), "--dry-run", "--no-progress"]) == 0
    assert main(["quarantine", "purge", "--log-dir", str(log_dir), "--all"]) == 0  # nothing left: nothing more
    assert len(read_accepted_losses(log_dir)) == 1


@pytest.mark.parametrize("where", ["middle segment", "last segment"])
def test_a_stray_empty_segment_inside_another_costs_no_record(
    template: Template, tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    """An empty ``.log`` named with an offset inside the offsets of the segment before it (a stray
    file: no writer rolls there) holds nothing, yet it made that segment's batches reaching its base
    offset "not fit": ``seglog recover`` quarantined intact committed batches (a whole segment) and
    exited 3, and ``--accept-data-loss`` would have made the loss final; readers stopped there. The
    empty segment is now the one set aside (its files deleted: it holds no byte; readers leave it out,
    ``describe`` names it), and nothing is lost."""
    segment = template.segments[2 if where == "middle segment" else -1]
    batches = [b for b in template.batches if b.segment == segment]
    log_dir = tmp_path / "logs"
    shutil.copytree(template.log_dir, log_dir)
    partition = log_dir / PARTITION_DIR
    assert batches[-1].last_offset > batches[0].base_offset
    stray = partition / f"{batches[0].base_offset + 1:020d}.log"
    stray.write_bytes(b"")
    records = read_records(capsys, log_dir, TOPIC, "--from-beginning", "--encoding", "base64")
    assert [r["offset"] for r in records] == sorted(template.values)  # readers leave it out too
    assert main(["describe", "--log-dir", str(log_dir), "--verify"]) == 1
    assert f"{stray.name}: deletes it: it holds nothing" in capsys.readouterr().out
    assert main(["recover", "--log-dir", str(log_dir), "--dry-run", "--json", "--no-progress"]) == 0
    assert json.loads(capsys.readouterr().out)["partitions"][0]["lost_offsets"] == []
    status, report = _recover(log_dir, capsys)
    assert status == 0, report
    [result] = report["partitions"]  # type: ignore[index]
    assert result["lost_offsets"] == [] and result["quarantined"] == []
    assert any(s["path"] == str(stray) for s in result["steps"]), result["steps"]
    assert not stray.exists()
    assert [(b.segment, b.raw) for b in log_batches(partition)] == [(b.segment, b.raw) for b in template.batches]
    records = read_records(capsys, log_dir, TOPIC, "--from-beginning", "--encoding", "base64")
    assert [r["offset"] for r in records] == sorted(template.values)


def test_committed_records_a_maintenance_open_removes_are_an_error_of_the_job(
    template: Template, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A middle segment cut inside a batch: ``seglog maintain --once index`` opened the partition to
    rebuild its index, and the loader salvaged the segment (committed offsets from the cut to the
    next segment lost, their bytes quarantined), yet the job said `indexes_rebuilt=1, 0 errors` and
    exited 0; after it, ``seglog read``, ``describe --verify`` and ``recover`` all exited 0 without a
    word (the gap's quarantine file accounts for it). The job now fails that partition with one line
    naming the committed offsets lost and the quarantine file, and exits 1."""
    segment = template.segments[2]
    batches = [b for b in template.batches if b.segment == segment]
    victim = batches[1]
    log_dir = tmp_path / "logs"
    shutil.copytree(template.log_dir, log_dir)
    os.truncate(log_dir / PARTITION_DIR / segment, victim.position + victim.size // 2)
    following = next(b.base_offset for b in template.batches if b.segment > segment)
    capsys.readouterr()
    assert maintain_once(log_dir, "index") == 1
    err = capsys.readouterr().err
    lost = f"committed offsets {victim.base_offset}..{following - 1}"
    assert lost in err and f"{segment}.{victim.position}.quarantine" in err, err
