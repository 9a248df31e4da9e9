"""The sizes a record batch written to a log must respect, and the error naming the limit it breaks.

Three settings bound a batch (the whole batch, 12-byte log overhead included):

* ``max.message.bytes``: the largest batch a topic stores (Kafka's ``RecordTooLargeException``
  above it, ``UnifiedLog.analyzeAndValidateRecords``);
* ``segment.bytes``: a batch must fit an empty segment (Kafka's ``RecordBatchTooLargeException``);
* ``batch.size``: the size seglog's writer aims at (Kafka producer's ``batch.size``): a batch takes
  no further record that would make it larger; a record larger than that on its own gets a batch of
  its own, bounded only by the two limits above.

Every layer that cuts batches (``Log.append``, the Spark sink) or stores them (``Log.append_encoded``)
asks :class:`BatchLimits`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from indexer.config import LogConfig
from indexer.errors import RecordBatchTooLargeError, RecordTooLargeError, SeglogError
from indexer.limits import INT32_MAX


@dataclass(frozen=True, slots=True)
class BatchLimits:
    """``max.message.bytes``, ``segment.bytes`` and ``batch.size`` of one topic."""

    max_message_bytes: int
    segment_bytes: int = INT32_MAX
    batch_size: int = INT32_MAX

    @classmethod
    def of(cls, config: LogConfig) -> BatchLimits:
        """The limits ``config`` sets."""
        return cls(config.max_message_bytes, config.segment_bytes, config.batch_size)

    @property
    def max_batch_bytes(self) -> int:
        """The largest batch allowed: within ``max.message.bytes`` and one segment."""
        return min(self.max_message_bytes, self.segment_bytes, INT32_MAX)

    def too_large(
        self, size: int, what: str, *, where: str | os.PathLike[str] | None = None, index: int | None = None
    ) -> SeglogError:
        """The error for ``what`` (``"the batch of 900 bytes at offset 7"``), a batch of ``size`` bytes above
        :attr:`max_batch_bytes`: :class:`RecordTooLargeError` when it breaks ``max.message.bytes``
        (``index`` is then the record's row), else :class:`RecordBatchTooLargeError` (``segment.bytes``)."""
        place = f" of {where}" if where is not None else ""
        if size > self.max_message_bytes:
            return RecordTooLargeError(
                f"{what} is larger than max.message.bytes = {self.max_message_bytes}{place}",
                size=size,
                limit=self.max_message_bytes,
                index=index,
            )
        return RecordBatchTooLargeError(f"{what} is larger than segment.bytes = {self.segment_bytes}{place}")

    def check(
        self, sizes: np.ndarray, first_offsets: np.ndarray, *, where: str | os.PathLike[str] | None = None
    ) -> None:
        """Raise :meth:`too_large`'s error for the first batch (sizes and first offsets, vectorised)
        above :attr:`max_batch_bytes`."""
        over = np.flatnonzero(sizes > self.max_batch_bytes)
        if over.size:
            i = int(over[0])
            size = int(sizes[i])
            raise self.too_large(size, f"the batch of {size} bytes at offset {int(first_offsets[i])}", where=where)
