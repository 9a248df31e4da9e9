"""Threads shared by the engine's parallel loops (planning and encoding one large append).

The numba kernels release the GIL, so a second thread doubles their throughput on a second core; but
starting a thread costs ~0.3 ms, as much as planning 50,000 records. :func:`in_threads` therefore
borrows long-lived threads of one process-wide pool, and works on its own when none is free (or
after a ``fork``, which keeps the pool object but not its threads): helpers that have not started
by the time the caller ran out of tasks are cancelled, never waited for.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _helpers() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="seglog-worker")
        return _pool


def in_threads(tasks: int, run: Callable[[int], None], *, workers: int) -> None:
    """``run(k)`` for every ``k < tasks`` on up to ``workers`` threads, the caller's included.

    Each thread claims the next task until none is left (``run`` must release the GIL to gain
    anything). The first error of any thread stops the others after their current task and is
    raised here.
    """
    claims = itertools.count()  # next() is atomic under the GIL: each task goes to one thread
    failed = threading.Event()
    errors: list[BaseException] = []

    def work() -> None:
        try:
            while not failed.is_set() and (k := next(claims)) < tasks:
                run(k)
        except BaseException as e:  # raised in the caller's thread
            errors.append(e)
            failed.set()

    helpers = [_helpers().submit(work) for _ in range(min(workers, tasks) - 1)]
    work()
    for helper in helpers:
        if not helper.cancel():  # started: wait for its current task
            helper.result()
    if errors:
        raise errors[0]
