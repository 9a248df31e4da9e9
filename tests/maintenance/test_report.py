"""Job reports: counters, per-partition errors with their file, one-line summaries."""

from __future__ import annotations

import logging

import pytest

from indexer.errors import StorageError
from maintenance.report import JobReport


def test_errors_are_recorded_with_partition_and_file(caplog: pytest.LogCaptureFixture) -> None:
    report = JobReport("retention")
    with caplog.at_level(logging.ERROR, logger="maintenance.report"):
        with report.partition("t-0"):
            raise StorageError("rename failed", path="/logs/t-0/00000000000000000000.log")
        with report.partition("t-1"):
            raise FileNotFoundError(2, "No such file", "/logs/t-1/00000000000000000042.index")
        with report.partition("t-2"):
            report.count("segments_deleted", 3)
    assert report.partitions == 3 and report.actions == 3
    assert [(e.partition, e.path) for e in report.errors] == [
        ("t-0", "/logs/t-0/00000000000000000000.log"),
        ("t-1", "/logs/t-1/00000000000000000042.index"),
    ]
    assert "t-0 (/logs/t-0/00000000000000000000.log): StorageError: rename failed" in caplog.text
    report.checked = 4
    assert report.summary().startswith(
        "retention: 4 partitions checked, 3 worked on, 3 actions (segments_deleted=3), 0 skipped, 2 errors"
    )
    assert report.to_json()["errors"][1]["partition"] == "t-1"


def test_timed_measures_the_body() -> None:
    report = JobReport("roll")
    with report.timed():
        pass
    assert report.duration_ms >= 0.0
