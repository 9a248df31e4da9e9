"""The public surface of `streaming` is one tested list, and importing it does not start Spark."""

from __future__ import annotations

import subprocess
import sys

import streaming
from tests.exports import assert_exports


def test_all_lists_exactly_the_public_names() -> None:
    assert_exports(streaming)


def test_importing_streaming_does_not_import_pyspark() -> None:
    code = "import sys, streaming; print('pyspark' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
