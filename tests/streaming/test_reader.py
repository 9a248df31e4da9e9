"""``spark.read.format("seglog")`` against Spark's Kafka-source contract (batch queries): columns, every
option, errors raised at ``load`` on the driver, read_committed, and the real broker-written logs.

The expected records come from kafka-python's decoder (tests/streaming/helpers.py), not from seglog's."""

from __future__ import annotations

import json
import logging
import math
import warnings
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.errors import AnalysisException, StreamingQueryException
from pyspark.sql import DataFrame, DataFrameReader, SparkSession

from indexer.config import LogConfig, Settings
from indexer.errors import ConfigError, InvalidTimestampError, OffsetOutOfRangeError
from indexer.file_names import is_listed_to_patterns, is_log_file, parse_topic_partition_name
from indexer.log import Log
from indexer.log_manager import LogManager
from indexer.records.isolation import IsolationLevel
from streaming.reader import RangeToRead, SeglogDataSource, read_range
from streaming.sink import SegmentLogSink
from tests.indexer.test_read_committed import ALL_OFFSETS, COMMITTED_OFFSETS, write_transactional_partition
from tests.streaming.helpers import await_end, committed_then_damaged, read_topic

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.memory_records import MemoryRecords

pytestmark = pytest.mark.spark

KAFKA_COLUMNS = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Topic "ev": 2 partitions, 40 committed rows (timestamps 1000..1039, some with headers) and one
    uncommitted record; topic "other": 1 partition, 5 rows."""
    root = tmp_path_factory.mktemp("reader")
    headers = [[{"key": "h", "value": f"{i}".encode()}] if i % 3 == 0 else None for i in range(40)]
    with SegmentLogSink(root, topic="ev", num_partitions=2, settings=Settings()) as sink:
        sink.write_batch(
            pa.table(
                {
                    "key": [f"k{i % 7}".encode() for i in range(40)],
                    "value": [f"v{i}".encode() for i in range(40)],
                    "timestamp": pa.array(range(1000, 1040), pa.int64()),
                    "headers": pa.array(headers, pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
                }
            ),
            0,
            query_id="q",
        )
    with SegmentLogSink(root, topic="other", num_partitions=1, settings=Settings()) as sink:
        sink.write_batch(pa.table({"value": [f"o{i}".encode() for i in range(5)]}), 0, query_id="q")
    with Log.open(root / "ev-0", LogConfig()) as log:
        log.append({"value": [b"uncommitted"]})  # beyond the high watermark: must stay invisible
    return root


def seglog(spark: SparkSession, **options: str) -> DataFrameReader:
    reader = spark.read.format("seglog")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader


def rows(df: DataFrame) -> list[tuple[str, int, int, bytes]]:
    return sorted((r.topic, r.partition, r.offset, r.value) for r in df.collect())


def oracle(log_dir: Path, topic: str) -> list[tuple[str, int, int, bytes]]:
    return sorted((topic, s.partition, s.offset, s.value) for s in read_topic(log_dir, topic))


def test_kafka_columns_committed_records_and_headers(spark: SparkSession, log_dir: Path) -> None:
    df = seglog(spark, subscribe="ev").load(str(log_dir))
    assert df.columns == KAFKA_COLUMNS  # no headers column unless includeHeaders=true, as Spark's source
    assert [f.dataType.simpleString() for f in df.schema] == [
        "binary",
        "binary",
        "string",
        "int",
        "bigint",
        "timestamp",
        "int",
    ]
    assert rows(df) == oracle(log_dir, "ev") and len(rows(df)) == 40  # the uncommitted record is not there
    with_headers = seglog(spark, subscribe="ev", includeHeaders="true").load(str(log_dir))
    assert with_headers.columns == [*KAFKA_COLUMNS, "headers"]
    expected = {
        (s.partition, s.offset): (s.key, s.timestamp, [(k, v) for k, v in s.headers] or None)
        for s in read_topic(log_dir, "ev")
    }
    for r in with_headers.collect():
        key, timestamp, headers = expected[(r.partition, r.offset)]
        assert (r.key, round(r.timestamp.timestamp() * 1000), r.timestampType) == (key, timestamp, 0)
        assert (None if r.headers is None else [(h.key, h.value) for h in r.headers]) == headers


def test_subscribe_subscribe_pattern_and_assign(spark: SparkSession, log_dir: Path) -> None:
    both = oracle(log_dir, "ev") + oracle(log_dir, "other")
    assert rows(seglog(spark, subscribe="ev,other").load(str(log_dir))) == sorted(both)
    assert rows(seglog(spark, subscribePattern="o.*").load(str(log_dir))) == oracle(log_dir, "other")
    assigned = seglog(spark, assign=json.dumps({"ev": [1]})).load(str(log_dir))
    assert rows(assigned) == [r for r in oracle(log_dir, "ev") if r[1] == 1]


def test_offsets_and_timestamps_select_ranges(spark: SparkSession, log_dir: Path) -> None:
    path = str(log_dir)
    everything = oracle(log_dir, "ev")
    ends = {p: sum(1 for r in everything if r[1] == p) for p in (0, 1)}
    some = seglog(
        spark,
        subscribe="ev",
        startingOffsets=json.dumps({"ev": {"0": 2, "1": -2}}),
        endingOffsets=json.dumps({"ev": {"0": 4, "1": -1}}),
    ).load(path)
    assert rows(some) == [r for r in everything if (r[1] == 0 and 2 <= r[2] < 4) or r[1] == 1]
    by_time = {(s.partition, s.offset): s.timestamp for s in read_topic(log_dir, "ev")}

    def since(ts: int, until: int | None = None) -> list[tuple[str, int, int, bytes]]:
        # Offsets from each partition's first record at or after ts (records are in time order here).
        return [
            r for r in everything if by_time[(r[1], r[2])] >= ts and (until is None or by_time[(r[1], r[2])] < until)
        ]

    assert rows(seglog(spark, subscribe="ev", startingTimestamp="1030").load(path)) == since(1030)
    assert rows(
        seglog(
            spark,
            subscribe="ev",
            startingOffsetsByTimestamp=json.dumps({"ev": {"0": 1010, "1": 1020}}),
            startingOffsets="latest",
        ).load(path)
    ) == [r for r in since(1010) if r[1] == 0] + [r for r in since(1020) if r[1] == 1]
    assert rows(seglog(spark, subscribe="ev", endingTimestamp="1020").load(path)) == since(0, 1020)
    assert rows(
        seglog(spark, subscribe="ev", endingOffsetsByTimestamp=json.dumps({"ev": {"0": 1005, "1": 9999}})).load(path)
    ) == [r for r in since(0, 1005) if r[1] == 0] + [r for r in everything if r[1] == 1]
    # No record at or after the timestamp: Kafka's default strategy fails, "latest" starts at the end.
    with pytest.raises(Exception, match="has no record at or after timestamp 5000"):
        seglog(spark, subscribe="ev", startingTimestamp="5000").load(path).collect()
    # ev-0's only record after 5000 is uncommitted: Kafka's ListOffsets answers a consumer "none" for it too.
    with pytest.raises(Exception, match="ev-0 has no record at or after timestamp 5000"):
        only_uncommitted = json.dumps({"ev": {"0": 5000, "1": 1000}})
        seglog(spark, subscribe="ev", startingOffsetsByTimestamp=only_uncommitted).load(path).collect()
    late = seglog(spark, subscribe="ev", startingTimestamp="5000", startingOffsetsByTimestampStrategy="latest")
    assert rows(late.load(path)) == []
    with pytest.raises(Exception, match=f"offset 99 of ev-0 is beyond its committed records .they end at {ends[0]}"):
        seglog(spark, subscribe="ev", endingOffsets=json.dumps({"ev": {"0": 99, "1": -1}})).load(path).collect()
    with pytest.raises(Exception, match="startingOffsets cannot be latest .-1. in a batch query"):
        seglog(spark, subscribe="ev", startingOffsets="latest").load(path).collect()
    # Checked against the partitions when the offsets are taken (a streaming query's first run only).
    # Which partitions are wrong is said, as Kafka's "Specified: ... Assigned: ..." does.
    with pytest.raises(
        AnalysisException, match=r"startingOffsets must name exactly the partitions .*ev-0, ev-1 .it leaves out ev-1\)"
    ):
        seglog(spark, subscribe="ev", startingOffsets='{"ev": {"0": 1}}').load(path).collect()
    with pytest.raises(
        AnalysisException,
        match=r"endingOffsets must name exactly the partitions .*ev-0, ev-1 .it names other-0, not one of them\)",
    ):
        seglog(spark, subscribe="ev", endingOffsets='{"ev": {"0": 1, "1": 1}, "other": {"0": 1}}').load(path).collect()


def test_offsets_json_naming_other_partitions_says_which(log_dir: Path) -> None:
    """A JSON offsets option must name exactly the subscribed partitions (Kafka's rule); the error said only
    which those are, not which of the given ones are wrong, so a misspelt topic read as a missing one."""
    source = SeglogDataSource(
        {"subscribe": "ev", "path": str(log_dir), "startingOffsets": '{"evv": {"0": 0, "1": 0}, "ev": {"0": 0}}'}
    )
    with pytest.raises(ConfigError) as info:
        source.reader(source.schema()).partitions()
    assert str(info.value) == (
        "option startingOffsets must name exactly the partitions of subscribe=ev: ev-0, ev-1 "
        "(it names evv-0, evv-1, not one of them; it leaves out ev-1)"
    )


def _commit(log_dir: Path, topic: str, values_by_partition: dict[int, list[str]]) -> None:
    """Append and commit ``values_by_partition`` to ``topic`` (created with as many partitions)."""
    with LogManager(log_dir, Settings()) as manager:
        for partition, values in values_by_partition.items():
            log = manager.get_or_create_log(topic, partition)
            if values:
                log.append({"value": [v.encode() for v in values]})
            log.update_high_watermark(log.log_end_offset)


def test_earliest_and_latest_bind_when_a_reused_dataframe_reads(spark: SparkSession, tmp_path: Path) -> None:
    """As Kafka's batch source (KafkaRelationSuite: "latest should late bind to the current (latest)
    offset in the df"): earliest and latest, by default or as -2/-1 in JSON, are a partition's start and
    end when a task reads, so a DataFrame read again sees the records committed since, also in a
    partition that was empty and with minPartitions; explicit offsets stay where they are. The offsets
    were fixed when the DataFrame was first planned: it read the same records again, in silence."""
    _commit(tmp_path, "lb", {0: ["a0", "a1"], 1: ["b0"], 2: []})
    default = seglog(spark, subscribe="lb").load(str(tmp_path))
    split = seglog(spark, subscribe="lb", minPartitions="4").load(str(tmp_path))
    pinned = seglog(
        spark,
        subscribe="lb",
        startingOffsets='{"lb": {"0": -2, "1": 0, "2": -2}}',
        endingOffsets='{"lb": {"0": 2, "1": -1, "2": 0}}',
    ).load(str(tmp_path))

    def values(df: DataFrame) -> list[bytes]:
        return sorted(r.value for r in df.collect())

    assert values(default) == values(split) == [b"a0", b"a1", b"b0"] == values(pinned)
    _commit(tmp_path, "lb", {0: ["a2"], 1: ["b1"], 2: ["c0"]})
    assert values(default) == values(split) == [b"a0", b"a1", b"a2", b"b0", b"b1", b"c0"]
    assert values(pinned) == [b"a0", b"a1", b"b0", b"b1"]  # ends at lb-0's offset 2 and lb-2's 0


def test_earliest_after_an_explicit_ending_offset_reads_nothing_there(tmp_path: Path) -> None:
    """From earliest (the default) to an explicit ending offset that the log start has passed since
    (retention, deleted records): nothing of that partition is left to read, and Kafka's batch source
    reads nothing there. The query failed instead, blaming a starting offset the user never gave ("the
    starting offset 5 is after the ending offset 3"). Explicit offsets in that order are still refused."""
    _commit(tmp_path, "rs", {0: [f"r{i}" for i in range(8)], 1: ["s0", "s1"]})
    with LogManager(tmp_path, Settings()) as manager:
        log = manager.get_log("rs", 0)
        assert log is not None and log.maybe_increment_log_start_offset(5)
    ending = '{"rs": {"0": 3, "1": -1}}'
    source = SeglogDataSource({"subscribe": "rs", "path": str(tmp_path), "endingOffsets": ending})
    tasks = [p for p in source.reader(source.schema()).partitions() if isinstance(p, RangeToRead)]
    assert [(t.partition, sum(b.num_rows for b in read_range(t))) for t in tasks] == [(1, 2)]
    explicit = SeglogDataSource(
        {
            "subscribe": "rs",
            "path": str(tmp_path),
            "endingOffsets": ending,
            "startingOffsets": '{"rs": {"0": 6, "1": 0}}',
        }
    )
    with pytest.raises(ConfigError, match="rs-0: the starting offset 6 is after the ending offset 3"):
        explicit.reader(explicit.schema()).partitions()


def test_min_partitions_and_max_records_per_partition_split_tasks(spark: SparkSession, log_dir: Path) -> None:
    expected = oracle(log_dir, "ev")
    sizes = [sum(1 for r in expected if r[1] == p) for p in (0, 1)]
    split = seglog(spark, subscribe="ev", maxRecordsPerPartition="3").load(str(log_dir))
    assert split.rdd.getNumPartitions() == sum(math.ceil(n / 3) for n in sizes)
    assert rows(split) == expected
    spread = seglog(spark, subscribe="ev", minPartitions="6").load(str(log_dir))
    assert spread.rdd.getNumPartitions() >= 5 and rows(spread) == expected
    assert seglog(spark, subscribe="ev").load(str(log_dir)).rdd.getNumPartitions() == 2


@pytest.mark.parametrize(
    ("options", "path", "message"),
    [
        ({"subscribe": "ev"}, "missing", "log directory .*missing does not exist"),
        ({"subscribe": "ev"}, "ev-0", "is a partition directory; give the log directory that holds it"),
        ({"subscribe": "ev", "startingOffsets": '{"ev": {"0": 1}'}, "", "startingOffsets is not valid JSON"),
        ({"subscribe": "ev", "subscribePattern": "e.*"}, "", "exactly one of the options"),
        ({"subscribe": "ev", "maxOffsetPerTrigger": "5"}, "", "did you mean maxOffsetsPerTrigger"),
    ],
)
def test_bad_options_fail_at_load_on_the_driver(
    spark: SparkSession, log_dir: Path, options: dict[str, str], path: str, message: str
) -> None:
    with pytest.raises(AnalysisException, match=message) as info:
        seglog(spark, **options).load(str(log_dir / path) if path else str(log_dir))
    assert "ConfigError" in str(info.value) and "AssertionError" not in str(info.value)


def test_a_log_dir_given_as_a_uri_is_read_as_spark_takes_paths(spark: SparkSession, log_dir: Path) -> None:
    """``file:`` URIs are the local path (it was "log directory <cwd>/file:/... does not exist"); another
    scheme is named as not local."""
    assert rows(seglog(spark, subscribe="ev").load(f"file://{log_dir}")) == oracle(log_dir, "ev")
    assert rows(seglog(spark, subscribe="ev").load(f"file:{log_dir}")) == oracle(log_dir, "ev")
    with pytest.raises(AnalysisException, match=r"ConfigError: log directory 'hdfs://nn/logs' is not a local path"):
        seglog(spark, subscribe="ev").load("hdfs://nn/logs")
    # Several paths reach the source as Spark's "paths" option (it said "unknown option 'paths'").
    with pytest.raises(AnalysisException, match=r"ConfigError: the seglog source reads one log directory, load"):
        seglog(spark, subscribe="ev").load([str(log_dir), str(log_dir)])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": "nope"}, r"subscribe=nope: nope not found in .* \(topics there: ev, other\)"),
        ({"subscribePattern": "x.*"}, "no topic matches 'x.*'"),
        ({"assign": '{"ev": [7]}'}, "ev-7 not found"),
    ],
)
def test_a_subscription_naming_what_is_not_there_fails_when_the_query_plans(
    spark: SparkSession, log_dir: Path, options: dict[str, str], message: str
) -> None:
    """On the driver, where the offsets are taken (not at ``load``: a streaming query restarted after
    one of its topics was deleted meets that as data loss, see test_reader_stream.py)."""
    with pytest.raises(AnalysisException, match=message) as info:
        seglog(spark, **options).load(str(log_dir)).collect()
    assert "ConfigError" in str(info.value) and "Failed to generate Python data source read partitions" in str(
        info.value
    )


