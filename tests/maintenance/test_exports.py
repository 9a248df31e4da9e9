"""The public surface of the maintenance package is one sorted, tested list."""

from __future__ import annotations

import maintenance


def test_all_lists_exactly_the_public_names() -> None:
    public = {name for name in vars(maintenance) if not name.startswith("_")}
    modules = {"access", "committed", "daemon", "jobs", "metadata", "recovery", "report", "scheduler", "settings"}
    assert set(maintenance.__all__) == public - modules
    assert maintenance.__all__ == sorted(maintenance.__all__, key=lambda n: (not n.isupper(), n[0].islower(), n))
