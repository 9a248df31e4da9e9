"""Spark's own lookup of Python data sources (the scan a SparkSession runs at its first data source
call) finds ``seglog`` through the top-level ``pyspark_seglog`` module; run in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SCAN = """
import io
from pyspark.serializers import read_int, UTF8Deserializer
from pyspark.sql.worker.lookup_data_sources import _main
from pyspark.worker_util import pickleSer
out = io.BytesIO()
_main(io.BytesIO(), out)
out.seek(0)
names = {}
for _ in range(read_int(out)):
    name = UTF8Deserializer().loads(out)
    names[name] = pickleSer._read_with_length(out)
source = names["seglog"]
print(source.__module__, source.__name__, sorted(names))
"""


def test_spark_lookup_registers_seglog(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCAN],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[:2] == ["streaming.reader", "SeglogDataSource"]
