"""Running ``seglog`` commands in-process (``seglog.cli.main``), as the tests of several folders do."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from seglog.cli import main


def read_records(
    capsys: pytest.CaptureFixture[str], log_dir: Path, topic: str, *extra: str, partition: int = 0
) -> list[dict[str, Any]]:
    """``seglog read`` of one partition with the options ``extra``: asserts it exits 0 and returns the
    records it printed (JSON lines), in order."""
    assert main(["read", "--log-dir", str(log_dir), "--topic", topic, "--partition", str(partition), *extra]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def append_file(log_dir: Path, topic: str, source: Path | str, *extra: str, partition: int = 0) -> int:
    """``seglog append`` of the JSON-lines file ``source`` (``-``: stdin) with the options ``extra``;
    returns its exit status."""
    return main(
        ["append", "--log-dir", str(log_dir), "--topic", topic, "--partition", str(partition), *extra, str(source)]
    )


def maintain_once(log_dir: Path, job: str, *extra: str) -> int:
    """``seglog maintain --once job`` with the options ``extra``; returns its exit status."""
    return main(["maintain", "--log-dir", str(log_dir), "--once", job, *extra])
