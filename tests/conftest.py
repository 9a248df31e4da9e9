"""Fixtures and settings shared by every test folder."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.budget import BUDGET
from tests.filesystems import TinyFs, mount_tiny_fs, unmount
from tests.spark_session import TEST_JVM_OPTIONS

REPO_ROOT = Path(__file__).resolve().parent.parent
VECTORS_DIR = REPO_ROOT.parent / "shared" / "vectors" / "kafka"

# The Spark drivers that tests start as subprocesses (`seglog run`, the crash and cluster drivers) start
# with the test JVM options too: spark-submit adds SPARK_SUBMIT_OPTS to the driver JVM's options. It
# takes about 3 s off each such start here (a `seglog run` that fails on its first row: 11.5 s -> 8.3 s).
os.environ.setdefault("SPARK_SUBMIT_OPTS", TEST_JVM_OPTIONS)

# One hypothesis profile, locally and in CI: each property test sets its own max_examples, sized so
# that the whole suite stays well under its time budget; a profile cannot raise or lower those.
# What SEGLOG_TEST_BUDGET bounds is the fuzz, soak and crash loops (tests/budget.py: ``scaled``),
# including the hypothesis fuzzers whose example counts come from it. Failures print the blob
# that replays them (@reproduce_failure).
settings.register_profile(
    "seglog", max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.load_profile("seglog")


@pytest.fixture
def cut_below_recovery_point(vectors_dir: Path, tmp_path: Path) -> Path:
    """A broker-written log directory whose partition ``items-0`` (437 records, recovery point 437)
    has no high watermark entry and whose ``.log`` was cut mid-batch at 1,300,000 bytes: it ends at
    offset 236, below the offsets the broker flushed (236..436 are lost)."""
    log_dir = tmp_path / "broker-logs"
    log_dir.mkdir()
    shutil.copytree(vectors_dir / "gzip-large-records" / "items-0", log_dir / "items-0")
    for path in (log_dir / "items-0").iterdir():
        path.chmod(0o644)
    (log_dir / "items-0").chmod(0o755)
    (log_dir / "replication-offset-checkpoint").write_text("0\n0\n")
    (log_dir / "recovery-point-offset-checkpoint").write_text("0\n1\nitems 0 437\n")
    os.truncate(log_dir / "items-0" / "00000000000000000000.log", 1_300_000)
    return log_dir


@pytest.fixture(scope="session")
def vectors_dir() -> Path:
    """Real broker-written log directories (read in place from ../shared/vectors, never copied)."""
    if not VECTORS_DIR.is_dir():
        pytest.fail(f"test vectors not found at {VECTORS_DIR}: the repo must sit beside shared/")
    return VECTORS_DIR


@pytest.fixture(scope="session")
def test_budget() -> str:
    """How much time slow/fuzz tests may take: "dev", "ci" (bounded) or "soak" (long); see tests/budget.py."""
    return BUDGET


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[TinyFs]:
    """A real 1 MiB tmpfs under ``tmp_path`` (``tests/filesystems.py``), unmounted afterwards; the
    test is skipped where mounting is not permitted."""
    fs = mount_tiny_fs(tmp_path / "tiny-fs", "1m")
    try:
        yield fs
    finally:
        unmount(fs)
