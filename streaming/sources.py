"""Streaming sources of the main job, each shaped into the sink's columns (``key``, ``value``, ...).

* ``rate``: Spark's built-in rate source turned into realistic keyed events: ``key`` a user id
  (``user-000042``, 1000 users), ``value`` a JSON event (id, user, type, amount, time), ``headers``
  the source and the event type, ``timestamp`` the rate source's time. Pure Spark SQL expressions,
  no Python UDF, so rows never leave the JVM before the sink collects them as Arrow.
* ``files``: a directory of JSON, CSV or Parquet files, subdirectories included (hidden names, where a
  file is written before it is renamed into place, are not read). Files that have a ``value`` column are
  passed through (with whichever of ``key``, ``topic``, ``partition``, ``headers``,
  ``timestamp`` they have; a text ``timestamp``, as JSON holds one, is read as an ISO-8601
  timestamp); other files become ``value = to_json(row)``, keyed by ``key_column``.
  A JSON line or CSV row Spark cannot parse fails the micro-batch (``raise_error``), which the job
  reports as a :class:`~indexer.errors.SchemaError` (:func:`malformed_input_error`).
* ``kafka``: Spark's Kafka source (needs ``spark-sql-kafka-0-10`` on the classpath).
* ``delta``: a Delta table's change stream (needs ``delta-spark`` and its jars).

pyspark is imported inside the functions (style checklist 6).
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING

from indexer.errors import ConfigError, SchemaError
from streaming.micro_batch import SINK_COLUMNS

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

logger = logging.getLogger(__name__)

SOURCES = ("rate", "files", "kafka", "delta")
CORRUPT_RECORD_COLUMN = "_corrupt_record"  # Spark's default name (spark.sql.columnNameOfCorruptRecord)
MALFORMED_MARK = "seglog-malformed-input: "  # begins the error file_events raises for an unparsable line
_PLAN_DUMP = "\n=== Streaming Query ==="  # begins what Spark appends to a query's failure: its state and plan
FILE_FORMATS = ("json", "csv", "parquet")
EVENT_TYPES = ("view", "click", "add_to_cart", "purchase")
NUM_USERS = 1000

_PACKAGE_HINTS = {
    "kafka": "org.apache.spark:spark-sql-kafka-0-10_2.13:<spark version> (e.g. spark-submit --packages ...)",
    "delta": "io.delta:delta-spark_2.13 with spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension",
}


def rate_events(spark: SparkSession, rows_per_second: int, *, num_users: int = NUM_USERS) -> DataFrame:
    """Spark's rate source shaped into keyed JSON events with headers (see the module docstring)."""
    from pyspark.sql import functions as F

    if rows_per_second < 1:
        raise ConfigError(f"rows.per.second must be >= 1, got {rows_per_second}")
    rate = spark.readStream.format("rate").option("rowsPerSecond", rows_per_second).load()
    user = F.pmod(F.xxhash64(F.col("value")), F.lit(num_users))
    kind = F.element_at(
        F.array(*[F.lit(t) for t in EVENT_TYPES]),
        (F.pmod(F.xxhash64(F.col("value"), F.lit(1)), F.lit(len(EVENT_TYPES))) + 1).cast("int"),
    )
    user_id = F.concat(F.lit("user-"), F.lpad(user.cast("string"), 6, "0"))
    amount = F.when(kind == "purchase", F.round(F.pmod(F.col("value") * 7919, F.lit(50000)) / 100.0, 2))
    event = F.to_json(
        F.struct(
            F.col("value").alias("event_id"),
            user_id.alias("user_id"),
            kind.alias("type"),
            amount.alias("amount"),
            F.date_format(F.col("timestamp"), "yyyy-MM-dd'T'HH:mm:ss.SSSXXX").alias("time"),
        )
    )
    headers = F.array(
        F.struct(F.lit("source").alias("key"), F.lit("seglog-rate").cast("binary").alias("value")),
        F.struct(F.lit("event-type").alias("key"), kind.cast("binary").alias("value")),
    )
    return rate.select(
        user_id.cast("binary").alias("key"),
        event.cast("binary").alias("value"),
        headers.alias("headers"),
        F.col("timestamp"),
    )


