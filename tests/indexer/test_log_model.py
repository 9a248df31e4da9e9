"""A stateful model test of indexer/log.py: random appends, rolls, truncations, high watermark and log
start offset moves, retention and reopens (clean and unclean) against an in-memory list of records.

After every step: the offsets agree with the model; every record in the log reads back exactly once,
in offset order, with key, value, headers and timestamp intact; ``offset_for_timestamp`` gives the
model's answer; every ``.log`` file is CRC-valid batches up to its end; and every index entry points at
a batch start, the entries strictly increase and honour ``index.interval.bytes``.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from indexer.clock import MockClock
from indexer.config import LogConfig
from indexer.log import Log
from indexer.segment import LogSegment
from tests.budget import scaled

T0 = 1_700_000_000_000
INTERVAL = 150
CONFIG = LogConfig.from_mapping(
    {
        "segment.bytes": 900,
        "segment.ms": 4000,  # record timestamps span 0..6 s: some segments roll on record time
        "segment.index.bytes": 48,  # 6 offset-index slots, 4 time-index slots: rolls on full indexes too
        "index.interval.bytes": INTERVAL,
        "max.message.bytes": 300,  # several batches per append
        "file.delete.delay.ms": 0,
    }
)

blobs = st.one_of(st.none(), st.binary(max_size=40))
headers = st.lists(st.fixed_dictionaries({"key": st.text(max_size=5), "value": blobs}), max_size=2)
rows = st.lists(
    st.fixed_dictionaries({"key": blobs, "value": blobs, "timestamp": st.integers(T0, T0 + 6000), "headers": headers}),
    min_size=0,
    max_size=12,
)

Record = tuple[bytes | None, bytes | None, int, list[dict[str, Any]]]


class LogModel(RuleBasedStateMachine):
    """The log against ``records`` (offset -> record) and the three offsets."""

    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="seglog-model-")) / "t-0"
        self.clock = MockClock(T0)
        self.log = Log.open(self.directory, CONFIG, clock=self.clock)
        self.records: dict[int, Record] = {}
        self.starts: set[int] = {0}  # offsets where an append began: always batch boundaries
        self.lso = self.leo = self.hw = 0

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.directory.parent, ignore_errors=True)

    @initialize()
    def start(self) -> None:
        pass

    # -- rules -----------------------------------------------------------------------------------

    @rule(batch=rows)
    def append(self, batch: list[dict[str, Any]]) -> None:
        info = self.log.append(batch)
        assert info.first_offset == self.leo
        assert info.num_records == len(batch)
        if batch:
            self.starts.add(self.leo)
        for row in batch:
            self.records[self.leo] = (row["key"], row["value"], row["timestamp"], row["headers"])
            self.leo += 1

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @rule(data=st.data())
    def truncate_to(self, data: st.DataObject) -> None:
        target = data.draw(st.sampled_from(sorted(self.starts | {self.leo, self.leo + 3})))
        first_base = self.log.segments.first_segment_base_offset()
        changed = self.log.truncate_to(target)
        assert changed == (target < self.leo)
        if target < self.leo and first_base is not None and first_base > target:
            # below every segment: Kafka truncates fully and starts the log at the target
            self.records = {}
            self.starts = {target}
            self.lso = self.leo = self.hw = target
        elif target < self.leo:
            self.records = {o: r for o, r in self.records.items() if o < target}
            self.starts = {s for s in self.starts if s <= target}
            self.leo = target
            self.lso = min(self.lso, target)
            self.hw = min(self.hw, self.leo)

    @rule(gap=st.integers(0, 5))
    def truncate_fully_and_start_at(self, gap: int) -> None:
        new_offset = self.leo + gap
        self.log.truncate_fully_and_start_at(new_offset)
        self.records = {}
        self.starts = {new_offset}
        self.lso = self.leo = self.hw = new_offset

    @rule(data=st.data())
    def update_high_watermark(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.lso - 2, self.leo + 2))
        assert self.log.update_high_watermark(offset) == min(max(offset, self.lso), self.leo)
        self.hw = min(max(offset, self.lso), self.leo)

    @rule(data=st.data())
    def increment_log_start_offset(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.lso - 1, self.hw))
        assert self.log.maybe_increment_log_start_offset(offset) == (offset > self.lso)
        self.lso = max(self.lso, offset)

    @rule()
    def delete_old_segments(self) -> None:
        # retention.ms (7 days) and retention.bytes (none) never trigger here: only the start offset does
        self.log.delete_old_segments()
        first_base = self.log.segments.first_segment_base_offset()
        assert first_base is not None and first_base <= self.lso
        self.records = {o: r for o, r in self.records.items() if o >= first_base}

    @rule(clean=st.booleans())
    def reopen(self, clean: bool) -> None:
        recovery_point = self.log.recovery_point
        self.log.close()
        self.log = Log.open(
            self.directory,
            CONFIG,
            clock=self.clock,
            recovery_point=recovery_point if clean else 0,
            log_start_offset=self.lso,
            had_clean_shutdown=clean,
            high_watermark=self.hw,
        )

    @rule(ms=st.integers(0, 3000))
    def advance_clock(self, ms: int) -> None:
        self.clock.advance(ms)

    @precondition(lambda self: self.leo > self.lso)
    @rule(data=st.data())
    def read_some(self, data: st.DataObject) -> None:
        start = data.draw(st.integers(self.lso, self.leo))
        limit = data.draw(st.integers(1, 10))
        table = self.log.read_records(start, limit, max_offset=self.leo)
        expected = [o for o in sorted(self.records) if o >= start][:limit]
        assert table.column("offset").to_pylist() == expected

    @rule(data=st.data())
    def offset_for_timestamp(self, data: st.DataObject) -> None:
        target = data.draw(st.integers(T0 - 10, T0 + 6010))
        visible = [o for o in sorted(self.records) if o >= self.lso and self.records[o][2] >= target]
        expected = visible[0] if visible and visible[0] < self.hw else None
        assert self.log.offset_for_timestamp(target) == expected

    # -- invariants --------------------------------------------------------------------------------

    @invariant()
    def offsets_agree(self) -> None:
        assert (self.log.log_start_offset, self.log.log_end_offset, self.log.high_watermark) == (
            self.lso,
            self.leo,
            self.hw,
        )

    @invariant()
    def every_record_reads_back_once_in_order(self) -> None:
        visible = [o for o in sorted(self.records) if o >= self.lso]
        table = self.log.read_records(self.lso, max_offset=self.leo)
        assert table.column("offset").to_pylist() == visible
        got = zip(
            table.column("key").to_pylist(),
            table.column("value").to_pylist(),
            table.column("timestamp").to_pylist(),
            table.column("headers").to_pylist(),
            strict=True,
        )
        for offset, (key, value, timestamp, hdrs) in zip(visible, got, strict=True):
            assert (key, value, timestamp, hdrs or []) == self.records[offset], offset  # no headers may read as null
        bounded = self.log.read_records(self.lso)
        assert bounded.column("offset").to_pylist() == [o for o in visible if o < self.hw]

    @invariant()
    def files_are_valid_batches_with_sound_indexes(self) -> None:
        for segment in self.log.segments:
            check_segment(segment)


def check_segment(segment: LogSegment) -> None:
    scan = segment.log.scan(0, verify_crc=True)
    assert scan.error is None
    assert scan.valid_bytes == segment.size == segment.log.path.stat().st_size
    positions = np.asarray(scan.positions)
    last_offsets = np.asarray(scan.last_offsets)
    if len(positions):
        assert int(scan.base_offsets[0]) >= segment.base_offset
    index = segment.offset_index
    entries = [index.entry(i) for i in range(index.entries)]
    previous_position = 0
    previous_offset = segment.base_offset - 1
    for offset, position in entries:
        slot = np.flatnonzero(positions == position)
        assert slot.size == 1, f"index entry ({offset}, {position}) is not at a batch start of {segment}"
        assert offset == int(last_offsets[slot[0]])
        assert offset > previous_offset and position > previous_position
        assert position - previous_position > INTERVAL
        previous_offset, previous_position = offset, position
    time_index = segment.time_index
    times = [time_index.entry(i) for i in range(time_index.entries)]
    stamps = np.asarray(scan.max_timestamps)
    for i, (timestamp, offset) in enumerate(times):
        if i:
            assert timestamp > times[i - 1].timestamp and offset >= times[i - 1].offset
        slot = np.flatnonzero(last_offsets == offset)
        assert slot.size == 1, f"time index entry ({timestamp}, {offset}) is not a batch's last offset"
        assert int(stamps[slot[0]]) == timestamp == int(stamps[: slot[0] + 1].max())


LogModel.TestCase.settings = settings(
    max_examples=12,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
TestLogModel = LogModel.TestCase


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_log_model_long_run() -> None:
    run_state_machine_as_test(
        LogModel,
        settings=settings(
            max_examples=scaled(150, ci=40, soak=2000),
            stateful_step_count=scaled(50, ci=30, soak=100),
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        ),
    )
