"""Arrow schemas of records going into the log and coming out of it, and input normalisation.

Records travel as Arrow columns (Spark hands micro-batches over as Arrow). The writer takes
:data:`APPEND_SCHEMA`; :func:`to_append_table` turns what users naturally have (a table with string
keys, Arrow timestamps, a dict of columns, a list of dicts) into exactly that schema. Readers return
:data:`READ_SCHEMA`, named as in Spark's Kafka source minus ``topic``/``partition``.

Null meanings follow Kafka: a null key or value is written with length -1 (a null value is a
tombstone), a null header list means no headers, and a null timestamp means "now" (the log's clock),
as a producer fills in ``System.currentTimeMillis()`` when the application gives none. A negative
timestamp is refused, as Kafka's ``ProducerRecord`` refuses it (:func:`check_timestamps`).
:func:`to_append_table` is pure and thread-safe.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence, Sized
from collections.abc import Set as AbstractSet
from typing import Any, NoReturn, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from indexer.errors import InvalidTimestampError, SchemaError
from indexer.limits import INT64_MAX

logger = logging.getLogger(__name__)

HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
HEADERS_TYPE = pa.list_(HEADER_TYPE)

APPEND_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("timestamp", pa.int64()),
        pa.field("headers", HEADERS_TYPE),
    ]
)

READ_SCHEMA = pa.schema(
    [
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.int64()),
        pa.field("timestampType", pa.int32()),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", HEADERS_TYPE),
    ]
)

AppendColumn: TypeAlias = pa.Array | pa.ChunkedArray | np.ndarray | Sequence[Any]
"""One input column: Arrow, numpy, or a Python sequence of values (None for null)."""
AppendInput: TypeAlias = pa.Table | pa.RecordBatch | Mapping[str, AppendColumn] | Sequence[Mapping[str, Any]]
"""What :func:`to_append_table` takes: a table or record batch, columns by name, or a list of records."""

_BINARY_LIKE = (pa.types.is_binary, pa.types.is_large_binary, pa.types.is_string, pa.types.is_large_string)
_MS_FACTORS = {"s": (1000, 1), "ms": (1, 1), "us": (1, 1000), "ns": (1, 1_000_000)}


def to_append_table(data: AppendInput, *, now_ms: int, first_row: int = 0) -> pa.Table:
    """Normalise ``data`` to a single-chunk table of :data:`APPEND_SCHEMA`.

    Args:
        data: a ``pa.Table`` / ``pa.RecordBatch``, a mapping of column name to column (Arrow
            array, numpy array or Python sequence), or a sequence of row mappings.
        now_ms: the timestamp (ms since epoch) given to rows whose timestamp is null.
        first_row: the number of the first row in error messages (a part of a larger input).

    Returns:
        A table with exactly the columns ``key, value, timestamp, headers``; missing columns are
        nulls, string keys/values are UTF-8 bytes, Arrow timestamps are ms since epoch (floored,
        as Spark's ``DateTimeUtils.toMillis``), null timestamps are ``now_ms``.

    Raises:
        SchemaError: an unknown column, a column of the wrong type (the message names the column,
            the type found and the type expected), a column that is not a sequence of values (a
            string, bytes, a mapping, a set, a scalar), an Arrow timestamp whose milliseconds do not fit
            int64, a null header or one with a null key, or input of a kind this function does not take.
        InvalidTimestampError: a negative timestamp (the first one).
    """
    columns = _columns_of(data)
    unknown = sorted(set(columns) - set(APPEND_SCHEMA.names))
    if unknown:
        raise SchemaError(f"unknown column(s) {unknown}: records have only the columns {APPEND_SCHEMA.names}")
    lengths = {name: len(column) for name, column in columns.items()}
    if len(set(lengths.values())) > 1:
        raise SchemaError(f"columns have different lengths: {lengths}")
    num_rows = next(iter(lengths.values()), 0)
    arrays = []
    for field in APPEND_SCHEMA:
        column = columns.get(field.name)
        if column is None:
            array: pa.Array = pa.nulls(num_rows, field.type)
        else:
            array = _to_array(field.name, column)
        if field.name == "timestamp":
            array = _normalise_timestamps(array, now_ms, first_row)
            check_timestamps(array, first_row=first_row)
        elif field.name == "headers":
            array = _normalise_headers(array, first_row)
        else:
            array = _normalise_binary(field.name, array)
        arrays.append(array)
    return pa.Table.from_arrays(arrays, schema=APPEND_SCHEMA)


def _columns_of(data: Any) -> dict[str, Any]:
    """The named columns of any accepted input kind, not yet converted."""
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    if isinstance(data, pa.Table):
        for name in sorted(set(data.column_names)):
            if (count := data.column_names.count(name)) > 1:
                raise SchemaError(f"column {name!r} appears {count} times: a table of records has each column once")
        return {name: data.column(name) for name in data.column_names}
    if isinstance(data, Mapping):
        return {str(name): _check_column(str(name), column) for name, column in data.items()}
    if isinstance(data, Sequence) and not isinstance(data, (str, bytes, bytearray)):
        if not all(isinstance(row, Mapping) for row in data):
            raise SchemaError("a list of records must hold only mappings (one dict per record)")
        names: dict[str, None] = {}
        for row in data:
            names.update(dict.fromkeys(row))
        return {str(name): [row.get(name) for row in data] for name in names}
    raise SchemaError(
        f"records must be a pyarrow Table/RecordBatch, a dict of columns or a list of dicts, not {type(data).__name__}"
    )


def _check_column(name: str, column: Any) -> Any:
    """``column`` if it holds one value per record. A string, bytes, a mapping or a set is refused, not
    iterated: ``{"key": "k1", "value": "hello"}`` is one record written as if it were columns, and would
    otherwise become one record per character (a set has no order); so is a value without a length."""
    if isinstance(column, (pa.Array, pa.ChunkedArray)):
        return column
    if isinstance(column, np.ndarray) and column.ndim == 1:
        return column
    single = isinstance(column, (str, bytes, bytearray, memoryview, Mapping, AbstractSet, np.ndarray))
    if single or not isinstance(column, Sized) or not isinstance(column, Iterable):
        raise SchemaError(
            f"column {name!r}: found {type(column).__name__}, expected a sequence of values (one per record); "
            f"to append single records, pass a list of dicts: [{{{name!r}: ...}}]"
        )
    return column


def _to_array(name: str, column: Any) -> pa.Array:
    """One contiguous Arrow array from an Arrow, numpy or Python column."""
    if isinstance(column, pa.ChunkedArray):
        if column.num_chunks == 1:
            return column.chunk(0)
        return column.combine_chunks() if column.num_chunks else pa.array([], column.type)
    if isinstance(column, pa.Array):
        return column
    type_hint = HEADERS_TYPE if name == "headers" else None
    try:
        if isinstance(column, np.ndarray):
            return pa.array(column, type=type_hint)
        values = list(column)
        array = pa.array(values, type=type_hint)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as exc:
        raise SchemaError(f"column {name!r}: cannot convert to Arrow ({exc})") from exc
    if pa.types.is_timestamp(array.type) and any(isinstance(v, int) for v in values):
        # Arrow reads the integers in the datetimes' unit (us): milliseconds would be 1000x too small
        raise SchemaError(
            f"column {name!r}: holds both datetimes and integers; give every timestamp one way "
            "(datetimes, or integers of milliseconds since the epoch)"
        )
    return array


def _normalise_binary(name: str, array: pa.Array) -> pa.Array:
    """``binary`` from binary, large_binary, string, large_string or all-null input."""
    if pa.types.is_null(array.type):
        return pa.nulls(len(array), pa.binary())
    if not any(check(array.type) for check in _BINARY_LIKE):
        raise SchemaError(f"column {name!r}: found type {array.type}, expected binary (or string, UTF-8 encoded)")
    return array if array.type == pa.binary() else array.cast(pa.binary())


def _normalise_timestamps(array: pa.Array, now_ms: int, first_row: int) -> pa.Array:
    """``int64`` ms since epoch from integers or Arrow timestamps; nulls become ``now_ms``."""
    kind = array.type
    if pa.types.is_null(kind):
        return pa.array(np.full(len(array), now_ms, dtype=np.int64))
    if pa.types.is_timestamp(kind):
        multiply, divide = _MS_FACTORS[kind.unit]
    elif pa.types.is_integer(kind):
        multiply, divide = 1, 1
    else:
        raise SchemaError(
            f"column 'timestamp': found type {kind}, expected int64 (ms since epoch) or an Arrow timestamp"
        )
    try:
        raw = array.cast(pa.int64())
    except pa.ArrowInvalid as exc:
        raise SchemaError(f"column 'timestamp': found type {kind} with values outside int64 ({exc})") from exc
    if multiply == 1 and divide == 1 and raw.null_count == 0:
        return raw
    values = raw.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64, copy=True)
    if divide != 1:
        values //= divide
    if multiply != 1:
        # numpy wraps on overflow: a value of seconds beyond int64 ms would become another timestamp
        outside = np.flatnonzero(np.abs(values) > INT64_MAX // multiply)
        if outside.size:
            row = int(outside[0])
            raise SchemaError(
                f"column 'timestamp': row {first_row + row}: {raw[row].as_py()!r} ({kind}) does not fit int64 "
                "milliseconds since the epoch"
            )
        values *= multiply
    if raw.null_count:
        values[raw.is_null().to_numpy(zero_copy_only=False)] = now_ms
    return pa.array(values, type=pa.int64())


def check_timestamps(timestamps: pa.Array, *, first_row: int = 0) -> None:
    """Kafka's producer rule: a record timestamp is milliseconds since the epoch, never negative
    (null, for "now", passes).

    Raises:
        InvalidTimestampError: the first negative timestamp; its ``index`` counts rows from ``first_row``.
    """
    negative = np.flatnonzero(pc.fill_null(pc.less(timestamps, 0), False).to_numpy(zero_copy_only=False))
    if negative.size:
        row = int(negative[0])
        timestamp = timestamps[row].as_py()
        raise InvalidTimestampError(
            f"row {first_row + row}: timestamp {timestamp} is negative: Kafka timestamps are milliseconds "
            "since the epoch, >= 0 (null means now)",
            index=first_row + row,
            timestamp=timestamp,
        )


def _normalise_headers(array: pa.Array, first_row: int) -> pa.Array:
    """``list<struct<key: string, value: binary>>``; a null header, or one with a null key, is rejected (its
    row counted from ``first_row``)."""
    kind = array.type
    if pa.types.is_null(kind):
        return pa.nulls(len(array), HEADERS_TYPE)
    if (pa.types.is_list(kind) or pa.types.is_large_list(kind)) and pa.types.is_null(kind.value_type):
        return array.cast(HEADERS_TYPE)  # only empty lists and nulls: what Arrow infers from [[]]
    expected = f"found type {kind}, expected {HEADERS_TYPE}"
    if not (pa.types.is_list(kind) or pa.types.is_large_list(kind)) or not pa.types.is_struct(kind.value_type):
        raise SchemaError(f"column 'headers': {expected}")
    struct = kind.value_type
    names = sorted(struct.field(i).name for i in range(struct.num_fields))
    if names != ["key", "value"]:
        raise SchemaError(f"column 'headers': {expected} (header fields {names})")
    key_type, value_type = struct.field("key").type, struct.field("value").type
    key_ok = pa.types.is_string(key_type) or pa.types.is_large_string(key_type) or pa.types.is_null(key_type)
    value_ok = pa.types.is_null(value_type) or any(check(value_type) for check in _BINARY_LIKE)
    if not (key_ok and value_ok):
        raise SchemaError(f"column 'headers': {expected}")
    if array.type != HEADERS_TYPE:
        array = array.cast(HEADERS_TYPE)
    headers = array.flatten()
    if headers.null_count or headers.field("key").null_count:
        _raise_null_header(array, headers, first_row)
    return array


def _raise_null_header(array: pa.Array, headers: pa.StructArray, first_row: int) -> NoReturn:
    """Raise for the first header of ``array`` (a headers column; ``headers`` its headers, flattened) that is
    null or has a null key, naming its row (counted from ``first_row``) and its place in the row."""
    broken = pc.or_(headers.is_null(), headers.field("key").is_null()).to_numpy(zero_copy_only=False)
    first = int(np.flatnonzero(broken)[0])
    rows = pc.list_parent_indices(array).to_numpy(zero_copy_only=False)
    row = int(rows[first])
    place = first - int(np.searchsorted(rows, row))
    what = "is null" if headers[first].as_py() is None else "has a null key"
    raise SchemaError(
        f"column 'headers': row {first_row + row}: header {place} {what} (a Kafka header is a non-null string key "
        "and a value)"
    )
