"""The Kafka record format: v2 batches, legacy v0/v1 message sets, codecs, `.log` files.

Importing this package loads numba and pyarrow (the encoder, decoder and file kernels).
"""

from indexer.records.batch_header import CREATE_TIME as CREATE_TIME
from indexer.records.batch_header import LOG_APPEND_TIME as LOG_APPEND_TIME
from indexer.records.batch_header import LOG_OVERHEAD as LOG_OVERHEAD
from indexer.records.batch_header import RECORD_BATCH_OVERHEAD as RECORD_BATCH_OVERHEAD
from indexer.records.batch_header import BatchHeader as BatchHeader
from indexer.records.batch_header import compute_batch_crc as compute_batch_crc
from indexer.records.batch_header import crc32c as crc32c
from indexer.records.batch_header import pack_batch_header as pack_batch_header
from indexer.records.batch_header import parse_batch_header as parse_batch_header
from indexer.records.codecs import Codec as Codec
from indexer.records.codecs import get_codec as get_codec
from indexer.records.columns import APPEND_SCHEMA as APPEND_SCHEMA
from indexer.records.columns import READ_SCHEMA as READ_SCHEMA
from indexer.records.columns import to_append_table as to_append_table
from indexer.records.control import ControlRecordType as ControlRecordType
from indexer.records.control import EndTransactionMarker as EndTransactionMarker
from indexer.records.control import encode_end_txn_marker_batch as encode_end_txn_marker_batch
from indexer.records.decoder import DecodedBatch as DecodedBatch
from indexer.records.decoder import decode_batch as decode_batch
from indexer.records.decoder import decode_records as decode_records
from indexer.records.encoder import DEFAULT_MAX_BATCH_BYTES as DEFAULT_MAX_BATCH_BYTES
from indexer.records.encoder import EncodedBatches as EncodedBatches
from indexer.records.encoder import encode_batches as encode_batches
from indexer.records.file_records import BatchScan as BatchScan
from indexer.records.file_records import FileBatch as FileBatch
from indexer.records.file_records import FileRecords as FileRecords
from indexer.records.file_records import LogOffsetPosition as LogOffsetPosition

__all__ = [
    "APPEND_SCHEMA",
    "CREATE_TIME",
    "DEFAULT_MAX_BATCH_BYTES",
    "LOG_APPEND_TIME",
    "LOG_OVERHEAD",
    "READ_SCHEMA",
    "RECORD_BATCH_OVERHEAD",
    "BatchHeader",
    "BatchScan",
    "Codec",
    "ControlRecordType",
    "DecodedBatch",
    "EncodedBatches",
    "EndTransactionMarker",
    "FileBatch",
    "FileRecords",
    "LogOffsetPosition",
    "compute_batch_crc",
    "crc32c",
    "decode_batch",
    "decode_records",
    "encode_batches",
    "encode_end_txn_marker_batch",
    "get_codec",
    "pack_batch_header",
    "parse_batch_header",
    "to_append_table",
]
