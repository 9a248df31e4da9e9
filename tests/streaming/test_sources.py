"""The job's sources, shaped into the sink's columns."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import DataFrame, SparkSession

from indexer.errors import ConfigError
from streaming import sources
from tests.streaming.helpers import wait_until

pytestmark = pytest.mark.spark


def _drain(df: DataFrame, tmp_path: Path) -> pa.Table:
    """Run ``df`` (a file stream) to the end and return everything as one Arrow table."""
    seen: list[pa.Table] = []
    query = (
        df.writeStream.foreachBatch(lambda batch, _id: seen.append(batch.toArrow()))
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return pa.concat_tables(seen)


def test_rate_events_are_keyed_json_with_headers(spark: SparkSession) -> None:
    seen: list[pa.Table] = []
    query = (
        sources.rate_events(spark, 100)
        .writeStream.foreachBatch(lambda batch, _id: seen.append(batch.toArrow()))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        wait_until(lambda: any(t.num_rows for t in seen), "the first rows of the rate source", query)
    finally:
        query.stop()
    table = pa.concat_tables([t for t in seen if t.num_rows])
    assert table.column_names == ["key", "value", "headers", "timestamp"]
    row = table.slice(0, 1).to_pylist()[0]
    event = json.loads(row["value"])
    assert row["key"] == event["user_id"].encode() and event["user_id"].startswith("user-")
    assert event["type"] in sources.EVENT_TYPES
    assert ("amount" in event) == (event["type"] == "purchase")
    assert row["headers"] == [
        {"key": "source", "value": b"seglog-rate"},
        {"key": "event-type", "value": event["type"].encode()},
    ]


def test_files_with_a_value_column_pass_through(spark: SparkSession, tmp_path: Path) -> None:
    """A Parquet timestamp without a zone (pandas' naive datetimes), which Spark reads as ``timestamp_ntz``
    and the sink refuses, is read as Spark's ``timestamp``, in the session's time zone as Spark casts it."""
    (tmp_path / "in").mkdir()
    pq.write_table(
        pa.table(
            {
                "key": ["a", "b"],
                "value": [b"1", b"2"],
                "partition": pa.array([0, 1], pa.int32()),
                "other": [1, 2],
                "timestamp": pa.array([1_700_000_000_000, None], pa.timestamp("ms")),
            }
        ),
        tmp_path / "in" / "x.parquet",
    )
    df = sources.file_events(spark, str(tmp_path / "in"), "parquet")
    assert df.schema["timestamp"].dataType.simpleString() == "timestamp"
    table = _drain(df, tmp_path).sort_by("key")
    assert table.column_names == ["key", "value", "partition", "timestamp"]
    assert table.column("value").to_pylist() == [b"1", b"2"]
    wall = datetime(2023, 11, 14, 22, 13, 20, tzinfo=ZoneInfo(spark.conf.get("spark.sql.session.timeZone")))
    assert table.column("timestamp").cast(pa.int64()).to_pylist() == [int(wall.timestamp()) * 1_000_000, None]


def test_other_files_become_json_values_keyed_by_a_column(spark: SparkSession, tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "x.csv").write_text("user,clicks\nann,3\nbob,5\n")
    df = sources.file_events(spark, str(tmp_path / "in"), "csv", key_column="user", max_files_per_trigger=1)
    table = _drain(df, tmp_path).sort_by("key")
    assert table.column("key").to_pylist() == ["ann", "bob"]
    assert [json.loads(v) for v in table.column("value").to_pylist()] == [
        {"user": "ann", "clicks": 3},
        {"user": "bob", "clicks": 5},
    ]
    with pytest.raises(ConfigError, match="key column 'nobody'"):
        sources.file_events(spark, str(tmp_path / "in"), "csv", key_column="nobody")
    with pytest.raises(ConfigError, match="file format"):
        sources.file_events(spark, str(tmp_path / "in"), "avro")
    (tmp_path / "empty").mkdir()
    for file_format in sources.FILE_FORMATS:  # not Spark's UNABLE_TO_INFER_SCHEMA ("looks like a bug")
        with pytest.raises(ConfigError, match=f"no {file_format} file in .*empty to take the schema from"):
            sources.file_events(spark, str(tmp_path / "empty"), file_format)


def test_kafka_and_delta_sources_explain_the_missing_package(spark: SparkSession, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="spark-sql-kafka-0-10"):
        sources.kafka_events(spark, "localhost:9092", "clicks")
    with pytest.raises(ConfigError, match="delta-spark"):
        sources.delta_events(spark, str(tmp_path))


def test_csv_fields_may_hold_quoted_commas_and_line_ends(spark: SparkSession, tmp_path: Path) -> None:
    """RFC 4180 (and Spark's own CSV writer) quote a field holding a line end; Spark's CSV reader splits
    such a record at the line end unless ``multiLine`` is on, so the files source refused valid CSV as a
    malformed record (``malformed csv record in ...: line2"``); and a doubled quote inside a quoted field
    (RFC 4180's escape) was read as two quotes, and the field's own quotes kept, instead of ``say "hi"``.
    A quoted empty field (``""``, how Spark's CSV writer writes an empty string) was read as null like an
    empty one, so an empty value became a tombstone."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "x.csv").write_text('key,value\nk1,"a,b"\nk2,"line1\nline2"\r\nk3,"say ""hi"""\nk4,""\nk5,\n')
    table = _drain(sources.file_events(spark, str(tmp_path / "in"), "csv"), tmp_path).sort_by("key")
    assert table.column("key").to_pylist() == ["k1", "k2", "k3", "k4", "k5"]
    assert table.column("value").to_pylist() == ["a,b", "line1\nline2", 'say "hi"', "", None]


def test_files_in_subdirectories_are_read_and_hidden_ones_are_not(spark: SparkSession, tmp_path: Path) -> None:
    """Spark's file source reads only the files directly in its directory (unless their subdirectories are
    all ``name=value`` partitions): files a user's tool writes into ``in/2024-01-02/`` were skipped in
    silence. Every file under the directory is read now, except hidden ones (``.name``, ``_name``, which
    Spark never lists: where a file is written before it is renamed into place), gzipped ones too."""
    import gzip

    (tmp_path / "in" / "2024-01-02" / "deeper").mkdir(parents=True)
    (tmp_path / "in" / "a.json").write_text('{"key": "top", "value": "1"}\n')
    (tmp_path / "in" / "2024-01-02" / "b.json").write_text('{"key": "sub", "value": "2"}\n')
    (tmp_path / "in" / "2024-01-02" / "deeper" / "c.json.gz").write_bytes(
        gzip.compress(b'{"key": "deep", "value": "3"}\n')
    )
    (tmp_path / "in" / ".d.json.tmp").write_text('{"key": "hidden", "value": "4"}\n{"key": "cut')
    (tmp_path / "in" / "_e.json").write_text('{"key": "hidden", "value": "5"}\n')
    table = _drain(sources.file_events(spark, str(tmp_path / "in"), "json"), tmp_path).sort_by("value")
    assert table.column("key").to_pylist() == ["top", "sub", "deep"]


def test_seglog_read_output_passes_through_with_its_headers(spark: SparkSession, tmp_path: Path) -> None:
    """``seglog read`` writes headers as ``[key, value]`` pairs (the format ``seglog append`` takes), which
    Spark infers as ``array<array<string>>`` (``array<string>`` when every list is empty): the sink refused
    the whole micro-batch with ``SchemaError: column 'headers': found type list<element: list<element:
    string>>, expected ...``, naming no file. Such headers are now Spark's Kafka ``headers`` structs, and a
    header that is not a pair with a key stops the job naming the file."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.json").write_text(
        '{"offset":0,"timestamp":5,"timestampType":0,"key":"a","value":"1","headers":[["h","x"],["h","y"],["",null]]}\n'
        '{"offset":1,"timestamp":6,"timestampType":0,"key":"b","value":"2","headers":[]}\n'
    )
    (tmp_path / "only-empty").mkdir()
    (tmp_path / "only-empty" / "b.json").write_text('{"key":"c","value":"3","headers":[]}\n')
    table = _drain(sources.file_events(spark, str(tmp_path / "in"), "json"), tmp_path / "1").sort_by("value")
    assert table.column("headers").to_pylist() == [
        [{"key": "h", "value": b"x"}, {"key": "h", "value": b"y"}, {"key": "", "value": None}],
        [],
    ]
    table = _drain(sources.file_events(spark, str(tmp_path / "only-empty"), "json"), tmp_path / "2")
    assert table.column("headers").to_pylist() == [[]]
    (tmp_path / "in" / "c.json").write_text('{"key":"d","value":"4","headers":[["h"]]}\n')
    with pytest.raises(Exception, match=r'headers must be \[key, value\] pairs with a key, got \["h"\]'):
        _drain(sources.file_events(spark, str(tmp_path / "in"), "json"), tmp_path / "3")


@pytest.mark.parametrize("file_format", ["json", "csv"])
def test_a_partition_column_of_json_or_csv_files_is_read_as_the_int_the_sink_takes(
    spark: SparkSession, tmp_path: Path, file_format: str
) -> None:
    """Spark infers a bigint from JSON's numbers, which the sink refuses as Spark's Kafka sink does
    ("partition attribute type must be an int"): the files source reads the column as an int, and a
    number past an int is a malformed line naming its file, not a wrapped partition."""
    (tmp_path / "in").mkdir()
    rows = {"json": '{"value": "a", "partition": 1}\n', "csv": "value,partition\na,1\n"}
    (tmp_path / "in" / f"a.{file_format}").write_text(rows[file_format])
    table = _drain(sources.file_events(spark, str(tmp_path / "in"), file_format), tmp_path / "1")
    assert table.schema.field("partition").type == pa.int32()
    assert table.column("partition").to_pylist() == [1]
    past = {"json": '{"value": "b", "partition": 2147483648}\n', "csv": "value,partition\nb,2147483648\n"}
    (tmp_path / "in" / f"b.{file_format}").write_text(past[file_format])
    with pytest.raises(Exception, match=rf"{sources.MALFORMED_MARK}{file_format} record in .*b\.{file_format}"):
        _drain(sources.file_events(spark, str(tmp_path / "in"), file_format), tmp_path / "2")


def test_a_failure_that_is_no_malformed_line_is_not_reported_as_one(spark: SparkSession, tmp_path: Path) -> None:
    """Spark's query failure ends with the query's plan, which holds the files source's error message as a
    literal: any other failure of a files query (a file deleted once listed, a directory of which no line
    parses) was reported as ``malformed json record in , input_file_name(), : , _corrupt_record#7)), ...``."""
    from pyspark.errors import StreamingQueryException

    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.json").write_text('{"key": "a", "value": "1"}\n')

    def fail(_batch: DataFrame, _id: int) -> None:
        raise RuntimeError("not a malformed line")

    query = (
        sources.file_events(spark, str(tmp_path / "in"), "json")
        .writeStream.foreachBatch(fail)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(StreamingQueryException) as caught:
        query.awaitTermination()
    assert sources.MALFORMED_MARK in str(caught.value)  # in the plan
    assert sources.malformed_input_error(caught.value) is None


def test_a_directory_where_no_line_parses_is_refused_at_start(spark: SparkSession, tmp_path: Path) -> None:
    """A directory whose only lines Spark cannot parse (here Latin-1, not UTF-8) gives Spark a schema of
    its corrupt-record column alone, which it refuses to query: the job stopped at its first micro-batch
    with Spark's many-line UNSUPPORTED_FEATURE.QUERY_ONLY_CORRUPT_RECORD_COLUMN. It is one line now,
    before the query starts."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.json").write_bytes(b'{"key": "l", "value": "caf\xe9"}\n')
    with pytest.raises(ConfigError, match=r"no line of the json files in .*in parses: .* not UTF-8"):
        sources.file_events(spark, str(tmp_path / "in"), "json")


def test_a_value_or_key_that_is_no_text_is_refused_at_start(spark: SparkSession, tmp_path: Path) -> None:
    """Spark's Kafka sink takes a string or binary key and value only. Files whose values are all numbers
    were read as a bigint column, which the sink refused at the first micro-batch with ``SchemaError: column
    'value': found type int64, expected binary ...``, naming no file; now it is one line before the query
    starts, naming the directory. CSV has no types: its key and value are the text (inferSchema made
    ``5.0`` a double, refused the same way)."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.json").write_text('{"key": "n", "value": 5}\n{"key": "m", "value": 6}\n')
    with pytest.raises(ConfigError, match=r"the json files in .*in have a value of type bigint"):
        sources.file_events(spark, str(tmp_path / "in"), "json")
    (tmp_path / "in" / "a.json").write_text('{"key": 1, "value": "a"}\n')
    with pytest.raises(ConfigError, match=r"the json files in .*in have a key of type bigint"):
        sources.file_events(spark, str(tmp_path / "in"), "json")
    (tmp_path / "csv").mkdir()
    (tmp_path / "csv" / "a.csv").write_text("key,value\n1,5.0\n")
    table = _drain(sources.file_events(spark, str(tmp_path / "csv"), "csv"), tmp_path)
    assert table.to_pylist() == [{"key": "1", "value": "5.0"}]  # CSV has no types: its text
