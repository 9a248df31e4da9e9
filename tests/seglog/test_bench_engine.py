"""`seglog bench engine`: the report's shape (not the speed) and the fixtures it builds."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from indexer.offset_index import OffsetIndex
from indexer.records.file_records import FileRecords
from seglog.bench import engine
from seglog.cli import main

FIELDS = {"name", "unit", "value", "baseline", "baseline_value", "ratio", "goal", "goal_kind", "met", "details"}


def test_quick_run_writes_the_json_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "out" / "engine.json"
    code = main(["bench", "engine", "--quick", "--scale", "0.002", "--json", str(report), "--dir", str(tmp_path)])
    assert code == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:2] == ["benchmark", "value"]
    doc = json.loads(report.read_text())
    assert [r["name"] for r in doc] == [
        "batch encoding (v2, 100-byte values)",
        "append through Log.append (encode+write+index)",
        "offset index: vectorised lookups (lookup_many)",
        "offset index: single lookup p50",
        "offset index: single lookup p99",
        "warm/cold search: major faults of tail lookups",
        "plain binary search: major faults of tail lookups",
        "segment recovery (CRC + index rebuild)",
        "random fetch of 100 records p50 (read_records)",
        "random fetch of 100 records p99 (read_records)",
    ]
    for result in doc:
        assert FIELDS <= set(result)
        assert result["suite"] == "engine" and result["quick"] is True
        assert result["value"] >= 0 and result["baseline_value"] >= 0
        if result["goal_kind"] == "ratio>=" and result["value"] and result["baseline_value"]:
            expected = (
                result["value"] / result["baseline_value"]
                if result["unit"] in ("records/s", "MB/s")
                else result["baseline_value"] / result["value"]
            )
            assert math.isclose(result["ratio"], expected)
    encoding = doc[0]["details"]
    assert encoding["first_batch_identical"] is True  # same bytes as kafka-python's builder
    assert doc[2]["details"]["agrees_with_bisect"] is True
    assert doc[5]["details"]["same_slots"] is True
    assert doc[7]["details"]["truncated"] == 0
    assert doc[8]["details"]["batches"] >= doc[8]["details"]["baseline_batches"]
    assert not list(tmp_path.glob("seglog-bench-*"))  # scratch files removed


def test_sizes_scale_and_refuse_nonsense() -> None:
    full = engine.Sizes.for_run(quick=False, scale=1.0)
    quick = engine.Sizes.for_run(quick=True, scale=1.0)
    assert (full.records, quick.records) == (1_000_000, 200_000)
    assert (full.segment_bytes, quick.segment_bytes) == (1 << 30, 128 << 20)
    assert full.index_bytes == 10 << 20
    with pytest.raises(ValueError, match="--scale must be > 0"):
        engine.Sizes.for_run(quick=True, scale=0)


def test_synthetic_segment_is_a_valid_log(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.log"
    size = engine._write_segment(path, 300_000)
    assert path.stat().st_size == size >= 300_000 // 2
    records = FileRecords.open(path, mutable=False)
    try:
        scan = records.scan()
    finally:
        records.close_handlers()
    assert scan.error is None and scan.valid_bytes == size
    assert scan.base_offsets[0] == 0
    assert np.array_equal(scan.base_offsets[1:], scan.last_offsets[:-1] + 1)  # consecutive offsets


def test_synthetic_offset_index_is_sane(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    keys = engine._write_offset_index(path, 1000)
    with OffsetIndex(path, 0, writable=False) as index:
        index.sanity_check()
        assert index.entries == 1000
        assert index.lookup(int(keys[500]) + 1) == (int(keys[500]), 501 * engine.INDEX_POSITION_STRIDE)
