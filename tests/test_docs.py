"""The engine's Python examples in README.md and docs/ run as written, and print what their comments say.

Only the self-contained examples (no Spark session, no names defined elsewhere) are run; each in a
fresh directory, its paths as the page gives them (the README's ``/tmp/seglog-demo`` is moved into
the test's directory).
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from seglog.cli import COMMANDS, build_parser, load_command_module, main
from seglog.commands import bench
from seglog.serve.group_offsets import CommittedOffset, GroupOffsets
from tests.cli import append_file

ROOT = Path(__file__).resolve().parent.parent
SEGLOG = [sys.executable, "-m", "seglog"]


def python_example(page: str, marker: str) -> str:
    """The ```python block of ``page`` (relative to the repository) that contains ``marker``."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / page).read_text(encoding="utf-8"), re.S)
    found = [block for block in blocks if marker in block]
    assert len(found) == 1, f"{page}: {len(found)} python examples contain {marker!r}"
    return found[0]


def promised_output(code: str) -> list[str]:
    """What the example's ``print(...)  # <output>`` lines say they print, in order."""
    return [
        line.split("#", 1)[1].strip()
        for line in code.splitlines()
        if line.lstrip().startswith("print(") and "#" in line
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


def test_indexes_example_prints_what_it_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # the example writes its index files in the working directory
    code = python_example("docs/indexes.md", "OffsetIndex(")
    run_example(code, "docs/indexes.md")
    expected = promised_output(code)
    assert len(expected) == 3
    assert capsys.readouterr().out.splitlines() == expected
    assert (tmp_path / "00000000000000000000.index").stat().st_size == 8  # "close() trimmed the file to entries * 8"


def test_record_files_example_prints_what_it_says(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(ROOT)  # the example reads a broker-written vector in place, by its path from the repository
    code = python_example("docs/record-files.md", "FileRecords.open(")
    run_example(code, "docs/record-files.md")
    expected = promised_output(code)
    assert expected == ["LogOffsetPosition(offset=80, position=0, size=2409)"]
    assert capsys.readouterr().out.splitlines() == expected


def shell_example(page: str, marker: str) -> list[str]:
    """The command lines of the ```bash block of ``page`` that contains ``marker`` (comments removed)."""
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / page).read_text(encoding="utf-8"), re.S)
    found = [block for block in blocks if marker in block]
    assert len(found) == 1, f"{page}: {len(found)} bash examples contain {marker!r}"
    return [line.split("  #", 1)[0].strip() for line in found[0].splitlines() if line.strip()]


def test_readme_look_at_the_data_commands_run_as_written(tmp_path: Path) -> None:
    """The README's commands after ``make run`` work on a log directory as the main job leaves it."""
    logs = tmp_path / "data" / "logs"
    assert main(["topic", "create", "--log-dir", str(logs), "--topic", "events", "--partitions", "4"]) == 0
    (tmp_path / "events.jsonl").write_text("".join(f'{{"key": "user-{i}", "value": "event {i}"}}\n' for i in range(20)))
    for partition in range(4):
        assert append_file(logs, "events", tmp_path / "events.jsonl", partition=partition) == 0
    describe, read, dump = shell_example("README.md", "seglog describe")
    outputs = []
    for line in (describe, read, dump):
        argv = shlex.split(line)
        assert argv[0] == ".venv/bin/seglog", line
        done = subprocess.run([*SEGLOG, *argv[1:]], cwd=tmp_path, capture_output=True, text=True)
        assert (done.returncode, done.stderr) == (0, ""), line
        outputs.append(done.stdout)
    assert "events-0: log start offset 0, log end offset 20, high watermark 20" in outputs[0]
    assert [json.loads(record)["offset"] for record in outputs[1].splitlines()] == [0, 1, 2, 3, 4]
    assert outputs[2].startswith("Dumping data/logs/events-0/00000000000000000000.log\n")
    assert "| offset: 19 " in outputs[2]


def test_readme_command_table_lists_every_command() -> None:
    """README.md's command table names every ``seglog`` command (and docs/cli.md's too)."""
    for page in ("README.md", "docs/cli.md"):
        text = (ROOT / page).read_text(encoding="utf-8")
        listed = set(re.findall(r"^\| `(?:seglog )?([a-z]+)[ `]", text, re.M))
        assert set(COMMANDS) <= listed, f"{page} does not list {sorted(set(COMMANDS) - listed)}"


