"""Every file name seglog reads or writes, in one place (Kafka's ``LogFileUtils``).

A partition directory is ``<topic>-<partition>``; a segment with base offset ``B`` is the set of
files ``<B as 20 zero-padded digits>.log`` / ``.index`` / ``.timeindex`` / ``.txnindex``.
Transient suffixes are appended after the normal one: ``.deleted`` (awaiting asynchronous
deletion), ``.cleaned`` and ``.swap`` (multi-file replace in progress), and ``.tmp`` after an index
file's name (``<B>.index.tmp``: a new index file not yet renamed over the old one). Bytes that recovery removes
from a segment are kept in ``<B>.log.<position>.quarantine`` (``position``: where they were in
that ``.log``; a second file for the same place gets ``.<n>`` before the suffix): the name ends
in no segment suffix, so no loader ever takes it for a segment. No other module builds a file name.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from indexer.errors import InvalidTopicError, SeglogError, StorageError, storage_errors
from indexer.limits import INT32_MAX, integer_argument

LOG_FILE_SUFFIX = ".log"
INDEX_FILE_SUFFIX = ".index"
TIME_INDEX_FILE_SUFFIX = ".timeindex"
TXN_INDEX_FILE_SUFFIX = ".txnindex"
PRODUCER_SNAPSHOT_FILE_SUFFIX = ".snapshot"
DELETED_FILE_SUFFIX = ".deleted"
CLEANED_FILE_SUFFIX = ".cleaned"
SWAP_FILE_SUFFIX = ".swap"
QUARANTINE_FILE_SUFFIX = ".quarantine"
INDEX_TEMP_SUFFIX = ".tmp"
_KRAFT_DELETED_SUFFIX = ".checkpoint.deleted"  # a KRaft snapshot being deleted: not a segment's file

# Files in a log directory (beside the partition directories).
RECOVERY_POINT_CHECKPOINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT_FILE = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT_FILE = "replication-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
LOG_DIR_LOCK_FILE = ".lock"
DATA_LOSS_FILE = "seglog-accepted-data-loss.jsonl"  # what `seglog recover --accept-data-loss` accepted
TOPICS_FILE = "seglog-topics.json"  # each topic's partition count (indexer.topics)

# Files in a partition directory.
LEADER_EPOCH_CHECKPOINT_FILE = "leader-epoch-checkpoint"
PARTITION_METADATA_FILE = "partition.metadata"
PARTITION_LOCK_FILE = ".seglog.lock"

MAX_TOPIC_LENGTH = 249

TopicPartition = tuple[str, int]
"""A partition as ``(topic, partition)``: the one alias every layer uses."""
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")


def filename_prefix_from_offset(offset: int) -> str:
    """``offset`` as at least 20 zero-padded digits (``0`` -> ``00000000000000000000``)."""
    return f"{offset:020d}"


def offset_from_file_name(name: str) -> int:
    """The offset encoded before the first ``.`` of a segment or snapshot file name."""
    head = name.split(".", 1)[0]
    try:
        return int(head)
    except ValueError:
        raise ValueError(f"file name {name!r} does not start with an offset") from None


def log_file(directory: Path, base_offset: int, suffix: str = "") -> Path:
    return directory / (filename_prefix_from_offset(base_offset) + LOG_FILE_SUFFIX + suffix)


def offset_index_file(directory: Path, base_offset: int, suffix: str = "") -> Path:
    return directory / (filename_prefix_from_offset(base_offset) + INDEX_FILE_SUFFIX + suffix)


def time_index_file(directory: Path, base_offset: int, suffix: str = "") -> Path:
    return directory / (filename_prefix_from_offset(base_offset) + TIME_INDEX_FILE_SUFFIX + suffix)


def transaction_index_file(directory: Path, base_offset: int, suffix: str = "") -> Path:
    return directory / (filename_prefix_from_offset(base_offset) + TXN_INDEX_FILE_SUFFIX + suffix)


def producer_snapshot_file(directory: Path, offset: int) -> Path:
    return directory / (filename_prefix_from_offset(offset) + PRODUCER_SNAPSHOT_FILE_SUFFIX)


def quarantine_file(directory: Path, base_offset: int, position: int, copy: int = 0) -> Path:
    """Where the bytes recovery removed at ``position`` of segment ``base_offset``'s ``.log`` are kept
    (``copy`` > 0 when an earlier, different quarantine of the same place exists)."""
    tail = f".{copy}" if copy else ""
    return log_file(directory, base_offset, f".{position}{tail}{QUARANTINE_FILE_SUFFIX}")


def is_quarantine_file(path: Path) -> bool:
    return path.name.endswith(QUARANTINE_FILE_SUFFIX)


def parse_quarantine_file_name(name: str) -> tuple[int, int]:
    """``(segment base offset, position in its .log)`` of a quarantine file name."""
    parts = name.split(".")
    if len(parts) not in (4, 5) or parts[1] != LOG_FILE_SUFFIX[1:] or not name.endswith(QUARANTINE_FILE_SUFFIX):
        raise ValueError(f"file name {name!r} is not a quarantine file name")
    try:
        return int(parts[0]), int(parts[2])
    except ValueError:
        raise ValueError(f"file name {name!r} is not a quarantine file name") from None


def is_log_file(path: Path) -> bool:
    return path.name.endswith(LOG_FILE_SUFFIX)


def is_stray_deleted_file(name: str) -> bool:
    """Whether the partition-directory file ``name`` is one the loader removes at once as a leftover
    of an earlier run's asynchronous deletion (spec 6.2 step 1): ``.deleted``, except KRaft's
    ``.checkpoint.deleted`` snapshots."""
    return name.endswith(DELETED_FILE_SUFFIX) and not name.endswith(_KRAFT_DELETED_SUFFIX)


def index_temp_file(path: Path) -> Path:
    """Where a new ``.index``/``.timeindex`` file is written before it is renamed over ``path``."""
    return path.with_name(path.name + INDEX_TEMP_SUFFIX)


_INDEX_TEMP = re.compile(r"^[0-9]+\.(index|timeindex)(\.(cleaned|swap|deleted))?" + re.escape(INDEX_TEMP_SUFFIX) + "$")


def is_index_temp_file(name: str) -> bool:
    """Whether the partition-directory file ``name`` is a new index file never renamed into place
    (:func:`index_temp_file`): a process died while replacing that index. Never an index itself."""
    return _INDEX_TEMP.match(name) is not None


def is_index_file(path: Path) -> bool:
    return path.name.endswith((INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX, TXN_INDEX_FILE_SUFFIX))


def validate_topic(topic: str) -> str:
    """Return ``topic`` if it is a legal Kafka topic name, else raise :class:`InvalidTopicError`.

    Kafka's rules (``org.apache.kafka.common.internals.Topic.validate``): non-empty, at most 249
    characters, only ASCII letters, digits, ``.``, ``_`` and ``-``, and not ``.`` or ``..``. They
    also make the name safe as a directory name: no separators, no traversal.
    """
    if not isinstance(topic, str):
        raise InvalidTopicError(f"topic name must be a string, got {type(topic).__name__}")
    if not topic:
        raise InvalidTopicError("topic name is empty")
    if topic in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {topic!r}")
    if len(topic) > MAX_TOPIC_LENGTH:
        raise InvalidTopicError(f"topic name is {len(topic)} characters long; the limit is {MAX_TOPIC_LENGTH}")
    if not _LEGAL_TOPIC.match(topic):
        raise InvalidTopicError(
            f"topic name {topic!r} is illegal: only ASCII letters, digits, '.', '_' and '-' are allowed"
        )
    return topic


INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
"""Kafka's internal topics (``Topic.INTERNAL_TOPICS``)."""
CLUSTER_METADATA_TOPIC = "__cluster_metadata"
"""KRaft's metadata log: a partition directory of a broker's log dir, but no topic a client lists."""


