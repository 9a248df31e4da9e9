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

A purge of quarantine files (``seglog quarantine purge``, the retention job after
``quarantine.retention.ms``) appends one too, before it deletes anything (:func:`purge_quarantine`):
the bytes recovery removed are then gone for good, and the offsets they held would otherwise leave
no trace (a gap inside a segment is read past like a compacted one, and a gap between segments
would look like missing files).

The file is only ever appended to (and fsynced); nothing in seglog deletes it.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from indexer import file_names
from indexer._files import pwrite_all
from indexer.checkpoint import fsync_directory
from indexer.errors import OffsetsInNoSegmentError, StorageError, storage_errors
from indexer.quarantine import QuarantineFile, list_quarantine
from indexer.records.file_records import FileRecords
from indexer.salvage import LostRange, offsets_without_batch

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


@dataclass(frozen=True, slots=True)
class CheckpointedEnd:
    """The offset a partition's log must reach by its checkpoints (``offset``), and the checkpoint that
    says so (``checkpoint``: "high watermark" or "recovery point")."""

    offset: int
    checkpoint: str

    @property
    def by(self) -> str:
        """What recorded it, in the words of :func:`missing_committed_records`."""
        if self.checkpoint == "high watermark":
            return "its checkpointed high watermark"
        return "its checkpointed recovery point"


def checkpointed_end(high_watermark: int | None, recovery_point: int | None) -> CheckpointedEnd | None:
    """The offset below which a partition's log cannot legitimately end, by its checkpoints: its high
    watermark when ``replication-offset-checkpoint`` has one, else its recovery point (None: neither
    says anything). The one rule ``seglog read``, ``seglog serve``, the Spark source and ``seglog
    describe`` ask.

    The high watermark wins when known: seglog's writers cut uncommitted tails above it (a failed
    append, a dead writer's tail) and checkpoint the recovery point only later, so a recovery point
    above the log end is then no loss. Without a high watermark nothing truncates a log (a
    broker-written directory whose checkpoint lacks the partition; :func:`maintenance.committed.kept_offset`
    keeps everything), and every offset below the recovery point was flushed: a log ending below it
    lost flushed records (a segment cut or deleted), which ``seglog recover`` reports as lost too.
    """
    if high_watermark is not None:
        return CheckpointedEnd(high_watermark, "high watermark")
    if recovery_point:
        return CheckpointedEnd(recovery_point, "recovery point")
    return None


def missing_checkpointed_records(
    directory: Path, log_end_offset: int, end: CheckpointedEnd | None
) -> StorageError | None:
    """The error naming the records missing from the end of partition ``directory`` when its log ends
    at ``log_end_offset``, below ``end`` (:func:`checkpointed_end`); None when nothing is missing."""
    if end is None or end.offset <= log_end_offset:
        return None
    return missing_committed_records(directory, log_end_offset, end.offset, end.by)


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
    Appends of several processes (the retention job's quarantine purge beside ``seglog recover``) are
    serialised by an exclusive ``flock`` on the file.

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
            fcntl.flock(fd, fcntl.LOCK_EX)  # another process's append (a purge beside a recover): one after the other
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


@dataclass(frozen=True, slots=True)
class QuarantinePurge:
    """What :func:`purge_quarantine` deleted (or, in a dry run, would delete) in one partition: the
    quarantine ``files`` and the offset ranges ``lost`` for good with them (recorded)."""

    files: list[QuarantineFile] = field(default_factory=list)
    lost: list[LostRange] = field(default_factory=list)


def purge_quarantine(
    partition_dir: Path, *, command: str, now_ms: int, older_than_ms: int | None = None, dry_run: bool = False
) -> QuarantinePurge:
    """Delete the quarantine files of ``partition_dir`` (only those modified at least ``older_than_ms``
    before ``now_ms``, the time recorded, when given), recording first, as a loss accepted by ``command``, the offsets
    that go for good with them (:func:`lost_with_quarantine`), and saying them at WARNING: the gap
    stays visible (``seglog describe`` lists the record) and readers go on past it as while the
    files existed. ``dry_run``: what would be deleted and recorded; nothing is.

    Raises:
        StorageError: a file cannot be read, deleted, or the record written.
    """
    found = list_quarantine(partition_dir)
    files = [q for q in found if older_than_ms is None or now_ms - q.modified_ms >= older_than_ms]
    if not files:
        return QuarantinePurge()
    remaining = {q.base_offset for q in found if q not in files}
    lost = lost_with_quarantine(partition_dir, sorted({q.base_offset for q in files} - remaining))
    purge = QuarantinePurge(files, lost)
    if dry_run:
        return purge
    topic, partition = file_names.parse_topic_partition_name(partition_dir.name)
    if lost:
        record_accepted_loss(
            partition_dir.parent,
            {
                "accepted_at_ms": now_ms,
                "command": command,
                "topic": topic,
                "partition": partition,
                "lost": [r.to_dict() for r in lost],
                "quarantined": [q.path.name for q in files],
            },
        )
        logger.warning(
            "%s: offsets %s are lost for good: their bytes went with the quarantine files purged (recorded in %s)",
            partition_dir.name,
            ", ".join(f"{r.first}..{r.end - 1}" for r in lost if r.end is not None),
            data_loss_file(partition_dir.parent),
        )
    for q in files:
        with storage_errors(q.path, "delete"):
            q.path.unlink(missing_ok=True)
    with storage_errors(partition_dir, "fsync"):
        fsync_directory(partition_dir)
    return purge


def lost_with_quarantine(partition_dir: Path, bases: Iterable[int]) -> list[LostRange]:
    """The offsets that the quarantine files of segments ``bases`` of ``partition_dir`` account for
    and that no acceptance recorded yet: of each segment still there, every offset none of its
    batches holds up to the next segment (:func:`~indexer.salvage.offsets_without_batch`; in a
    broker's compacted segment this includes what compaction removed, which the files cannot tell
    apart). A segment no longer there left with the log start (retention), or was deleted whole by
    recovery, whose gap between the segments around it readers and recovery report until a loss is
    accepted (:func:`offsets_in_no_segment`): nothing to add for it.

    Raises:
        StorageError: the directory, a ``.log`` or the accepted-loss record cannot be read.
    """
    with storage_errors(partition_dir, "list"):
        segments = sorted(
            file_names.offset_from_file_name(p.name)
            for p in partition_dir.iterdir()
            if p.name.endswith(file_names.LOG_FILE_SUFFIX) and p.name.split(".")[0].isdigit()
        )
    ranges: list[LostRange] = []
    for base in bases:
        if base in segments:
            following = next((b for b in segments if b > base), None)
            with FileRecords.open(file_names.log_file(partition_dir, base), mutable=False) as records:
                ranges += offsets_without_batch(records.scan(0, verify_crc=False), base, following)
    topic, partition = file_names.parse_topic_partition_name(partition_dir.name)
    accepted = [
        (int(r["first"]), int(r["last"]))
        for entry in read_accepted_losses(partition_dir.parent)
        if (entry.get("topic"), entry.get("partition")) == (topic, partition)
        for r in entry.get("lost", [])
        if r.get("last") is not None
    ]
    return [
        r
        for r in ranges
        if r.end is not None and not any(first <= r.first and last >= r.end - 1 for first, last in accepted)
    ]
