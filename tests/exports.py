"""The check behind each package's ``test_exports``: ``__all__`` is sorted and lists exactly its public names."""

from __future__ import annotations

from types import ModuleType


def _order(name: str) -> tuple[bool, bool, str]:
    """Constants, then classes, then functions, each alphabetical (ruff's RUF022 order)."""
    return (not name.isupper(), name[0].islower(), name)


def assert_exports(package: ModuleType) -> None:
    """Fail unless ``package.__all__`` is sorted and equals its public non-module attributes.

    Submodules are left out: importing ``package.sub`` anywhere binds ``sub`` on the package.
    """
    exported = list(package.__all__)
    public = {
        name for name, value in vars(package).items() if not name.startswith("_") and not isinstance(value, ModuleType)
    }
    assert set(exported) == public
    assert len(exported) == len(public)  # no duplicates
    assert exported == sorted(exported, key=_order)
