"""Fixtures of the streaming tests: the shared SparkSession (see tests/spark_session.py)."""

from tests.spark_session import spark

__all__ = ["spark"]
