"""The executor-side write protocol of one partition (streaming.executor_writes), without Spark: real files,
attempts of Spark tasks played by direct calls and threads. Each test is one crash window of
docs/streaming.md ("Executor writes: crash windows")."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from indexer.commit_log import SinkCommit, SinkCommitLog
from indexer.config import Settings
from indexer.errors import FencedError, StorageError
from indexer.file_names import REPLICATION_OFFSET_CHECKPOINT_FILE
from indexer.records.encoder import EncodedBatches
from indexer.sink_fence import DONE, FenceToken
from maintenance.access import BorrowedLogs
from maintenance.jobs import JOBS
from streaming import executor_writes
from streaming.executor_writes import (
    PIECES_SCHEMA,
    WritePlan,
    _received_piece,
    checkpoint_partition,
    encode_pieces,
    left_clean,
    write_partition,
    write_pieces,
    write_tasks,
)
from streaming.fence import PartitionFence
from streaming.micro_batch import TopicLayout
from tests.streaming.helpers import QUERY_TIMEOUT_S, check_indexes, read_topic, snapshot

CONFIG = (
    Settings()
    .log_config("t")
    .with_overrides({"segment.bytes": 8192, "max.message.bytes": 1024, "index.interval.bytes": 256}, source="test")
)
LAYOUT = TopicLayout(2, CONFIG.max_message_bytes, CONFIG.segment_bytes)
REPO = Path(__file__).resolve().parents[2]


def _plan(log_dir: Path, batch_id: int, ends: dict[int, int] | None = None) -> WritePlan:
    return WritePlan(
        str(log_dir),
        "t",
        "t",
        LAYOUT,
        CONFIG,
        "q",
        batch_id,
        1_700_000_000_000,
        f"w{batch_id}",
        ends if ends is not None else {0: 0, 1: 0},
    )


def _rows(start: int, n: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {
            "key": [f"k{i % 7}".encode() for i in range(start, start + n)],
            "value": [f"v{i}".encode() for i in range(start, start + n)],
        }
    )


def _pieces(plan: WritePlan, start: int, n: int) -> dict[int, list[EncodedBatches]]:
    """Stage 1 of one Spark task over rows ``start..start+n`` (in two record batches), per partition."""
    half = n // 2
    batches = iter([_rows(start, half), _rows(start + half, n - half)])
    table = pa.Table.from_batches(list(encode_pieces(plan, 0, batches)), schema=PIECES_SCHEMA)
    out: dict[int, list[EncodedBatches]] = {}
    for batch in table.to_batches():
        for row, partition in enumerate(batch.column("partition").to_pylist()):
            out.setdefault(partition, []).append(_received_piece(batch, row))
    return out


def _commit(log_dir: Path, batch_id: int, ends: dict[int, int]) -> None:
    SinkCommitLog(log_dir, "t").write(SinkCommit("t", "q", batch_id, {("t", p): e for p, e in ends.items()}))
    checkpoint_partition(log_dir, REPLICATION_OFFSET_CHECKPOINT_FILE, {("t", p): e for p, e in ends.items()})


def _values(log_dir: Path) -> Counter[bytes]:
    return Counter(r.value for r in read_topic(log_dir, "t", up_to_high_watermark=False))  # type: ignore[misc]


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    _commit(tmp_path, -1, {0: 0, 1: 0})  # the driver's baseline
    return tmp_path


def test_encoding_is_deterministic(log_dir: Path) -> None:
    plan = _plan(log_dir, 0)
    first = pa.Table.from_batches(list(encode_pieces(plan, 3, iter([_rows(0, 500)]))))
    again = pa.Table.from_batches(list(encode_pieces(plan, 3, iter([_rows(0, 500)]))))
    assert first.equals(again) and first.num_rows == 2


@pytest.mark.parametrize(("partitions", "cores", "tasks"), [(4, 2, 2), (2, 8, 2), (3, 3, 3), (1, 0, 1)])
def test_one_wave_of_write_tasks(partitions: int, cores: int, tasks: int) -> None:
    assert write_tasks(partitions, cores) == tasks


def test_one_task_writes_each_of_its_partitions_in_row_order(log_dir: Path) -> None:
    """Fewer write tasks than partitions: a task gets every piece of its partitions from every encode
    task, in any order, and writes each partition in the micro-batch's row order."""
    plan = _plan(log_dir, 0)
    encoded = [encode_pieces(plan, task, iter([_rows(task * 300, 300)])) for task in (1, 0)]  # out of order
    received = pa.Table.from_batches([b for batches in encoded for b in batches], schema=PIECES_SCHEMA)
    assert sorted(set(received.column("partition").to_pylist())) == [0, 1]
    written = write_pieces(plan, "a", iter(received.to_batches(max_chunksize=1)))
    results = pa.Table.from_batches(list(written)).to_pylist()
    assert [(r["partition"], r["start"], r["wrote"]) for r in results] == [(0, 0, True), (1, 0, True)]
    assert sum(r["rows"] for r in results) == 600
    _commit(log_dir, 0, {r["partition"]: r["end"] for r in results})
    for partition in (0, 1):
        stored = [r for r in read_topic(log_dir, "t") if r.partition == partition]
        assert [r.offset for r in stored] == list(range(len(stored)))
        seqs = [int(r.value[1:]) for r in stored]  # type: ignore[index]
        assert seqs == sorted(seqs) and len(stored) == results[partition]["end"]


