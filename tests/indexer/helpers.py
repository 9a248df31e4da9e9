"""Helpers shared by the index tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from indexer.errors import IndexFullError, IndexOffsetOverflowError, InvalidOffsetError


def index_error(action: Callable[[], Any]) -> type[Exception] | None:
    """The type of the error an index rejects ``action`` with (``None``: it succeeded)."""
    try:
        action()
    except (IndexFullError, InvalidOffsetError, IndexOffsetOverflowError, ValueError) as e:
        return type(e)
    return None