def test_the_parent_of_a_log_directory_names_the_log_directory(spark: SparkSession, tmp_path: Path) -> None:
    """``load("data")`` for ``data/logs`` said only "data holds no topic partition"; it names the
    directory below that holds partitions, as a partition directory names its parent."""
    with Log.open(tmp_path / "logs" / "ev-0", LogConfig()) as log:
        log.append({"value": [b"v"]})
    (tmp_path / "checkpoints").mkdir()
    message = (
        f"{tmp_path} holds no topic partition .no <topic>-<partition> directory.; {tmp_path / 'logs'} below it does"
    )
    with pytest.raises(AnalysisException, match=message):
        seglog(spark, subscribe="ev").load(str(tmp_path)).collect()


def test_a_schema_set_by_the_user_is_refused_on_the_driver_unless_it_is_the_sources(
    spark: SparkSession, log_dir: Path
) -> None:
    """As Kafka's source (its schema is fixed), not a schema mismatch in every task."""
    with pytest.raises(AnalysisException, match="the seglog source has a fixed schema") as info:
        spark.read.format("seglog").schema("key binary, value binary").option("subscribe", "ev").load(
            str(log_dir)
        ).collect()
    assert "SCHEMA_MISMATCH" not in str(info.value)
    own = seglog(spark, subscribe="ev").load(str(log_dir)).schema
    assert rows(seglog(spark, subscribe="ev").schema(own).load(str(log_dir))) == oracle(log_dir, "ev")


