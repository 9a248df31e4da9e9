"""How long the slow fuzz, soak and crash tests may run: ``SEGLOG_TEST_BUDGET``.

``dev`` (default) runs them at their normal size, ``ci`` (what `.ci/run` sets) bounds them so the
whole suite fits CI's time, ``soak`` runs them long, for a night of fuzzing.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

BUDGET = os.environ.get("SEGLOG_TEST_BUDGET", "dev")


def scaled(dev: int, *, ci: int, soak: int) -> int:
    """The size (examples, trials, steps) a slow test should use under the current budget."""
    return {"ci": ci, "soak": soak}.get(BUDGET, dev)


def fuzz_settings(dev: int, *, ci: int, soak: int) -> settings:
    """Hypothesis settings of a slow property test on fixtures (module- or function-scoped): :func:`scaled`
    examples, no deadline, and no health check failing it for its fixtures or slow data."""
    return settings(
        max_examples=scaled(dev, ci=ci, soak=soak),
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
