"""seglog's storage engine: Kafka-format segment logs with offset and time indexes.

The package itself re-exports only the light names (errors, configuration, file names), so that
``import indexer`` loads neither numba nor pyarrow. The engine classes live in their modules:
``indexer.log.Log``, ``indexer.log_manager.LogManager``, ``indexer.segment.LogSegment``,
``indexer.offset_index.OffsetIndex``, ``indexer.time_index.TimeIndex``,
``indexer.transaction_index.TransactionIndex``; the record format in :mod:`indexer.records`.

Importing it first makes sure numba has a directory to cache the compiled kernels in
(:mod:`indexer._kernel_cache`), also for a user who can write neither the source tree nor a home.
"""

import indexer._kernel_cache  # noqa: F401  (first: numba's cache directory, before any module defines a kernel)
from indexer.config import LogConfig as LogConfig
from indexer.config import Settings as Settings
from indexer.config import load_settings as load_settings
from indexer.errors import ConfigError as ConfigError
from indexer.errors import CorruptIndexError as CorruptIndexError
from indexer.errors import CorruptRecordError as CorruptRecordError
from indexer.errors import IndexFullError as IndexFullError
from indexer.errors import IndexOffsetOverflowError as IndexOffsetOverflowError
from indexer.errors import InvalidArgumentError as InvalidArgumentError
from indexer.errors import InvalidOffsetError as InvalidOffsetError
from indexer.errors import InvalidRecordError as InvalidRecordError
from indexer.errors import InvalidTopicError as InvalidTopicError
from indexer.errors import LogLockedError as LogLockedError
from indexer.errors import LogSegmentOffsetOverflowError as LogSegmentOffsetOverflowError
from indexer.errors import OffsetOutOfRangeError as OffsetOutOfRangeError
from indexer.errors import RecordBatchTooLargeError as RecordBatchTooLargeError
from indexer.errors import RecordTooLargeError as RecordTooLargeError
from indexer.errors import SchemaError as SchemaError
from indexer.errors import SeglogError as SeglogError
from indexer.errors import StorageError as StorageError
from indexer.file_names import INDEX_FILE_SUFFIX as INDEX_FILE_SUFFIX
from indexer.file_names import LOG_FILE_SUFFIX as LOG_FILE_SUFFIX
from indexer.file_names import TIME_INDEX_FILE_SUFFIX as TIME_INDEX_FILE_SUFFIX
from indexer.file_names import TXN_INDEX_FILE_SUFFIX as TXN_INDEX_FILE_SUFFIX
from indexer.file_names import filename_prefix_from_offset as filename_prefix_from_offset
from indexer.file_names import offset_from_file_name as offset_from_file_name
from indexer.file_names import parse_topic_partition_name as parse_topic_partition_name
from indexer.file_names import partition_dir_name as partition_dir_name
from indexer.file_names import validate_topic as validate_topic

__all__ = [
    "INDEX_FILE_SUFFIX",
    "LOG_FILE_SUFFIX",
    "TIME_INDEX_FILE_SUFFIX",
    "TXN_INDEX_FILE_SUFFIX",
    "ConfigError",
    "CorruptIndexError",
    "CorruptRecordError",
    "IndexFullError",
    "IndexOffsetOverflowError",
    "InvalidArgumentError",
    "InvalidOffsetError",
    "InvalidRecordError",
    "InvalidTopicError",
    "LogConfig",
    "LogLockedError",
    "LogSegmentOffsetOverflowError",
    "OffsetOutOfRangeError",
    "RecordBatchTooLargeError",
    "RecordTooLargeError",
    "SchemaError",
    "SeglogError",
    "Settings",
    "StorageError",
    "filename_prefix_from_offset",
    "load_settings",
    "offset_from_file_name",
    "parse_topic_partition_name",
    "partition_dir_name",
    "validate_topic",
]
