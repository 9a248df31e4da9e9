"""Fixtures and settings shared by every test folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

REPO_ROOT = Path(__file__).resolve().parent.parent
VECTORS_DIR = REPO_ROOT.parent / "shared" / "vectors" / "kafka"

# Hypothesis budgets: "dev" (default) for quick local runs, "ci" bounded for the 90-minute CI run,
# "soak" for long local fuzzing (SEGLOG_TEST_BUDGET=soak).
settings.register_profile("dev", max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "ci",
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=False,
    print_blob=True,
)
settings.register_profile("soak", max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("SEGLOG_TEST_BUDGET", "dev"))


@pytest.fixture(scope="session")
def vectors_dir() -> Path:
    """Real broker-written log directories (read in place from ../shared/vectors, never copied)."""
    if not VECTORS_DIR.is_dir():
        pytest.fail(f"test vectors not found at {VECTORS_DIR}: the repo must sit beside shared/")
    return VECTORS_DIR


@pytest.fixture(scope="session")
def test_budget() -> str:
    """How much time slow/fuzz tests may take: "dev", "ci" (bounded) or "soak" (long)."""
    return os.environ.get("SEGLOG_TEST_BUDGET", "dev")
