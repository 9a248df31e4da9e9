"""Errors raised by seglog on purpose.

Every error seglog raises about data, files or offsets derives from :class:`SeglogError`, so
callers can write ``except SeglogError``. Names follow Kafka's exception classes with an
``Error`` suffix. An argument of a public engine call that is not an integer of Kafka's range (an
offset, a count, a partition, a time) is an :class:`InvalidArgumentError` naming it (also a
``TypeError`` and a ``ValueError``); other caller misuse (a closed log, an unknown option) stays
``ValueError`` / ``TypeError``, as Kafka uses ``IllegalArgumentException``.

Context travels as attributes (``path``, ``offset``, ``position``) and is also named in the
message, so a log line alone says which file and where::

    SeglogError
    ├── StorageError                      an OSError, with the path it happened on
    │   ├── LogLockedError                another writer holds the partition
    │   └── ReadOnlyLogDirectoryError     a log directory this process cannot write in
    ├── CorruptRecordError                bad CRC, impossible size, truncated batch
    │   ├── InvalidRecordError            a batch whose records do not parse
    │   └── OffsetsInNoSegmentError       offsets between two segments that no segment file holds
    ├── CorruptIndexError                 an index that fails its sanity check
    ├── IndexFullError                    append to a full index (roll first)
    ├── InvalidOffsetError                an index append that would go backwards
    ├── IndexOffsetOverflowError          offset not expressible relative to the base
    ├── LogSegmentOffsetOverflowError     batch offsets outside a segment's range
    ├── OffsetOutOfRangeError             read/truncate outside [log start, log end]
    ├── RecordTooLargeError               one record larger than max.message.bytes
    ├── RecordBatchTooLargeError          one append larger than segment.bytes
    ├── InvalidTimestampError             a negative record timestamp
    ├── InvalidTopicError                 topic name breaks Kafka's rules
    ├── UnknownTopicOrPartitionError      a topic or partition that does not exist
    ├── InvalidPartitionsError            a partition count other than the topic's
    ├── TopicExistsError                  creating a topic that exists
    ├── LogDirectoryNotFoundError         a log directory that does not exist
    ├── NotALogDirectoryError             a partition (or other) directory given as a log directory
    ├── SchemaError                       input columns of the wrong name or type
    ├── InputFileError                    an input file (a settings file, records) that cannot be read
    ├── InvalidArgumentError              an offset, count, partition or time that is no integer in range
    └── ConfigError                       unknown config key or invalid value
"""

from __future__ import annotations

import errno as errnos
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class SeglogError(Exception):
    """Root of every error seglog raises on purpose."""


class StorageError(SeglogError):
    """An I/O failure on a log file or directory (Kafka's ``KafkaStorageException``).

    ``path`` names the file or directory; ``errno`` is the underlying ``OSError.errno`` (or None).
    """

    def __init__(self, message: str, *, path: str | os.PathLike[str] | None = None, errno: int | None = None):
        super().__init__(message)
        self.path = None if path is None else os.fspath(path)
        self.errno = errno


def raise_if_interrupted(error: BaseException) -> None:
    """Re-raise the ``KeyboardInterrupt`` (Ctrl-C) that ``error`` stands for: a SIGINT that arrives
    inside a compiled (numba) kernel comes out as ``SystemError: ... returned a result with an
    exception set`` caused by it, which a handler of ``Exception`` would take for a failure.

    Raises:
        KeyboardInterrupt: ``error`` was caused by one.
    """
    cause = error.__cause__ or error.__context__
    if isinstance(error, SystemError) and isinstance(cause, KeyboardInterrupt):
        raise cause


@contextmanager
def storage_errors(
    path: str | os.PathLike[str], action: str, *, target: str | os.PathLike[str] | None = None
) -> Iterator[None]:
    """The one place ``OSError`` becomes :class:`StorageError` (Kafka's ``maybeHandleIOException``).

    ``with storage_errors(path, "append to"):`` turns an ``OSError`` raised inside into
    ``StorageError("Failed to append to /abs/path: No space left on device", path=, errno=)``.
    A ``target`` (a rename's destination) is named after the path: ``"Failed to rename /a to /b: ..."``.
    """
    try:
        yield
    except OSError as e:
        reason = e.strerror or str(e)
        to = "" if target is None else f" to {os.path.abspath(target)}"
        raise StorageError(f"Failed to {action} {os.path.abspath(path)}{to}: {reason}", path=path, errno=e.errno) from e


