"""Tests of indexer/_workers.py."""

from __future__ import annotations

import threading

import pytest

from indexer import _workers


@pytest.mark.parametrize("workers", [1, 2, 5])
def test_every_task_runs_once(workers: int) -> None:
    done: list[int] = []
    _workers.in_threads(500, done.append, workers=workers)
    assert sorted(done) == list(range(500))


def test_the_first_error_is_raised_and_the_others_stop_claiming() -> None:
    done: list[int] = []

    def run(k: int) -> None:
        if k == 3:
            raise OSError(28, "No space left on device")
        done.append(k)

    with pytest.raises(OSError, match="No space"):
        _workers.in_threads(1000, run, workers=2)
    assert len(done) < 999  # the other thread stopped after its current task


def test_a_busy_pool_does_not_hold_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    """With every pooled thread busy elsewhere, the caller does all the tasks itself and returns."""
    release = threading.Event()
    pool = _workers._helpers()
    blockers = [pool.submit(release.wait) for _ in range(pool._max_workers)]
    try:
        done: list[int] = []
        _workers.in_threads(50, done.append, workers=2)
        assert sorted(done) == list(range(50))
    finally:
        release.set()
        for blocker in blockers:
            blocker.result()
