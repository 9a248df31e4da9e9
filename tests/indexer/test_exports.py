"""The public surface of the indexer package is one sorted, tested list, and cheap to import."""

from __future__ import annotations

import ast
import subprocess
import sys

import indexer
from tests.exports import assert_exports


def test_all_lists_exactly_the_public_names() -> None:
    assert_exports(indexer)


def test_import_loads_no_heavy_dependency() -> None:
    """``import indexer`` stays cheap: no numba (so no kernel compiles), pyarrow, pyspark or apscheduler."""
    code = "import sys, indexer; print(sorted({m.split('.')[0] for m in sys.modules}))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(ast.literal_eval(result.stdout))
    assert loaded.isdisjoint({"numba", "pyarrow", "pyspark", "apscheduler"})