class LogLockedError(StorageError):
    """Another writer (this process or another one) holds the partition's lock."""


class ReadOnlyLogDirectoryError(StorageError):
    """A log directory this process cannot write in (a read-only file system, or no permission), met by
    a command that would change it: one error for the directory instead of one per partition."""


class CorruptRecordError(SeglogError):
    """A record batch failed validation: CRC mismatch, impossible size or truncated contents."""

    def __init__(
        self,
        message: str,
        *,
        path: str | os.PathLike[str] | None = None,
        position: int | None = None,
        offset: int | None = None,
    ):
        super().__init__(message)
        self.path = None if path is None else os.fspath(path)
        self.position = position
        self.offset = offset


class InvalidRecordError(CorruptRecordError):
    """A batch whose CRC may be fine but whose records do not parse (Kafka ``InvalidRecordException``)."""


class OffsetsInNoSegmentError(CorruptRecordError):
    """Offsets ``offset``..``end - 1`` lie between two segments of a log and no segment file holds them
    (a segment's files deleted by hand or left out of a copy), and no recovery or accepted loss
    accounts for them: a read stops there rather than go on as if the offsets were contiguous."""

    def __init__(self, message: str, *, path: str | os.PathLike[str] | None = None, offset: int, end: int) -> None:
        super().__init__(message, path=path, offset=offset)
        self.end = end


class CorruptIndexError(SeglogError):
    """An index file failed its sanity check."""

    def __init__(self, message: str, *, path: str | os.PathLike[str] | None = None):
        super().__init__(message)
        self.path = None if path is None else os.fspath(path)


class IndexFullError(SeglogError):
    """An append to an index that has no free slot (the segment must roll first)."""

    def __init__(self, message: str, *, path: str | os.PathLike[str] | None = None):
        super().__init__(message)
        self.path = None if path is None else os.fspath(path)


class InvalidOffsetError(SeglogError):
    """An index append whose offset does not move forward."""

    def __init__(self, message: str, *, path: str | os.PathLike[str] | None = None, offset: int | None = None):
        super().__init__(message)
        self.path = None if path is None else os.fspath(path)
        self.offset = offset


class IndexOffsetOverflowError(SeglogError):
    """An offset that cannot be stored relative to the index's base offset (0 .. 2**31-1)."""

    def __init__(self, message: str, *, path: str | os.PathLike[str] | None = None, offset: int | None = None):
        super().__init__(message)
        self.path = None if path is None else os.fspath(path)
        self.offset = offset


class LogSegmentOffsetOverflowError(SeglogError):
    """A batch whose offsets do not fit the segment's relative range; carries ``segment`` and ``offset``."""

    def __init__(self, message: str, *, segment: object = None, offset: int | None = None):
        super().__init__(message)
        self.segment = segment
        self.offset = offset


class OffsetOutOfRangeError(SeglogError):
    """A requested offset outside what the log holds."""

    def __init__(self, message: str, *, offset: int | None = None, path: str | os.PathLike[str] | None = None):
        super().__init__(message)
        self.offset = offset
        self.path = None if path is None else os.fspath(path)


class RecordTooLargeError(SeglogError):
    """A single record whose batch would exceed ``max.message.bytes``."""

    def __init__(self, message: str, *, size: int | None = None, limit: int | None = None, index: int | None = None):
        super().__init__(message)
        self.size = size
        self.limit = limit
        self.index = index


class RecordBatchTooLargeError(SeglogError):
    """One append larger than ``segment.bytes``."""


class InvalidTimestampError(SeglogError, ValueError):
    """A record timestamp that cannot be taken: a negative one, which Kafka's producer refuses
    (``ProducerRecord``), or one a reader cannot show (past Spark's timestamp column); ``index`` is its
    row in the input, ``timestamp`` its value."""

    def __init__(self, message: str, *, index: int | None = None, timestamp: int | None = None):
        super().__init__(message)
        self.index = index
        self.timestamp = timestamp


class InvalidTopicError(SeglogError, ValueError):
    """A topic name that breaks Kafka's rules (and would be unsafe as a directory name)."""


