"""From records to the batches a log appends: plan, encode (overlapping the writes), check, summarise.

The log (:meth:`indexer.log.Log.append`) owns offsets, segments and rolls; this module owns the
record-format side of an append:

* :func:`plan_append` cuts a table into batches that fit every :class:`BatchLimits` and checks every
  record before a byte is written (:func:`~indexer.records.encoder.plan_batches`);
* :meth:`AppendPlan.parts` hands the log the batches to write, in order: uncompressed batches, whose
  sizes are known before encoding, as their metadata plus a ``fill`` that encodes them straight into
  the segment file on several threads (:func:`~indexer.records.encoder.encode_planned_to`); compressed
  ones encoded chunk by chunk in a helper thread, ahead of the writes;
* :func:`check_stored_as_is` checks batches encoded beforehand (``Log.append_encoded``) against the
  topic before they are stored as they are;
* :class:`AppendSummary` describes what an append wrote.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from indexer.config import LogConfig
from indexer.errors import RecordTooLargeError
from indexer.limits import INT32_MAX
from indexer.records.batch_header import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_CODEC_MASK,
    COMPRESSION_IDS,
    CREATE_TIME,
    LOG_APPEND_TIME,
    MAGIC_OFFSET,
    MAGIC_V2,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
)
from indexer.records.batch_limits import BatchLimits
from indexer.records.encoder import (
    BatchPlan,
    EncodedBatches,
    encode_planned,
    encode_planned_to,
    plan_batches,
    planned_batches,
)
from indexer.records.framing import is_contiguous

# A compressed append of more than two chunks is encoded chunk by chunk in a helper thread, so
# encoding a chunk overlaps writing the one before (the encoder's kernels and the writes release the
# GIL). The batches are planned once for the whole table first (which finds every invalid record
# before a byte is written); a chunk is then a run of whole planned batches of at most an eighth of
# the append, between these bounds (one larger batch alone): small chunks start the writes early and
# stay in the CPU cache between encoding and writing, each chunk costs the writer ~0.5 ms of
# indexing. The helper writes each chunk's records through its thread's recycled buffer before
# compressing them (encoder.encode_planned): only the compressed bytes take fresh memory.
# Uncompressed batches, whose positions are known before encoding, are instead encoded and written
# by _ENCODE_WORKERS threads side by side (encoder.encode_planned_to).
_APPEND_CHUNK_BYTES = 8 * 1024 * 1024
_APPEND_MIN_CHUNK_BYTES = 4 * 1024 * 1024
_ENCODE_WORKERS = min(2, os.cpu_count() or 1)  # threads encoding and writing one uncompressed append

_CODEC_NAMES = {codec_id: name for name, codec_id in COMPRESSION_IDS.items()}

Write = Callable[[np.ndarray, int], None]
"""``write(data, position)``: whole batches to store at ``position`` (relative to the first one)."""
Fill = Callable[[Write, int, int], None]
"""``fill(write, start, stop)``: encode batches ``start..stop-1`` and hand them to ``write``."""


class AppendPart(NamedTuple):
    """Batches for the log to write, in order: encoded, or (with ``fill``) only their metadata, with
    ``fill`` encoding them into the file (see ``LogSegment.append_batches``)."""

    batches: EncodedBatches
    fill: Fill | None


class AppendSummary(NamedTuple):
    """What appended batches hold (Kafka's ``LogAppendInfo`` fields an append's parts add up to)."""

    max_timestamp: int
    offset_of_max_timestamp: int
    num_batches: int
    valid_bytes: int
    last_offset: int

    @classmethod
    def of(cls, encoded: EncodedBatches) -> AppendSummary:
        """The summary of the (non-empty) ``encoded``."""
        best = int(np.argmax(encoded.max_timestamps))
        return cls(
            max_timestamp=int(encoded.max_timestamps[best]),
            offset_of_max_timestamp=int(encoded.offsets_of_max_timestamp[best]),
            num_batches=len(encoded),
            valid_bytes=int(encoded.positions[-1] + encoded.sizes[-1] - encoded.positions[0]),
            last_offset=encoded.last_offset,
        )

    @classmethod
    def combine(cls, parts: list[AppendSummary]) -> AppendSummary:
        """The summary of consecutive parts (non-empty list); the first part holding the largest
        timestamp names its offset (Kafka keeps the first)."""
        best = max(range(len(parts)), key=lambda k: (parts[k].max_timestamp, -k))
        return cls(
            max_timestamp=parts[best].max_timestamp,
            offset_of_max_timestamp=parts[best].offset_of_max_timestamp,
            num_batches=sum(part.num_batches for part in parts),
            valid_bytes=sum(part.valid_bytes for part in parts),
            last_offset=parts[-1].last_offset,
        )


@dataclass(frozen=True, eq=False)
class AppendPlan:
    """The batches of one append, planned and checked (:func:`plan_append`), not yet encoded."""

    plan: BatchPlan
    limits: BatchLimits
    table: pa.Table
    log_append_time_ms: int | None
    where: str | os.PathLike[str] | None

    def parts(self) -> Generator[AppendPart, None, None]:
        """The batches to write, in order (see the module docstring), every one checked against the
        limits before the first is yielded. Closing the iterator stops a helper thread at once (after
        the chunk it is encoding, which is discarded).

        Raises:
            RecordBatchTooLargeError: a record alone, compressed, does not fit a segment.
        """
        plan = self.plan
        if self._encodes_at_positions():
            yield AppendPart(planned_batches(plan), self._encode_into)
            return
        if int(plan.sizes.max()) <= self.limits.segment_bytes:  # compressed sizes fit too
            chunk_bytes = min(_APPEND_CHUNK_BYTES, max(_APPEND_MIN_CHUNK_BYTES, plan.total_bytes // 8))
            ranges = plan.chunks(chunk_bytes)
            if len(ranges) > 2:
                with contextlib.closing(_encode_in_chunks(plan, ranges)) as chunks:
                    for encoded in chunks:
                        yield AppendPart(encoded, None)
                return
        encoded = encode_planned(plan)
        if int(encoded.sizes.max()) > self.limits.segment_bytes:
            # a batch that compressed too little for a segment: cut every batch to fit uncompressed
            plan = _plan(self.table, plan.base_offset, self.limits, self.limits.max_batch_bytes, plan.compression,
                         self.log_append_time_ms, self.where)  # fmt: skip
            encoded = encode_planned(plan)
        yield AppendPart(encoded, None)

    def _encodes_at_positions(self) -> bool:
        """Whether the batches' sizes are final before encoding (no compression), so that several
        threads can encode and write them at their file positions at once."""
        return self.plan.compression == "none"

    def _encode_into(self, write: Write, start: int, stop: int) -> None:
        """Encode batches ``start..stop-1`` and hand them to ``write`` on several threads."""
        encode_planned_to(self.plan, start, stop, write, workers=_ENCODE_WORKERS)


def plan_append(
    table: pa.Table,
    first_offset: int,
    *,
    limits: BatchLimits,
    compression: str,
    log_append_time_ms: int | None,
    where: str | os.PathLike[str] | None = None,
) -> AppendPlan:
    """Cut ``table`` (:data:`~indexer.records.columns.APPEND_SCHEMA`, non-empty) into batches from
    ``first_offset``, packed up to ``batch.size``, each within ``max.message.bytes``.

    Uncompressed batches are also cut to fit a segment. Compressed ones are bounded by their
    uncompressed size, so they fit ``max.message.bytes`` whatever compression does; ``segment.bytes``
    is Kafka's check of the stored (compressed) batch, so :meth:`AppendPlan.parts` cuts them again
    only if one compresses too little to fit a segment. ``log_append_time_ms`` stamps LogAppendTime
    batches; None writes CreateTime. Every record is checked here, before anything is encoded.

    Raises:
        RecordTooLargeError: a record alone breaks ``max.message.bytes`` (``index`` is its row).
        RecordBatchTooLargeError: a record alone does not fit a segment (``segment.bytes``), uncompressed.
        SchemaError: ``table`` is not of the append schema.
    """
    largest = limits.max_batch_bytes if compression == "none" else limits.max_message_bytes
    plan = _plan(table, first_offset, limits, largest, compression, log_append_time_ms, where)
    return AppendPlan(plan, limits, table, log_append_time_ms, where)


def _plan(
    table: pa.Table,
    first_offset: int,
    limits: BatchLimits,
    largest: int,
    compression: str,
    log_append_time_ms: int | None,
    where: str | os.PathLike[str] | None,
) -> BatchPlan:
    """``plan_batches`` with batches of at most ``largest`` bytes, its error told in ``limits``' terms."""
    if table.num_rows and largest < RECORD_BATCH_OVERHEAD:  # not even an empty batch fits (segment.bytes=14)
        what = f"record 0, alone in a batch of more than {RECORD_BATCH_OVERHEAD} bytes,"
        raise limits.too_large(RECORD_BATCH_OVERHEAD + 1, what, where=where, index=0)
    try:
        return plan_batches(
            table,
            first_offset,
            max_batch_bytes=min(largest, INT32_MAX),
            batch_size=limits.batch_size,
            compression=compression,
            timestamp_type=CREATE_TIME if log_append_time_ms is None else LOG_APPEND_TIME,
            log_append_time_ms=log_append_time_ms,
        )
    except RecordTooLargeError as e:
        row, size = int(e.index or 0), int(e.size or 0)
        what = f"record {row}, alone in a batch of {size} bytes,"
        raise limits.too_large(size, what, where=where, index=row) from None


