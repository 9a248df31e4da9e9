"""kafka-python's record format classes, the independent reference the record tests cross-check with.

Imported here once, with the DeprecationWarning that kafka-python 3 raises while loading its
protocol JSON silenced (the suite turns warnings into errors).
"""

from __future__ import annotations

import warnings

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import codec as kafka_codec
    from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
    from kafka.record.legacy_records import LegacyRecordBatchBuilder
    from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

__all__ = [
    "DefaultRecordBatch",
    "DefaultRecordBatchBuilder",
    "LegacyRecordBatchBuilder",
    "MemoryRecords",
    "MemoryRecordsBuilder",
    "kafka_codec",
]
