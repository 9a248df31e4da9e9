"""The ``seglog`` Spark source over a partition that lost records before ``seglog recover`` ran: a middle
segment's files deleted by hand, or a damaged batch. With ``failOnDataLoss=true`` (the default) a query
fails naming the partition, the offsets and ``seglog recover``; with ``false`` it skips exactly the
offsets recovery would name lost, with a WARNING saying so, and reads the rest (Spark's Kafka source
contract: the user accepts lost data and wants the query to go on). A batch written twice (which
recovery keeps one copy of) is skipped the same way, the warning saying recovery keeps it."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from pyspark.errors import AnalysisException, PythonException, StreamingQueryException
from pyspark.sql import SparkSession

from indexer.config import Settings
from indexer.errors import OffsetOutOfRangeError
from indexer.log_manager import LogManager
from indexer.records.file_records import FileRecords
from indexer.records.isolation import IsolationLevel
from streaming.reader import RangeToRead, read_range
from tests.streaming.helpers import await_end, start_foreach_batch
from tests.streaming.test_reader_stream import Batches, stream

pytestmark = pytest.mark.spark

RECORDS = 12  # 4 segments of 3 records


def _write(log_dir: Path) -> list[Path]:
    """Topic "h", one partition: offsets 0..11 committed in 4 segments of one batch; their .log files."""
    with LogManager(log_dir, Settings(overrides={"segment.bytes": 2000})) as manager:
        log = manager.get_or_create_log("h", 0)
        for i in range(4):
            log.append({"value": [f"v{3 * i + j}".encode() for j in range(3)]})
            log.roll()
        log.update_high_watermark(log.log_end_offset)
    return sorted((log_dir / "h-0").glob("*.log"))[:4]


def _hole(log_dir: Path) -> None:
    """Offsets 3..5 in no segment file: the second segment's .log deleted by hand."""
    _write(log_dir)[1].unlink()


def _damaged(log_dir: Path) -> None:
    """The batch of offsets 3..5 fails its CRC (a byte of its records flipped)."""
    path = _write(log_dir)[1]
    with FileRecords.open(path, mutable=False) as records:
        batch = next(iter(records.batches()))
    with open(path, "r+b") as f:
        f.seek(batch.position + batch.size_in_bytes - 1)
        byte = f.read(1)[0]
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte ^ 0xFF]))


def _duplicated(log_dir: Path) -> None:
    """The batch of offsets 3..5 written twice: CRC-valid, but the offsets go back."""
    path = _write(log_dir)[1]
    path.write_bytes(path.read_bytes() * 2)


def _piece(log_dir: Path, fail_on_data_loss: bool) -> RangeToRead:
    return RangeToRead(str(log_dir), "h", 0, 0, RECORDS, False, IsolationLevel.READ_UNCOMMITTED, fail_on_data_loss)


@pytest.mark.parametrize("damage", [_hole, _damaged])
def test_a_task_skips_the_lost_offsets_only_when_data_loss_is_accepted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: object
) -> None:
    """A task read the records around a missing segment as if contiguous, and failed on a damaged
    batch whatever ``failOnDataLoss`` said."""
    assert callable(damage)
    damage(tmp_path)
    with pytest.raises(OffsetOutOfRangeError) as failed:
        list(read_range(_piece(tmp_path, True)))
    message = str(failed.value)
    assert "offsets 3..5 of h-0" in message and f"seglog recover --log-dir {tmp_path}" in message, message
    assert "failOnDataLoss" in message and "\n" not in message, message
    caplog.set_level(logging.WARNING, logger="streaming.reader")
    offsets = [o for batch in read_range(_piece(tmp_path, False)) for o in batch.column("offset").to_pylist()]
    assert offsets == [0, 1, 2, *range(6, RECORDS)]
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "offsets 3..5 of h-0 cannot be read" in warned[0], warned
    assert "seglog recover" in warned[0] and "skipped (failOnDataLoss=false)" in warned[0], warned
    if damage is _damaged:
        assert "00000000000000000003.log" in warned[0], warned


