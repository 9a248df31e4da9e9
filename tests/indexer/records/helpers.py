"""Helpers shared by the record format tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from hypothesis import strategies as st

from indexer.records.columns import READ_SCHEMA


def table_rows(table: pa.Table, names: Sequence[str] = READ_SCHEMA.names) -> list[tuple[Any, ...]]:
    """The rows of ``table`` as tuples of the columns ``names`` (all of ``READ_SCHEMA`` by default)."""
    return list(zip(*(table.column(name).to_pylist() for name in names), strict=True))


def record_dicts(
    *,
    max_small: int,
    max_large: int,
    max_timestamp: int,
    max_header_key: int,
    max_header_value: int,
    max_headers: int,
) -> st.SearchStrategy[dict[str, Any]]:
    """Rows for ``to_append_table``: key and value each None, up to ``max_small`` random bytes or 64 to
        ``max_large`` copies of one byte; a timestamp within ``0..max_timestamp`` (negative ones are refused;
    deltas within a batch still span ``-max_timestamp..max_timestamp``); headers None
        or up to ``max_headers`` of a text key (up to ``max_header_key`` characters) and a value None or up
        to ``max_header_value`` bytes."""
    large = st.builds(lambda n, b: bytes([b]) * n, st.integers(64, max_large), st.integers(0, 255))
    data = st.one_of(st.none(), st.binary(max_size=max_small), large)
    header = st.fixed_dictionaries(
        {"key": st.text(max_size=max_header_key), "value": st.one_of(st.none(), st.binary(max_size=max_header_value))}
    )
    headers = st.one_of(st.none(), st.lists(header, max_size=max_headers))
    timestamp = st.integers(0, max_timestamp)
    return st.fixed_dictionaries({"key": data, "value": data, "timestamp": timestamp, "headers": headers})
