"""Tests of indexer/records/columns.py: schemas and input normalisation."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
import pytest

from indexer.errors import InvalidTimestampError, SchemaError
from indexer.records.columns import APPEND_SCHEMA, HEADER_TYPE, HEADERS_TYPE, READ_SCHEMA, to_append_table

NOW = 1_700_000_000_000


def test_schemas_have_the_documented_columns() -> None:
    assert APPEND_SCHEMA.names == ["key", "value", "timestamp", "headers"]
    assert READ_SCHEMA.names == ["offset", "timestamp", "timestampType", "key", "value", "headers"]
    assert READ_SCHEMA.field("timestampType").type == pa.int32()
    assert HEADERS_TYPE == pa.list_(HEADER_TYPE)
    assert [f.type for f in HEADER_TYPE] == [pa.string(), pa.binary()]


def test_table_with_strings_becomes_binary_and_missing_columns_null() -> None:
    table = to_append_table(
        pa.table({"key": ["k", None], "value": pa.array(["vé", "w"], pa.large_string())}), now_ms=NOW
    )
    assert table.schema == APPEND_SCHEMA
    assert table.column("key").to_pylist() == [b"k", None]
    assert table.column("value").to_pylist() == ["vé".encode(), b"w"]
    assert table.column("timestamp").to_pylist() == [NOW, NOW]
    assert table.column("headers").to_pylist() == [None, None]
    assert table.column("key").num_chunks == 1


def test_large_binary_is_accepted() -> None:
    table = to_append_table({"value": pa.array([b"x", None], pa.large_binary())}, now_ms=NOW)
    assert table.column("value").type == pa.binary()
    assert table.column("value").to_pylist() == [b"x", None]


@pytest.mark.parametrize(
    ("unit", "raw", "expected_ms"),
    [
        ("s", [2, 0], [2000, 0]),
        ("ms", [5, 7], [5, 7]),
        ("us", [1999, 3001], [1, 3]),  # floored, as Spark's DateTimeUtils.toMillis
        ("ns", [2_500_000, 999_999], [2, 0]),
    ],
)
def test_arrow_timestamps_become_ms(unit: str, raw: list[int], expected_ms: list[int]) -> None:
    column = pa.array(raw, pa.int64()).cast(pa.timestamp(unit, tz="UTC"))
    table = to_append_table({"value": [b"a", b"b"], "timestamp": column}, now_ms=NOW)
    assert table.column("timestamp").to_pylist() == expected_ms


@pytest.mark.parametrize(
    "column",
    [
        pa.array([5, None, -1, -7], pa.int64()),  # -1 is no "no timestamp" sentinel either
        pa.array([5, None, -1, -7], pa.int32()),
        pa.array([5_000, None, -1, -7_000], pa.int64()).cast(pa.timestamp("us", tz="UTC")),  # floored: before 1970
    ],
)
def test_negative_timestamps_are_refused_as_kafkas_producer_does(column: pa.Array) -> None:
    with pytest.raises(InvalidTimestampError, match=r"^row 12: timestamp -1 is negative") as info:
        to_append_table({"value": [b"v"] * 4, "timestamp": column}, now_ms=NOW, first_row=10)
    assert (info.value.index, info.value.timestamp) == (12, -1)


def test_null_timestamps_become_now_and_python_datetimes_are_accepted() -> None:
    when = dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=dt.UTC)
    table = to_append_table([{"value": b"a", "timestamp": when}, {"value": b"b", "timestamp": None}], now_ms=NOW)
    assert table.column("timestamp").to_pylist() == [NOW, NOW]
    table = to_append_table({"timestamp": pa.array([7, None], pa.int32())}, now_ms=NOW)
    assert table.column("timestamp").to_pylist() == [7, NOW]


def test_list_of_dicts_with_header_tuples() -> None:
    rows = [
        {"key": "k1", "value": b"v1", "timestamp": 5, "headers": [("h", b"x"), ("n", None)]},
        {"value": "v2"},
    ]
    table = to_append_table(rows, now_ms=NOW)
    assert table.to_pylist() == [
        {
            "key": b"k1",
            "value": b"v1",
            "timestamp": 5,
            "headers": [{"key": "h", "value": b"x"}, {"key": "n", "value": None}],
        },
        {"key": None, "value": b"v2", "timestamp": NOW, "headers": None},
    ]


def test_dict_of_numpy_columns_and_record_batch() -> None:
    table = to_append_table(
        {"timestamp": np.array([1, 2], np.int64), "value": np.array([b"a", b"bc"], object)}, now_ms=NOW
    )
    assert table.column("timestamp").to_pylist() == [1, 2]
    batch = pa.RecordBatch.from_pydict({"value": [b"a"]})
    assert to_append_table(batch, now_ms=NOW).column("value").to_pylist() == [b"a"]


@pytest.mark.parametrize("empty", [[], {}, pa.table({"value": pa.array([], pa.binary())})])
def test_empty_input_is_a_zero_row_table(empty: object) -> None:
    table = to_append_table(empty, now_ms=NOW)
    assert table.num_rows == 0
    assert table.schema == APPEND_SCHEMA


def test_headers_of_other_list_shapes_are_cast() -> None:
    struct = pa.struct([("value", pa.large_string()), ("key", pa.large_string())])
    spark_like = pa.array([[{"key": "a", "value": "b"}], []], pa.large_list(pa.field("element", struct)))
    table = to_append_table({"headers": spark_like}, now_ms=NOW)
    assert table.column("headers").type == HEADERS_TYPE
    assert table.column("headers").to_pylist() == [[{"key": "a", "value": b"b"}], []]


def test_sliced_input_keeps_its_rows() -> None:
    source = pa.table(
        {"key": [b"a", b"b", b"c"], "headers": pa.array([[("x", b"1")], None, [("y", None)]], HEADERS_TYPE)}
    )
    table = to_append_table(source.slice(1), now_ms=NOW)
    assert table.column("key").to_pylist() == [b"b", b"c"]
    assert table.column("headers").to_pylist() == [None, [{"key": "y", "value": None}]]


@pytest.mark.parametrize(
    ("data", "fragments"),
    [
        ({"offset": [1]}, ["unknown column", "offset"]),
        ({"key": pa.array([1], pa.int64())}, ["'key'", "int64", "expected binary"]),
        ({"value": pa.array([1.5])}, ["'value'", "double", "expected binary"]),
        ({"timestamp": ["yesterday"]}, ["'timestamp'", "string", "expected int64"]),
        ({"headers": pa.array([["a"]])}, ["'headers'", "list<item: string>", "expected list<item: struct"]),
        ({"headers": pa.array([[{"key": 1, "value": b"x"}]])}, ["'headers'", "key: int64"]),
        ({"headers": [[("k", b"v")], [("a", b"v"), (None, b"v")]]}, ["'headers': row 1: header 1 has a null key"]),
        (  # a null header (Spark: an array holding a null struct), not a header with a null key
            {"headers": pa.array([None, [{"key": "k", "value": b"v"}, None]], HEADERS_TYPE)},
            ["'headers': row 1: header 1 is null"],
        ),
        ({"key": [b"a"], "value": [b"a", b"b"]}, ["different lengths"]),
        ({"key": [b"a", 3]}, ["'key'", "cannot convert"]),
        ([{"key": b"a"}, "b"], ["only mappings"]),
        ("key", ["not str"]),
    ],
)
def test_bad_input_raises_schema_error(data: object, fragments: list[str]) -> None:
    with pytest.raises(SchemaError) as info:
        to_append_table(data, now_ms=NOW)
    for fragment in fragments:
        assert fragment in str(info.value)


def test_headers_of_only_empty_lists_are_accepted() -> None:
    table = to_append_table(pa.table({"value": [b"a", b"b"], "headers": [[], None]}), now_ms=0)
    assert table.column("headers").to_pylist() == [[], None]


@pytest.mark.parametrize(
    "column",
    [
        "hello",  # would be one record per character
        b"hello",  # would be one record per byte value
        {"a": b"x"},  # would be one record per dict key
        {b"a", b"b"},  # unordered: the records' order would be arbitrary
        None,
        5,
        iter([b"a"]),
    ],
    ids=["str", "bytes", "dict", "set", "None", "int", "iterator"],
)
def test_a_column_that_is_not_a_sequence_of_values_is_refused(column: object) -> None:
    # {"value": "hello"} is one record written as if it were columns: it must not become records
    # 'h', 'e', 'l', 'l', 'o' (nor a TypeError that names no column)
    with pytest.raises(SchemaError, match=r"column 'value': .*a sequence of values.*list of dicts"):
        to_append_table({"value": column}, now_ms=NOW)


def test_a_table_with_a_duplicate_column_is_refused() -> None:
    table = pa.Table.from_arrays([pa.array([b"a"]), pa.array([b"b"])], names=["value", "value"])
    with pytest.raises(SchemaError, match=r"column 'value' appears 2 times"):
        to_append_table(table, now_ms=NOW)


@pytest.mark.parametrize(
    ("unit", "seconds"),
    [("s", 2**62), ("s", 9_300_000_000_000_000), ("s", 9_223_372_036_854_776)],
    ids=["wraps-to-0", "wraps-negative", "just-past-int64-ms"],
)
def test_arrow_timestamps_beyond_int64_ms_are_refused_not_wrapped(unit: str, seconds: int) -> None:
    column = pa.array([1, seconds], pa.timestamp(unit, tz="UTC"))
    with pytest.raises(SchemaError, match=r"column 'timestamp': row 1: .* does not fit int64 milliseconds"):
        to_append_table({"timestamp": column}, now_ms=NOW)


def test_the_largest_arrow_timestamp_in_seconds_that_fits_int64_ms_is_kept() -> None:
    largest = (2**63 - 1) // 1000
    table = to_append_table({"timestamp": pa.array([largest], pa.timestamp("s"))}, now_ms=NOW)
    assert table.column("timestamp").to_pylist() == [largest * 1000]


def test_python_timestamps_mixing_datetimes_and_integers_are_refused() -> None:
    # Arrow infers a timestamp[us] column and reads the integer as microseconds: 5 (ms, meant) would
    # be stored as 0
    when = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    with pytest.raises(SchemaError, match=r"column 'timestamp': .*both datetimes and integers"):
        to_append_table([{"value": b"a", "timestamp": when}, {"value": b"b", "timestamp": 5}], now_ms=NOW)