def is_listed_to_patterns(topic: str) -> bool:
    """Whether a pattern subscription can match ``topic``: Kafka never lists internal topics to one (the
    consumer's ``exclude.internal.topics``, the admin's ``listTopics``) nor the metadata log; only a
    subscription by name reads them."""
    return topic not in INTERNAL_TOPICS and topic != CLUSTER_METADATA_TOPIC


def partition_number(partition: object) -> int:
    """``partition`` as an ``int`` if it is one of Kafka's partition numbers (0..2**31 - 1, an int32).

    Raises:
        InvalidArgumentError: anything else (a float, a bool, a negative or larger number).
    """
    return integer_argument("partition", partition, low=0, high=INT32_MAX)


def partition_dir_name(topic: str, partition: int) -> str:
    """``<topic>-<partition>`` after validating both (:func:`validate_topic`, :func:`partition_number`)."""
    validate_topic(topic)
    return f"{topic}-{partition_number(partition)}"


def parse_topic_partition_name(name: str) -> TopicPartition:
    """Split a partition directory name ``<topic>-<partition>`` (partition after the last ``-``).

    Also accepts Kafka's ``<topic>-<partition>.<uuid>-delete|-future|-stray`` forms.
    """
    base = name
    for suffix in ("-delete", "-future", "-stray"):
        if name.endswith(suffix):
            m = re.match(r"^(\S+)-(\S+)\.(\S+)" + re.escape(suffix) + "$", name)
            if not m:
                raise ValueError(f"directory name {name!r} is not a topic-partition directory")
            base = f"{m.group(1)}-{m.group(2)}"
            break
    topic, sep, part = base.rpartition("-")
    if not sep or not topic or not part:
        raise ValueError(f"directory name {name!r} is not a topic-partition directory")
    try:
        partition = int(part)
    except ValueError:
        raise ValueError(f"directory name {name!r} has a non-integer partition {part!r}") from None
    if not 0 <= partition <= INT32_MAX:
        raise ValueError(f"directory name {name!r} has a partition outside 0..{INT32_MAX}")
    return topic, partition


