"""Fixtures shared by every test folder."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
VECTORS_DIR = REPO_ROOT.parent / "shared" / "vectors" / "kafka"


@pytest.fixture(scope="session")
def vectors_dir() -> Path:
    """Real broker-written log directories (read in place from ../shared/vectors, never copied)."""
    if not VECTORS_DIR.is_dir():
        pytest.fail(f"test vectors not found at {VECTORS_DIR}: the repo must sit beside shared/")
    return VECTORS_DIR
