"""Time for the engine: wall clock, monotonic clock, sleeping and delayed tasks (Kafka's ``Time`` and
``MockTime`` + ``MockScheduler``).

The log reads the wall clock for roll timing (``segment.ms``), retention (``retention.ms``) and the
``.deleted`` delay (``file.delete.delay.ms``), and schedules the physical deletion of ``.deleted``
files. Everything that depends on time takes a :class:`Clock`, so tests drive time with a
:class:`MockClock` instead of sleeping.

:class:`MockClock` follows Kafka's ``MockTime``/``MockScheduler`` pair: time moves only when told
(``advance`` or ``sleep``), tasks whose due time has been reached run inside that call, in due order,
and a task scheduled with delay 0 runs immediately, inside ``schedule`` (spec Appendix A).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

logger = logging.getLogger(__name__)


@runtime_checkable
class ScheduledTask(Protocol):
    """A handle on a task given to :meth:`Clock.schedule`."""

    def cancel(self) -> bool:
        """Stop the task from running; False if it already ran (or was cancelled)."""
        ...


@runtime_checkable
class Clock(Protocol):
    """Wall time, monotonic time, sleeping and one-shot delayed tasks."""

    def milliseconds(self) -> int:
        """Wall-clock time in ms since the epoch (Kafka ``Time.milliseconds``)."""
        ...

    def monotonic_ns(self) -> int:
        """A monotonic time in ns, for measuring durations only."""
        ...

    def sleep(self, ms: int) -> None:
        """Wait ``ms`` milliseconds (a mock clock advances instead)."""
        ...

    def schedule(self, delay_ms: int, fn: Callable[[], object], *, name: str = "") -> ScheduledTask:
        """Run ``fn`` once, ``delay_ms`` from now on the monotonic clock (Kafka ``Scheduler.scheduleOnce``)."""
        ...


class _TimerTask:
    """A :class:`ScheduledTask` backed by a daemon :class:`threading.Timer`."""

    __slots__ = ("_timer", "_lock", "_state", "name")

    def __init__(self, delay_ms: int, fn: Callable[[], object], name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._state = "pending"  # pending -> running | cancelled
        self._timer = threading.Timer(delay_ms / 1000.0, self._run, args=(fn,))
        self._timer.daemon = True
        self._timer.name = f"seglog-{name or 'task'}"

    def _start(self) -> None:
        self._timer.start()

    def _run(self, fn: Callable[[], object]) -> None:
        with self._lock:
            if self._state != "pending":
                return
            self._state = "running"
        try:
            fn()
        except Exception:
            # A failing background task must not vanish silently (Kafka's scheduler logs and continues).
            logger.exception("scheduled task %r failed", self.name)

    def cancel(self) -> bool:
        with self._lock:
            if self._state != "pending":
                return False
            self._state = "cancelled"
        self._timer.cancel()
        return True


class SystemClock:
    """The real clock. Delayed tasks run on daemon timer threads.

    A task still pending when the process exits never runs: for ``.deleted`` files that is harmless,
    because the loader deletes leftover ``.deleted`` files on the next open (spec 6.2 step 1).
    Thread-safe.
    """

    def milliseconds(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ns(self) -> int:
        return time.monotonic_ns()

    def sleep(self, ms: int) -> None:
        if ms > 0:
            time.sleep(ms / 1000.0)

    def schedule(self, delay_ms: int, fn: Callable[[], object], *, name: str = "") -> ScheduledTask:
        if delay_ms < 0:
            raise ValueError(f"delay_ms must be >= 0, got {delay_ms}")
        task = _TimerTask(delay_ms, fn, name)
        task._start()
        return task


@dataclass(order=True)
class MockTask:
    """A task held by a :class:`MockClock`, ordered by due time (on its monotonic clock, in ns) then
    scheduling order."""

    due_ns: int
    seq: int
    name: str = field(compare=False)
    fn: Callable[[], object] = field(compare=False, repr=False)
    cancelled: bool = field(default=False, compare=False)
    done: bool = field(default=False, compare=False)

    def cancel(self) -> bool:
        if self.done or self.cancelled:
            return False
        self.cancelled = True
        return True


class MockClock:
    """A clock that moves only when told, with a tiny scheduler (Kafka ``MockTime`` + ``MockScheduler``).

    ``advance(ms)`` and ``sleep(ms)`` move both clocks forward and run every task that became due, in
    due order, with the clock set to each task's due time while it runs (so a task that reads the time
    sees its own deadline). A task scheduled with delay 0 runs at once, inside ``schedule``. Tasks may
    schedule further tasks. Delays count on the monotonic clock, as :class:`SystemClock`'s timers'
    (and Kafka's scheduler's) do: ``set_wall_ms`` steps the wall clock alone (an operator or NTP
    setting the time), and no task runs earlier or later for it. Exceptions from tasks propagate to
    the caller of ``advance`` (tests want to see them). Thread-safe: one lock guards time and the
    queue; tasks run outside it.
    """

    def __init__(self, start_ms: int = 1_700_000_000_000, *, start_monotonic_ns: int = 0) -> None:
        self._wall_ms = start_ms
        self._mono_ns = start_monotonic_ns
        self._lock = threading.RLock()
        self._queue: list[MockTask] = []
        self._seq = itertools.count()

    def milliseconds(self) -> int:
        with self._lock:
            return self._wall_ms

    def monotonic_ns(self) -> int:
        with self._lock:
            return self._mono_ns

    def sleep(self, ms: int) -> None:
        """Same as :meth:`advance`: sleeping on a mock clock moves it."""
        self.advance(ms)

    def advance(self, ms: int) -> None:
        """Move time forward by ``ms`` and run the tasks that became due."""
        if ms < 0:
            raise ValueError(f"cannot move a clock backwards (advance by {ms} ms)")
        with self._lock:
            target_ms = self._wall_ms + ms
            target_ns = self._mono_ns + ms * 1_000_000
        self._run_due(target_ns)
        with self._lock:
            self._wall_ms = max(self._wall_ms, target_ms)
            self._mono_ns = max(self._mono_ns, target_ns)

    def set_wall_ms(self, ms: int) -> None:
        """Set the wall clock to ``ms``, backward or forward, leaving the monotonic clock and the tasks'
        due times as they are (a step of the system time)."""
        with self._lock:
            self._wall_ms = ms

    def schedule(self, delay_ms: int, fn: Callable[[], object], *, name: str = "") -> MockTask:
        """Queue ``fn`` to run ``delay_ms`` from now; a zero delay runs it before returning."""
        if delay_ms < 0:
            raise ValueError(f"delay_ms must be >= 0, got {delay_ms}")
        with self._lock:
            task = MockTask(self._mono_ns + delay_ms * 1_000_000, next(self._seq), name, fn)
            heapq.heappush(self._queue, task)
        if delay_ms == 0:
            self._run_due(self.monotonic_ns())
        return task

    @property
    def pending(self) -> list[MockTask]:
        """Tasks not yet run nor cancelled, in due order."""
        with self._lock:
            return sorted(t for t in self._queue if not t.cancelled)

    def _run_due(self, until_ns: int) -> None:
        while True:
            with self._lock:
                while self._queue and self._queue[0].cancelled:
                    heapq.heappop(self._queue)
                if not self._queue or self._queue[0].due_ns > until_ns:
                    return
                task = heapq.heappop(self._queue)
                if task.due_ns > self._mono_ns:
                    advanced = task.due_ns - self._mono_ns
                    self._mono_ns = task.due_ns
                    self._wall_ms += advanced // 1_000_000
                task.done = True
            task.fn()
