"""What a maintenance job did: per-job counters and per-partition errors, for logs, ``--once`` and tests."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from indexer.errors import SeglogError

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PartitionError:
    """One partition a job could not handle; ``path`` is the file named by the error, if any."""

    partition: str
    message: str
    path: str | None = None

    def __str__(self) -> str:
        where = f" ({self.path})" if self.path else ""
        return f"{self.partition}{where}: {self.message}"


@dataclass
class JobReport:
    """The outcome of one run of one job over a log directory.

    ``checked`` counts the partitions the job looked at (every partition of the directory it may
    see), ``partitions`` those it worked on (opened, when the daemon borrows partitions: only the
    ones whose files show something to do), ``skipped`` names those another process owns,
    ``actions`` counts what the job did (segments rolled or deleted, logs flushed, checkpoints or
    indexes written, files removed); ``details`` holds job-specific counters; ``findings`` one
    line per thing found, with its reason (a deleted segment and the limit it breached, a damaged
    index and what is wrong with it).
    """

    job: str
    checked: int = 0
    partitions: int = 0
    actions: int = 0
    skipped: list[str] = field(default_factory=list)
    errors: list[PartitionError] = field(default_factory=list)
    details: dict[str, int] = field(default_factory=dict)
    findings: list[str] = field(default_factory=list)
    duration_ms: float = 0.0

    def count(self, key: str, n: int = 1) -> None:
        """Add ``n`` to the job-specific counter ``key`` and to :attr:`actions`."""
        self.details[key] = self.details.get(key, 0) + n
        self.actions += n

    def note(self, partition: str, finding: str) -> None:
        """Record (and log) one finding about ``partition``, e.g. why a segment was deleted."""
        line = f"{partition}: {finding}"
        self.findings.append(line)
        logger.info("maintenance job %s: %s", self.job, line)

    @contextmanager
    def partition(self, name: str, directory: Path | None = None) -> Iterator[None]:
        """Handle one partition: count it; log and record (never raise) any exception from the body.

        This is what keeps one broken partition from stopping a job or the daemon: the error is
        logged with the partition and the file the exception names (``path`` attribute of seglog
        errors, ``filename`` of an ``OSError``). ``directory``: the partition's, see :meth:`fail`.
        """
        self.partitions += 1
        try:
            yield
        except Exception as e:
            self.fail(name, e, directory=directory)

    def fail(self, name: str, error: Exception, *, log: bool = True, directory: Path | None = None) -> None:
        """Record and log ``error`` for partition ``name`` (with the file it names, if any): one line
        for the errors seglog expects (its own, and ``OSError`` such as a read-only file system), a
        traceback for anything else (a bug). ``log=False``: recorded only (said before, by an earlier pass).

        An expected error while the partition's ``directory`` no longer exists is no error: the
        partition was deleted during the pass (``rm -rf`` of a topic or of the whole log directory,
        which the next pass reports once); it is logged as such and not recorded."""
        if directory is not None and isinstance(error, (SeglogError, OSError)) and not directory.exists():
            logger.info(
                "maintenance job %s: %s: its directory %s was removed during the pass", self.job, name, directory
            )
            return
        path = getattr(error, "path", None) or getattr(error, "filename", None)
        failure = PartitionError(name, f"{type(error).__name__}: {error}", None if path is None else str(path))
        self.errors.append(failure)
        if not log:
            return
        expected = isinstance(error, (SeglogError, OSError))
        logger.error("maintenance job %s failed on %s", self.job, failure, exc_info=None if expected else error)

    @contextmanager
    def timed(self) -> Iterator[JobReport]:
        """Measure the wall time of the body into :attr:`duration_ms`."""
        start = time.perf_counter()
        try:
            yield self
        finally:
            self.duration_ms = (time.perf_counter() - start) * 1000.0

    def summary(self) -> str:
        """One line: ``retention: 12 partitions checked, 2 worked on, 3 actions (segments_deleted=3),
        1 skipped, 0 errors, 4.2 ms``."""
        counters = ", ".join(f"{k}={v}" for k, v in sorted(self.details.items()))
        return (
            f"{self.job}: {self.checked} partitions checked, {self.partitions} worked on, {self.actions} actions"
            + (f" ({counters})" if counters else "")
            + f", {len(self.skipped)} skipped, {len(self.errors)} errors, {self.duration_ms:.1f} ms"
        )

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["errors"] = [asdict(e) for e in self.errors]
        return d
