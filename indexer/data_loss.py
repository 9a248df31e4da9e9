"""The record of data loss a user accepted: ``<log dir>/seglog-accepted-data-loss.jsonl``.

When recovery could not keep committed records (damage with no intact copy), seglog refuses to go
on silently: ``seglog recover`` exits 3 and the sink will not start on a partition that ends below
its committed offset. ``seglog recover --accept-data-loss`` is the explicit way forward (the spirit
of Spark's ``failOnDataLoss=false``, but decided once, by a person, and written down): for each
partition it appends one JSON line here, then moves the partition's end up to the committed offset
so the lost offsets stay a gap and are never reused for other records. A line::

    {"accepted_at_ms": 1700000000000, "command": "seglog recover --accept-data-loss",
     "host": "node-1", "pid": 4242, "topic": "events", "partition": 0,
     "lost": [{"first": 4661, "last": 9756}], "committed_offset": 9757,
     "log_end_offset": 4661, "quarantined": ["00000000000000004096.log.2048.quarantine"]}

The file is only ever appended to (and fsynced); nothing in seglog deletes it.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from indexer import file_names
from indexer._files import pwrite_all
from indexer.checkpoint import fsync_directory
from indexer.errors import OffsetsInNoSegmentError, StorageError, storage_errors
from indexer.quarantine import list_quarantine
from indexer.salvage import LostRange

logger = logging.getLogger(__name__)


def data_loss_file(log_dir: str | os.PathLike[str]) -> Path:
    """The path of the accepted-data-loss record of ``log_dir``."""
    return Path(log_dir) / file_names.DATA_LOSS_FILE


def missing_committed_records(directory: Path, log_end_offset: int, committed: int, committed_by: str) -> StorageError:
    """The error of a writer that finds partition ``directory`` ending at ``log_end_offset``, below
    the offset ``committed_by`` (what recorded it, e.g. "its checkpointed high watermark") says was
    committed: the records in between are gone, and writing on would give their offsets to others."""
    log_dir = directory.parent
    return StorageError(
        f"partition {directory.name} in {log_dir} ends at offset {log_end_offset}, below {committed_by} "
        f"{committed}: committed records (offsets {log_end_offset}..{committed - 1}) are missing. If they "
        f"cannot be restored, accept the loss with `seglog recover --log-dir {log_dir} --accept-data-loss` "
        "(it records what was lost and lets writers go on; see docs/recovery.md)",
        path=directory,
    )


def log_start_above(directory: Path, log_start_offset: int, bound: int, what: str) -> StorageError:
    """The error of an open of partition ``directory`` whose checkpointed log start offset is above
    ``bound``, ``what`` that is (e.g. "its log end offset"): no writer leaves that (its log start never
    passes its log end, nor its committed offset), so ``log-start-offset-checkpoint`` is damaged or
    segment files are missing. Reading from it would skip every record below it, and a writer would
    remove the segments below it (committed records): refused, naming the file, the value and
    ``seglog recover``, which names what recovery would remove."""
    log_dir = directory.parent
    return StorageError(
        f"partition {directory.name} in {log_dir}: its checkpointed log start offset {log_start_offset} "
        f"({log_dir / file_names.LOG_START_OFFSET_CHECKPOINT_FILE}) is above {what} {bound} (a damaged checkpoint, or "
        "segment files missing): opening it would skip or remove the records below it; "
        f"`seglog recover --log-dir {log_dir} --dry-run` names what recovery would remove",
        path=directory,
    )


def record_accepted_loss(log_dir: str | os.PathLike[str], entry: Mapping[str, Any]) -> dict[str, Any]:
    """Append one acceptance (``entry`` plus host and pid) as a JSON line, fsynced; returns the line.

    Raises:
        StorageError: the file cannot be written.
    """
    line = {**entry, "host": socket.gethostname(), "pid": os.getpid()}
    data = (json.dumps(line, sort_keys=True) + "\n").encode("utf-8")
    path = data_loss_file(log_dir)
    created = not path.exists()
    with storage_errors(path, "append to"):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            end = _complete_lines_end(fd)
            try:
                os.ftruncate(fd, end)  # a line an interrupted acceptance left unfinished
                pwrite_all(fd, memoryview(data), end)
                os.fsync(fd)
            except OSError:
                # A full disk can take the start of the line and refuse the rest: cut it, so the
                # file stays readable and the next acceptance starts on a line of its own.
                os.ftruncate(fd, end)
                raise
        finally:
            os.close(fd)
        if created:
            fsync_directory(path.parent)
    return line


def _complete_lines_end(fd: int) -> int:
    """The size of the file up to its last newline: what complete acceptances hold."""
    size = os.fstat(fd).st_size
    data = os.pread(fd, size, 0)
    return data.rfind(b"\n") + 1


def read_accepted_losses(log_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every acceptance recorded in ``log_dir``, oldest first (empty when there is none).

    Raises:
        StorageError: the file exists but cannot be read or a line is not JSON.
    """
    path = data_loss_file(log_dir)
    if not path.exists():
        return []
    with storage_errors(path, "read"):
        raw = path.read_text(encoding="utf-8")
    lines = raw.splitlines()
    out = []
    for number, text in enumerate(lines, 1):
        if not text.strip():
            continue
        try:
            out.append(json.loads(text))
        except json.JSONDecodeError as e:
            if number == len(lines) and not raw.endswith("\n"):
                # an acceptance interrupted mid-line (a crash): it was never made; the next one cuts it
                logger.warning("%s: ignoring the unfinished last line %d (an interrupted acceptance)", path, number)
                continue
            raise StorageError(f"{path} line {number} is not JSON: {e}", path=path) from e
    return out


