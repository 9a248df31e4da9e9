"""Seeded damage of batch header fields and stray segment files, through the commands a user runs.

A committed log of several segments and every codec, records with keys, headers and timestamps, is
damaged: one header field of a random batch (base offset, length, magic, CRC, lastOffsetDelta, record
count) flipped or overwritten, a segment cut inside a batch, or a stray empty segment named inside
another. Then, as a user would:

* ``seglog read`` before any recovery prints only records exactly as written, in offset order, and
  never stops short in silence: it reads every committed record, or exits 1 naming the damage, or
  warns that committed records are missing from the log's end;
* ``seglog recover --dry-run`` writes nothing; ``seglog recover`` keeps every batch whose bytes are
  intact (read back exactly as written) and names every committed offset it could not keep;
* every ``.log`` byte left is a CRC-valid batch for kafka-python's reader too.

A base offset changed where nothing around it contradicts it (the log's last batch) cannot be told
from a true one (docs/recovery.md, Salvage); such cases check only that nothing is invented.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from indexer.clock import MockClock
from indexer.log_manager import LogManager
from seglog.cli import main
from tests.budget import fuzz_settings
from tests.indexer.helpers import Batch, log_batches
from tests.kafka_python import MemoryRecords
from tests.maintenance.conftest import settings_for, small_config

TOPIC = "t"
CODECS = ("gzip", "snappy", "lz4", "zstd", None)
FIELDS = {  # v2 batch header fields: (first byte, end)
    "baseOffset": (0, 8),
    "length": (8, 12),
    "magic": (16, 17),
    "crc": (17, 21),
    "lastOffsetDelta": (23, 27),
    "recordCount": (57, 61),
}
EPOCH = range(12, 16)  # partitionLeaderEpoch: outside the CRC, read by nobody


class Written:
    """The pristine log: its batches, and each record as ``seglog read --encoding base64`` prints it.
    Not a dataclass: hypothesis prints a failing example's fixtures, a dataclass field by field."""

    def __init__(self, log_dir: Path, batches: list[Batch], records: dict[int, dict[str, object]]) -> None:
        self.log_dir, self.batches, self.records = log_dir, batches, records

    def __repr__(self) -> str:
        return f"Written({self.log_dir}, {len(self.batches)} batches, {len(self.records)} records)"


def _read(capsys: pytest.CaptureFixture[str], log_dir: Path) -> tuple[int, list[dict[str, object]], str]:
    status = main(["read", "--log-dir", str(log_dir), "--topic", TOPIC, "--partition", "0", "--from-beginning"]
                  + ["--encoding", "base64"])  # fmt: skip
    out, err = capsys.readouterr()
    return status, [json.loads(line) for line in out.splitlines()], err


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Written:
    log_dir = tmp_path_factory.mktemp("damage") / "logs"
    rng = np.random.default_rng(5)
    with LogManager(log_dir, settings_for(small_config(segment_bytes=1500)), clock=MockClock(1_700_000_000_000)) as m:
        log = m.get_or_create_log(TOPIC, 0)
        for i in range(30):
            n = int(rng.integers(1, 6))
            log.append(
                {
                    "key": [f"k{i}.{j}".encode() for j in range(n)],
                    "value": [bytes(rng.integers(0, 256, int(rng.integers(0, 80)), dtype=np.uint8)) for _ in range(n)],
                    "timestamp": [1_700_000_000_000 + 100 * i + j for j in range(n)],
                    "headers": [[{"key": f"h{j}", "value": bytes([i, j])}] for j in range(n)],
                },
                compression=CODECS[i % len(CODECS)],
            )
        log.update_high_watermark(log.log_end_offset)
    batches = log_batches(log_dir / f"{TOPIC}-0")
    assert len({b.segment for b in batches}) >= 4
    return Written(log_dir, batches, {r["offset"]: r for r in _read_all(log_dir)})


def _read_all(log_dir: Path) -> list[dict[str, object]]:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["read", "--log-dir", str(log_dir), "--topic", TOPIC, "--partition", "0", "--from-beginning"]
                    + ["--encoding", "base64"]) == 0  # fmt: skip
    return [json.loads(line) for line in out.getvalue().splitlines()]


def _damage(batches: list[Batch], pick: int, kind: str, where: int, junk: bytes) -> tuple[Batch, int, bytes]:
    """``(batch, position in its segment, new bytes)`` of one damage (``pick`` 0 and 1: the log's first
    and last batch); for ``cut`` the position to cut the segment at, for ``stray`` the base offset
    of an empty segment named inside the batch's. ``junk``: an overwrite, or 1 byte: a bit to flip."""
    batch = batches[0] if pick == 0 else batches[-1] if pick == 1 else batches[pick % len(batches)]
    if kind == "cut":
        return batch, batch.position + 1 + where % (batch.size - 1), b""
    if kind == "stray":
        return batch, batch.base_offset + 1 + where % 3, b""
    first, end = FIELDS[kind]
    if len(junk) == 1:
        at = first + where % (end - first)
        return batch, batch.position + at, bytes([batch.raw[at] ^ (1 << junk[0] % 8)])
    return batch, batch.position + first, junk[: end - first]