@pytest.mark.slow
def test_a_task_writes_more_than_2_gib_of_pieces(log_dir: Path) -> None:
    """Pieces of one partition that together pass 2 GiB (what one Arrow ``binary`` array can hold) are
    written in order: the task sorted the whole received table, data included, and failed with Arrow's
    "offset overflow while concatenating arrays"."""
    config = Settings().log_config("t")
    plan = replace(
        _plan(log_dir, 0), config=config, layout=TopicLayout(1, config.max_message_bytes, config.segment_bytes)
    )
    value = b"x" * (512 << 10)
    rows = pa.RecordBatch.from_pydict({"key": [b"k"] * 1400, "value": [value] * 1400})  # 700 MiB, partition 0
    (piece,) = list(encode_pieces(plan, 0, iter([rows])))
    received = [piece.set_column(2, "seq", pa.array([seq], pa.int32())) for seq in (2, 0, 1)]
    assert sum(len(batch.column("data")[0].as_buffer()) for batch in received) > 2**31
    (result,) = pa.Table.from_batches(list(write_pieces(plan, "a", iter(received)))).to_pylist()
    assert (result["partition"], result["start"], result["end"], result["wrote"]) == (0, 0, 4200, True)


def test_attempt_writes_and_a_duplicate_of_a_finished_attempt_touches_nothing(log_dir: Path) -> None:
    plan = _plan(log_dir, 0)
    pieces = _pieces(plan, 0, 400)
    first = write_partition(plan, 0, pieces[0], attempt="a")
    assert first.wrote and first.start == 0 and first.end == first.rows > 0
    assert PartitionFence(log_dir / "t-0", "t").read() == FenceToken("q", 0, "a", 0, first.end, DONE)
    before = snapshot(log_dir)
    duplicate = write_partition(plan, 0, _pieces(plan, 0, 400)[0], attempt="b")  # speculative copy, retry
    assert not duplicate.wrote and (duplicate.start, duplicate.end) == (first.start, first.end)
    assert snapshot(log_dir) == before


class _DiesAfter(list[EncodedBatches]):
    """Pieces whose appending fails after ``n`` were appended: an attempt dying half-way (the first pass
    over them counts their rows)."""

    def __init__(self, pieces: list[EncodedBatches], n: int) -> None:
        super().__init__(pieces)
        self.n = n
        self.passes = 0

    def __iter__(self) -> Iterator[EncodedBatches]:
        self.passes += 1
        for i, piece in enumerate(list.__iter__(self)):
            if i == self.n and self.passes > 1:
                raise RuntimeError("executor lost")
            yield piece


def test_retry_after_an_attempt_died_half_way_removes_its_records_and_writes_once(log_dir: Path) -> None:
    plan = _plan(log_dir, 0)
    pieces = _pieces(plan, 0, 1000)
    assert len(pieces[1]) == 2
    with pytest.raises(RuntimeError):
        write_partition(plan, 1, _DiesAfter(pieces[1], 1), attempt="a")
    fence = PartitionFence(log_dir / "t-1", "t")
    assert fence.read() == FenceToken("q", 0, "a", 0)  # claimed, never done
    assert not left_clean(log_dir / "t-1", fence)  # its holder line stays: the retry's open recovers the log
    retry = write_partition(plan, 1, _pieces(plan, 0, 1000)[1], attempt="b")
    assert retry.wrote and retry.end == retry.rows
    stored = read_topic(log_dir, "t", up_to_high_watermark=False)
    assert [r.offset for r in stored] == list(range(retry.end))
    assert len({r.value for r in stored}) == retry.end
    assert check_indexes(log_dir, "t") > 0
    assert left_clean(log_dir / "t-1", fence)  # closed: the next attempt's open skips recovery