def file_events(
    spark: SparkSession,
    path: str,
    file_format: str,
    *,
    max_files_per_trigger: int | None = None,
    key_column: str | None = None,
) -> DataFrame:
    """A streaming read of the ``file_format`` files under directory ``path`` (subdirectories too, hidden
    names not), shaped for the sink.

    The schema is taken from the files already there (streaming file sources need one up front),
    so the directory must hold at least one file when the query starts.

    Raises:
        ConfigError: an unknown format, a key column the files lack, no file (or no line that parses)
            to take the schema from, or a key or value that is no text (JSON, Parquet).
    """
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructField, TimestampType

    if file_format not in FILE_FORMATS:
        raise ConfigError(f"file format must be one of {FILE_FORMATS}, got {file_format!r}")
    # CSV as RFC 4180 (Python's csv module, pandas, spreadsheets) writes it: a quoted field may hold a line
    # end, which Spark's reader cuts the record at without multiLine (valid CSV became a malformed record),
    # and a quote inside one is doubled, which Spark's default escape (a backslash) kept as two quotes.
    # An empty field is null, a quoted empty one ("") the empty string, as Spark's CSV writer writes them:
    # Spark's default nullValue "" made both null (an empty value became a tombstone); NUL is no text.
    csv_options = {"header": "true", "multiLine": "true", "escape": '"', "nullValue": "\x00"}
    reader_options = csv_options if file_format == "csv" else {}
    # Every file under the directory, at any depth: Spark's default reads only the top level's (unless
    # every subdirectory is a name=value partition) and skipped the others in silence. Hidden names
    # (.name, _name) are never listed, so a file written under one and then renamed is read whole.
    reader_options["recursiveFileLookup"] = "true"
    static = spark.read.format(file_format).options(**reader_options)
    if file_format == "csv":
        static = static.option("inferSchema", "true")
    try:
        schema = static.load(path).schema
    except AnalysisException as e:
        if e.getCondition() != "UNABLE_TO_INFER_SCHEMA":
            raise
        raise ConfigError(
            f"no {file_format} file in {path} to take the schema from: the files source reads it from the "
            "files there when the query starts, so put at least one in first"
        ) from None
    names = schema.fieldNames()
    if names == [reader_options.get("columnNameOfCorruptRecord", CORRUPT_RECORD_COLUMN)]:
        raise ConfigError(
            f"no line of the {file_format} files in {path} parses: each is cut short, not {file_format}, "
            "or not UTF-8, so there is no schema to take from them"
        )
    for name in ("key", "value") if "value" in names else ():
        if name not in names or isinstance(schema[name].dataType, (StringType, BinaryType)):
            continue
        if file_format == "csv":  # CSV has no types: the text is the key or value, not what inferSchema made of it
            schema = _with_type(schema, name, StringType())
        else:
            raise ConfigError(
                f"the {file_format} files in {path} have a {name} of type {schema[name].dataType.simpleString()}: "
                f"a record's {name} is a string or bytes (as Spark's Kafka sink takes), so write it as a JSON string"
            )
    if "value" in names and "timestamp" in names and isinstance(schema["timestamp"].dataType, StringType):
        # JSON has no timestamp type (Spark writes one as an ISO-8601 string, and infers a string back):
        # read it as the timestamp Spark's Kafka sink takes; a string that is none is a malformed line.
        schema = _with_type(schema, "timestamp", TimestampType())
    if "value" in names and "partition" in names and file_format != "parquet":
        # JSON has no int type (Spark infers a bigint) and CSV no types at all, while Spark's Kafka sink takes
        # an int partition: read it as one (a number past an int, or no number, is a malformed line).
        schema = _with_type(schema, "partition", IntegerType())
    header_pairs = "value" in names and "headers" in names and _holds_header_pairs(schema["headers"].dataType)
    if header_pairs:
        # seglog read's headers, [[key, value], ...] (the format seglog append takes): Spark infers them as
        # array<array<string>>, or array<string> when every list is empty; read both as the pairs.
        schema = _with_type(schema, "headers", ArrayType(ArrayType(StringType())))
    corrupt = None
    if file_format in ("json", "csv"):
        # Spark's readers turn a line they cannot parse into a row of nulls (PERMISSIVE), which the sink
        # would store as a tombstone; with this column in the schema they keep the line there instead.
        corrupt = reader_options.setdefault("columnNameOfCorruptRecord", CORRUPT_RECORD_COLUMN)
        if corrupt not in schema.fieldNames():
            schema = schema.add(StructField(corrupt, StringType()))
    stream = spark.readStream.format(file_format).options(**reader_options).schema(schema)
    if max_files_per_trigger is not None:
        stream = stream.option("maxFilesPerTrigger", max_files_per_trigger)
    df = stream.load(path)
    columns = [c for c in df.columns if c != corrupt]
    if "value" in columns:
        shaped = {c: F.col(c) for c in columns if c in SINK_COLUMNS}
    else:
        if key_column is not None and key_column not in columns:
            raise ConfigError(f"key column {key_column!r} is not among the file columns {columns}")
        key = F.col(key_column).cast("string") if key_column else F.lit(None).cast("string")
        shaped = {"key": key, "value": F.to_json(F.struct(*[F.col(c) for c in columns]))}
    if header_pairs:
        shaped["headers"] = F.transform(F.col("headers"), lambda pair: _header_struct(pair, file_format))
    value = shaped["value"]
    if corrupt is not None:
        message = F.concat(
            F.lit(f"{MALFORMED_MARK}{file_format} record in "), F.input_file_name(), F.lit(": "), F.col(corrupt)
        )
        value = F.when(F.col(corrupt).isNotNull(), F.raise_error(message)).otherwise(value)
    shaped["value"] = value
    return _zoned_timestamp(df.select(*[column.alias(name) for name, column in shaped.items()]))


