"""One real local SparkSession for the whole test session (``local[2]``, UI off, no packages).

Shared by the streaming tests and the maintenance soak test: import the fixture into a folder's
``conftest.py`` (``from tests.spark_session import spark``). Starting a JVM takes seconds, so every
test reuses this one; tests that need a separate driver process start their own subprocess.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# C1-only JIT and the serial GC halve the JVM's start on a busy 2-core machine; test queries are short.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
TEST_SPARK_CONF = {
    "spark.driver.extraJavaOptions": TEST_JVM_OPTIONS,
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
}


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """The session's SparkSession; stopped at the end of the test run."""
    from streaming.session import build_spark_session

    session = build_spark_session("local[2]", "seglog-tests", TEST_SPARK_CONF)
    yield session
    for query in session.streams.active:
        query.stop()
    session.stop()
