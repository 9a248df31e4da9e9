"""Exactly once on a real local Spark streaming query: clean runs, replays after a lost Spark commit,
and bad input failing the query with the sink's own error."""

from __future__ import annotations

import json
import logging
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from indexer.commit_log import SinkCommitLog
from indexer.config import LogConfig, Settings
from indexer.errors import (
    ConfigError,
    InvalidTimestampError,
    InvalidTopicError,
    LogLockedError,
    RecordTooLargeError,
    SchemaError,
    UnknownTopicOrPartitionError,
)
from indexer.log import Log
from indexer.sink_fence import fence_file
from streaming.arrow_collect import micro_batch_plan
from streaming.job import JobSpec, JobSummary, run_job
from streaming.partitioner import partition_for_keys
from streaming.sink import SegmentLogSink, _to_collect
from tests.streaming.helpers import (
    await_end,
    json_input_stream,
    read_topic,
    snapshot,
    start_foreach_batch,
    write_json_inputs,
)

pytestmark = pytest.mark.spark

SETTINGS = Settings()


def _spec(tmp_path: Path, **options: Any) -> JobSpec:
    """The job of topic ``ev`` (3 partitions) over the files of ``tmp_path / "in"``, until they are all read."""
    return JobSpec(
        log_dir=tmp_path / "logs",
        checkpoint_location=str(tmp_path / "checkpoint"),
        topic="ev",
        num_partitions=3,
        source="files",
        input_path=str(tmp_path / "in"),
        available_now=True,
        **options,
    )


def _run(spark: SparkSession, tmp_path: Path, files_per_batch: int = 1) -> JobSummary:
    spec = _spec(tmp_path, input_format="json", max_files_per_trigger=files_per_batch, progress_interval_s=3600)
    return run_job(spec, SETTINGS, spark=spark)


def _assert_exactly_once_in_key_order(log_dir: Path, rows: list[tuple[str, str]]) -> None:
    stored = read_topic(log_dir, "ev")
    assert Counter((r.key, r.value) for r in stored) == Counter((k.encode(), v.encode()) for k, v in rows)
    per_key: dict[bytes, list[int]] = defaultdict(list)
    partition_of: dict[bytes, set[int]] = defaultdict(set)
    for r in sorted(stored, key=lambda r: (r.partition, r.offset)):
        assert r.key is not None and r.value is not None
        per_key[r.key].append(int(r.value.split(b":")[1]))
        partition_of[r.key].add(r.partition)
    for key, seqs in per_key.items():
        assert seqs == list(range(len(seqs))), f"key {key!r} out of order"
        assert partition_of[key] == {int(partition_for_keys(pa.array([key]), 3)[0])}


def test_clean_run_writes_every_row_once_in_order_per_key(spark: SparkSession, tmp_path: Path) -> None:
    rows = write_json_inputs(tmp_path / "in", files=3, rows_per_file=600, keys=17)
    summary = _run(spark, tmp_path)
    assert (summary.batches, summary.skipped_batches, summary.rows) == (3, 0, 1800)
    _assert_exactly_once_in_key_order(tmp_path / "logs", rows)
    commit = SinkCommitLog(tmp_path / "logs", "ev").read()
    metadata = json.loads((tmp_path / "checkpoint" / "metadata").read_text())
    assert (commit.query_id, commit.batch_id) == (metadata["id"], 2)


