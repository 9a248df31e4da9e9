"""Each topic's partition count, fixed when the topic is created: ``<log dir>/seglog-topics.json``.

A Kafka broker keeps a topic's partition count in the cluster metadata, and every producer hashes
keys over that one count. seglog has no controller, so the log directory records it::

    {"version": 1, "topics": {"events": {"partitions": 4}}}

The file is replaced atomically (temp file, fsync, rename, fsync of the directory) and read and
changed under the log directory's ``.lock``, so writers in several processes agree on every
topic. A log directory written before the file existed (or a broker's, which has none) gets the
count inferred once from its partition directories (1 + the highest partition number) and
recorded. :class:`~indexer.log_manager.LogManager` is the API (``create_topic``,
``topic_partitions``, ``add_partitions``); this module only reads and writes the file.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from indexer.checkpoint import DEFAULT_LOCK_TIMEOUT_S, write_atomically
from indexer.errors import StorageError, storage_errors
from indexer.file_names import LOG_DIR_LOCK_FILE, TOPICS_FILE
from indexer.lock import FileLock

VERSION = 1


def read_topics(log_dir: Path) -> dict[str, int]:
    """The recorded partition count of every topic (empty when the file does not exist).

    Raises:
        StorageError: the file exists but cannot be read or parsed (never guessed around: a wrong
            count would re-hash keys).
    """
    path = log_dir / TOPICS_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise StorageError(f"cannot read {path}: {e.strerror}", path=path, errno=e.errno) from e
    try:
        doc = json.loads(text)
        if doc.get("version") != VERSION:
            raise ValueError(f"unknown version {doc.get('version')!r}")
        counts = {str(topic): int(entry["partitions"]) for topic, entry in doc["topics"].items()}
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise StorageError(f"malformed topics file {path}: {e}", path=path) from e
    return counts


def write_topics(log_dir: Path, counts: dict[str, int]) -> None:
    """Replace the file with ``counts``, atomically; the caller holds :func:`locked`."""
    path = log_dir / TOPICS_FILE
    doc = {"version": VERSION, "topics": {t: {"partitions": n} for t, n in sorted(counts.items())}}
    with storage_errors(path, "write the topics file"):
        write_atomically(path, (json.dumps(doc, indent=2) + "\n").encode("utf-8"))


@contextmanager
def locked(log_dir: Path) -> Iterator[None]:
    """Hold the log directory's ``.lock`` (as checkpoint writers do) around a read-change-write."""
    lock = FileLock(log_dir / LOG_DIR_LOCK_FILE, what=f"log directory {log_dir}")
    lock.acquire(timeout=DEFAULT_LOCK_TIMEOUT_S)
    try:
        yield
    finally:
        lock.release()
