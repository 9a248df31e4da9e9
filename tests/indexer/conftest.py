"""Fixtures shared by the engine's tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from indexer.clock import MockClock
from indexer.config import LogConfig
from indexer.log import Log

T0 = 1_700_000_000_000  # the mock clock's start (ms)


@pytest.fixture
def open_log(tmp_path: Path) -> Iterator[Any]:
    """``open_log(name="t-0", **config)``: a :class:`Log` in ``tmp_path / name`` with Kafka-named
    ``config`` on a mock clock at ``T0``; every log opened is closed after the test."""
    opened: list[Log] = []

    def opener(name: str = "t-0", **config: object) -> Log:
        log = Log.open(tmp_path / name, LogConfig.from_mapping(config), clock=MockClock(T0))
        opened.append(log)
        return log

    yield opener
    for log in opened:
        log.close()