def test_a_batch_written_twice_is_skipped_only_when_data_loss_is_accepted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two CRC-valid copies of the batch of offsets 3..5 (neither is served: which one is right only
    recovery decides) failed the task with ``failOnDataLoss=false`` too, against Spark's contract that
    the query goes on past what cannot be read. It now skips 3..5 with a warning naming them, the file,
    and that ``seglog recover`` keeps them (one copy); ``true`` still fails naming them."""
    _duplicated(tmp_path)
    with pytest.raises(OffsetOutOfRangeError, match=r"offsets 3\.\.5 of h-0 cannot be read.*failOnDataLoss"):
        list(read_range(_piece(tmp_path, True)))
    caplog.set_level(logging.WARNING, logger="streaming.reader")
    offsets = [o for batch in read_range(_piece(tmp_path, False)) for o in batch.column("offset").to_pylist()]
    assert offsets == [0, 1, 2, *range(6, RECORDS)]
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "offsets 3..5 of h-0 cannot be read" in warned[0], warned
    assert "00000000000000000003.log" in warned[0] and "offsets go backwards" in warned[0], warned
    assert "keeps them" in warned[0] and "skipped (failOnDataLoss=false)" in warned[0], warned


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_spark_read_over_a_missing_segment(spark: SparkSession, tmp_path: Path, fail_on_data_loss: bool) -> None:
    _hole(tmp_path)
    df = spark.read.format("seglog").option("subscribe", "h").option("failOnDataLoss", str(fail_on_data_loss).lower())
    if fail_on_data_loss:
        with pytest.raises(PythonException, match=r"cannot read offsets 3\.\.5 of h-0.*seglog recover"):
            df.load(str(tmp_path)).collect()
        return
    assert sorted(r.offset for r in df.load(str(tmp_path)).collect()) == [0, 1, 2, *range(6, RECORDS)]


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_spark_read_stream_over_a_damaged_batch(spark: SparkSession, tmp_path: Path, fail_on_data_loss: bool) -> None:
    log_dir = tmp_path / "logs"
    _damaged(log_dir)
    sink = Batches()
    query = start_foreach_batch(
        stream(
            spark, log_dir, subscribe="h", startingOffsets="earliest", failOnDataLoss=str(fail_on_data_loss).lower()
        ),
        sink,
        tmp_path / "ckpt",
    )
    if fail_on_data_loss:
        with pytest.raises(StreamingQueryException, match=r"offsets 3\.\.5 of h-0 cannot be read.*failOnDataLoss"):
            await_end(query)
        return
    await_end(query)
    assert query.exception() is None
    assert sorted(o for rows in sink.batches.values() for _, o, _ in rows) == [0, 1, 2, *range(6, RECORDS)]


def test_spark_read_skips_a_batch_written_twice_when_data_loss_is_accepted(spark: SparkSession, tmp_path: Path) -> None:
    """``spark.read.format("seglog")`` with ``failOnDataLoss=false`` failed on a batch written twice."""
    _duplicated(tmp_path)
    df = spark.read.format("seglog").option("subscribe", "h").option("failOnDataLoss", "false")
    assert sorted(r.offset for r in df.load(str(tmp_path)).collect()) == [0, 1, 2, *range(6, RECORDS)]


def test_spark_read_refuses_an_unreadable_high_watermark_checkpoint(spark: SparkSession, tmp_path: Path) -> None:
    """With a malformed ``replication-offset-checkpoint`` the source took "no entry" for each partition
    and read up to the log end: records never committed came back (here 12..14, appended after the
    commit). The query now fails on the driver where the source first takes offsets (the plan of a batch
    query), naming the file and ``seglog recover``."""
    _write(tmp_path)
    with LogManager(tmp_path, Settings()) as manager:
        manager.get_or_create_log("h", 0).append({"value": [b"uncommitted"] * 3})
    path = tmp_path / "replication-offset-checkpoint"
    path.write_text(f"0\n1\nh 0 {RECORDS}x\n")
    df = spark.read.format("seglog").option("subscribe", "h")
    with pytest.raises(AnalysisException, match=rf"Malformed line in checkpoint file \[{path}\].*seglog recover"):
        df.load(str(tmp_path)).collect()