def _damaged(batch: Batch, now: bytes) -> tuple[bool, bool]:
    """Whether ``batch`` changed (its leader epoch aside), and whether only its base offset did."""
    before = np.frombuffer(batch.raw, dtype=np.uint8)
    after = np.frombuffer(now[batch.position : batch.position + batch.size].ljust(batch.size, b"\0"), dtype=np.uint8)
    changed = np.flatnonzero(before != after)
    changed = changed[~np.isin(changed, EPOCH)]
    if len(now) < batch.position + batch.size:
        return True, False
    return bool(changed.size), bool(changed.size) and bool(np.all(changed < 8))


@fuzz_settings(25, ci=15, soak=1000)
@given(
    pick=st.integers(0, 10**6),
    kind=st.sampled_from([*FIELDS, "cut", "stray"]),
    where=st.integers(0, 10**6),
    junk=st.one_of(st.binary(min_size=1, max_size=1), st.binary(min_size=8, max_size=8)),
)
def test_damage_is_never_read_or_recovered_in_silence(
    written: Written,
    tmp_path_factory: pytest.TempPathFactory,
    capsys: pytest.CaptureFixture[str],
    pick: int,
    kind: str,
    where: int,
    junk: bytes,
) -> None:
    log_dir = tmp_path_factory.mktemp("trial") / "logs"
    shutil.copytree(written.log_dir, log_dir)
    partition = log_dir / f"{TOPIC}-0"
    batch, position, new = _damage(written.batches, pick, kind, where, junk)
    path = partition / batch.segment
    if kind == "cut":
        os.truncate(path, position)
    elif kind == "stray":
        (partition / f"{position:020d}.log").write_bytes(b"")
    else:
        raw = bytearray(path.read_bytes())
        raw[position : position + len(new)] = new
        path.write_bytes(bytes(raw))
    files = {b.segment: (partition / b.segment).read_bytes() for b in written.batches}
    damaged = {b: _damaged(b, files[b.segment]) for b in written.batches}
    intact = [b for b in written.batches if not damaged[b][0]]
    undecidable = any(only_base for _, only_base in damaged.values())

    status, records, err = _read(capsys, log_dir)
    assert "Traceback" not in err, err
    assert all(r == written.records[r["offset"]] for r in records), kind  # nothing invented or altered
    offsets = [r["offset"] for r in records]
    assert offsets == sorted(set(offsets))
    if status == 0 and not undecidable:  # all of it, or the missing end named
        assert offsets == sorted(written.records) or "are missing" in err, (kind, offsets[-3:], err)
    elif status != 0:
        assert err.strip().splitlines()[-1].startswith("seglog: "), err  # one line naming it, after warnings

    before = {p.name: p.read_bytes() for p in partition.iterdir()}
    assert main(["recover", "--log-dir", str(log_dir), "--dry-run", "--json", "--no-progress"]) in (0, 3)
    capsys.readouterr()
    assert {p.name: p.read_bytes() for p in partition.iterdir()} == before  # a dry run writes nothing
    status = main(["recover", "--log-dir", str(log_dir), "--json", "--no-progress"])
    report = json.loads(capsys.readouterr().out)["partitions"][0]
    lost = {o for r in report["lost_offsets"] for o in range(r["first"], r["last"] + 1) if r["committed"]}

    status_read, records, err = _read(capsys, log_dir)
    assert status_read == 0, err
    assert all(r == written.records[r["offset"]] for r in records)
    offsets = [r["offset"] for r in records]
    assert offsets == sorted(set(offsets))
    if not undecidable:
        assert {o for b in intact for o in range(b.base_offset, b.last_offset + 1)} <= set(offsets), kind
        assert set(written.records) - set(offsets) <= lost, (kind, report["lost_offsets"])
        assert status == (3 if lost else 0)
    for segment in sorted(partition.glob("*.log")):  # every byte a CRC-valid batch, for kafka-python too
        raw = segment.read_bytes()
        records_file = MemoryRecords(raw)
        while records_file.has_next():
            kafka_batch = records_file.next_batch()
            assert kafka_batch is not None and kafka_batch.validate_crc(), segment
        assert records_file.valid_bytes() == len(raw), segment
    assert all(base64.b64decode(str(r["value"])) is not None for r in records if r["value"] is not None)
