"""Dependencies point one way: ``seglog`` -> ``streaming``, ``maintenance`` -> ``indexer``.

Every module's imports are read with :mod:`ast`, static ones and the dynamic ones by a string
literal (``importlib.import_module("...")``, ``__import__("...")``), so a loop hidden behind a
string is found too. A dynamic import by a computed name cannot be checked, so the lower packages
may not have one. Then a fresh interpreter imports the whole engine and must not load Spark or
APScheduler.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# package -> the packages of this repository and the third-party packages it must never import
FORBIDDEN: dict[str, set[str]] = {
    "indexer": {"streaming", "maintenance", "seglog", "pyspark", "py4j", "apscheduler"},
    "streaming": {"maintenance", "seglog"},
    "maintenance": {"streaming", "seglog", "pyspark", "py4j"},
}
HEAVY = ("pyspark", "py4j", "apscheduler")
DYNAMIC_IMPORTERS = {"import_module", "__import__"}


def modules(package: str) -> Iterator[tuple[str, Path]]:
    """(dotted module name, path) of every module of ``package``."""
    for path in sorted((REPO / package).rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path


def imports(module: str, path: Path) -> Iterator[tuple[int, str | None]]:
    """(line, imported module) of every import in the file; None for a dynamic import by a computed name."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            yield node.lineno, target
            for alias in node.names:  # `from pkg import sub` may import a submodule
                yield node.lineno, f"{target}.{alias.name}"
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
            if name in DYNAMIC_IMPORTERS:
                arg = node.args[0] if node.args else None
                literal = isinstance(arg, ast.Constant) and isinstance(arg.value, str)
                yield node.lineno, arg.value if literal else None  # type: ignore[union-attr]


def violations(package: str) -> list[str]:
    """Each forbidden import of ``package``, as ``file:line: module``."""
    found = []
    for module, path in modules(package):
        for line, target in imports(module, path):
            where = f"{path.relative_to(REPO)}:{line}"
            if target is None:
                found.append(f"{where}: dynamic import by a computed name")
            elif target.split(".")[0] in FORBIDDEN[package]:
                found.append(f"{where}: {target}")
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_point_one_way(package: str) -> None:
    assert violations(package) == []


def test_the_checker_sees_every_kind_of_import(tmp_path: Path) -> None:
    """The parser finds static, relative and string imports (so the test above can fail)."""
    source = tmp_path / "mod.py"
    source.write_text(
        "import maintenance.jobs\nfrom streaming import sink\nfrom . import sibling\nfrom ..up import x\n"
        "import importlib\nimportlib.import_module('maintenance.scheduler')\n__import__('seglog.cli')\n"
        "from importlib import import_module\nimport_module(NAME)\n"
    )
    found = {target for _, target in imports("indexer.records.mod", source)}
    assert {
        "maintenance.jobs",
        "streaming",
        "streaming.sink",
        "indexer.records.sibling",
        "indexer.up.x",
        "maintenance.scheduler",
        "seglog.cli",
        None,
    } <= found


def test_importing_the_engine_loads_no_spark_or_scheduler() -> None:
    """``import indexer`` and every one of its modules, in a fresh interpreter: no pyspark, py4j, apscheduler."""
    names = [module for module, _ in modules("indexer")]
    code = (
        "import importlib, sys\n"
        f"for name in {names!r}: importlib.import_module(name)\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert result.stdout.strip() == "[]"