def _encode_in_chunks(plan: BatchPlan, ranges: list[tuple[int, int]]) -> Generator[EncodedBatches, None, None]:
    """The batch ranges of ``plan`` encoded in order by a helper thread, ahead of the consumer.

    Errors of the helper are raised here; closing the iterator stops it (after the chunk it is
    encoding, which is discarded).
    """
    results: queue.Queue[EncodedBatches | BaseException | None] = queue.Queue()
    stopped = threading.Event()

    def work() -> None:
        try:
            for start, stop in ranges:
                if stopped.is_set():
                    return
                results.put(encode_planned(plan, start, stop))
        except BaseException as e:  # handed to the consumer, which raises it
            results.put(e)
        else:
            results.put(None)

    thread = threading.Thread(target=work, name="seglog-append-encoder", daemon=True)
    thread.start()
    try:
        while (item := results.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stopped.set()
        thread.join()


def check_stored_as_is(
    encoded: EncodedBatches, first_offset: int, config: LogConfig, *, where: str | os.PathLike[str]
) -> None:
    """Reject (non-empty) ``encoded`` batches a log of ``config`` cannot store as they are, their
    offsets to start at ``first_offset``: checks vectorised over the batches' framing and headers.

    Raises:
        ValueError: not back-to-back v2 batches with consecutive offsets in a writable buffer, or a
            codec other than the topic's (uncompressed passes: the encoder's choice for a batch that
            would not shrink) or a timestamp type other than the topic's.
        RecordTooLargeError: a batch is larger than ``max.message.bytes``.
        RecordBatchTooLargeError: a batch is larger than ``segment.bytes``.
    """
    if not is_contiguous(encoded):
        raise ValueError(
            f"cannot append to {where}: the batches are not back to back in their buffer "
            "with consecutive offsets (use encode_batches)"
        )
    buffer, positions = encoded.buffer, encoded.positions
    if not buffer.flags.writeable:
        raise ValueError(
            f"cannot append to {where}: the batches' buffer is read-only, and their offsets are assigned in place"
        )
    if bool((buffer[positions + MAGIC_OFFSET] != MAGIC_V2).any()):
        raise ValueError(f"cannot append to {where}: only v2 batches can be appended encoded")
    attributes = buffer[positions + ATTRIBUTES_OFFSET + 1]  # the low byte of the int16 attributes
    for codec_id in np.unique(attributes & COMPRESSION_CODEC_MASK).tolist():
        name = _CODEC_NAMES.get(int(codec_id))
        # An uncompressed batch in a compressed topic is what the encoder writes when the topic's codec
        # would make the batch larger (docs/records.md), as Log.append stores it.
        if name is None or (name != "none" and config.stored_codec(name) != name):
            raise ValueError(
                f"cannot append to {where}: its compression.type is {config.compression_type}, and encoded "
                f"batches are stored as they are; encode them with {config.stored_codec(None)!r}"
            )
    append_time = config.is_log_append_time
    if bool((((attributes & TIMESTAMP_TYPE_MASK) != 0) != append_time).any()):
        raise ValueError(
            f"cannot append to {where}: its message.timestamp.type is {config.message_timestamp_type}, and "
            "encoded batches are stored as they are; encode them with "
            f"timestamp_type={'LOG_APPEND_TIME' if append_time else 'CREATE_TIME'}"
        )
    first_offsets = encoded.base_offsets - encoded.base_offsets[0] + first_offset
    BatchLimits.of(config).check(encoded.sizes, first_offsets, where=where)
