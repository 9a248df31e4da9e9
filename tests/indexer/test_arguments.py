"""The engine's public entry points refuse an offset, count, partition or time that is not an integer
of Kafka's range with one error naming the argument, before they change anything.

A float offset used to be read as its floor, stored as the high watermark (``1.5``) or the log end
offset, a bool counted as 0 or 1, and ``now_ms=2**63`` failed deep in numpy with a bare
``OverflowError``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from indexer.config import LogConfig, load_settings
from indexer.errors import InvalidArgumentError
from indexer.log import Log
from indexer.log_manager import LogManager

ROW = pa.table({"value": [b"x"]})

LOG_CALLS: list[tuple[str, str, Callable[[Log], Any]]] = [
    ("read_records(1.5)", "start_offset", lambda log: log.read_records(1.5)),
    ("read_records(True)", "start_offset", lambda log: log.read_records(True)),
    ("read_records('1')", "start_offset", lambda log: log.read_records("1")),
    ("read_records(max_records=2.5)", "max_records", lambda log: log.read_records(0, max_records=2.5)),
    ("read_records(max_offset=1.5)", "max_offset", lambda log: log.read_records(0, max_offset=1.5)),
    ("read(1.5)", "start_offset", lambda log: log.read(1.5, 100)),
    ("read(max_bytes=1.5)", "max_bytes", lambda log: log.read(0, 1.5)),
    ("read(max_offset=2**64)", "max_offset", lambda log: log.read(0, 100, max_offset=2**64)),
    ("offset_for_timestamp(1.5)", "timestamp", lambda log: log.offset_for_timestamp(1500.5)),
    ("offset_for_timestamp(2**64)", "timestamp", lambda log: log.offset_for_timestamp(2**64)),
    ("append(now_ms=2**63)", "now_ms", lambda log: log.append(ROW, now_ms=2**63)),
    ("append(now_ms=1.5)", "now_ms", lambda log: log.append(ROW, now_ms=1.5)),
    ("append(now_ms=-1)", "now_ms", lambda log: log.append(ROW, now_ms=-1)),
    ("update_high_watermark(1.5)", "offset", lambda log: log.update_high_watermark(1.5)),
    ("update_high_watermark(2**64)", "offset", lambda log: log.update_high_watermark(2**64)),
    ("maybe_increment_log_start_offset(1.5)", "offset", lambda log: log.maybe_increment_log_start_offset(1.5)),
    ("truncate_to(1.5)", "target_offset", lambda log: log.truncate_to(1.5)),
    ("truncate_to(-1)", "target_offset", lambda log: log.truncate_to(-1)),
    ("truncate_fully_and_start_at(2.0)", "new_offset", lambda log: log.truncate_fully_and_start_at(2.0)),
    ("flush(1.5)", "offset", lambda log: log.flush(1.5)),
    ("roll(1.5)", "expected_next_offset", lambda log: log.roll(1.5)),
    ("continue_at(7.5)", "offset", lambda log: log.continue_at(7.5)),
    ("delete_pending_files(1.5)", "now_ms", lambda log: log.delete_pending_files(1.5)),
]


@pytest.mark.parametrize(("call", "argument", "action"), LOG_CALLS, ids=[c[0] for c in LOG_CALLS])
def test_log_entry_points_refuse_a_non_integer_naming_the_argument(
    tmp_path: Path, call: str, argument: str, action: Callable[[Log], Any]
) -> None:
    with Log.open(tmp_path / "t-0", LogConfig.from_mapping({})) as log:
        log.append({"value": [b"a", b"b", b"c"], "timestamp": [1000, 2000, 3000]})
        log.update_high_watermark(2)
        files = sorted(p.name for p in (tmp_path / "t-0").iterdir())
        with pytest.raises(InvalidArgumentError) as info:
            action(log)
        assert info.value.argument == argument
        assert str(info.value).startswith(f"{argument} must be an integer in ")
        assert (log.log_start_offset, log.high_watermark, log.log_end_offset, log.num_segments) == (0, 2, 3, 1)
        assert sorted(p.name for p in (tmp_path / "t-0").iterdir()) == files


def test_numpy_integers_are_integers(tmp_path: Path) -> None:
    with Log.open(tmp_path / "t-0", LogConfig.from_mapping({})) as log:
        log.append({"value": [b"a", b"b"]}, now_ms=np.int64(5))
        assert log.update_high_watermark(np.int64(2)) == 2
        assert type(log.high_watermark) is int
        assert log.read_records(np.int64(1), max_records=np.int32(5)).column("offset").to_pylist() == [1]


MANAGER_CALLS: list[tuple[str, str, Callable[[LogManager], Any]]] = [
    ("get_or_create_log(partition=0.0)", "partition", lambda m: m.get_or_create_log("t", 0.0)),
    ("get_or_create_log(partition=True)", "partition", lambda m: m.get_or_create_log("t", True)),
    ("get_or_create_log(partition=2**31)", "partition", lambda m: m.get_or_create_log("t", 2**31)),
    ("get_log(partition=0.5)", "partition", lambda m: m.get_log("t", 0.5)),
    ("high_watermark(partition=0.0)", "partition", lambda m: m.high_watermark("t", 0.0)),
    ("create_topic(num_partitions=1.5)", "num_partitions", lambda m: m.create_topic("u", 1.5)),
    ("create_topic(num_partitions=True)", "num_partitions", lambda m: m.create_topic("u", True)),
    ("add_partitions(num_partitions=2.0)", "num_partitions", lambda m: m.add_partitions("t", 2.0)),
]


@pytest.mark.parametrize(("call", "argument", "action"), MANAGER_CALLS, ids=[c[0] for c in MANAGER_CALLS])
def test_log_manager_entry_points_refuse_a_non_integer_naming_the_argument(
    tmp_path: Path, call: str, argument: str, action: Callable[[LogManager], Any]
) -> None:
    with LogManager(tmp_path, load_settings()) as logs:
        logs.create_topic("t", 1)
        before = sorted(p.name for p in tmp_path.iterdir())
        topics = (tmp_path / "seglog-topics.json").read_bytes()
        with pytest.raises(InvalidArgumentError) as info:
            action(logs)
        assert info.value.argument == argument
        assert str(info.value).startswith(f"{argument} must be an integer in ")
        assert sorted(p.name for p in tmp_path.iterdir()) == before
        assert (tmp_path / "seglog-topics.json").read_bytes() == topics
