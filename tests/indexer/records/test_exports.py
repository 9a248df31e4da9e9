"""The public surface of the indexer.records package is one sorted, tested list."""

from __future__ import annotations

import indexer.records
from tests.exports import assert_exports


def test_all_lists_exactly_the_public_names() -> None:
    assert_exports(indexer.records)
