"""The partitions of a served log directory, read-only, following a live writer.

A read-only :class:`~indexer.log.Log` sees its files as they were when opened, takes no lock and
writes nothing. The writer (the sink, ``seglog append``, a broker that wrote the directory) publishes
what is committed in the log directory's ``replication-offset-checkpoint`` (high watermarks) and the
maintenance daemon publishes retention in ``log-start-offset-checkpoint`` and by renaming segments;
rolls and retention change the partition directory. So every ``poll_ms`` the catalog stats the two
checkpoint files and the directories of the partitions it has opened, and re-opens a partition's log
when its checkpointed offsets or its directory changed; every ``rescan_ms`` it lists the directory
for new partitions. Logs are opened on first use only (a broker directory may hold hundreds).

The high watermark of a partition is its checkpointed one; a partition without an entry shows
everything on disk (``Log.open(read_only=True)``'s rule, what a finished directory needs).

Everything runs on the server's event loop thread: re-opening swaps a partition's log between two
requests, so the old log is closed at once, and no lock is needed. Readers wait for a change with
:meth:`Catalog.wait_for_change` (Fetch long-polls).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import errno
import logging
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from indexer import file_names
from indexer.checkpoint import read_checkpoint
from indexer.config import Settings
from indexer.data_loss import checkpointed_end, missing_checkpointed_records
from indexer.errors import SeglogError, StorageError
from indexer.file_names import TopicPartition
from indexer.log import Log
from indexer.log_manager import LogManager

logger = logging.getLogger(__name__)

# Topic ids of directories without partition.metadata (seglog writes none): a name-based UUID, stable
# across restarts and servers, in a namespace of our own.
_TOPIC_ID_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://github.com/seglog/seglog/topic-id")
# How often the checkpoints are looked at while a fetch waits for records (a tailing consumer): two
# stat calls, so a commit reaches it within about a millisecond instead of a poll_ms.
WAITING_POLL_S = 0.001


def stat_key(path: Path) -> tuple[int, int, int] | None:
    """What changes when a file is replaced or written, or a directory's entries change."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def read_topic_id(partition_dir: Path) -> uuid.UUID | None:
    """The topic id of a broker's ``partition.metadata`` (``topic_id: <base64url>``), if readable."""
    try:
        text = (partition_dir / file_names.PARTITION_METADATA_FILE).read_text("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "topic_id":
            encoded = value.strip()
            try:
                return uuid.UUID(bytes=base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)))
            except (ValueError, binascii.Error):
                return None
    return None


@dataclass
class _Partition:
    directory: Path
    log: Log | None = None
    dir_stat: tuple[int, int, int] | None = None
    offsets: tuple[int | None, int | None] = (None, None)  # checkpointed (high watermark, log start)
    problem: str | None = None  # why it last failed to open


@dataclass
class _Checkpoints:
    high_watermarks: dict[TopicPartition, int] = field(default_factory=dict)
    log_start_offsets: dict[TopicPartition, int] = field(default_factory=dict)
    recovery_points: dict[TopicPartition, int] = field(default_factory=dict)
    stats: tuple[object, object] = (None, None)


