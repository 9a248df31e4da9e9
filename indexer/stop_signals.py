"""The signals that stop seglog's long-running commands cleanly: ``seglog maintain``, ``seglog run``
and ``seglog serve`` stop on each as a Kafka broker's JVM runs its shutdown hooks on each.

One rule for all three, here because every layer may import the engine: ``maintenance`` cannot
import ``seglog``, and ``seglog serve`` must not import ``maintenance`` (it would load APScheduler).
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType


def stop_signals() -> list[signal.Signals]:
    """SIGTERM, SIGINT and SIGHUP, but SIGHUP only if it is not ignored now: SIGHUP comes when the
    terminal or ssh session that started the command closes, and one ignored at the start (``nohup``)
    stays ignored, as the JVM leaves it. Ask it before installing handlers."""
    stop = [signal.SIGTERM, signal.SIGINT]
    if signal.getsignal(signal.SIGHUP) != signal.SIG_IGN:
        stop.append(signal.SIGHUP)
    return stop


@contextmanager
def handling_stop_signals(handler: Callable[[int, FrameType | None], None]) -> Iterator[None]:
    """``handler`` handles the :func:`stop_signals` while inside; the previous handlers are restored
    afterwards (for the commands that wait in threads; ``seglog serve``'s event loop installs its own
    for the same signals)."""
    previous = {sig: signal.signal(sig, handler) for sig in stop_signals()}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
