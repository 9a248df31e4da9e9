"""Benchmark results: one shape for every `seglog bench` suite, printed as a table and saved as JSON.

Every figure is a ratio against a baseline measured side by side in the same process, so results
from different machines compare. ``ratio`` is always "times better than the baseline" (for
throughputs ``value / baseline_value``, for latencies and counts ``baseline_value / value``);
``goal`` is the minimum ratio the project promises (or an absolute bound, see ``goal_kind``).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

logger = logging.getLogger(__name__)

READ_CHUNK_BYTES = 8 << 20  # the read size of the cold-read baseline


@dataclass
class BenchResult:
    """One line of a benchmark report."""

    name: str
    unit: str
    value: float
    baseline: str
    baseline_value: float
    ratio: float
    goal: float | None
    goal_kind: Literal["ratio>=", "value<=", "value>=", "value=="] = "ratio>="
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def met(self) -> bool | None:
        if self.goal is None:
            return None
        if self.goal_kind == "ratio>=":
            return self.ratio >= self.goal
        if self.goal_kind == "value<=":
            return self.value <= self.goal
        if self.goal_kind == "value>=":
            return self.value >= self.goal
        return self.value == self.goal

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["met"] = self.met
        return d


def add_suite_arguments(parser: argparse.ArgumentParser, *, quick: str, scratch: str | None = None) -> None:
    """The options every suite takes: ``--quick`` (``quick`` says what it shrinks) and ``--json``; with
    ``scratch`` (its help), also ``--dir`` for scratch files and the hidden ``--scale`` that
    multiplies the input sizes so that tests run a suite in seconds."""
    parser.add_argument("--quick", action="store_true", help=quick)
    parser.add_argument("--json", metavar="FILE", type=output_file, help="also write the results as JSON")
    if scratch is not None:
        parser.add_argument("--dir", metavar="DIR", default=None, help=scratch)
        parser.add_argument("--scale", type=float, default=1.0, help=argparse.SUPPRESS)


def output_file(text: str) -> str:
    """argparse type: a file the results can be written to once the run ends, checked before it starts
    (a run takes minutes, and failing only then would lose its measurements): not a directory, under a
    directory that exists and is writable, or that :func:`write_json` can create."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory; name a file in it, e.g. {path / 'bench.json'}")
    parent = next(p for p in (path.absolute().parent, *path.absolute().parents) if p.exists())
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(f"cannot write {text}: {parent} is a file")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"cannot write {text}: {parent} is not writable")
    return text


def throughput_result(
    name: str, unit: str, value: float, baseline: str, baseline_value: float, goal: float | None, **details: Any
) -> BenchResult:
    """A higher-is-better figure: ratio = value / baseline_value."""
    ratio = value / baseline_value if baseline_value else math.inf
    return BenchResult(name, unit, value, baseline, baseline_value, ratio, goal, "ratio>=", dict(details))


def latency_result(
    name: str,
    unit: str,
    value: float,
    baseline: str,
    baseline_value: float,
    goal: float | None,
    goal_kind: Literal["ratio>=", "value<=", "value>=", "value=="] = "ratio>=",
    **details: Any,
) -> BenchResult:
    """A lower-is-better figure: ratio = baseline_value / value."""
    ratio = baseline_value / value if value else math.inf
    return BenchResult(name, unit, value, baseline, baseline_value, ratio, goal, goal_kind, dict(details))


def percentiles(samples: Sequence[float] | np.ndarray) -> dict[str, float]:
    """p50/p90/p99/max of ``samples`` (means hide tails; we never report one alone)."""
    a = np.asarray(samples, dtype=np.float64)
    if a.size == 0:
        return {"p50": math.nan, "p90": math.nan, "p99": math.nan, "max": math.nan}
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return {"p50": float(p50), "p90": float(p90), "p99": float(p99), "max": float(a.max())}


def machine_info() -> dict[str, Any]:
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "numpy": np.__version__,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _fmt(x: float) -> str:
    if isinstance(x, float) and (math.isinf(x) or math.isnan(x)):
        return str(x)
    ax = abs(x)
    if ax >= 1e6:
        return f"{x:,.0f}"
    if ax >= 100:
        return f"{x:,.1f}"
    if ax >= 1:
        return f"{x:.2f}"
    return f"{x:.4g}"