class UnknownTopicOrPartitionError(SeglogError, ValueError):
    """A partition number outside the topic's partitions (Kafka's ``UnknownTopicOrPartitionException``)."""


class GroupIdNotFoundError(SeglogError, ValueError):
    """A consumer group, or a partition of one, without committed offsets where some were named
    (Kafka's ``GroupIdNotFoundException``)."""


class GroupNotEmptyError(SeglogError, ValueError):
    """A group's offsets cannot all go while it has members on a running server (Kafka's
    ``GroupNotEmptyException``, NON_EMPTY_GROUP)."""


class GroupSubscribedToTopicError(SeglogError, ValueError):
    """A group's offsets of a topic cannot go while members on a running server subscribe to it: they
    would commit them again (Kafka's ``GroupSubscribedToTopicException``)."""


class SchemaError(SeglogError, TypeError):
    """Input columns missing or of the wrong type."""


class InvalidArgumentError(SeglogError, TypeError, ValueError):
    """An argument of a public engine call that is not an integer in its range (a float or bool offset,
    a time past Kafka's int64); ``argument`` is its name, ``value`` what was given. Raised by
    :func:`indexer.limits.integer_argument`, the one check every entry point calls."""

    def __init__(self, message: str, *, argument: str, value: object):
        super().__init__(message)
        self.argument = argument
        self.value = value


class ConfigError(SeglogError, ValueError):
    """An unknown configuration key or an invalid value."""


class FencedError(StorageError):
    """A writer found that a newer writer of the same partition took over (its fencing token is gone):
    it stops before touching the partition again (a stale Spark task attempt, a zombie executor)."""


class InvalidPartitionsError(SeglogError, ValueError):
    """A partition count other than the topic's recorded one, or one that would shrink it (Kafka's
    ``InvalidPartitionsException``)."""


class TopicExistsError(SeglogError, ValueError):
    """Creating a topic that already exists (Kafka's ``TopicExistsException``)."""


class LogDirectoryNotFoundError(SeglogError):
    """A log directory that does not exist, where one must (a reader, describe, recover, maintain)."""

    def __init__(self, message: str, *, path: str | os.PathLike[str] | None = None):
        super().__init__(message)
        self.path = None if path is None else os.fspath(path)


class InputFileError(SeglogError, ValueError):
    """An input file named by the user (``--conf``, ``$SEGLOG_CONF``, the records of ``seglog append``,
    the files of ``seglog dump``) that does not exist, is a directory or cannot be read
    (:func:`check_input_file`). ``path`` is the file as given."""

    def __init__(self, message: str, *, path: str | os.PathLike[str]):
        super().__init__(message)
        self.path = os.fspath(path)


def check_input_file(path: str | os.PathLike[str], what: str, option: str) -> Path:
    """``path`` as a :class:`~pathlib.Path`, checked to be a file this process can open for reading: the
    one check of every input file, before anything is read or written, so that each says what is wrong
    in one line naming what the file is for and the option that named it, e.g. ``configuration file
    x.toml (--conf) does not exist`` (not Python's ``[Errno 2] No such file or directory: 'x.toml'``).

    The file is opened (without blocking: a FIFO with no writer yet passes) and closed again.

    Raises:
        InputFileError: it does not exist (nor does a directory on its path), it is a directory, or it
            cannot be opened (no permission, a symbolic link loop, ...).
    """
    file = Path(path)
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        if e.errno in (errnos.ENOENT, errnos.ENOTDIR):
            problem = "does not exist"
        elif e.errno in (errnos.EACCES, errnos.EPERM):
            problem = "cannot be read: permission denied"
        elif e.errno == errnos.EISDIR:
            problem = "is a directory, not a file"
        else:
            problem = f"cannot be read: {(e.strerror or str(e)).lower()}"
        raise InputFileError(f"{what} {file} ({option}) {problem}", path=path) from None
    try:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise InputFileError(f"{what} {file} ({option}) is a directory, not a file", path=path)
    finally:
        os.close(fd)
    return file


class NotALogDirectoryError(SeglogError, ValueError):
    """A directory given as a log directory that is a partition directory (or holds segment files)."""

    def __init__(self, message: str, *, path: str | os.PathLike[str] | None = None):
        super().__init__(message)
        self.path = None if path is None else os.fspath(path)