class Catalog:
    """The topics and partitions of ``log_dir``, with read-only logs that follow the writer."""

    def __init__(
        self, log_dir: str | os.PathLike[str], settings: Settings, *, poll_ms: int = 10, rescan_ms: int = 500
    ) -> None:
        self.log_dir = Path(log_dir)
        self.settings = settings
        self.poll_s = poll_ms / 1000
        self.rescan_s = rescan_ms / 1000
        self._listing = LogManager(self.log_dir, settings, read_only=True)
        self._partitions: dict[TopicPartition, _Partition] = {}
        self._topic_ids: dict[str, uuid.UUID] = {}
        self._counts: dict[str, int] = {}  # partition_counts(), as of the last rescan
        self._counts_stat: tuple[int, int, int] | None = None  # seglog-topics.json's, then
        self._checkpoints = _Checkpoints()
        self._changed: asyncio.Future[None] | None = None
        self._waiters = 0  # fetches in wait_for_change
        self._waiter_arrived = asyncio.Event()
        self._closed = False
        self._unreadable: str | None = None  # the checkpoint error last logged
        self.rescan()
        self._read_checkpoints(first=True)

    # -- topics ----------------------------------------------------------------------------------

    def topics(self) -> dict[str, list[int]]:
        """Every topic with its partition numbers, sorted."""
        topics: dict[str, list[int]] = {}
        for topic, partition in sorted(self._partitions):
            topics.setdefault(topic, []).append(partition)
        return topics

    def partition_counts(self) -> dict[str, int]:
        """Every topic with its partition count, the engine's (recorded, or implied by its highest
        partition directory): a partition below it may have no directory here, as in the directory of
        one broker of a cluster, which holds only the partitions that broker replicated. As of the
        last :meth:`rescan` (asking the engine costs a directory listing per unrecorded topic)."""
        return dict(self._counts)

    def topic_id(self, topic: str) -> uuid.UUID:
        """The topic's id: from a broker's ``partition.metadata``, else derived from the name."""
        found = self._topic_ids.get(topic)
        if found is None:
            first = min(p for t, p in self._partitions if t == topic) if topic in self.topics() else 0
            found = read_topic_id(self.log_dir / file_names.partition_dir_name(topic, first))
            found = found or uuid.uuid5(_TOPIC_ID_NAMESPACE, topic)
            self._topic_ids[topic] = found
        return found

    def topic_by_id(self, topic_id: uuid.UUID) -> str | None:
        """The topic with ``topic_id``, or None."""
        return next((topic for topic in self.topics() if self.topic_id(topic) == topic_id), None)

    def log(self, topic: str, partition: int) -> Log | None:
        """The partition's read-only log, opened on first use; None if there is no such partition
        (or it holds no segment yet).

        Raises:
            SeglogError: the partition cannot be read.
        """
        entry = self._partitions.get((topic, partition))
        if entry is None:
            return None
        if entry.log is None:
            self._reopen((topic, partition), entry)
        return entry.log

    def reopen(self, topic: str, partition: int) -> Log | None:
        """Re-open a partition after a read failed (a segment deleted under it, ...)."""
        entry = self._partitions.get((topic, partition))
        if entry is None:
            return None
        self._reopen((topic, partition), entry)
        return entry.log

    # -- following the writer --------------------------------------------------------------------

    async def wait_for_change(self, timeout_s: float) -> None:
        """Return when a partition's offsets or files changed, or after ``timeout_s``. While anyone
        waits, the checkpoints are looked at every :data:`WAITING_POLL_S` rather than every ``poll_ms``."""
        if self._changed is None or self._changed.done():
            self._changed = asyncio.get_running_loop().create_future()
        self._waiters += 1
        self._waiter_arrived.set()
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, timeout_s)):
                    await asyncio.shield(self._changed)
        finally:
            self._waiters -= 1

    def _notify(self) -> None:
        if self._changed is not None and not self._changed.done():
            self._changed.set_result(None)

    async def follow(self) -> None:
        """Poll for changes until cancelled (the server runs this as a task): every ``poll_ms``, and
        every :data:`WAITING_POLL_S` (the checkpoints only) while a fetch waits for new records."""
        loop = asyncio.get_running_loop()
        next_rescan = loop.time() + self.rescan_s
        next_poll = loop.time() + self.poll_s
        while not self._closed:
            if self._waiters:
                await asyncio.sleep(WAITING_POLL_S)
            else:
                self._waiter_arrived.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(0.0, next_poll - loop.time())):
                        await self._waiter_arrived.wait()
            changed = False
            now = loop.time()
            if now >= next_rescan:
                changed |= self.rescan()
                next_rescan = now + self.rescan_s
            if now >= next_poll:
                changed |= self.poll()
                next_poll = now + self.poll_s
            else:
                changed |= self.poll(directories=False)
            if changed:
                self._notify()

    def rescan(self) -> bool:
        """Pick up partitions created or deleted since the last scan; True if any."""
        found = {tp for tp in self._listing.partitions() if tp[0] != file_names.CLUSTER_METADATA_TOPIC}
        known = set(self._partitions)
        counts_stat = stat_key(self.log_dir / file_names.TOPICS_FILE)
        if found != known or counts_stat != self._counts_stat:
            counts = self._listing.topics()
            counts.pop(file_names.CLUSTER_METADATA_TOPIC, None)
            self._counts, self._counts_stat = counts, counts_stat
        for tp in known - found:
            entry = self._partitions.pop(tp)
            if entry.log is not None:
                entry.log.close()
        for tp in found - known:
            self._partitions[tp] = _Partition(self.log_dir / file_names.partition_dir_name(*tp))
        if found != known:
            self._topic_ids = {t: i for t, i in self._topic_ids.items() if any(tp[0] == t for tp in found)}
            logger.info("serving %d partitions of %d topics", len(found), len(self.topics()))
        return found != known

    def poll(self, *, directories: bool = True) -> bool:
        """Re-open the opened partitions whose checkpointed offsets or (with ``directories``) directory
        changed; True if any. Without ``directories`` it costs two ``stat`` calls when nothing changed."""
        if not self._read_checkpoints() and not directories:
            return False
        changed = False
        for tp, entry in self._partitions.items():
            if entry.log is None:
                continue
            if entry.offsets != self._offsets(tp) or directories and entry.dir_stat != stat_key(entry.directory):
                changed |= self._reopen(tp, entry)
        return changed

    def _offsets(self, tp: TopicPartition) -> tuple[int | None, int | None]:
        return self._checkpoints.high_watermarks.get(tp), self._checkpoints.log_start_offsets.get(tp)

    def _read_checkpoints(self, *, first: bool = False) -> bool:
        """Read the checkpoint files if they changed since the last read; True if they were read.

        An unreadable ``replication-offset-checkpoint`` (:func:`indexer.checkpoint.read_checkpoint`) is
        never taken for an empty one, which would serve uncommitted records: at the ``first`` read it
        stops the server (nothing committed is known yet); later the high watermarks read before are
        kept (committed records only), and the error is logged once until the file can be read again.

        Raises:
            StorageError: ``first``, and ``replication-offset-checkpoint`` cannot be read.
        """
        hw_path = self.log_dir / file_names.REPLICATION_OFFSET_CHECKPOINT_FILE
        lso_path = self.log_dir / file_names.LOG_START_OFFSET_CHECKPOINT_FILE
        stats = (stat_key(hw_path), stat_key(lso_path))
        if stats == self._checkpoints.stats:
            return False
        try:
            high_watermarks = read_checkpoint(self.log_dir, file_names.REPLICATION_OFFSET_CHECKPOINT_FILE)
        except StorageError as e:
            if first:
                raise
            if str(e) != self._unreadable:
                logger.error("%s; serving up to the high watermarks read before", e)
            self._unreadable = str(e)
            return False
        if self._unreadable is not None:
            logger.info("%s can be read again", hw_path)
            self._unreadable = None
        log_start_offsets = read_checkpoint(self.log_dir, file_names.LOG_START_OFFSET_CHECKPOINT_FILE, reader=True)
        recovery_points = read_checkpoint(self.log_dir, file_names.RECOVERY_POINT_CHECKPOINT_FILE, reader=True)
        self._checkpoints = _Checkpoints(high_watermarks, log_start_offsets, recovery_points, stats)
        return True

    def _reopen(self, tp: TopicPartition, entry: _Partition) -> bool:
        dir_stat = stat_key(entry.directory)
        high_watermark, log_start_offset = self._offsets(tp)
        try:
            log = Log.open(
                entry.directory,
                self.settings.log_config(tp[0]),
                read_only=True,
                log_start_offset=log_start_offset or 0,
                high_watermark=high_watermark,
            )
        except SeglogError as e:
            if isinstance(e, StorageError) and e.errno == errno.ENOENT:  # no segment yet, files renamed
                logger.debug("cannot open %s-%d yet: %s", tp[0], tp[1], e)
            elif str(e) != entry.problem:  # damage: said once, not at every fetch that asks again
                logger.warning("cannot serve %s-%d: %s", tp[0], tp[1], e)
            entry.problem = str(e)
            return False
        entry.problem = None
        must_reach = checkpointed_end(high_watermark, self._checkpoints.recovery_points.get(tp))
        loss = missing_checkpointed_records(entry.directory, log.log_end_offset, must_reach)
        if loss is not None:
            logger.warning("%s; served up to offset %d", loss, log.log_end_offset)
        old, entry.log = entry.log, log
        entry.dir_stat, entry.offsets = dir_stat, (high_watermark, log_start_offset)
        if old is not None:
            old.close()
        logger.debug(
            "%s-%d: offsets %d..%d, high watermark %d",
            tp[0],
            tp[1],
            log.log_start_offset,
            log.log_end_offset,
            log.high_watermark,
        )
        return True

    def close(self) -> None:
        """Close every open log."""
        self._closed = True
        for entry in self._partitions.values():
            if entry.log is not None:
                entry.log.close()
                entry.log = None
        self._listing.close()