def format_table(results: Iterable[BenchResult]) -> str:
    """A plain-text table: name, value, baseline, ratio, goal, met."""
    rows = [("benchmark", "value", "unit", "baseline", "baseline value", "ratio", "goal", "met")]
    for r in results:
        goal = (
            ""
            if r.goal is None
            else (f">= {r.goal:g}x" if r.goal_kind == "ratio>=" else f"{r.goal_kind[5:]} {r.goal:g}")
        )
        met = "" if r.met is None else ("yes" if r.met else "NO")
        rows.append((r.name, _fmt(r.value), r.unit, r.baseline, _fmt(r.baseline_value), f"{_fmt(r.ratio)}x", goal, met))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def write_json(results: Sequence[BenchResult], path: str | os.PathLike[str], *, suite: str, quick: bool) -> None:
    """Save ``results`` as a JSON list of objects (``name``, ``unit``, ``value``, ``baseline``,
    ``baseline_value``, ``ratio``, ``goal``, ``met``, ...), each tagged with the suite and machine."""
    machine = machine_info()
    doc = [{**r.to_json(), "suite": suite, "quick": quick, "machine": machine} for r in results]
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


def publish(results: Sequence[BenchResult], *, json_path: str | None, suite: str, quick: bool) -> None:
    """Print the table of ``results`` and, with ``json_path``, save them as JSON (every suite's ending)."""
    print(format_table(results))
    if json_path:
        write_json(results, json_path, suite=suite, quick=quick)
        logger.info("wrote %s", json_path)


def timed(fn: Callable[[], Any], *, evict: Iterable[str | os.PathLike[str]] = ()) -> tuple[float, Any]:
    """``(seconds, result)`` of one call of ``fn``; the files of ``evict`` are evicted from the page cache
    first (untimed), for a figure whose reads must go to the disk."""
    drop_page_cache(*evict)
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def drop_page_cache(*paths: str | os.PathLike[str]) -> None:
    """Write each of ``paths`` back and evict it from the page cache, so the next read goes to the disk."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def cold_read_seconds(paths: Sequence[Path]) -> float:
    """Seconds to read ``paths`` once in ``READ_CHUNK_BYTES`` chunks, evicted from the page cache first:
    the baseline of the recovery figures (recovery reads its input at least once)."""

    def read_once() -> None:
        for path in paths:
            with open(path, "rb", buffering=0) as f:
                while f.read(READ_CHUNK_BYTES):
                    pass

    seconds, _ = timed(read_once, evict=paths)
    return seconds


def recovery_result(
    name: str, baseline: str, size: int, seconds: float, baseline_seconds: float, **details: Any
) -> BenchResult:
    """A recovery figure: MB/s of recovering ``size`` bytes in ``seconds`` against reading them once from
    the disk in ``baseline_seconds`` (:func:`cold_read_seconds`); goal 0.5x, as recovery reads its input
    at least once and checks every byte."""
    return throughput_result(
        name,
        "MB/s",
        size / seconds / 1e6,
        baseline,
        size / baseline_seconds / 1e6,
        0.5,
        bytes=size,
        **details,
        seconds=seconds,
        baseline_seconds=baseline_seconds,
    )


@contextmanager
def scratch_directory(directory: str | None, prefix: str, *, removed: Sequence[str]) -> Iterator[Path]:
    """The scratch directory of a run: ``directory`` (``--dir``, created if need be and kept, so a suite
    may leave inputs there for later runs) or a new temporary directory named ``prefix...``, removed
    afterwards. Either way its entries named in ``removed`` (one run's outputs) are removed afterwards."""
    scratch = Path(directory) if directory else Path(tempfile.mkdtemp(prefix=prefix))
    scratch.mkdir(parents=True, exist_ok=True)
    try:
        yield scratch
    finally:
        for name in removed:
            shutil.rmtree(scratch / name, ignore_errors=True)
        if not directory:
            shutil.rmtree(scratch, ignore_errors=True)