def test_the_job_writes_on_the_executors_with_maintenance_borrowing_the_partitions(
    spark: SparkSession, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``writes=executors``: the job holds no partition (each task takes its partition's lock) and the
    in-process maintenance borrows each partition in turn, as ``seglog maintain`` does; every row is
    stored once, in key order, and the partitions are free afterwards."""
    from maintenance.scheduler import start_maintenance

    rows = write_json_inputs(tmp_path / "in", files=3, rows_per_file=400, keys=13)
    spec = _spec(tmp_path, input_format="json", max_files_per_trigger=1, progress_interval_s=3600, writes="executors")
    settings = Settings(
        sections={"maintenance": {"log.initial.task.delay.ms": 0, "log.flush.scheduler.interval.ms": 50}}
    )
    caplog.set_level(logging.INFO)
    summary = run_job(spec, settings, spark=spark, maintenance=start_maintenance)
    assert (summary.batches, summary.rows) == (3, 1200)
    _assert_exactly_once_in_key_order(tmp_path / "logs", rows)
    messages = [r.getMessage() for r in caplog.records]
    assert any("written on the executors" in m for m in messages)
    assert any(f"maintenance of {tmp_path / 'logs'} started" in m for m in messages)
    for partition in range(3):  # written by executor tasks (their fences), and free once the job stopped
        assert fence_file(tmp_path / "logs" / f"ev-{partition}", "ev").exists()
        Log.open(tmp_path / "logs" / f"ev-{partition}", LogConfig()).close()


def test_a_given_session_decides_where_the_job_writes_by_its_own_master(
    spark: SparkSession, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``writes=auto`` with a SparkSession handed in follows that session's master (``local[...]``: the
    driver writes), not ``spec.master``, which only names the master of a session the job starts."""
    write_json_inputs(tmp_path / "in", files=1, rows_per_file=50, keys=5)
    spec = _spec(tmp_path, input_format="json", progress_interval_s=3600, master="spark://cluster.example:7077")
    caplog.set_level(logging.INFO)
    assert run_job(spec, SETTINGS, spark=spark).rows == 50
    assert any("written on the driver" in r.getMessage() for r in caplog.records)


def test_restart_after_losing_the_last_spark_commit_adds_no_duplicates(spark: SparkSession, tmp_path: Path) -> None:
    rows = write_json_inputs(tmp_path / "in", files=2, rows_per_file=500, keys=11)
    _run(spark, tmp_path)
    commit_dir = tmp_path / "checkpoint" / "commits"
    assert sorted(p.name for p in commit_dir.iterdir() if p.name.isdigit()) == ["0", "1"]
    (commit_dir / "1").unlink()
    (commit_dir / ".1.crc").unlink(missing_ok=True)
    before = snapshot(tmp_path / "logs")
    summary = _run(spark, tmp_path)  # Spark re-runs batch 1; the sink skips it
    assert (summary.batches, summary.skipped_batches) == (0, 1)
    assert snapshot(tmp_path / "logs") == before
    assert (tmp_path / "checkpoint" / "commits" / "1").exists()
    _assert_exactly_once_in_key_order(tmp_path / "logs", rows)
    # New input after the restart is still written exactly once, after the old.
    more = write_json_inputs(tmp_path / "in2", files=1, rows_per_file=200, keys=11)
    (tmp_path / "in2" / "part-0000.json").rename(tmp_path / "in" / "later.json")
    assert _run(spark, tmp_path).rows == 200
    assert len(read_topic(tmp_path / "logs", "ev")) == len(rows) + len(more)


@pytest.mark.parametrize("writes", ["driver", "executors"])
def test_a_second_sink_of_the_same_id_is_refused_while_the_first_is_open(
    spark: SparkSession, tmp_path: Path, writes: str
) -> None:
    """Two writers of one sink id at once (two queries on one topic) would each commit from the record
    they read before the other's commit: with executor writes, whose driver holds no partition, one
    could cut and overwrite the other's written range and both commit it. The sink's own lock refuses
    the second until the first is closed; nothing of the second is written."""
    logs = tmp_path / "logs"
    df = spark.createDataFrame([(f"k{i}", f"v{i}") for i in range(20)], "key string, value string")
    first = SegmentLogSink(logs, topic="t", num_partitions=2, settings=SETTINGS, writes=writes, query_id="qa")
    first(df, 0)
    before = snapshot(logs)
    second = SegmentLogSink(logs, topic="t", num_partitions=2, settings=SETTINGS, writes=writes, query_id="qb")
    with pytest.raises(LogLockedError, match=r"sink t in .* is locked by pid \d+ .*this process"):
        second(df, 0)
    assert snapshot(logs) == before
    first.close()
    second(df, 0)
    second.close()
    assert len(read_topic(logs, "t")) == 40


def test_sink_takes_its_identity_from_the_running_query(spark: SparkSession, tmp_path: Path) -> None:
    write_json_inputs(tmp_path / "in", files=1, rows_per_file=10, keys=3)
    sink = SegmentLogSink(tmp_path / "logs", topic="ev", num_partitions=3, settings=SETTINGS)
    query = start_foreach_batch(json_input_stream(spark, tmp_path / "in"), sink, tmp_path / "ck")
    query.awaitTermination()
    sink.close()
    assert sink.committed().query_id == query.id
    assert len(read_topic(tmp_path / "logs", "ev")) == 10


def test_a_batch_dataframe_without_a_name_for_its_write_is_refused(spark: SparkSession, tmp_path: Path) -> None:
    """``df.write.format("seglog")`` is not offered (docs/streaming.md); a batch DataFrame is written by
    calling the sink with ``query_id=``, a name for the write. Without one the sink has no identity to make
    a rerun harmless: a ``ConfigError`` (one of seglog's own errors) saying so, before anything is written."""
    sink = SegmentLogSink(tmp_path / "logs", topic="ev", settings=SETTINGS)
    with pytest.raises(ConfigError, match=r"pass query_id= \(a name for this write:"):
        sink(spark.range(3).selectExpr("cast(id as string) as value"), 0)
    sink.close()
    assert snapshot(tmp_path / "logs") == {}


@pytest.mark.parametrize("query_id", [None, "named"])
def test_a_query_without_a_checkpoint_location_fails_before_writing(
    spark: SparkSession, tmp_path: Path, query_id: str | None
) -> None:
    """Without ``checkpointLocation`` Spark runs a ``foreachBatch`` query on a temporary checkpoint it deletes
    when the query stops: a restart is a new query, whose rows the sink would write again (or, under a
    fixed ``query_id``, skip as committed: lost). Spark's Kafka sink refuses to start without one; the
    sink fails the first micro-batch, before touching the log directory."""
    write_json_inputs(tmp_path / "in", files=1, rows_per_file=10, keys=3)
    sink = SegmentLogSink(tmp_path / "logs", topic="ev", settings=SETTINGS, query_id=query_id)
    query = json_input_stream(spark, tmp_path / "in").writeStream.foreachBatch(sink).trigger(availableNow=True).start()
    with pytest.raises(StreamingQueryException, match="has no checkpointLocation"):
        await_end(query)
    sink.close()
    assert isinstance(sink.last_error, ConfigError)
    message = str(sink.last_error)
    assert "\n" not in message and "temporary checkpoint" in message and "option('checkpointLocation'" in message
    assert not (tmp_path / "logs").exists() or snapshot(tmp_path / "logs") == {}


def test_a_sink_given_another_querys_checkpoint_fails_and_writes_nothing(spark: SparkSession, tmp_path: Path) -> None:
    """A copy-pasted ``checkpoint_location`` would make the sink skip this query's batches as the other
    query's committed ones while Spark commits them: the query fails instead, before any write."""
    write_json_inputs(tmp_path / "in", files=1, rows_per_file=10, keys=3)
    first = SegmentLogSink(
        tmp_path / "logs", topic="ev", num_partitions=3, settings=SETTINGS, checkpoint_location=str(tmp_path / "ckA")
    )
    start_foreach_batch(json_input_stream(spark, tmp_path / "in"), first, tmp_path / "ckA").awaitTermination()
    first.close()
    before = snapshot(tmp_path / "logs")
    write_json_inputs(tmp_path / "in2", files=1, rows_per_file=10, keys=3)
    second = SegmentLogSink(
        tmp_path / "logs", topic="ev", num_partitions=3, settings=SETTINGS, checkpoint_location=str(tmp_path / "ckA")
    )
    query = start_foreach_batch(json_input_stream(spark, tmp_path / "in2"), second, tmp_path / "ckB")
    with pytest.raises(StreamingQueryException, match="is the checkpoint of query"):
        query.awaitTermination()
    second.close()
    assert isinstance(second.last_error, ConfigError)
    assert snapshot(tmp_path / "logs") == before
    assert not (tmp_path / "ckB" / "commits" / "0").exists()


@pytest.mark.parametrize("writes", ["driver", "executors"])
@pytest.mark.parametrize(
    "shape, error, message, attributes",
    [
        (lambda df: df.select(F.col("key")), SchemaError, "no 'value' column", {}),
        (
            lambda df: df.select(F.length("value").alias("value")),
            SchemaError,
            "column 'value': found type int, expected string or binary",
            {},
        ),
        (  # Spark's Kafka sink refuses it from the schema too ("partition must be a(n) int")
            lambda df: df.select("value", F.lit("0").alias("partition")),
            SchemaError,
            "column 'partition': found type string, expected int",
            {},
        ),
        (  # Spark's Kafka sink fails on it too (Kafka's ProducerRecord refuses a negative timestamp)
            lambda df: df.select("value", F.timestamp_millis(F.lit(-1000)).alias("timestamp")),
            InvalidTimestampError,
            "row 0: timestamp -1000 is negative",
            {"index": 0, "timestamp": -1000},
        ),
        (  # found once the topic's partition count is known
            lambda df: df.select("value", F.lit(7).alias("partition")),
            UnknownTopicOrPartitionError,
            "row 0: partition 7 of topic 'ev' is outside the topic's partitions 0..2",
            {},
        ),
        (  # found while encoding (on the executors: stage 1, before the driver creates the topic)
            lambda df: df.select(F.repeat(F.col("value"), 300_000).alias("value")),
            RecordTooLargeError,
            "more than max.message.bytes=1048588",
            {"index": 0, "limit": 1048588},
        ),
    ],
)
def test_bad_input_fails_the_query_with_the_sink_error(
    spark: SparkSession,
    tmp_path: Path,
    shape: object,
    error: type[Exception],
    message: str,
    attributes: dict[str, object],
    writes: str,
) -> None:
    """On the executors too: the task's error reaches the driver as the sink's own error, with the same
    attributes (the offending row, its value). A column of a wrong type (or none) fails before any
    Spark job of the micro-batch: no collect, no encoding task."""
    write_json_inputs(tmp_path / "in", files=1, rows_per_file=10, keys=3)
    (tmp_path / "logs").mkdir()
    sink = SegmentLogSink(tmp_path / "logs", topic="ev", num_partitions=3, settings=SETTINGS, writes=writes)
    df = json_input_stream(spark, tmp_path / "in")
    query = start_foreach_batch(shape(df), sink, tmp_path / "ck")  # type: ignore[operator]
    with pytest.raises(StreamingQueryException, match=message):
        query.awaitTermination()
    sink.close()
    assert isinstance(sink.last_error, error)
    assert message in str(sink.last_error)
    assert {name: getattr(sink.last_error, name) for name in attributes} == attributes
    jobs = spark.sparkContext.statusTracker().getJobIdsForGroup(str(query.runId))
    assert (jobs == []) == (error is SchemaError), jobs
    # Both paths create the topic (its partitions, its recorded count, the baselines) only once every
    # row passed: on the executors, once the encoding stage finished. A refused micro-batch leaves the
    # log directory as it found it.
    assert snapshot(tmp_path / "logs") == {}
    assert not list((tmp_path / "logs").glob("ev-*"))


@pytest.mark.parametrize(
    "columns, message",
    [
        (  # Spark: "partition attribute type must be an int"
            ["value", "cast(0 as bigint) as partition"],
            "column 'partition': found type bigint, expected int, as Spark's Kafka sink takes it",
        ),
        (["value", "null as partition"], "column 'partition': found type void, expected int"),
        (  # Spark: "headers attribute type must be array<struct<key:string,value:binary>>"
            ["value", "array(named_struct('key', 'k', 'value', 'v')) as headers"],
            "column 'headers': found type array<struct<key:string,value:string>>, expected "
            "array<struct<key:string,value:binary>>, as Spark's Kafka sink takes it",
        ),
        (["value", "array(named_struct('name', 'k', 'value', cast('v' as binary))) as headers"], "column 'headers'"),
        (["value", "array(1) as headers"], "column 'headers': found type array<int>"),
        (  # what to do is part of the line: the cast Spark's Kafka integration guide writes the other way round
            ["cast(id as int) as value"],
            "column 'value': found type int, expected string or binary, as Spark's Kafka sink takes it (cast it: "
            "col('value').cast('string'))",
        ),
        (
            ["to_json(named_struct('id', id)) as value", "named_struct('id', id) as key"],
            "column 'key': found type struct<id:bigint>, expected string or binary, as Spark's Kafka sink takes it "
            "(serialize it, e.g. F.to_json(col('key')))",
        ),
        (["value", "cast(null as string) as key", "cast(1 as string) as topic", "null as headers"], "found type void"),
        (  # Spark's Kafka sink takes the first of them; a join's leftover is refused, not guessed at
            ["value", "value as key", "'k' as key", "id"],
            "column 'key' appears 2 times in the micro-batch (columns: ['value', 'key', 'key', 'id'])",
        ),
        (["value", "value"], "column 'value' appears 2 times"),
        (  # a wall-clock time without a zone: Spark reads it in the session's time zone, never as UTC
            ["value", "cast(timestamp_millis(id) as timestamp_ntz) as timestamp"],
            "column 'timestamp': found type timestamp_ntz, expected timestamp or an integer type (milliseconds "
            "since the epoch) (cast it: col('timestamp').cast('timestamp'))",
        ),
        (["value", "cast(id as double) as timestamp"], "column 'timestamp': found type double, expected timestamp"),
        (
            ["value", "'2024-01-02 03:04:05' as timestamp"],
            "column 'timestamp': found type string, expected timestamp or an integer type (milliseconds since the "
            "epoch) (cast it: col('timestamp').cast('timestamp'))",
        ),
    ],
)
@pytest.mark.parametrize("writes", ["driver", "executors"])
def test_column_types_spark_kafka_sink_refuses_are_refused_before_any_spark_job(
    spark: SparkSession, tmp_path: Path, columns: list[str], message: str, writes: str
) -> None:
    """A ``bigint`` partition and string header values went through (Arrow takes them), where Spark's
    Kafka sink refuses them from the query's schema (``KafkaWriter.validateQuery``): the same
    DataFrame written to Kafka would fail. Refused on the driver from the schema, before any Spark job
    of the micro-batch, in one line; an empty micro-batch too."""
    sink = SegmentLogSink(tmp_path / "logs", topic="ev", query_id="q", settings=SETTINGS, writes=writes)
    for rows in (3, 0):
        df = spark.range(rows).selectExpr("id", "cast(id as string) as value").selectExpr(*columns)
        group = f"types-{tmp_path.name}-{rows}"
        spark.sparkContext.setJobGroup(group, "the sink's micro-batch")
        try:
            with pytest.raises(SchemaError, match=re.escape(message)) as info:
                sink(df, 0)
        finally:
            spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
        assert "\n" not in str(info.value)
        assert spark.sparkContext.statusTracker().getJobIdsForGroup(group) == []
    sink.close()
    assert sink.committed().batch_id == -1
    assert snapshot(tmp_path / "logs") == {}


def test_the_column_types_spark_kafka_sink_takes_are_taken(spark: SparkSession, tmp_path: Path) -> None:
    """``int`` partitions, string or binary keys and values, binary header values (nullability aside)."""
    sink = SegmentLogSink(tmp_path / "logs", topic="ev", num_partitions=2, query_id="q", settings=SETTINGS)
    df = spark.range(2).selectExpr(
        "cast(id as string) as key",
        "cast(cast(id as string) as binary) as value",
        "cast(id as int) as partition",
        "array(named_struct('key', 'h', 'value', cast(null as binary))) as headers",
        "'ignored' as topic",
    )
    sink(df, 0)
    sink.close()
    assert sink.committed().end_offsets == {("ev", 0): 1, ("ev", 1): 1}


@pytest.mark.parametrize(
    "columns, error, message",
    [
        (
            ["value"],
            InvalidTopicError,
            "no 'topic' column and the sink has no default topic: give SegmentLogSink a topic= or the micro-batch "
            "a 'topic' column",
        ),
        (["value", "1 as topic"], SchemaError, "column 'topic': found type int, expected string"),
    ],
)
@pytest.mark.parametrize("rows", [0, 3])
def test_a_micro_batch_without_a_topic_fails_from_its_schema_before_any_spark_job(
    spark: SparkSession, tmp_path: Path, columns: list[str], error: type[Exception], message: str, rows: int
) -> None:
    """As Spark's Kafka sink (``KafkaWriter.validateQuery``: "topic option required when no 'topic'
    attribute is present"): decided by the schema, so an empty micro-batch fails too, and nothing is
    collected or written."""
    sink = SegmentLogSink(tmp_path / "logs", query_id="q", settings=SETTINGS)
    df = spark.range(rows).selectExpr("cast(id as string) as value").selectExpr(*columns)
    group = f"no-topic-{tmp_path.name}"
    spark.sparkContext.setJobGroup(group, "the sink's micro-batch")
    try:
        with pytest.raises(error, match=message):
            sink(df, 0)
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
        sink.close()
    assert spark.sparkContext.statusTracker().getJobIdsForGroup(group) == []
    assert sink.committed().batch_id == -1
    assert snapshot(tmp_path / "logs") == {}


def test_the_job_reraises_the_sinks_own_error_and_commits_nothing(spark: SparkSession, tmp_path: Path) -> None:
    write_json_inputs(tmp_path / "in", files=1, rows_per_file=10, keys=3)
    with pytest.raises(RecordTooLargeError, match="more than max.message.bytes=70"):
        run_job(_spec(tmp_path), Settings(overrides={"max.message.bytes": 70}), spark=spark)
    assert SinkCommitLog(tmp_path / "logs", "ev").read().batch_id == -1
    assert read_topic(tmp_path / "logs", "ev", up_to_high_watermark=False) == []


def test_only_the_sink_columns_travel_to_the_driver(spark: SparkSession) -> None:
    """Columns the sink ignores are dropped before the collect; a batch without ``value`` fails before any Spark job."""
    df = spark.range(2).selectExpr(
        "cast(id as string) as key", "repeat('x', 1000) as payload", "cast(cast(id as string) as binary) as value"
    )
    assert _to_collect(df, "t").columns == ["key", "value"]
    kafka_shaped = df.select("key", "value")
    assert _to_collect(kafka_shaped, "t") is kafka_shaped
    with pytest.raises(SchemaError, match=r"no 'value' column \(columns: \['key', 'payload'\]\)"):
        _to_collect(df.drop("value"), "t")


def test_a_stateful_query_updates_its_state_once_per_batch(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sink collects the micro-batch from the query's own plan: with a streaming aggregation, each
    batch still runs (and updates the state store) exactly once, so the running counts are right."""
    direct: list[bool] = []

    def spy(batch_df: DataFrame) -> DataFrame | None:
        found = micro_batch_plan(batch_df)
        direct.append(found is not None)
        return found

    monkeypatch.setattr("streaming.sink.micro_batch_plan", spy)
    rows = write_json_inputs(tmp_path / "in", files=3, rows_per_file=40, keys=4)
    (tmp_path / "logs").mkdir()
    sink = SegmentLogSink(tmp_path / "logs", topic="counts", num_partitions=1, settings=SETTINGS)
    counts = (
        json_input_stream(spark, tmp_path / "in", files_per_trigger=1)
        .groupBy("key")
        .count()
        .select("key", F.col("count").cast("string").alias("value"))
    )
    query = start_foreach_batch(counts, sink, tmp_path / "ck", output_mode="update")
    query.awaitTermination()
    sink.close()
    latest = {r.key: int(r.value) for r in read_topic(tmp_path / "logs", "counts")}  # offset order: last wins
    assert latest == {k.encode(): n for k, n in Counter(k for k, _ in rows).items()}
    assert direct == [True, True, True]


@pytest.mark.parametrize("writes", ["driver", "executors"])
def test_an_empty_first_micro_batch_leaves_an_empty_topic_to_read(
    spark: SparkSession, tmp_path: Path, writes: str
) -> None:
    """Both paths create the sink's topic at its first micro-batch, rows or not: a reader started before
    the first row finds the topic (empty) whichever path wrote, instead of "not found" after driver writes."""
    sink = SegmentLogSink(
        tmp_path / "logs", topic="ev", num_partitions=3, settings=SETTINGS, writes=writes, query_id="empty"
    )
    with sink:
        sink(spark.range(0).selectExpr("cast(id as string) as value"), 0)
    assert sink.committed().batch_id == 0
    read = spark.read.format("seglog").option("subscribe", "ev").load(str(tmp_path / "logs"))
    assert read.count() == 0
    assert sorted(p.name for p in (tmp_path / "logs").glob("ev-*")) == ["ev-0", "ev-1", "ev-2"]
