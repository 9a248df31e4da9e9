"""Tests for indexer/log_loader.py: Kafka's load and recovery order (spec 6.2, 6.3), the dry run,
and the loader on real broker-written partition directories."""

from __future__ import annotations

import dataclasses
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from indexer import file_names
from indexer.checkpoint import EpochEntry, LeaderEpochCheckpointFile
from indexer.clock import MockClock
from indexer.config import LogConfig
from indexer.errors import StorageError
from indexer.lock import FileLock
from indexer.log import Log
from indexer.log_loader import LoadedLog, LogLoader, RecoveryReport, StepKind
from indexer.records.columns import to_append_table
from indexer.records.encoder import encode_batches
from indexer.records.file_records import BatchScan, FileRecords

CONFIG = LogConfig(segment_bytes=2048, index_interval_bytes=200, file_delete_delay_ms=1000)
TRUNCATE = dataclasses.replace(CONFIG, recovery_strategy="truncate")  # Kafka's recovery


def write_log(directory: Path, appends: int = 30, rows: int = 4, config: LogConfig = CONFIG) -> int:
    """Write ``appends`` batches of ``rows`` records through Log and close it cleanly; returns the LEO."""
    log = Log.open(directory, config, clock=MockClock())
    for i in range(appends):
        log.append({"key": [f"k{i}-{j}".encode() for j in range(rows)], "value": [b"x" * 40] * rows})
    end = log.log_end_offset
    log.close()
    return end


def snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def loader(directory: Path, clock: MockClock | None = None, config: LogConfig = CONFIG, **kwargs: object) -> LogLoader:
    return LogLoader(directory, config, clock=clock or MockClock(), **kwargs)  # type: ignore[arg-type]


def load(directory: Path, clock: MockClock | None = None, **kwargs: object) -> LoadedLog:
    """Dry run first (must change nothing), then the real load; both must decide the same."""
    before = snapshot(directory)
    planned = loader(directory, clock, **kwargs).check()
    assert snapshot(directory) == before, "check() changed files"
    loaded = loader(directory, clock, **kwargs).load()
    assert decisions(planned) == decisions(loaded.report)
    assert (planned.next_offset, planned.recovery_point, planned.log_start_offset) == (
        loaded.next_offset,
        loaded.recovery_point,
        loaded.log_start_offset,
    )
    return loaded


def decisions(report: RecoveryReport) -> list[tuple]:
    return [(s.kind, Path(s.path).name, s.bytes_truncated, s.batches_dropped, s.segment_bytes) for s in report.steps]


def close(loaded: LoadedLog) -> None:
    for segment in loaded.segments:
        segment.close()
    for segment in loaded.deleted_segments:
        segment.close_handlers()


def taken_over(directory: Path, loaded: LoadedLog, clock: MockClock, config: LogConfig = CONFIG) -> Log:
    """The writable log of ``loaded``, as :meth:`Log.open` makes it after the load (under the lock)."""
    lock = FileLock(directory / file_names.PARTITION_LOCK_FILE)
    lock.acquire()
    return Log.from_loaded(directory, config, loaded, clock=clock, file_lock=lock, high_watermark=None)