def help_examples(argv: list[str], capsys: pytest.CaptureFixture[str]) -> list[list[str]]:
    """The ``seglog ...`` lines of the ``examples:`` section of ``seglog <argv> --help``, as argv lists."""
    assert main([*argv, "--help"]) == 0
    out = capsys.readouterr().out
    assert not out.split("\n\n")[1].startswith("options:"), f"seglog {' '.join(argv)} --help says not what it does"
    assert "examples:" in out, f"seglog {' '.join(argv)} --help shows no examples"
    examples = out.split("examples:", 1)[1]
    lines = re.sub(r"\\\n\s*", " ", examples).splitlines()
    return [shlex.split(line.split("  #", 1)[0])[1:] for line in lines if line.strip().startswith("seglog ")]


def command_lines() -> list[list[str]]:
    """Every command line with a ``--help`` of its own: ``seglog``, each command, each action of a
    command that has actions (``topic create``) and each benchmark suite (``bench engine``)."""
    lines: list[list[str]] = [[]]
    for name in COMMANDS:
        lines.append([name])
        parser, _ = build_parser([name])
        (commands,) = (action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
        for action in commands.choices[name]._actions:
            if isinstance(action, argparse._SubParsersAction):
                lines += [[name, choice] for choice in action.choices]
    return lines + [["bench", suite] for suite in bench.SUITES]


@pytest.mark.parametrize("command", command_lines(), ids=lambda argv: " ".join(argv) or "seglog")
def test_every_help_example_is_a_valid_command_line(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """Each ``--help`` shows examples, and each example parses with that command's options."""
    examples = help_examples(command, capsys)
    assert examples, f"seglog {' '.join(command)} --help has no seglog example"
    for argv in examples:
        parser, module = build_parser(argv)
        try:
            args = parser.parse_args(argv)
            if args.command == "bench":  # the suite parses its own options
                suite = load_command_module("bench", bench.SUITES[args.suite])
                suite_parser = argparse.ArgumentParser()
                suite.add_arguments(suite_parser)
                suite_parser.parse_args(args.suite_args)
        except SystemExit:
            pytest.fail(f"help example of seglog {' '.join(command)} does not parse: seglog {shlex.join(argv)}")
        assert module is not None


@pytest.fixture(scope="module")
def example_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A working directory for the help examples: ``data/logs`` with topic ``events`` (4 partitions,
    1,100 records in events-0), group ``billing``'s offsets as ``seglog serve`` keeps them, and the
    ``records.jsonl`` and ``blobs.jsonl`` the examples append."""
    directory = tmp_path_factory.mktemp("examples")
    logs = directory / "data" / "logs"
    records = directory / "records.jsonl"
    records.write_text("".join(f'{{"key": "user-{i}", "value": "event {i}"}}\n' for i in range(1100)))
    (directory / "blobs.jsonl").write_text('{"key": "AAE=", "value": "/w=="}\n')
    assert main(["topic", "create", "--log-dir", str(logs), "--topic", "events", "--partitions", "4"]) == 0
    assert append_file(logs, "events", records) == 0
    committed = {("events", p): CommittedOffset(p) for p in range(4)}
    asyncio.run(GroupOffsets(logs).commit("billing", committed))
    return directory


def runnable(argv: list[str]) -> bool:
    """Whether a help example ends by itself and needs nothing but a log directory: not a daemon, a
    Spark job, a server or a benchmark."""
    return argv[0] not in ("run", "serve", "bench") and (argv[0] != "maintain" or "--once" in argv)


@pytest.mark.parametrize(
    "command", [line for line in command_lines() if line[:1] not in (["run"], ["serve"], ["bench"])], ids=" ".join
)
def test_help_examples_run(
    command: list[str],
    example_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    vectors_dir: Path,
) -> None:
    """Every example a ``--help`` shows runs as written and exits 0, each in a copy of
    :func:`example_dir` (``topic create`` in an empty directory), ``../shared/vectors`` read in place."""
    for number, argv in enumerate(argv for argv in help_examples(command, capsys) if runnable(argv)):
        work = tmp_path / str(number)
        if argv[:2] == ["topic", "create"]:
            work.mkdir()
        else:
            shutil.copytree(example_dir, work)
        monkeypatch.chdir(work)
        argv = [arg.replace("../shared/vectors/kafka", str(vectors_dir)) for arg in argv]
        argv = [path for arg in argv for path in (sorted(glob.glob(arg)) if "*" in arg else [arg])]
        assert main(argv) == 0, f"seglog {shlex.join(argv)}: {capsys.readouterr().err}"
        capsys.readouterr()
