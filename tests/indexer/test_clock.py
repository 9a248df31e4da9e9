"""Tests for indexer/clock.py: the system clock, and the mock clock with its scheduler (spec Appendix A)."""

from __future__ import annotations

import threading
import time

import pytest

from indexer.clock import Clock, MockClock, SystemClock


def test_system_clock_is_a_clock_and_reads_real_time() -> None:
    clock = SystemClock()
    assert isinstance(clock, Clock)
    assert abs(clock.milliseconds() - time.time() * 1000) < 1000
    first = clock.monotonic_ns()
    clock.sleep(2)
    assert clock.monotonic_ns() - first >= 2_000_000


def test_system_clock_runs_scheduled_task_on_a_thread() -> None:
    clock = SystemClock()
    ran = threading.Event()
    clock.schedule(1, ran.set, name="probe")
    assert ran.wait(5)


def test_system_clock_cancel_prevents_the_task() -> None:
    clock = SystemClock()
    ran = threading.Event()
    task = clock.schedule(200, ran.set)
    assert task.cancel() is True
    assert task.cancel() is False
    assert not ran.wait(0.4)


def test_system_clock_task_failure_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    clock = SystemClock()
    done = threading.Event()

    def boom() -> None:
        done.set()
        raise RuntimeError("boom")

    clock.schedule(0, boom, name="failing")
    assert done.wait(5)
    for _ in range(100):
        if any("failing" in r.getMessage() for r in caplog.records):
            break
        threading.Event().wait(0.01)
    assert any("scheduled task 'failing' failed" in r.getMessage() for r in caplog.records)


def test_mock_clock_moves_only_when_told() -> None:
    clock = MockClock(1000, start_monotonic_ns=5)
    assert isinstance(clock, Clock)
    assert clock.milliseconds() == 1000 and clock.monotonic_ns() == 5
    clock.advance(250)
    assert clock.milliseconds() == 1250 and clock.monotonic_ns() == 5 + 250_000_000
    clock.sleep(10)
    assert clock.milliseconds() == 1260
    with pytest.raises(ValueError):
        clock.advance(-1)


def test_mock_clock_zero_delay_task_runs_inside_schedule() -> None:
    clock = MockClock(0)
    ran: list[int] = []
    task = clock.schedule(0, lambda: ran.append(clock.milliseconds()))
    assert ran == [0]
    assert task.done and clock.pending == []


def test_mock_clock_runs_due_tasks_in_due_order_at_their_due_time() -> None:
    clock = MockClock(0)
    ran: list[tuple[str, int]] = []
    clock.schedule(30, lambda: ran.append(("c", clock.milliseconds())))
    clock.schedule(10, lambda: ran.append(("a", clock.milliseconds())))
    clock.schedule(10, lambda: ran.append(("b", clock.milliseconds())))
    clock.advance(9)
    assert ran == []
    clock.advance(1)
    assert ran == [("a", 10), ("b", 10)]
    clock.sleep(100)
    assert ran[-1] == ("c", 30)
    assert clock.milliseconds() == 110


def test_mock_clock_cancelled_task_never_runs_and_tasks_can_chain() -> None:
    clock = MockClock(0)
    ran: list[str] = []
    cancelled = clock.schedule(5, lambda: ran.append("x"))
    assert cancelled.cancel()
    clock.schedule(5, lambda: clock.schedule(5, lambda: ran.append("second")))
    clock.advance(10)
    assert ran == ["second"]
    assert [t.name for t in clock.pending] == []


def test_mock_clock_task_errors_propagate() -> None:
    clock = MockClock(0)

    def boom() -> None:
        raise RuntimeError("task failed")

    clock.schedule(1, boom)
    with pytest.raises(RuntimeError, match="task failed"):
        clock.advance(1)