def partition_dirs(log_dir: Path) -> list[tuple[TopicPartition, Path]]:
    """The live ``<topic>-<partition>`` directories of ``log_dir``, sorted: the one listing every layer uses.

    Anything else is ignored: files, names that are not partitions or not in canonical form, and
    Kafka's ``-delete``/``-future``/``-stray`` directories (not live logs). A missing ``log_dir``
    has no partitions.

    Raises:
        StorageError: the directory cannot be listed.
    """
    try:
        entries = [e.name for e in os.scandir(log_dir) if e.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return []
    except OSError as e:
        raise StorageError(f"cannot list log directory {log_dir}: {e.strerror}", path=log_dir) from e
    found = []
    for name in entries:
        try:
            topic, partition = parse_topic_partition_name(name)
            if partition_dir_name(topic, partition) == name:
                found.append(((topic, partition), Path(log_dir) / name))
        except (ValueError, SeglogError):
            continue
    return sorted(found)


def log_dirs_below(path: Path, limit: int = 3) -> list[Path]:
    """The directories directly below ``path`` that hold partition directories (:func:`partition_dirs`),
    sorted, at most ``limit``: what a user who named the parent of a log directory (``data`` for
    ``data/logs``) meant, for an error to name. Unlistable entries are skipped."""
    try:
        children = sorted(e.path for e in os.scandir(path) if e.is_dir(follow_symlinks=False))
    except OSError:
        return []
    found = []
    for child in children:
        try:
            if partition_dirs(Path(child)):
                found.append(Path(child))
        except StorageError:
            continue
        if len(found) == limit:
            break
    return found


def misnamed_partition_dirs(log_dir: Path) -> list[tuple[Path, StorageError]]:
    """Directories of ``log_dir`` that hold ``.log`` files yet are not live partition directories
    (:func:`partition_dirs`) nor Kafka's ``-delete``/``-future``/``-stray`` ones (a partition renamed
    by hand, a typo), each with the error that names it: their records belong to no partition, so a
    command that lists partitions names them instead of passing over them in silence. Sorted.

    Raises:
        StorageError: ``log_dir`` cannot be listed.
    """
    live = {path.name for _, path in partition_dirs(log_dir)}
    if not Path(log_dir).is_dir():
        return []
    out = []
    with storage_errors(log_dir, "list"):
        dirs = sorted(p for p in Path(log_dir).iterdir() if p.is_dir() and not p.is_symlink())
    for path in dirs:
        if path.name in live or path.name.endswith(("-delete", "-future", "-stray")):
            continue
        with storage_errors(path, "list"):
            segments = sum(1 for e in os.scandir(path) if e.name.endswith(LOG_FILE_SUFFIX) and e.is_file())
        if segments:
            error = StorageError(
                f"{path} holds {segments} segment files but is not a <topic>-<partition> directory (as "
                "events-0): no partition holds its records; rename it to the partition it belongs to",
                path=path,
            )
            out.append((path, error))
    return out
