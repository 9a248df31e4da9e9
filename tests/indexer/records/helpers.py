"""Helpers shared by the record format tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from indexer.records.columns import READ_SCHEMA


def table_rows(table: pa.Table, names: Sequence[str] = READ_SCHEMA.names) -> list[tuple[Any, ...]]:
    """The rows of ``table`` as tuples of the columns ``names`` (all of ``READ_SCHEMA`` by default)."""
    return list(zip(*(table.column(name).to_pylist() for name in names), strict=True))