def _zoned_timestamp(df: DataFrame) -> DataFrame:
    """``df`` with a ``timestamp`` column of Spark's ``timestamp_ntz`` (a wall-clock time without a zone, as
    Parquet files of pandas' naive datetimes hold it) cast to ``timestamp``, in the session's time zone as
    Spark casts it: the sink refuses ``timestamp_ntz`` (:data:`streaming.sink.SINK_TIMESTAMP_TYPES`)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampNTZType

    if "timestamp" not in df.columns or not isinstance(df.schema["timestamp"].dataType, TimestampNTZType):
        return df
    return df.withColumn("timestamp", F.col("timestamp").cast("timestamp"))


def _with_type(schema: StructType, name: str, data_type: DataType) -> StructType:
    """``schema`` with field ``name`` of type ``data_type``."""
    from pyspark.sql.types import StructField, StructType

    return StructType([StructField(f.name, data_type, f.nullable) if f.name == name else f for f in schema.fields])


def _holds_header_pairs(data_type: DataType) -> bool:
    """Whether Spark inferred a ``headers`` field of ``[key, value]`` lists (or of empty lists only)."""
    from pyspark.sql.types import ArrayType, StringType

    if not isinstance(data_type, ArrayType):
        return False
    element = data_type.elementType
    return isinstance(element, StringType) or (
        isinstance(element, ArrayType) and isinstance(element.elementType, StringType)
    )


def _header_struct(pair: Column, file_format: str) -> Column:
    """A ``[key, value]`` header as Spark's Kafka ``struct<key string, value binary>``; anything else
    stops the query naming the file (:func:`malformed_input_error`)."""
    from pyspark.sql import functions as F

    message = F.concat(
        F.lit(f"{MALFORMED_MARK}{file_format} record in "),
        F.input_file_name(),
        F.lit(": headers must be [key, value] pairs with a key, got "),
        F.to_json(pair),
    )
    header = F.struct(pair[0].alias("key"), pair[1].cast("binary").alias("value"))
    return F.when((F.size(pair) == 2) & pair[0].isNotNull(), header).otherwise(F.raise_error(message))


def malformed_input_error(failure: BaseException) -> SchemaError | None:
    """The :class:`SchemaError` a query failure stands for when :func:`file_events` stopped it on a line
    Spark could not parse, else None. Spark wraps the line's message in its own error text, once per
    layer (the task, the job, the query); the first copy is taken, without Spark's ``SQLSTATE``. The
    query's plan, which Spark appends, holds the message as a literal, so it is not searched."""
    text = str(failure).split(_PLAN_DUMP, 1)[0]
    start = text.find(MALFORMED_MARK)
    if start < 0:
        return None
    message = text[start + len(MALFORMED_MARK) :].split("\n", 1)[0]
    message = re.sub(r" SQLSTATE: \w+.*$", "", message)
    return SchemaError(f"malformed {message}")


def kafka_events(
    spark: SparkSession, bootstrap_servers: str, subscribe: str, *, starting_offsets: str = "latest"
) -> DataFrame:
    """Spark's Kafka source (``key``, ``value``, ``headers``, ``timestamp`` kept)."""
    df = _load_or_explain(
        "kafka",
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap_servers)
        .option("subscribe", subscribe)
        .option("startingOffsets", starting_offsets)
        .option("includeHeaders", "true"),
    )
    return df.select("key", "value", "headers", "timestamp")


def delta_events(spark: SparkSession, path: str, *, key_column: str | None = None) -> DataFrame:
    """A Delta table's stream, shaped like :func:`file_events` shapes files."""
    from pyspark.sql import functions as F

    df = _load_or_explain("delta", spark.readStream.format("delta"), path)
    if "value" in df.columns:
        return _zoned_timestamp(df.select(*[c for c in df.columns if c in SINK_COLUMNS]))
    key = F.col(key_column).cast("string") if key_column else F.lit(None).cast("string")
    return df.select(key.alias("key"), F.to_json(F.struct(*[F.col(c) for c in df.columns])).alias("value"))


def _load_or_explain(name: str, reader: object, path: str | None = None) -> DataFrame:
    """``reader.load()``, turning "data source not found" into a :class:`ConfigError` naming the package."""
    try:
        return reader.load(path) if path is not None else reader.load()  # type: ignore[attr-defined, no-any-return]
    except Exception as e:
        text = str(e)
        if "DATA_SOURCE_NOT_FOUND" in text or "Failed to find data source" in text or "ClassNotFound" in text:
            raise ConfigError(
                f"Spark's {name} source is not installed in this Spark; it needs {_PACKAGE_HINTS[name]}"
            ) from e
        raise
