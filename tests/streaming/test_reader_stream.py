"""``spark.readStream.format("seglog")`` against Spark's Kafka-source contract (streaming queries):
``Trigger.AvailableNow`` with rate limits honoured per trigger, ``minOffsetsPerTrigger`` +
``maxTriggerDelay``, records appended under a running query, offsets behind latest, and
``failOnDataLoss`` both ways when retention deletes a segment under a running query."""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import ReadAllAvailable

from indexer.config import Settings
from indexer.errors import LogDirectoryNotFoundError
from indexer.file_names import (
    LOG_START_OFFSET_CHECKPOINT_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
)
from indexer.log_manager import LogManager
from streaming.reader import RangeToRead, SeglogDataSource, offsets_behind_latest, read_range
from streaming.sink import SegmentLogSink
from tests.streaming.helpers import await_end, committed_then_damaged, read_topic, start_foreach_batch, wait_until

pytestmark = pytest.mark.spark


def append(
    log_dir: Path,
    topic: str,
    values: list[str],
    batch_id: int,
    *,
    partitions: int = 2,
    config: dict[str, int] | None = None,
) -> None:
    """Commit ``values`` to ``topic`` as one sink micro-batch (what a producing pipeline does)."""
    with SegmentLogSink(
        log_dir, topic=topic, num_partitions=partitions, settings=Settings(), config=config, sink_id=f"{topic}-producer"
    ) as sink:
        sink.write_batch(
            pa.table({"key": [v.encode() for v in values], "value": [v.encode() for v in values]}),
            batch_id,
            query_id="producer",
        )


def stream(spark: SparkSession, log_dir: Path, **options: str) -> DataFrame:
    reader = spark.readStream.format("seglog")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(str(log_dir))


class Batches:
    """A foreachBatch function keeping every micro-batch's values (runs on the driver)."""

    def __init__(self, during: Callable[[int], None] | None = None) -> None:
        self.batches: dict[int, list[tuple[int, int, bytes]]] = {}
        self.times: dict[int, float] = {}
        self.during = during

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        rows = sorted((r.partition, r.offset, r.value) for r in df.collect())
        if rows:  # a new query's batch 0 may be empty (from the initial offsets to the same offsets)
            self.batches[batch_id] = rows
            self.times[batch_id] = time.monotonic()
        if self.during is not None:
            self.during(batch_id)

    def values(self) -> list[bytes]:
        return sorted(v for rows in self.batches.values() for _, _, v in rows)


def test_available_now_reads_everything_once_within_max_offsets_per_trigger(
    spark: SparkSession, tmp_path: Path
) -> None:
    log_dir = tmp_path / "logs"
    values = [f"v{i:03d}" for i in range(50)]
    append(log_dir, "ev", values, 0)
    sink = Batches()
    query = start_foreach_batch(
        stream(spark, log_dir, subscribe="ev", startingOffsets="earliest", maxOffsetsPerTrigger="7"),
        sink,
        tmp_path / "ckpt",
    )
    await_end(query)
    assert sink.values() == sorted(v.encode() for v in values)  # everything, exactly once
    assert [len(b) for _, b in sorted(sink.batches.items())] == [7] * 7 + [1]  # the limit, per trigger
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    first = progress[0]["sources"][0]
    behind = offsets_behind_latest(first)
    assert behind["maxOffsetsBehindLatest"] > 0 and behind["minOffsetsBehindLatest"] >= 0
    assert sum(json.loads(first["latestOffset"])["ev"].values()) == 50
    assert offsets_behind_latest(progress[-1]["sources"][0])["maxOffsetsBehindLatest"] == 0
    # Restarted from its checkpoint, the query has nothing left to read.
    again = Batches()
    rerun = start_foreach_batch(
        stream(spark, log_dir, subscribe="ev", startingOffsets="earliest"), again, tmp_path / "ckpt"
    )
    await_end(rerun)
    assert again.values() == []