def offsets_in_no_segment(partition_dir: Path, gaps: Iterable[tuple[int, int, int]]) -> list[LostRange]:
    """Of the gaps ``(segment base, its next offset, the next segment's base offset)`` between the
    segments of ``partition_dir``, the offsets nothing accounts for: lost, because a segment's files
    went missing (deleted by hand, an incomplete copy). Writers roll at the log end, so only recovery
    leaves such a gap: an earlier one (a quarantine file of that segment holds the bytes), or one
    whose loss a user accepted (recorded here).

    Raises:
        StorageError: the partition directory or the accepted-loss record cannot be read.
    """
    open_gaps = [(base, end, following) for base, end, following in gaps if end < following]
    if not open_gaps:
        return []
    quarantined = {q.base_offset for q in list_quarantine(partition_dir)}
    try:
        topic, partition = file_names.parse_topic_partition_name(partition_dir.name)
    except ValueError:  # not a partition of a log directory: nothing can have been accepted
        accepted = []
    else:
        accepted = [
            (int(r["first"]), int(r["last"]))
            for entry in read_accepted_losses(partition_dir.parent)
            if (entry.get("topic"), entry.get("partition")) == (topic, partition)
            for r in entry.get("lost", [])
        ]
    return [
        LostRange(end, following)
        for base, end, following in open_gaps
        if base not in quarantined and not any(first <= end and last >= following - 1 for first, last in accepted)
    ]


def missing_between_segments(
    partition_dir: Path, base: int, first: int, following: int
) -> OffsetsInNoSegmentError | None:
    """The error of a read that needs offset ``first`` after segment ``base`` of ``partition_dir`` when
    the next segment starts at ``following``: offsets ``first..following - 1`` are in no segment file
    and, unless a recovery or an accepted loss accounts for them (:func:`offsets_in_no_segment`), lost.
    None when nothing is missing or the gap is accounted for (readers then go on, as after salvage).
    Readers before ``seglog recover`` must not return the records around such a hole as contiguous.

    Raises:
        StorageError: the partition directory or the accepted-loss record cannot be read.
    """
    if first >= following or not offsets_in_no_segment(partition_dir, [(base, first, following)]):
        return None
    log_dir = partition_dir.parent
    return OffsetsInNoSegmentError(
        f"cannot read offsets {first}..{following - 1} of {partition_dir.name}: no segment file holds them "
        f"(between segments {base} and {following}: a segment's files are missing or it was cut short). "
        f"`seglog recover --log-dir {log_dir}` names the loss; if the files cannot be restored, "
        "`--accept-data-loss` records it and readers go on after it",
        path=file_names.log_file(partition_dir, following),
        offset=first,
        end=following,
    )