def test_writing_with_format_seglog_is_refused_with_the_sinks_way_in(
    spark: SparkSession, log_dir: Path, tmp_path: Path
) -> None:
    """Not PySpark's "[NOT_IMPLEMENTED] writer is not implemented": the one line says how to write."""
    batch = spark.range(3).selectExpr("cast(id as string) as value")
    with pytest.raises(AnalysisException, match=r'format\("seglog"\) only reads; write with .*SegmentLogSink') as info:
        batch.write.format("seglog").mode("append").option("topic", "w").save(str(tmp_path / "logs"))
    assert "NOT_IMPLEMENTED" not in str(info.value)
    stream = spark.readStream.format("seglog").option("subscribe", "ev").load(str(log_dir)).select("value")
    query = (
        stream.writeStream.format("seglog")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start(str(tmp_path / "logs"))
    )
    with pytest.raises(StreamingQueryException, match=r'format\("seglog"\) only reads; write with') as failed:
        await_end(query)
    assert "NOT_IMPLEMENTED" not in str(failed.value)
    assert not (tmp_path / "logs").exists()


def test_committed_records_missing_from_the_log_are_reported_and_the_rest_read(
    spark: SparkSession, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Records the high watermark says are committed but no longer on disk (damage, files copied before
    the checkpoint): the read warns on the driver in the engine's words and reads the log up to its end,
    as a broker serves it (the query never had those offsets; writers refuse the partition)."""
    committed_then_damaged(tmp_path)
    assert [r.offset for r in seglog(spark, subscribe="dmg").load(str(tmp_path)).collect()] == list(range(10))
    caplog.set_level(logging.WARNING, logger="streaming.reader")  # the planner, in this process (Spark's is a worker)
    source = SeglogDataSource({"subscribe": "dmg", "path": str(tmp_path)})
    assert len(source.reader(source.schema()).partitions()) == 1
    warned = [r.getMessage() for r in caplog.records if "are missing" in r.getMessage()]
    assert len(warned) == 1 and "committed records (offsets 10..19)" in warned[0], warned


def test_a_log_ending_below_its_recovery_point_is_reported(
    cut_below_recovery_point: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A broker's partition without a high watermark entry, cut below its recovery point: the source
    planned its 236 records in silence; the driver now names the flushed offsets 236..436 that are gone."""
    caplog.set_level(logging.WARNING, logger="streaming.reader")
    source = SeglogDataSource({"subscribe": "items", "path": str(cut_below_recovery_point)})
    assert len(source.reader(source.schema()).partitions()) == 1
    warned = [r.getMessage() for r in caplog.records if "are missing" in r.getMessage()]
    assert len(warned) == 1 and "below its checkpointed recovery point 437" in warned[0], warned
    assert "(offsets 236..436)" in warned[0], warned


@pytest.mark.slow
def test_a_task_reads_more_than_2_gib_of_values(tmp_path: Path) -> None:
    """A task's range whose values pass 2 GiB within one read step (100,000 records of 512 KiB would
    be 50 GiB) reaches Spark in batches that each fit an Arrow ``binary`` array: it failed with
    "offset overflow while concatenating arrays" when a step became one batch."""
    value = b"v" * (512 << 10)
    with LogManager(tmp_path, Settings()) as manager:
        log = manager.get_or_create_log("big", 0)
        for _ in range(4200 // 50):  # 4,200 records, 2.1 GiB
            log.append({"value": [value] * 50})
        log.update_high_watermark(log.log_end_offset)
    piece = RangeToRead(str(tmp_path), "big", 0, 0, 4200, False, IsolationLevel.READ_UNCOMMITTED, True)
    batches = read_range(piece)
    offsets = [batch.column("offset").to_numpy() for batch in batches]
    assert len(offsets) > 1 and (pa.chunked_array(offsets).to_numpy() == range(4200)).all()


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_a_timestamp_past_sparks_range_is_an_error_not_a_wrapped_value(tmp_path: Path, fail_on_data_loss: bool) -> None:
    """Spark's timestamp column holds microseconds in a long: a record timestamp past 2^63 / 1000 ms (one
    written in nanoseconds, say) fails Spark's Kafka source (``Math.multiplyExact``: long overflow). It
    wrapped around here, in silence, into another instant; it is an error naming the partition, the
    offset and the timestamp, whatever failOnDataLoss says (the record is there, it cannot be shown)."""
    with LogManager(tmp_path, Settings()) as manager:
        log = manager.get_or_create_log("ns", 0)
        log.append({"value": [b"ms", b"ns"], "timestamp": [1_700_000_000_000, 1_700_000_000_000_000_000]})
        log.update_high_watermark(log.log_end_offset)
    piece = RangeToRead(str(tmp_path), "ns", 0, 0, 2, False, IsolationLevel.READ_UNCOMMITTED, fail_on_data_loss)
    with pytest.raises(
        InvalidTimestampError, match=r"offset 1 of ns-0 has timestamp 1700000000000000000 ms, past what Spark"
    ):
        list(read_range(piece))
    first = RangeToRead(str(tmp_path), "ns", 0, 0, 1, False, IsolationLevel.READ_UNCOMMITTED, fail_on_data_loss)
    (batch,) = read_range(first)
    assert batch.column("timestamp").cast(pa.int64()).to_pylist() == [1_700_000_000_000_000]


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_a_task_finding_the_log_shorter_than_planned_is_data_loss(tmp_path: Path, fail_on_data_loss: bool) -> None:
    """Planned on the driver up to offset 20, read on an executor after the end of the log was damaged:
    data loss, not a range that ends early in silence."""
    committed_then_damaged(tmp_path)
    piece = RangeToRead(str(tmp_path), "dmg", 0, 0, 20, False, IsolationLevel.READ_UNCOMMITTED, fail_on_data_loss)
    if fail_on_data_loss:
        with pytest.raises(OffsetOutOfRangeError, match=r"committed records \(offsets 10\.\.19\) are missing"):
            list(read_range(piece))
        return
    assert sum(batch.num_rows for batch in read_range(piece)) == 10


def test_read_committed_skips_aborted_transactions(spark: SparkSession, tmp_path: Path) -> None:
    write_transactional_partition(tmp_path / "tx-0")
    committed = seglog(spark, subscribe="tx", **{"kafka.isolation.level": "read_committed"}).load(str(tmp_path))
    assert [r[2] for r in rows(committed)] == COMMITTED_OFFSETS
    assert [r[2] for r in rows(seglog(spark, subscribe="tx").load(str(tmp_path)))] == ALL_OFFSETS


def _kafka_python_records(directory: Path, first: int, last: int) -> list[tuple[int, bytes | None]]:
    found = []
    for segment in sorted(p for p in directory.iterdir() if is_log_file(p)):
        records = MemoryRecords(segment.read_bytes())
        while (batch := records.next_batch()) is not None:
            if getattr(batch, "is_control_batch", False):
                continue
            found += [(r.offset, r.value) for r in batch if first <= r.offset < last]
    return found


def test_real_broker_logs_read_in_place(spark: SparkSession, vectors_dir: Path) -> None:
    """Every topic of every broker-written directory that a pattern sees (not the internal ones, as
    Kafka), read by Spark with the default options, equals kafka-python's decoding between each
    partition's log start and its end (where a checkpoint names records the copied logs do not hold,
    transactions-commit, up to the log end, as a broker serves it)."""
    for log_dir in sorted(p for p in vectors_dir.iterdir() if p.is_dir()):
        got = {}
        for r in (
            seglog(spark, subscribePattern=".*")
            .load(str(log_dir))
            .select("topic", "partition", "offset", "value")
            .collect()
        ):
            got.setdefault((r.topic, r.partition), []).append((r.offset, r.value))
        with LogManager(log_dir, Settings(), read_only=True) as manager:
            bounds = {
                tp: (log.log_start_offset, min(log.high_watermark, log.log_end_offset))
                for tp in manager.partitions()
                if (log := manager.get_log(*tp)) is not None
            }
        for directory in sorted(p for p in log_dir.iterdir() if p.is_dir()):
            tp = parse_topic_partition_name(directory.name)
            first, last = bounds[tp]
            expected = _kafka_python_records(directory, first, last) if is_listed_to_patterns(tp[0]) else []
            assert sorted(got.get(tp, [])) == expected, (log_dir.name, tp)
        assert got, log_dir.name
    with pytest.raises(AnalysisException, match="no topic matches '__consumer.*' .*subscribe to them by name"):
        seglog(spark, subscribePattern="__consumer.*").load(str(vectors_dir / "gzip-large-records")).collect()
    by_name = seglog(spark, subscribe="__consumer_offsets").load(str(vectors_dir / "gzip-large-records"))
    assert by_name.count() > 0