def test_running_query_waits_for_min_offsets_until_max_trigger_delay(spark: SparkSession, tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    append(log_dir, "ev", ["old"], 0)  # before the query: not read (startingOffsets defaults to latest)
    sink = Batches()
    started = time.monotonic()  # the source's delay clock starts at its first trigger, after this
    query = start_foreach_batch(
        stream(spark, log_dir, subscribe="ev", minOffsetsPerTrigger="10", maxTriggerDelay="6s"),
        sink,
        tmp_path / "ckpt",
        processing_time="300 milliseconds",
    )
    try:
        wait_until(lambda: bool(query.recentProgress), "the first trigger", query)
        append(log_dir, "ev", ["a", "b", "c"], 1)  # fewer than minOffsetsPerTrigger: waits for the delay
        wait_until(lambda: bool(sink.batches), "a batch after maxTriggerDelay", query)
        assert sink.values() == [b"a", b"b", b"c"]
        assert min(sink.times.values()) - started >= 5.9  # not before maxTriggerDelay
        append(log_dir, "ev", [f"n{i:02d}" for i in range(12)], 2)  # enough: read at the next trigger
        wait_until(lambda: len(sink.batches) >= 2, "the batch of minOffsetsPerTrigger records", query)
        assert sorted(v for _, _, v in sink.batches[max(sink.batches)]) == [f"n{i:02d}".encode() for i in range(12)]
    finally:
        query.stop()


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_fail_on_data_loss_when_retention_deletes_a_segment_under_the_query(
    spark: SparkSession, tmp_path: Path, fail_on_data_loss: bool
) -> None:
    log_dir = tmp_path / "logs"
    small = {"segment.bytes": 400}
    for batch in range(8):  # one partition, ~one sink batch per segment
        append(log_dir, "dl", [f"r{batch}-{i}" for i in range(5)], batch, partitions=1, config=small)
    deleted: list[int] = []

    def retention(batch_id: int) -> None:
        """While the first batch is being written, retention (retention.bytes) deletes the oldest segments."""
        if deleted:
            return
        settings = Settings(overrides={**small, "retention.bytes": 1})
        with LogManager(log_dir, settings) as manager:
            log = manager.get_log("dl", 0)
            assert log is not None
            assert log.delete_old_segments() > 0
            deleted.append(log.log_start_offset)

    sink = Batches(retention)  # batch 0 holds offsets 0..4
    query = start_foreach_batch(
        stream(
            spark,
            log_dir,
            subscribe="dl",
            startingOffsets="earliest",
            maxOffsetsPerTrigger="5",
            failOnDataLoss=str(fail_on_data_loss).lower(),
        ),
        sink,
        tmp_path / "ckpt",
    )
    stored = read_topic(log_dir, "dl")  # what retention left, decoded by kafka-python
    if fail_on_data_loss:
        with pytest.raises(
            StreamingQueryException, match=r"offsets 5\.\.\d+ of dl-0 were deleted .*failOnDataLoss"
        ) as info:
            await_end(query)
        assert len(sink.batches) == 1
        # Found when the driver plans the batch (Trigger.AvailableNow too), not by its task inside the
        # foreachBatch function, which Spark then blames ("error in the user provided function").
        assert "FOREACH_BATCH_USER_FUNCTION_ERROR" not in str(info.value)
        return
    await_end(query)
    assert query.exception() is None
    start = deleted[0]
    assert start > 5
    expected = sorted([f"r0-{i}".encode() for i in range(5)] + [s.value for s in stored if s.offset >= start])
    assert sink.values() == expected  # batch 0, then everything retention left, once


def test_running_query_picks_up_new_topics_of_its_pattern(spark: SparkSession, tmp_path: Path) -> None:
    """As Kafka's pattern subscription: a topic created later is read from its earliest offset."""
    log_dir = tmp_path / "logs"
    append(log_dir, "t1", ["a"], 0)
    sink = Batches()
    query = start_foreach_batch(
        stream(spark, log_dir, subscribePattern="t[0-9]", startingOffsets="earliest"),
        sink,
        tmp_path / "ckpt",
        processing_time="200 milliseconds",
    )
    try:
        query.processAllAvailable()
        append(log_dir, "t2", ["b", "c"], 0)
        append(log_dir, "x9", ["not subscribed"], 0)
        wait_until(lambda: len(sink.values()) >= 3, "the records of the new topic", query)
        query.processAllAvailable()
        assert sink.values() == [b"a", b"b", b"c"]
    finally:
        query.stop()


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_fail_on_data_loss_when_a_partition_found_later_no_longer_starts_at_zero(
    spark: SparkSession, tmp_path: Path, fail_on_data_loss: bool
) -> None:
    """As Kafka's source ("Added partition ... starts from N instead of 0"): a partition the query finds
    after its start (a new topic of its pattern, an added partition) whose first records retention
    already deleted is data loss; ``failOnDataLoss=false`` warns and reads what is left."""
    log_dir = tmp_path / "logs"
    append(log_dir, "t1", ["a"], 0, partitions=1)

    def run() -> Batches:
        sink = Batches()
        options = {"subscribePattern": "t[0-9]", "failOnDataLoss": str(fail_on_data_loss).lower()}
        query = start_foreach_batch(
            stream(spark, log_dir, startingOffsets="earliest", **options), sink, tmp_path / "ckpt"
        )
        await_end(query)
        return sink

    assert run().values() == [b"a"]
    small = {"segment.bytes": 400}
    for batch in range(6):  # ~one sink batch per segment
        append(log_dir, "t2", [f"r{batch}-{i}" for i in range(5)], batch, partitions=1, config=small)
    with LogManager(log_dir, Settings(overrides={**small, "retention.bytes": 1})) as manager:
        log = manager.get_log("t2", 0)
        assert log is not None and log.delete_old_segments() > 0
        first = log.log_start_offset
    if fail_on_data_loss:
        with pytest.raises(StreamingQueryException, match=rf"offsets 0\.\.{first - 1} of t2-0 were deleted"):
            run()
        return
    assert run().values() == sorted(s.value for s in read_topic(log_dir, "t2") if s.offset >= first)


def test_committed_records_missing_from_the_log_are_reported_once_and_the_rest_read(
    spark: SparkSession, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The high watermark says offsets 0..19 are committed, the damaged log ends at 10: a streaming
    query warns once (not at every trigger) and reads 0..9, whatever failOnDataLoss says (the query
    never had offsets 10..19; one that had read past 10 would find its partition truncated)."""
    committed_then_damaged(tmp_path / "logs")
    sink = Batches()
    query = start_foreach_batch(
        stream(spark, tmp_path / "logs", subscribe="dmg", startingOffsets="earliest"), sink, tmp_path / "ckpt"
    )
    await_end(query)
    assert sink.values() == sorted(f"d{i}".encode() for i in range(10))
    caplog.set_level(logging.WARNING, logger="streaming.reader")  # the planner, in this process (Spark's is a worker)
    source = SeglogDataSource({"subscribe": "dmg", "path": str(tmp_path / "logs"), "startingOffsets": "earliest"})
    reader = source.streamReader(source.schema())
    start = reader.initialOffset()
    for _ in range(3):  # three triggers
        assert reader.latestOffset(start, ReadAllAvailable()) == {"dmg": {"0": 10}}
    warned = [
        r.getMessage() for r in caplog.records if "committed records (offsets 10..19) are missing" in r.getMessage()
    ]
    assert len(warned) == 1, warned


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_a_checkpoint_of_another_subscription_is_named_as_such(
    spark: SparkSession, tmp_path: Path, fail_on_data_loss: bool
) -> None:
    """Restarted with another subscription, the checkpoint holds offsets of partitions the query no longer
    reads: data loss, as in Kafka's source ("... are gone"), but said as it is (it said "partition a-0 is
    gone", while a-0 is there); ``failOnDataLoss=false`` drops them and reads the partitions the new
    subscription adds from offset 0, as Kafka's source reads added partitions from their earliest."""
    log_dir = tmp_path / "logs"
    append(log_dir, "a", ["a0"], 0, partitions=1)
    append(log_dir, "b", ["b0"], 0, partitions=1)
    first = start_foreach_batch(
        stream(spark, log_dir, subscribe="a", startingOffsets="earliest"), Batches(), tmp_path / "ckpt"
    )
    await_end(first)
    sink = Batches()
    options = {"subscribe": "b", "failOnDataLoss": str(fail_on_data_loss).lower()}
    query = start_foreach_batch(stream(spark, log_dir, **options), sink, tmp_path / "ckpt")
    if fail_on_data_loss:
        with pytest.raises(StreamingQueryException) as info:
            await_end(query)
        message = str(info.value)
        assert "OffsetOutOfRangeError: a-0 is not in subscribe=b, but the checkpoint holds its offset 1" in message
        assert "failOnDataLoss" in message and "is gone" not in message
        return
    await_end(query)
    assert sink.values() == [b"b0"]
    assert json.loads(query.lastProgress["sources"][0]["endOffset"]) == {"b": {"0": 1}}  # a-0 dropped


@pytest.mark.parametrize(
    "starting",
    [{"startingOffsets": '{"t": {"0": -2, "1": -2}}'}, {"startingOffsetsByTimestamp": '{"t": {"0": 0, "1": 0}}'}],
)
def test_a_query_restarts_from_its_checkpoint_after_partitions_are_added(
    spark: SparkSession, tmp_path: Path, starting: dict[str, str]
) -> None:
    """The starting options apply only to a query's first run (Kafka checks their partitions then): the
    same query restarted after ``seglog topic alter`` goes on, reading the new partition from offset 0
    (it failed at load: "option startingOffsets must name exactly the partitions of subscribe=t")."""
    log_dir = tmp_path / "logs"
    append(log_dir, "t", [f"a{i}" for i in range(10)], 0)

    def run() -> Batches:
        sink = Batches()
        await_end(start_foreach_batch(stream(spark, log_dir, subscribe="t", **starting), sink, tmp_path / "ckpt"))
        return sink

    assert len(run().values()) == 10
    with LogManager(log_dir, Settings()) as manager:
        manager.add_partitions("t", 3)
    append(log_dir, "t", [f"b{i}" for i in range(10)], 1, partitions=3)
    sink = run()
    assert sink.values() == sorted(f"b{i}".encode() for i in range(10))
    assert {p for rows in sink.batches.values() for p, _, _ in rows} == {0, 1, 2}


@pytest.mark.parametrize(
    "schema, options, message",
    [
        (None, {"endingOffsets": "latest"}, "option endingOffsets is for batch queries only (spark.read)"),
        ("key binary, value binary", {}, "the seglog source has a fixed schema"),
        (
            None,
            {"startingOffsets": '{"ev": {"0": 0}}'},
            "option startingOffsets must name exactly the partitions of subscribe=ev: ev-0, ev-1",
        ),
        (None, {"subscribe": "nope"}, "subscribe=nope: nope not found in "),  # a new query's first run
    ],
)
def test_an_option_error_found_when_a_query_starts_is_ours_not_the_runners(
    spark: SparkSession, tmp_path: Path, schema: str | None, options: dict[str, str], message: str
) -> None:
    """``endingOffsets`` is for batch queries, and the columns are Kafka's: the streaming query fails with
    our ``ConfigError`` as its last error, not with PySpark's stream runner's ``UnboundLocalError`` (which
    it raises when building the reader fails) nor with a task's schema mismatch."""
    log_dir = tmp_path / "logs"
    append(log_dir, "ev", ["a", "b"], 0)
    reader = spark.readStream.format("seglog").option("subscribe", "ev").options(**options)
    query = (
        (reader.schema(schema) if schema else reader)
        .load(str(log_dir))
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .start()
    )
    with pytest.raises(StreamingQueryException) as info:
        await_end(query)
    assert f"ConfigError: {message}" in str(info.value)
    assert "UnboundLocalError" not in str(info.value) and "SCHEMA_MISMATCH" not in str(info.value)


PARTITION_CHECKPOINT_FILES = (
    LOG_START_OFFSET_CHECKPOINT_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
)


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_fail_on_data_loss_when_a_partition_is_recreated_shorter_between_runs(
    spark: SparkSession, tmp_path: Path, fail_on_data_loss: bool
) -> None:
    """As Kafka's source: a partition that now ends before the offset the query reached is data loss;
    ``failOnDataLoss=false`` warns and goes on from the partition's end."""
    log_dir = tmp_path / "logs"
    append(log_dir, "tr", [f"old{i}" for i in range(10)], 0, partitions=1)

    def run() -> Batches:
        sink = Batches()
        query = start_foreach_batch(
            stream(
                spark,
                log_dir,
                subscribe="tr",
                startingOffsets="earliest",
                failOnDataLoss=str(fail_on_data_loss).lower(),
            ),
            sink,
            tmp_path / "ckpt",
        )
        await_end(query)
        return sink

    assert len(run().values()) == 10
    # The topic is deleted (its files, and its partition's entries in the checkpoints, as Kafka's
    # deletion forgets them; else writers refuse the partition as missing committed records) and
    # created again, with fewer records.
    shutil.rmtree(log_dir / "tr-0")
    for name in ("seglog-sink.tr-producer.json", *PARTITION_CHECKPOINT_FILES):
        (log_dir / name).unlink()
    append(log_dir, "tr", ["new0", "new1", "new2"], 0, partitions=1)
    if fail_on_data_loss:
        with pytest.raises(StreamingQueryException, match=r"tr-0 ends at 3, before offset 10 .*failOnDataLoss"):
            run()
        return
    assert run().values() == []  # on from the partition's end, as Kafka's source
    append(log_dir, "tr", ["new3", "new4"], 1, partitions=1)
    assert run().values() == [b"new3", b"new4"]


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_a_query_restarted_after_one_of_its_topics_was_deleted_is_data_loss(
    spark: SparkSession, tmp_path: Path, fail_on_data_loss: bool
) -> None:
    """As Kafka's source ("... are gone. Some data may have been missed"): a subscribed topic deleted
    between two runs of a query is data loss, not an unknown topic; ``failOnDataLoss=false`` goes on with
    the others (the restart failed at load: "subscribe=gone,kept: gone not found")."""
    log_dir = tmp_path / "logs"
    append(log_dir, "gone", ["g0", "g1"], 0, partitions=1)
    append(log_dir, "kept", ["k0", "k1"], 0, partitions=1)

    def run() -> Batches:
        sink = Batches()
        options = {"startingOffsets": "earliest", "failOnDataLoss": str(fail_on_data_loss).lower()}
        query = start_foreach_batch(stream(spark, log_dir, subscribe="gone,kept", **options), sink, tmp_path / "ckpt")
        await_end(query)
        return sink

    assert run().values() == [b"g0", b"g1", b"k0", b"k1"]
    shutil.rmtree(log_dir / "gone-0")
    append(log_dir, "kept", ["k2"], 1, partitions=1)
    if fail_on_data_loss:
        with pytest.raises(StreamingQueryException, match=r"partition gone-0 is gone .*failOnDataLoss"):
            run()
        return
    assert run().values() == [b"k2"]


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
@pytest.mark.parametrize("away", ["moved", "unmounted"])
def test_a_log_directory_gone_under_a_query_is_an_error_not_data_loss(
    tmp_path: Path, fail_on_data_loss: bool, away: str
) -> None:
    """Kafka's source never takes a broker it cannot reach for deleted topics. The log directory gone
    under a running query (moved or deleted; or its filesystem not mounted, which leaves an empty mount
    point) was data loss of every partition ("partition t-0 is gone"): with ``failOnDataLoss=false`` the
    driver dropped them all from the offsets, to read everything again from offset 0 once the directory
    was back, and a task skipped its range in silence. It is an error naming the directory, whatever
    failOnDataLoss says (a deleted topic leaves the log directory's checkpoint files: data loss)."""
    log_dir = tmp_path / "logs"
    append(log_dir, "t", ["a", "b", "c", "d"], 0)
    options = {"subscribe": "t", "path": str(log_dir), "failOnDataLoss": str(fail_on_data_loss).lower()}
    source = SeglogDataSource({**options, "startingOffsets": "earliest"})
    reader = source.streamReader(source.schema())
    start = reader.initialOffset()
    latest = reader.latestOffset(start, ReadAllAvailable())
    (piece,) = [p for p in reader.partitions(start, latest) if isinstance(p, RangeToRead) and p.partition == 0]
    moved = tmp_path / "elsewhere"
    log_dir.rename(moved)
    if away == "unmounted":
        log_dir.mkdir()
    gone = rf"log directory {log_dir} (does not exist|is empty) .*; failOnDataLoss does not apply"
    with pytest.raises(LogDirectoryNotFoundError, match=gone):
        reader.latestOffset(start, ReadAllAvailable())
    with pytest.raises(LogDirectoryNotFoundError, match=gone):
        list(read_range(piece))  # on an executor
    if away == "unmounted":
        log_dir.rmdir()
    moved.rename(log_dir)  # back: the query goes on where it was
    assert reader.latestOffset(start, ReadAllAvailable()) == latest
    assert sum(batch.num_rows for batch in read_range(piece)) == piece.end - piece.start > 0
