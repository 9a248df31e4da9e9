"""`seglog serve` and `seglog bench serve` from the command line: user mistakes get one line, the
bench writes the shared JSON shape."""

from __future__ import annotations

import json
import socket
import subprocess
import warnings
from pathlib import Path

import pytest

from seglog.cli import main
from tests.serve.conftest import SEGLOG


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SEGLOG, *args], capture_output=True, text=True, timeout=60, check=False)


def test_missing_log_dir_is_one_line(tmp_path: Path) -> None:
    result = _run("serve", "--log-dir", str(tmp_path / "nope"), "--bind", "127.0.0.1:0")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"seglog: FileNotFoundError: log directory {tmp_path / 'nope'} does not exist"
    ]


def test_port_in_use_is_one_line(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = _run("serve", "--log-dir", str(tmp_path), "--bind", f"127.0.0.1:{port}")
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("seglog: OSError:") and "address already in use" in lines[0]


def test_bad_bind_is_a_usage_error(tmp_path: Path) -> None:
    result = _run("serve", "--log-dir", str(tmp_path), "--bind", "localhost")
    assert result.returncode == 2
    assert "expected HOST:PORT" in result.stderr


def test_bench_serve_writes_the_figures(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert main(["bench", "serve", "--quick", "--scale", "0.05", "--json", str(out), "--dir", str(tmp_path)]) == 0
    rows = json.loads(out.read_text())
    assert [r["name"] for r in rows] == [
        "consume via seglog serve (confluent-kafka)",
        "confluent-kafka consume loop, records already queued",
        "consume via seglog serve (kafka-python)",
        "commit to consumer receipt p50",
        "commit to consumer receipt p99",
    ]
    for row in rows:
        assert row["suite"] == "serve" and row["value"] > 0 and row["baseline_value"] > 0
    assert rows[0]["goal"] == 0.5
    assert 0 < rows[0]["details"]["first_fetch_records"] < rows[0]["details"]["records"]  # left out of the timed part
    assert rows[0]["details"]["startup_s"] > 0 and rows[2]["details"]["startup_s"] > 0
    assert rows[3]["details"]["lost"] == 0 and rows[3]["details"]["writer_publish_ms_p50"] > 0
    assert not any(tmp_path.glob("throughput*")) and not any(tmp_path.glob("latency*"))


pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
