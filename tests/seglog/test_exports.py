"""The public surface of the seglog package is one sorted, tested list."""

from __future__ import annotations

import seglog
from tests.exports import assert_exports


def test_all_lists_exactly_the_public_names() -> None:
    assert_exports(seglog)