def segment_logs(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.log"))


def damage_second_batch(log_file: Path) -> tuple[bytearray, BatchScan, int]:
    """Flip a bit inside the records of ``log_file``'s second batch, so its CRC fails; returns the
    damaged bytes, the scan of the file before, and the second batch's position."""
    data = bytearray(log_file.read_bytes())
    scan = FileRecords.open(log_file, mutable=False).scan()
    second = int(scan.positions[1])
    data[second + 70] ^= 0x01
    log_file.write_bytes(bytes(data))
    return data, scan, second


def test_clean_shutdown_load_does_nothing(tmp_path: Path) -> None:
    end = write_log(tmp_path / "t-0")
    loaded = load(tmp_path / "t-0", had_clean_shutdown=True, recovery_point=0)
    assert loaded.report.steps == []
    assert (loaded.next_offset, loaded.recovery_point, loaded.log_start_offset) == (end, end, 0)
    assert len(loaded.segments) == len(segment_logs(tmp_path / "t-0")) > 2
    close(loaded)


def test_unclean_shutdown_recovers_from_the_recovery_point_segment(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    end = write_log(directory)
    bases = [file_names.offset_from_file_name(p.name) for p in segment_logs(directory)]
    recovery_point = bases[2] + 1  # inside the third segment: it and every later one are recovered
    loaded = load(directory, recovery_point=recovery_point)
    recovered = [s.base_offset for s in loaded.report.of_kind(StepKind.RECOVER_SEGMENT)]
    assert recovered == bases[2:]
    assert loaded.report.bytes_truncated == 0 and not loaded.report.data_lost
    assert (loaded.next_offset, loaded.recovery_point) == (end, recovery_point)
    close(loaded)


def test_torn_tail_is_truncated_and_reported(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    end = write_log(directory)
    last = segment_logs(directory)[-1]
    size = last.stat().st_size
    with last.open("ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x99\x00\x00\x01\x00")  # a batch header cut short
    loaded = load(directory, recovery_point=0)
    [step] = [s for s in loaded.report.steps if s.bytes_truncated]
    assert step.path == str(last) and step.bytes_truncated == 12 and step.batches_dropped == 0
    assert last.stat().st_size == size
    assert loaded.next_offset == end
    close(loaded)


def test_corruption_deletes_every_later_segment(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    write_log(directory)
    logs = segment_logs(directory)
    victim = logs[1]
    data, scan, second = damage_second_batch(victim)
    clock = MockClock()
    loaded = load(directory, clock, config=TRUNCATE, recovery_point=0)
    report = loaded.report
    [cut] = [s for s in report.of_kind(StepKind.RECOVER_SEGMENT) if s.bytes_truncated]
    assert cut.path == str(victim) and cut.bytes_truncated == len(data) - second
    assert cut.batches_dropped == len(scan) - 1
    deleted = [Path(s.path) for s in report.segments_deleted]
    assert deleted == logs[2:]
    assert loaded.next_offset == int(scan.last_offsets[0]) + 1
    assert loaded.segments.base_offsets() == [file_names.offset_from_file_name(p.name) for p in logs[:2]]
    # Nothing is deleted without a copy: the cut bytes and every later .log are in quarantine.
    assert (directory / f"{victim.name}.{second}.quarantine").read_bytes() == bytes(data[second:])
    assert all(not p.exists() and (directory / f"{p.name}.0.quarantine").exists() for p in deleted)
    assert [(r.first, r.end) for r in report.lost_offsets] == [(int(scan.last_offsets[0]) + 1, None)]
    assert report.data_lost
    # The deleted segments' other files wait as .deleted for the log, which removes them after the delay.
    bases = [file_names.offset_from_file_name(p.name) for p in deleted]
    assert [s.base_offset for s in loaded.deleted_segments] == bases
    assert any(directory.glob("*.deleted"))
    log = taken_over(directory, loaded, clock, TRUNCATE)
    clock.advance(CONFIG.file_delete_delay_ms)
    assert not any(directory.glob("*.deleted"))
    log.close()


def test_salvage_keeps_every_intact_batch_after_the_damage(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    end = write_log(directory)
    logs = segment_logs(directory)
    victim = logs[1]
    data, scan, second = damage_second_batch(victim)
    loaded = load(directory, MockClock(), recovery_point=0)
    report = loaded.report
    [salvaged] = report.of_kind(StepKind.SALVAGE_SEGMENT)
    assert salvaged.path == str(victim) and salvaged.bytes_truncated == int(scan.sizes[1])
    assert not report.segments_deleted and loaded.next_offset == end
    assert [(r.first, r.end) for r in report.lost_offsets] == [
        (int(scan.base_offsets[1]), int(scan.last_offsets[1]) + 1)
    ]
    quarantined = directory / f"{victim.name}.{second}.quarantine"
    assert report.quarantined == [quarantined.name]
    assert quarantined.read_bytes() == bytes(data[second : second + int(scan.sizes[1])])
    kept = bytes(data[:second] + data[second + int(scan.sizes[1]) :])
    assert victim.read_bytes() == kept and len(FileRecords.open(victim, mutable=False).scan()) == len(scan) - 1
    assert report.data_lost
    close(loaded)


def scans_while(monkeypatch: pytest.MonkeyPatch, run: Callable[[], object]) -> list[tuple[str, int, bool]]:
    """``(file, start, verify_crc)`` of every ``FileRecords.scan`` made by ``run()``."""
    scans: list[tuple[str, int, bool]] = []
    original = FileRecords.scan

    def counting(self: FileRecords, start: int = 0, end: int | None = None, *, verify_crc: bool = True) -> BatchScan:
        scans.append((self.path.name, start, verify_crc))
        return original(self, start, end, verify_crc=verify_crc)

    with monkeypatch.context() as patch:
        patch.setattr(FileRecords, "scan", counting)
        run()
    return scans


def test_each_recovered_segment_is_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    directory = tmp_path / "t-0"
    end = write_log(directory)
    logs = segment_logs(directory)
    victim = logs[-1]
    _, _, second = damage_second_batch(victim)
    once = [(p.name, 0, True) for p in logs] + [(victim.name, second, False)]  # + the cut tail's framing
    assert sorted(scans_while(monkeypatch, loader(directory, recovery_point=0).check)) == sorted(once)
    result: list[LoadedLog] = []
    assert sorted(
        scans_while(monkeypatch, lambda: result.append(loader(directory, recovery_point=0).load()))
    ) == sorted(once)
    [loaded] = result
    assert loaded.next_offset < end and loaded.next_offset == loaded.segments.active_segment().read_next_offset()
    close(loaded)


def test_the_next_segment_is_read_ahead_while_one_is_recovered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    directory = tmp_path / "t-0"
    write_log(directory)
    logs = segment_logs(directory)
    events: list[tuple[str, str]] = []
    original_scan, original_advise = FileRecords.scan, os.posix_fadvise

    def scan(self: FileRecords, start: int = 0, end: int | None = None, *, verify_crc: bool = True) -> BatchScan:
        events.append(("scan", self.path.name))
        return original_scan(self, start, end, verify_crc=verify_crc)

    def advise(fd: int, offset: int, length: int, advice: int) -> None:
        assert (offset, length, advice) == (0, 0, os.POSIX_FADV_WILLNEED)
        events.append(("read ahead", Path(os.readlink(f"/proc/self/fd/{fd}")).name))
        original_advise(fd, offset, length, advice)

    monkeypatch.setattr(FileRecords, "scan", scan)
    monkeypatch.setattr(os, "posix_fadvise", advise)
    close(loader(directory, recovery_point=0).load())
    expected = []
    for current, following in zip(logs, [*logs[1:], None], strict=True):
        if following is not None:
            expected.append(("read ahead", following.name))
        expected.append(("scan", current.name))
    assert len(logs) > 2 and events == expected


def test_corruption_below_the_recovery_point_is_not_looked_for(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    end = write_log(directory)
    logs = segment_logs(directory)
    data = bytearray(logs[0].read_bytes())
    data[-5] ^= 0xFF
    logs[0].write_bytes(bytes(data))
    loaded = load(directory, recovery_point=end)
    assert not loaded.report.data_lost and loaded.next_offset == end
    close(loaded)


def test_temp_and_swap_files(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    end = write_log(directory)
    logs = segment_logs(directory)
    first, second = (file_names.offset_from_file_name(p.name) for p in logs[:2])
    # A finished split of segment `first`: its .swap copy replaces the originals.
    for suffix in (".log", ".index", ".timeindex"):
        src = directory / f"{first:020d}{suffix}"
        shutil.copy(src, str(src) + ".swap")
    (directory / f"{first:020d}.snapshot").write_bytes(b"")  # replaced by the swap too
    # An unfinished split above `second`: .cleaned files make .swap files at or above them invalid.
    (directory / f"{second:020d}.log.cleaned").write_bytes(b"")
    (directory / f"{second + 1:020d}.log.swap").write_bytes(b"")
    (directory / f"{second:020d}.index.deleted").write_bytes(b"")
    (directory / "00000000000099999999.checkpoint.deleted").write_bytes(b"kraft")  # not ours: kept
    loaded = load(directory, had_clean_shutdown=True)
    kinds = [s.kind for s in loaded.report.steps]
    assert kinds.count(StepKind.DELETE_STRAY_DELETED) == 1
    assert kinds.count(StepKind.DELETE_INVALID_SWAP) == 1
    assert kinds.count(StepKind.DELETE_CLEANED) == 1
    assert {Path(s.path).name for s in loaded.report.of_kind(StepKind.DELETE_SWAPPED_OUT)} == {
        f"{first:020d}.log",
        f"{first:020d}.index",
        f"{first:020d}.timeindex",
        f"{first:020d}.snapshot",
    }
    assert kinds.count(StepKind.COMPLETE_SWAP) == 3
    assert not any(directory.glob("*.swap")) and not any(directory.glob("*.cleaned"))
    assert (directory / "00000000000099999999.checkpoint.deleted").exists()
    assert loaded.next_offset == end
    close(loaded)


@pytest.mark.parametrize("swap", ["empty", "first half", "one batch short"])
def test_a_swap_that_lacks_valid_batches_of_what_it_replaces_is_set_aside(tmp_path: Path, swap: str) -> None:
    """An empty ``.swap`` beside segment 0 was renamed over it (Kafka's step 4 renames every swap
    file): its committed records were gone for good, no copy in quarantine. A swap file short of the
    segment's valid batches (cut, empty: no split or salvage of seglog writes one) would destroy
    records no other file holds; it is quarantined whole and the segment stays. A swap holding
    every batch still replaces it (test_temp_and_swap_files)."""
    directory = tmp_path / "t-0"
    end = write_log(directory)
    first = segment_logs(directory)[0]
    before = snapshot(directory)
    with FileRecords.open(first, mutable=False) as records:
        positions = records.scan().positions.tolist()
    cut = {"empty": 0, "first half": positions[len(positions) // 2], "one batch short": positions[-1]}[swap]
    Path(f"{first}.swap").write_bytes(first.read_bytes()[:cut])
    loaded = load(directory, had_clean_shutdown=True)
    kinds = [s.kind for s in loaded.report.steps]
    assert StepKind.COMPLETE_SWAP not in kinds and StepKind.DELETE_SWAPPED_OUT not in kinds, kinds
    assert kinds.count(StepKind.QUARANTINE_DAMAGED_SWAP) == 1, kinds
    assert loaded.next_offset == end and not loaded.report.data_lost
    close(loaded)
    assert first.read_bytes() == before[first.name]
    assert not any(directory.glob("*.swap")) and len(list(directory.glob("*.quarantine"))) == 1


def test_orphaned_index_and_missing_time_index(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    write_log(directory)
    (directory / f"{99999:020d}.index").write_bytes(b"\0" * 8)
    (directory / f"{99999:020d}.timeindex").write_bytes(b"")
    first_time_index = directory / f"{0:020d}.timeindex"
    first_time_index.unlink()
    loaded = load(directory, had_clean_shutdown=True)
    assert [s.kind for s in loaded.report.steps] == [
        StepKind.CREATE_EMPTY_TIME_INDEX,  # 0000.timeindex: created empty, not rebuilt (as Kafka)
        StepKind.DELETE_ORPHANED_INDEX,
        StepKind.DELETE_ORPHANED_INDEX,
    ]
    assert first_time_index.exists() and first_time_index.stat().st_size == 0
    close(loaded)


@pytest.mark.parametrize(
    "damage",
    ["missing", "odd-size", "zero-tail", "past-end", "garbage-time"],
)
def test_bad_index_is_rebuilt_even_after_clean_shutdown(tmp_path: Path, damage: str) -> None:
    directory = tmp_path / "t-0"
    write_log(directory)
    index = directory / f"{0:020d}.index"
    good = index.read_bytes()
    assert len(good) >= 16
    if damage == "missing":
        index.unlink()
    elif damage == "odd-size":
        index.write_bytes(good + b"\1")
    elif damage == "zero-tail":
        index.write_bytes(good + b"\0" * 32)
    elif damage == "past-end":
        index.write_bytes(good[:-4] + (10**6).to_bytes(4, "big"))
    else:
        (directory / f"{0:020d}.timeindex").write_bytes(b"\xff" * 24)
    loaded = load(directory, had_clean_shutdown=True)
    [step] = loaded.report.steps
    assert step.kind is StepKind.RECOVER_SEGMENT and step.indexes_rebuilt and step.base_offset == 0
    close(loaded)
    assert index.read_bytes() == good


def test_log_end_below_log_start_empties_the_log(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    end = write_log(directory)
    segments = len(segment_logs(directory))
    before = snapshot(directory)
    with pytest.raises(
        StorageError, match=rf"checkpointed log start offset {end + 100} .* above its log end offset {end}"
    ):
        loader(directory, None, had_clean_shutdown=True, log_start_offset=end + 100).load()  # a writer's
    assert snapshot(directory) == before
    loaded = load(directory, had_clean_shutdown=True, log_start_offset=end + 100, remove_below_log_start=True)
    assert len(loaded.report.of_kind(StepKind.DELETE_BELOW_LOG_START)) == segments
    assert loaded.report.of_kind(StepKind.CREATE_EMPTY_SEGMENT)[0].base_offset == end + 100
    # The log end was unknown, so even after a clean shutdown the recovery point is min(checkpoint, LEO).
    assert (loaded.next_offset, loaded.log_start_offset, loaded.recovery_point) == (end + 100, end + 100, 0)
    assert loaded.segments.base_offsets() == [end + 100]
    close(loaded)


def test_empty_directory_gets_an_empty_segment_at_the_log_start(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    directory.mkdir()
    loaded = load(directory, log_start_offset=42)
    assert [s.kind for s in loaded.report.steps] == [StepKind.CREATE_EMPTY_SEGMENT]
    assert (loaded.next_offset, loaded.log_start_offset, loaded.recovery_point) == (42, 42, 0)
    assert (directory / f"{42:020d}.log").exists()
    close(loaded)


def test_directory_marked_for_deletion_is_not_recovered(tmp_path: Path) -> None:
    directory = tmp_path / "t-0.0123456789abcdef0123456789abcdef-delete"
    write_log(tmp_path / "t-0")
    (tmp_path / "t-0").rename(directory)
    last = segment_logs(directory)[-1]
    with last.open("ab") as f:
        f.write(b"garbage")
    loaded = load(directory, recovery_point=0)
    assert loaded.report.steps == [] and (loaded.next_offset, loaded.recovery_point) == (0, 0)
    close(loaded)


def _raw_batches(base_offset: int, rows: int) -> bytes:
    table = to_append_table({"value": [b"v"] * rows}, now_ms=1_700_000_000_000)
    return np.asarray(encode_batches(table, base_offset).buffer).tobytes()


def test_offset_overflow_splits_the_segment(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    directory.mkdir()
    high = 3_000_000_000  # cannot be stored relative to base 0 (KAFKA-6264)
    (directory / f"{0:020d}.log").write_bytes(_raw_batches(0, 3) + _raw_batches(high, 2) + _raw_batches(high + 2, 1))
    clock = MockClock()
    loaded = load(directory, clock, recovery_point=0)
    [split] = loaded.report.of_kind(StepKind.SPLIT_OVERFLOWED_SEGMENT)
    assert f"segments at offsets [0, {high}]" in split.detail
    assert loaded.segments.base_offsets() == [0, high]
    assert loaded.next_offset == high + 3
    assert (directory / f"{high:020d}.log").stat().st_size == len(_raw_batches(high, 2)) + len(
        _raw_batches(high + 2, 1)
    )
    assert (directory / f"{0:020d}.log.deleted").exists()
    log = taken_over(directory, loaded, clock)
    clock.advance(CONFIG.file_delete_delay_ms)
    assert not (directory / f"{0:020d}.log.deleted").exists()
    log.close()
    assert [s.kind for s in load(directory, had_clean_shutdown=True).report.steps] == []


def test_leader_epochs_and_producer_snapshots_are_trimmed(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    end = write_log(directory)
    bases = [file_names.offset_from_file_name(p.name) for p in segment_logs(directory)]
    LeaderEpochCheckpointFile(directory / "leader-epoch-checkpoint").write(
        [EpochEntry(0, 0), EpochEntry(1, 5), EpochEntry(2, 30), EpochEntry(3, end), EpochEntry(4, end + 10)]
    )
    for offset in (bases[1], bases[1] + 1, end):
        file_names.producer_snapshot_file(directory, offset).write_bytes(b"")
    loaded = load(directory, had_clean_shutdown=True, log_start_offset=10)
    assert LeaderEpochCheckpointFile(directory / "leader-epoch-checkpoint").read() == [(1, 10), (2, 30)]
    deleted = {Path(s.path).name for s in loaded.report.of_kind(StepKind.DELETE_STRAY_SNAPSHOT)}
    assert deleted == {f"{bases[1] + 1:020d}.snapshot"}
    assert file_names.producer_snapshot_file(directory, end).exists()  # the snapshot at the log end stays
    close(loaded)
    # Only the largest stray snapshot survives removeStraySnapshots; above the log end it goes too.
    file_names.producer_snapshot_file(directory, end + 5).write_bytes(b"")
    loaded = load(directory, had_clean_shutdown=True, log_start_offset=10)
    deleted = {Path(s.path).name for s in loaded.report.of_kind(StepKind.DELETE_STRAY_SNAPSHOT)}
    assert deleted == {f"{end:020d}.snapshot", f"{end + 5:020d}.snapshot"}
    assert file_names.producer_snapshot_file(directory, bases[1]).exists()
    close(loaded)


def test_out_of_order_offsets_drop_the_segment_data(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    directory.mkdir()
    (directory / f"{0:020d}.log").write_bytes(_raw_batches(10, 2) + _raw_batches(0, 2))
    (directory / f"{100:020d}.log").write_bytes(_raw_batches(100, 2))
    loaded = load(directory, config=TRUNCATE, recovery_point=0)
    [dropped] = loaded.report.of_kind(StepKind.DROP_SEGMENT_DATA)
    assert dropped.base_offset == 0 and dropped.batches_dropped == 2
    assert [Path(s.path).name for s in loaded.report.segments_deleted] == [f"{100:020d}.log"]
    assert (loaded.next_offset, loaded.segments.base_offsets()) == (0, [0])
    close(loaded)


def test_salvage_keeps_the_longest_increasing_run_of_batches(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    directory.mkdir()
    first, second = _raw_batches(0, 2) + _raw_batches(2, 2), _raw_batches(1, 2)  # the last goes backwards
    (directory / f"{0:020d}.log").write_bytes(first + second)
    (directory / f"{100:020d}.log").write_bytes(_raw_batches(100, 2))
    loaded = load(directory, recovery_point=0)
    [salvaged] = [s for s in loaded.report.steps if s.bytes_truncated]
    assert salvaged.kind == StepKind.RECOVER_SEGMENT  # only the end goes: cut in place, no rewrite
    assert salvaged.bytes_truncated == len(second) and salvaged.batches_dropped == 1
    assert not loaded.report.segments_deleted
    assert (directory / f"{0:020d}.log").read_bytes() == first
    assert (directory / f"{0:020d}.log.{len(first)}.quarantine").read_bytes() == second
    assert loaded.segments.base_offsets() == [0, 100]
    close(loaded)


VECTOR_PARTITIONS = [
    "multi-segment-3x/invoice-0",
    "multi-segment-3x/invoice-3",
    "gzip-large-records/items-0",
    "snappy-headers/__consumer_offsets-0",
    "mixed-codecs-epochs/lsx1-0",
    "transactions-commit/__transaction_state-0",
]


@pytest.mark.parametrize("partition", VECTOR_PARTITIONS)
def test_vectors_load_without_data_loss(vectors_dir: Path, tmp_path: Path, partition: str) -> None:
    source = vectors_dir / partition
    if not source.is_dir():
        pytest.skip(f"{partition} not in the vectors")
    in_place = LogLoader(source, LogConfig(), recovery_point=0, clock=MockClock()).check()  # read-only dir
    assert not in_place.data_lost
    directory = tmp_path / source.name
    shutil.copytree(source, directory)
    for path in [directory, *directory.iterdir()]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    loaded = LogLoader(directory, LogConfig(), recovery_point=0, clock=MockClock()).load()
    assert decisions(loaded.report) == decisions(in_place)
    assert not loaded.report.data_lost and loaded.next_offset == in_place.next_offset
    last_log = segment_logs(directory)[-1]
    scan = FileRecords.open(last_log, mutable=False).scan()
    expected_end = int(scan.last_offsets[-1]) + 1 if len(scan) else file_names.offset_from_file_name(last_log.name)
    assert loaded.next_offset == expected_end
    close(loaded)
    again = LogLoader(directory, LogConfig(), had_clean_shutdown=True, clock=MockClock()).load()
    assert again.report.steps == [] and again.next_offset == expected_end
    close(again)


def test_deleted_files_removed_by_another_thread_while_the_log_opens_are_gone_not_an_error(tmp_path: Path) -> None:
    """Files renamed ``.deleted`` are removed ``file.delete.delay.ms`` later by whoever renamed them, also
    after that log was closed (the daemon's borrow gave the partition back; another daemon) and so
    while a new holder's loader lists and removes the same files: one that vanished between the
    listing and the loader's look at it is gone, as the loader would have made it, not a file that
    "could not be read" failing the open (the daemon's retention job failed so on a live directory)."""
    directory = tmp_path / "t-0"
    end = write_log(directory)
    for _ in range(5):
        names = [directory / f"{base:020d}.{kind}.deleted" for base in range(1000) for kind in ("log", "index")]
        for name in names:
            name.write_bytes(b"")
        started = threading.Event()

        def remove(names: list[Path] = names, started: threading.Event = started) -> None:
            started.set()
            for name in reversed(names):
                name.unlink(missing_ok=True)

        remover = threading.Thread(target=remove)
        remover.start()
        started.wait()
        log = Log.open(directory, CONFIG, clock=MockClock())
        assert log.log_end_offset == end
        log.close()
        remover.join()
        assert not list(directory.glob("*.deleted"))
