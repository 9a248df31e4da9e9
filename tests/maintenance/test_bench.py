"""`seglog bench maintenance` runs end to end (tiny sizes) and writes the shared JSON shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from seglog.cli import main


def test_bench_maintenance_writes_both_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench.json"
    scratch = tmp_path / "scratch"
    args = ["bench", "maintenance", "--quick", "--scale", "0.02", "--json", str(out), "--dir", str(scratch)]
    assert main(args) == 0
    rows = json.loads(out.read_text())
    assert [r["name"].split(",")[0] for r in rows] == ["log directory recovery (seglog recover)", "retention pass"]
    for row in rows:
        assert row["suite"] == "maintenance" and row["value"] > 0 and row["baseline_value"] > 0
        assert {"unit", "baseline", "ratio", "goal", "met"} <= set(row)
    assert rows[1]["goal_kind"] == "value<=" and rows[1]["goal"] == 1.0
    assert "retention pass" in capsys.readouterr().out
    # The retention directory is kept under --dir and reused by the next run.
    built = sorted(p.name for p in scratch.iterdir())
    assert built == ["retention-1x20"]
    assert main(args) == 0
