"""The engine's Python examples in README.md and docs/ run as written, and print what their comments say.

Only the self-contained examples (no Spark session, no names defined elsewhere) are run; each in a
fresh directory, its paths as the page gives them (the README's ``/tmp/seglog-demo`` is moved into
the test's directory).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def python_example(page: str, marker: str) -> str:
    """The ```python block of ``page`` (relative to the repository) that contains ``marker``."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / page).read_text(encoding="utf-8"), re.S)
    found = [block for block in blocks if marker in block]
    assert len(found) == 1, f"{page}: {len(found)} python examples contain {marker!r}"
    return found[0]


def promised_output(code: str) -> list[str]:
    """What the example's ``print(...)  # <output>`` lines say they print, in order."""
    return [
        line.split("#", 1)[1].strip() for line in code.splitlines() if line.startswith("    print(") and "#" in line
    ]


def run_example(code: str, name: str) -> None:
    exec(compile(code, name, "exec"), {"__name__": "__doc_example__"})


def test_readme_engine_example_prints_what_it_says(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = python_example("README.md", "LogManager(")
    assert '"/tmp/seglog-demo"' in code
    demo = tmp_path / "seglog-demo"
    run_example(code.replace('"/tmp/seglog-demo"', repr(str(demo))), "README.md")
    expected = promised_output(code)
    assert expected == ["0 2", "b'bob'", "2"]
    assert capsys.readouterr().out.splitlines() == expected
    assert (demo / "orders-0" / "00000000000000000000.log").is_file()
    assert (demo / ".kafka_cleanshutdown").is_file()  # "leaving the block ... writes ... the clean-shutdown marker"


@pytest.mark.parametrize(("page", "marker"), [("docs/log.md", "Log.open("), ("docs/recovery.md", "LogManager(")])
def test_docs_engine_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, page: str, marker: str) -> None:
    monkeypatch.chdir(tmp_path)  # the examples write data/logs/ relative to the working directory
    run_example(python_example(page, marker), page)
    assert (tmp_path / "data" / "logs" / "events-0" / "00000000000000000000.log").is_file()
