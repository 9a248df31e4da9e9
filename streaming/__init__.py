"""The Spark side of seglog: the exactly-once foreachBatch sink, the main job, readers.

Importing this package does not import pyspark (the Spark-facing functions import it when called);
:mod:`streaming.reader` (the ``seglog`` Spark data source) does, and is imported on its own.
"""

from streaming.job import JobSpec as JobSpec
from streaming.job import JobSummary as JobSummary
from streaming.job import run_job as run_job
from streaming.partitioner import murmur2 as murmur2
from streaming.partitioner import partition_for_keys as partition_for_keys
from streaming.sink import BatchStats as BatchStats
from streaming.sink import SegmentLogSink as SegmentLogSink

__all__ = [
    "BatchStats",
    "JobSpec",
    "JobSummary",
    "SegmentLogSink",
    "murmur2",
    "partition_for_keys",
    "run_job",
]