def test_zombie_attempt_that_lost_its_lock_is_fenced_and_neither_extends_nor_cuts_the_winner(
    log_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = _plan(log_dir, 0)
    opened: list[Any] = []
    original_open = executor_writes.open_partition

    def capture(*args: Any, **kwargs: Any) -> Any:
        log = original_open(*args, **kwargs)
        opened.append(log)
        return log

    monkeypatch.setattr(executor_writes, "open_partition", capture)
    paused, resume = threading.Event(), threading.Event()

    class _Pauses(list[EncodedBatches]):
        passes = 0

        def __iter__(self) -> Iterator[EncodedBatches]:
            self.passes += 1
            for i, piece in enumerate(list.__iter__(self)):
                if i == 1 and self.passes > 1:
                    paused.set()
                    assert resume.wait(QUERY_TIMEOUT_S)  # the winner has written
                yield piece

    errors: list[BaseException] = []

    def zombie() -> None:
        try:
            write_partition(plan, 1, _Pauses(_pieces(plan, 0, 1000)[1]), attempt="zombie")
        except BaseException as e:
            errors.append(e)

    thread = threading.Thread(target=zombie)
    thread.start()
    assert paused.wait(QUERY_TIMEOUT_S)
    opened[0]._file_lock.release()  # the zombie's lock lapses (an NFS lease), it does not know
    winner = write_partition(plan, 1, _pieces(plan, 0, 1000)[1], attempt="winner")
    after_winner = snapshot(log_dir)
    resume.set()
    thread.join(QUERY_TIMEOUT_S)
    assert len(errors) == 1 and isinstance(errors[0], FencedError)
    assert snapshot(log_dir) == after_winner  # no extension, no trim, no truncation by the zombie
    assert PartitionFence(log_dir / "t-1", "t").read() == FenceToken("q", 0, "winner", 0, winner.end, DONE)
    assert len(_values(log_dir)) == winner.end


def test_stale_attempt_after_its_batch_committed_writes_and_truncates_nothing(log_dir: Path) -> None:
    plan0 = _plan(log_dir, 0)
    done = write_partition(plan0, 0, _pieces(plan0, 0, 400)[0], attempt="a")
    _commit(log_dir, 0, {0: done.end, 1: 0})
    plan1 = _plan(log_dir, 1, {0: done.end, 1: 0})
    later = write_partition(plan1, 0, _pieces(plan1, 400, 400)[0], attempt="c")
    before = snapshot(log_dir)
    stale = write_partition(plan0, 0, _pieces(plan0, 0, 400)[0], attempt="late")  # batch 0, after batch 1 wrote
    assert not stale.wrote and stale.end == done.end
    assert snapshot(log_dir) == before and later.end > done.end


def test_attempt_of_an_older_batch_than_the_fence_is_refused_without_truncating(log_dir: Path) -> None:
    plan = _plan(log_dir, 0)
    write_partition(plan, 0, _pieces(plan, 0, 400)[0], attempt="a")  # written, not committed
    PartitionFence(log_dir / "t-0", "t").write(FenceToken("q", 5, "newer", 0))
    before = snapshot(log_dir)
    with pytest.raises(FencedError, match="batch 5 wrote the partition after batch 0"):
        write_partition(plan, 0, _pieces(plan, 0, 400)[0], attempt="b")
    assert snapshot(log_dir) == before


def test_high_watermark_above_the_committed_end_stops_the_task(log_dir: Path) -> None:
    plan = _plan(log_dir, 0)
    done = write_partition(plan, 0, _pieces(plan, 0, 400)[0], attempt="a")
    checkpoint_partition(log_dir, REPLICATION_OFFSET_CHECKPOINT_FILE, {("t", 0): done.end})  # another writer published
    with pytest.raises(StorageError, match="high watermark"):
        write_partition(_plan(log_dir, 0), 0, _pieces(plan, 0, 300)[0], attempt="b")


def test_an_unreadable_high_watermark_checkpoint_stops_the_task_before_it_writes(log_dir: Path) -> None:
    """A write task read a malformed ``replication-offset-checkpoint`` as empty (a warning) and wrote on
    with no committed offset to hold its log to; it now stops naming the file and ``seglog recover``,
    and the partition is as it was."""
    plan = _plan(log_dir, 0)
    write_partition(plan, 0, _pieces(plan, 0, 400)[0], attempt="a")
    (log_dir / REPLICATION_OFFSET_CHECKPOINT_FILE).write_text("0\n1\nt 0 x\n")
    before = snapshot(log_dir)
    with pytest.raises(StorageError, match=r"replication-offset-checkpoint.*seglog recover"):
        write_partition(_plan(log_dir, 1), 0, _pieces(plan, 400, 300)[0], attempt="b")
    assert snapshot(log_dir) == before


# ------------------------------------------------- beside the maintenance daemon: what its index job keeps


def _daemon_index_pass(log_dir: Path) -> dict[str, int]:
    """One pass of the ``seglog maintain`` daemon's ``index`` job over the log dir; its counts."""
    access = BorrowedLogs(log_dir, Settings(topic_defaults=CONFIG.to_dict(), source="test"))
    report = JOBS["index"].fn(access)
    assert not report.errors and not report.skipped
    return dict(report.details)


_DIES_AFTER_DONE = """
import os, signal, sys
from pathlib import Path
from streaming import executor_writes
from tests.streaming.test_executor_writes import _pieces, _plan

def die(*_args, **_kwargs):  # the fence says done; the log is not closed, the lock line stays
    os.kill(os.getpid(), signal.SIGKILL)

executor_writes.checkpoint_partition = die
plan = _plan(Path(sys.argv[1]), 0)
executor_writes.write_partition(plan, 0, _pieces(plan, 0, 400)[0], attempt="a")
"""


def test_worker_sigkilled_after_done_leaves_a_range_the_daemon_keeps_and_the_retry_reuses(log_dir: Path) -> None:
    child = subprocess.run(
        [sys.executable, "-c", _DIES_AFTER_DONE, str(log_dir)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    fence = PartitionFence(log_dir / "t-0", "t").read()
    assert fence is not None and fence.state == DONE and fence.end > 0
    assert not left_clean(log_dir / "t-0", PartitionFence(log_dir / "t-0", "t"))  # a dead lock holder
    assert "offsets_truncated" not in _daemon_index_pass(log_dir)
    plan = _plan(log_dir, 0)
    retry = write_partition(plan, 0, _pieces(plan, 0, 400)[0], attempt="b")
    assert not retry.wrote and (retry.start, retry.end) == (0, fence.end)  # reused, as the daemon left it
    _commit(log_dir, 0, {0: retry.end, 1: 0})
    stored = read_topic(log_dir, "t")
    assert [r.offset for r in stored] == list(range(retry.end)) and len(_values(log_dir)) == retry.rows
    assert check_indexes(log_dir, "t") > 0


def test_daemon_deciding_from_a_stale_lock_line_keeps_a_done_range_the_driver_commits_next(log_dir: Path) -> None:
    plan = _plan(log_dir, 0)
    result = write_partition(plan, 0, _pieces(plan, 0, 400)[0], attempt="a")  # the driver has this result
    # The daemon saw the task's pid in the lock file, and borrows the partition after the task closed it.
    (log_dir / "t-0" / ".seglog.lock").write_text("pid=999999 host=elsewhere since_ms=0\n")
    assert "offsets_truncated" not in _daemon_index_pass(log_dir)
    _commit(log_dir, 0, {0: result.end, 1: 0})
    stored = read_topic(log_dir, "t")
    assert [r.offset for r in stored] == list(range(result.end)) and len({r.value for r in stored}) == result.rows


def test_retry_rewrites_a_done_range_that_is_no_longer_in_the_log(log_dir: Path) -> None:
    plan = _plan(log_dir, 0)
    first = write_partition(plan, 0, _pieces(plan, 0, 1000)[0], attempt="a")  # its result is lost
    log = executor_writes.open_partition(log_dir, ("t", 0), CONFIG, clean=True)
    try:
        log.truncate_to(first.end // 2)  # a recovery cut part of it
        assert 0 < log.log_end_offset < first.end
    finally:
        log.close()
    retry = write_partition(plan, 0, _pieces(plan, 0, 1000)[0], attempt="b")
    assert retry.wrote and (retry.start, retry.end) == (0, first.end)
    _commit(log_dir, 0, {0: retry.end, 1: 0})
    stored = read_topic(log_dir, "t")
    assert [r.offset for r in stored] == list(range(retry.end)) and len({r.value for r in stored}) == retry.rows
    assert check_indexes(log_dir, "t") > 0
