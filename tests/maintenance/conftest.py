"""Fixtures of the maintenance tests: small real partitions written through the engine."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import pytest

from indexer.clock import MockClock
from indexer.config import LogConfig, Settings
from indexer.log import Log
from tests.spark_session import spark

__all__ = ["spark"]

START_MS = 1_700_000_000_000
REPO = Path(__file__).resolve().parents[2]
SEGLOG = [sys.executable, "-c", "import sys; from seglog.cli import main; sys.exit(main())"]


def small_config(**overrides: object) -> LogConfig:
    """Tiny segments (a few batches each) so tests get many real segment files quickly."""
    values: dict[str, object] = {
        "segment.bytes": 600,
        "index.interval.bytes": 100,
        "file.delete.delay.ms": 1000,
        "segment.index.bytes": 4096,
    }
    values.update({k.replace("_", "."): v for k, v in overrides.items()})
    return LogConfig.from_mapping(values)


def settings_for(config: LogConfig, maintenance: dict[str, object] | None = None) -> Settings:
    """Settings whose topic defaults are ``config`` (and an optional ``[maintenance]`` section)."""
    return Settings(topic_defaults=config.to_dict(), sections={"maintenance": maintenance or {}}, source="test")


def append_batches(log: Log, clock: MockClock, count: int, *, step_ms: int = 1000, records: int = 3) -> None:
    """``count`` appends of ``records`` 40-byte records stamped with the mock clock, ``step_ms`` apart."""
    for _ in range(count):
        now = clock.milliseconds()
        log.append({"value": [b"v" * 40] * records, "timestamp": [now] * records})
        clock.advance(step_ms)


def numbered_partition(log_dir: Path, config: LogConfig, batches: int, *, uncommitted: int = 0) -> tuple[int, int]:
    """Partition ``t-0`` of ``log_dir``: ``batches`` batches of 3 records whose values are their offsets
    (``b"%06d"``), the last ``uncommitted`` of them above the high watermark (a clean writer's tail),
    and its ``replication-offset-checkpoint``. Returns the high watermark and the log end offset."""
    log = Log.open(log_dir / "t-0", config)
    for i in range(batches):
        if i == batches - uncommitted:
            log.update_high_watermark(log.log_end_offset)
        log.append({"value": [b"%06d" % (3 * i + j) for j in range(3)]})
    if not uncommitted:
        log.update_high_watermark(log.log_end_offset)
    committed, end = log.high_watermark, log.log_end_offset
    log.close()
    (log_dir / "replication-offset-checkpoint").write_text(f"0\n1\nt 0 {committed}\n")
    return committed, end


@pytest.fixture
def clock() -> MockClock:
    return MockClock(START_MS)


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    path = tmp_path / "logs"
    path.mkdir()
    return path


def lines_of(stream: IO[str]) -> queue.Queue[str]:
    """Lines of ``stream`` as they come, read by a daemon thread."""
    q: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for line in stream:
            q.put(line)

    threading.Thread(target=pump, daemon=True).start()
    return q


def wait_for(q: queue.Queue[str], needle: str, timeout: float = 60) -> list[str]:
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            line = q.get(timeout=0.1)
        except queue.Empty:
            continue
        seen.append(line)
        if needle in line:
            return seen
    raise AssertionError(f"{needle!r} not seen within {timeout}s; got {seen[-20:]}")


def write_conf(path: Path, topic: Mapping[str, object], maintenance: Mapping[str, object]) -> Path:
    """A ``seglog.toml`` at ``path`` with the ``[topic]`` and ``[maintenance]`` settings given; returns ``path``."""
    lines = ["[topic]"] + [f'"{k}" = {json.dumps(v)}' for k, v in topic.items()]
    lines += ["[maintenance]"] + [f'"{k}" = {json.dumps(v)}' for k, v in maintenance.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


@contextmanager
def maintain_daemon(
    log_dir: Path, conf: Path, *, verbose: bool = True, ignore_hangup: bool = False
) -> Iterator[tuple[subprocess.Popen[str], queue.Queue[str]]]:
    """``seglog [-v] maintain`` on ``log_dir`` with ``conf`` as a process of its own, and the lines of its
    stderr, once it has said it is on; killed on the way out if it is still running. ``ignore_hangup``
    starts it with SIGHUP ignored, as ``nohup`` does."""
    proc = subprocess.Popen(
        [
            *(["nohup"] if ignore_hangup else []),
            *SEGLOG,
            *(["-v"] if verbose else []),
            "maintain",
            "--log-dir",
            str(log_dir),
            "--conf",
            str(conf),
        ],
        cwd=REPO,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    try:
        err = lines_of(proc.stderr)  # type: ignore[arg-type]
        wait_for(err, "seglog maintain on")
        yield proc, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.fixture
def live_writer(log_dir: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holding partition t-0 open (its writer lock) after 20 committed appends."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.maintenance.writer_proc",
            "--log-dir",
            str(log_dir),
            "--appends",
            "20",
            "--segment-bytes",
            "300",
            "--hold",
        ],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    out = lines_of(proc.stdout)  # type: ignore[arg-type]
    wait_for(out, "COMMITTED 100")
    proc.out = out  # type: ignore[attr-defined]
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
