"""How long the slow fuzz, soak and crash tests may run: ``SEGLOG_TEST_BUDGET``.

``dev`` (default) runs them at their normal size, ``ci`` (what `.ci/run` sets) bounds them so the
whole suite fits CI's time, ``soak`` runs them long, for a night of fuzzing.
"""

from __future__ import annotations

import os

BUDGET = os.environ.get("SEGLOG_TEST_BUDGET", "dev")


def scaled(dev: int, *, ci: int, soak: int) -> int:
    """The size (examples, trials, steps) a slow test should use under the current budget."""
    return {"ci": ci, "soak": soak}.get(BUDGET, dev)
