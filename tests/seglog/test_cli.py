"""The `seglog` dispatcher: lazy imports, help, exit codes, error lines, logging, bench dispatch."""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import tomllib
import types
from pathlib import Path

import pytest

from indexer.errors import CorruptIndexError
from seglog import cli
from seglog.cli import COMMANDS, Command, main
from tests.cli import append_file

PYTHON = sys.executable


def _fake_command(monkeypatch: pytest.MonkeyPatch, name: str, run) -> None:  # type: ignore[no-untyped-def]
    """Register a command backed by an in-memory module."""
    module = types.ModuleType(f"fake_{name}")
    module.__doc__ = f"The {name} command."

    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--flag", action="store_true")

    module.add_arguments = add_arguments  # type: ignore[attr-defined]
    module.run = run  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(COMMANDS, name, Command(module.__name__, f"summary of {name}"))


def test_help_lists_every_command_and_imports_none(capsys: pytest.CaptureFixture[str]) -> None:
    code = subprocess.run(
        [
            PYTHON,
            "-c",
            "import sys\nfrom seglog.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print([m for m in sys.modules if m.startswith('seglog.commands.') or m.split('.')[0] in "
            "('pyspark', 'apscheduler', 'numba', 'pyarrow')])",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    for name, command in COMMANDS.items():
        assert name in code.stdout
        assert command.summary.split()[0] in code.stdout
    assert code.stdout.strip().splitlines()[-1] == "[]"


def test_dump_imports_neither_pyspark_nor_apscheduler(vectors_dir: Path) -> None:
    index = vectors_dir / "multi-segment-3x" / "invoice-0" / "00000000000000060611.index"
    script = (
        "import sys\nfrom seglog.cli import main\n"
        f"code = main(['dump', {str(index)!r}])\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j', 'apscheduler', 'streaming',"
        " 'maintenance') or m.startswith('seglog.commands.')), file=sys.stderr)\n"
        "sys.exit(code)"
    )
    out = subprocess.run([PYTHON, "-c", script], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stderr.strip().splitlines()[-1] == "['seglog.commands.dump']"


def test_console_script_runs(vectors_dir: Path) -> None:
    script = Path(PYTHON).parent / "seglog"
    out = subprocess.run([str(script), "--help"], capture_output=True, text=True)
    assert out.returncode == 0
    assert "dump" in out.stdout


def test_version_is_the_packages_and_imports_no_command() -> None:
    """``seglog --version`` prints the installed distribution's version (pyproject's), exit 0."""
    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    script = (
        "import sys\nfrom seglog.cli import main\ncode = main(['--version'])\n"
        "print([m for m in sys.modules if m.startswith('seglog.commands.')])\nsys.exit(code)"
    )
    out = subprocess.run([PYTHON, "-c", script], capture_output=True, text=True)
    assert (out.returncode, out.stderr) == (0, "")
    assert out.stdout.splitlines() == [f"seglog {pyproject['project']['version']}", "[]"]


def test_python_dash_m_seglog_is_the_command_line() -> None:
    """``python -m seglog`` runs the same command line as the script (exit codes included)."""
    out = subprocess.run([PYTHON, "-m", "seglog", "--version"], capture_output=True, text=True)
    assert (out.returncode, out.stderr) == (0, "") and out.stdout.startswith("seglog ")
    out = subprocess.run([PYTHON, "-m", "seglog", "no-such-command"], capture_output=True, text=True)
    assert out.returncode == 2 and "no-such-command" in out.stderr


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert main(["no-such-command"]) == 2
    assert main(["read", "--log-dir", "x", "--topic", "t", "--partition", "0"]) == 2  # no start given
    assert main(["read", "--log-dir", "x", "--topic", "t", "--partition", "-3", "--from-offset", "0"]) == 2
    err = capsys.readouterr().err
    assert "expected a partition number 0..2147483646 (a topic has at most 2147483647 partitions" in err
    assert "got '-3'" in err


@pytest.mark.parametrize(
    "argv, usage, says",
    [
        (  # the missing start hid the misspelt option that was meant to give it
            ["read", "--log-dir", "x", "--topic", "t", "--partition", "0", "--from-begining"],
            "usage: seglog read",
            "seglog read: error: unrecognized argument --from-begining (did you mean --from-beginning?)",
        ),
        (  # said with the usage of `seglog`, not of `seglog read`, and without the option meant
            ["read", "--log-dir", "x", "--topic", "t", "--partition", "0", "--from-beginning", "--max-recrods", "5"],
            "usage: seglog read",
            "seglog read: error: unrecognized argument --max-recrods (did you mean --max-records?)",
        ),
        (
            ["topic", "create", "--log-dir", "x", "--topic", "t", "--partitons=4"],
            "usage: seglog topic create",
            "seglog topic create: error: unrecognized argument --partitons (did you mean --partitions?)",
        ),
        (
            ["bench", "engine", "--quik"],
            "usage: seglog bench engine",
            "seglog bench engine: error: unrecognized argument --quik (did you mean --quick?)",
        ),
        (
            ["--debgu", "describe", "--log-dir", "x"],
            "usage: seglog [",
            "seglog: error: unrecognized argument --debgu (did you mean --debug?)",
        ),
    ],
)
def test_a_misspelt_option_is_named_with_the_one_meant_in_its_commands_usage(
    capsys: pytest.CaptureFixture[str], argv: list[str], usage: str, says: str
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert usage in err and says in err, err


def test_abbreviated_options_and_values_that_look_like_options_still_parse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What argparse takes stays taken: a unique prefix of an option, and an option's value after ``--``."""
    monkeypatch.chdir(tmp_path)
    log_dir = tmp_path / "logs"
    records = tmp_path / "--in.jsonl"
    records.write_text('{"value": "v"}\n')
    assert main(["append", "--log-d", str(log_dir), "--topic", "t", "--partition", "0", "--", "--in.jsonl"]) == 0
    assert (
        main(["read", "--log-dir", str(log_dir), "--topic", "t", "--partition", "0", "--from-b", "--max-rec", "1"]) == 0
    )


BIG = "99999999999999999999"


@pytest.mark.parametrize(
    "argv, says",
    [
        (["serve", "--bind", "127.0.0.1:99999"], "argument --bind: the port must be 0..65535, got 99999"),
        (["serve", "--bind", "127.0.0.1:http"], "argument --bind: the port must be 0..65535, got 'http'"),
        (["serve", "--bind", "localhost"], "argument --bind: expected HOST:PORT (such as 127.0.0.1:9092)"),
        (["serve", "--brokers", "70000"], "argument --brokers: expected an integer in 1..65535"),
        (["serve", "--poll-ms", BIG], "argument --poll-ms: expected an integer in 1..2147483647"),
        (["serve", "--socket-request-max-bytes", "2147483648"], "expected an integer in 1..2147483647"),
        (["serve", "--group-initial-rebalance-delay-ms", "-1"], "expected an integer in 0..2147483647"),
        (["topic", "create", "--topic", "t", "--partitions", BIG], "argument --partitions: expected a partition"),
        (["topic", "alter", "--topic", "t", "--partitions", "2147483648"], "argument --partitions: expected a"),
        (["run", "--partitions", "0"], "argument --partitions: expected a partition count 1..2147483647"),
    ],
)
def test_a_number_outside_an_options_range_is_a_usage_error_naming_the_range(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    """`serve --bind 127.0.0.1:99999` said 'expected HOST:PORT'; `topic create --partitions 1e20` said
    'InvalidArgumentError: num_partitions must be an integer in -9223372036854775808..' (exit 1);
    `--poll-ms 1e20` served and never looked for new commits; `--brokers 70000` was an IndexError."""
    name = argv[:2] if argv[0] == "topic" else argv[:1]
    assert main([*name, "--log-dir", str(tmp_path / "logs"), *argv[len(name) :]]) == 2
    err = capsys.readouterr().err
    assert says in err, err
    assert not (tmp_path / "logs").exists()


def test_help_of_a_command_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dump", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--deep-iteration" in out and "examples:" in out
    assert "``" not in out


@pytest.mark.parametrize("command", ["append", "read", "dump"])
def test_help_shows_no_rst_markup(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A docstring's RST (``code``, a literal block's ``::``) reads as plain text in --help."""
    assert main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert "``" not in out and "::" not in out


def test_missing_command_module_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(COMMANDS, "ghost", Command("seglog.commands.no_such_module", "not written yet"))
    assert main(["ghost"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "seglog: CommandUnavailableError: the 'ghost' command is not available in this installation "
        "(module seglog.commands.no_such_module not found)"
    ]


def test_missing_dependency_of_a_command_names_the_package(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "needs_dep.py").write_text("import no_such_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(COMMANDS, "needy", Command("needs_dep", "needs a package"))
    assert main(["needy"]) == 1
    assert "needs the Python package 'no_such_dependency_xyz'" in capsys.readouterr().err


def test_seglog_error_is_one_stderr_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def run(args: argparse.Namespace) -> int:
        raise CorruptIndexError("Index file /x/0.index is corrupt, found 7 bytes\nsecond line", path="/x/0.index")

    _fake_command(monkeypatch, "boom", run)
    assert main(["boom"]) == 1
    captured = capsys.readouterr()
    assert captured.err == "seglog: CorruptIndexError: Index file /x/0.index is corrupt, found 7 bytes\n"
    assert captured.out == ""


def test_debug_prints_the_traceback(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def run(args: argparse.Namespace) -> int:
        raise ValueError("bad input")

    _fake_command(monkeypatch, "boom", run)
    assert main(["boom", "--debug"]) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err
    assert err.rstrip().endswith("seglog: ValueError: bad input")


def test_unexpected_exception_hints_at_debug(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def run(args: argparse.Namespace) -> int:
        raise KeyError("oops")

    _fake_command(monkeypatch, "boom", run)
    assert main(["boom"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == ["seglog: KeyError: 'oops'", "seglog: this looks like a bug; rerun with --debug for the traceback"]


def test_os_error_is_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def run(args: argparse.Namespace) -> int:
        raise FileNotFoundError(2, "No such file or directory", "/nope")

    _fake_command(monkeypatch, "boom", run)
    assert main(["boom"]) == 1
    assert capsys.readouterr().err == "seglog: FileNotFoundError: [Errno 2] No such file or directory: '/nope'\n"


@pytest.mark.parametrize(
    ("argv", "level"),
    [([], logging.WARNING), (["-v"], logging.INFO), (["-vv"], logging.DEBUG), (["-v", "-v"], logging.DEBUG)],
)
def test_verbosity_sets_the_log_level(monkeypatch: pytest.MonkeyPatch, argv: list[str], level: int) -> None:
    seen: dict[str, int] = {}

    def run(args: argparse.Namespace) -> int:
        seen["level"] = logging.getLogger().level
        return 0

    _fake_command(monkeypatch, "noop", run)
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", list(root.handlers))
    monkeypatch.setattr(root, "level", root.level)
    assert main([*argv, "noop"]) == 0
    assert seen["level"] == level
    assert main(["noop", *argv]) == 0  # accepted after the command name too
    assert seen["level"] == level


@pytest.mark.parametrize("command", [["topic", "describe"], ["quarantine", "list"]])
def test_common_options_are_accepted_after_an_action(
    tmp_path: Path, command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """`seglog topic describe --log-dir DIR --debug`: -v and --debug after the options of an action
    (docs/cli.md: accepted before or after the command name), not a usage error."""
    assert main([*command, "--log-dir", str(tmp_path), "-v"]) == 0
    assert main([*command, "--log-dir", str(tmp_path / "missing"), "--debug"]) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err
    assert err.rstrip().splitlines()[-1].startswith("seglog: LogDirectoryNotFoundError: ")


def test_command_exit_code_is_returned(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_command(monkeypatch, "three", lambda args: 3)
    assert main(["three", "--flag"]) == 3


def test_pre_scan_picks_the_command_argparse_picks() -> None:
    assert cli._selected_command(["-v", "--debug", "dump", "read"]) == "dump"
    assert cli._selected_command(["--", "describe"]) == "describe"
    assert cli._selected_command(["--help"]) is None
    assert cli._selected_command(["nonsense", "dump"]) is None


def test_log_config_arguments_reach_the_settings(tmp_path: Path) -> None:
    conf = tmp_path / "seglog.toml"
    conf.write_text('[topic]\n"segment.bytes" = 4096\n')
    parser = argparse.ArgumentParser()
    cli.add_log_config_arguments(parser)
    args = parser.parse_args(
        ["--conf", str(conf), "--config", "index.interval.bytes=10", "--config", "retention.ms=-1"]
    )
    config = cli.settings_from_args(args).log_config("t")
    assert (config.segment_bytes, config.index_interval_bytes, config.retention_ms) == (4096, 10, -1)


def test_config_sections_are_the_tables_a_settings_file_may_hold() -> None:
    from indexer.config import SECTIONS

    assert set(cli.CONFIG_SECTIONS) == set(SECTIONS)


def test_bad_config_override_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = append_file(tmp_path, "t", tmp_path / "missing.jsonl", "--config", "segment.bytes=tiny")
    assert code == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("seglog: ")


def test_bench_dispatches_to_the_suite_module(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from seglog.commands import bench

    suite = types.ModuleType("fake_suite")
    suite.__doc__ = "A fake suite."
    seen: dict[str, object] = {}

    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--quick", action="store_true")

    def run(args: argparse.Namespace) -> int:
        seen["quick"] = args.quick
        return 0

    suite.add_arguments = add_arguments  # type: ignore[attr-defined]
    suite.run = run  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fake_suite", suite)
    monkeypatch.setitem(bench.SUITES, "engine", "fake_suite")
    assert main(["bench", "engine", "--quick"]) == 0
    assert seen == {"quick": True}
    assert main(["bench", "engine", "--help"]) == 0
    assert "A fake suite." in capsys.readouterr().out
    assert main(["bench", "engine", "--bogus"]) == 2


def test_bench_suite_without_module_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from seglog.commands import bench

    monkeypatch.setitem(bench.SUITES, "sink", "seglog.bench.no_such_suite")
    assert main(["bench", "sink"]) == 1
    assert capsys.readouterr().err.startswith("seglog: CommandUnavailableError: the 'bench sink' command")


def test_json_output_of_a_command_is_valid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "in.jsonl").write_text('{"value": "x"}\n')
    assert append_file(tmp_path, "t", tmp_path / "in.jsonl", "--json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["first_offset"] == 0 and doc["last_offset"] == 0


def test_output_renders_text_or_json_and_raw_bytes() -> None:
    import io

    from seglog.output import Output, format_table

    data = {"a": 1, "b": [1, 2]}
    text, doc = io.StringIO(), io.StringIO()
    Output(text).emit(data, lambda d: [f"a is {d['a']}", "second"])
    Output(doc, json_mode=True).emit(data, lambda d: ["never"])
    assert text.getvalue() == "a is 1\nsecond\n"
    assert json.loads(doc.getvalue()) == data
    raw = io.StringIO()
    Output(raw).write_bytes("é\n".encode())
    assert raw.getvalue() == "é\n"
    assert format_table(("name", "n"), [("x", 5), ("longer", 120), ("y", None)], indent="  ") == [
        "  name      n",
        "  x         5",
        "  longer  120",
        "  y",
    ]


def test_an_option_another_one_needs_is_a_usage_error_naming_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`seglog maintain --json` without `--once` started the daemon, which never prints a report: the
    --json was ignored in silence. It is a usage error naming both options, before anything starts."""
    logs = tmp_path / "logs"
    assert main(["maintain", "--log-dir", str(logs), "--json"]) == 2
    err = capsys.readouterr().err
    assert "usage: seglog maintain" in err
    assert "seglog maintain: error: --json needs --once JOB" in err, err
    assert not logs.exists()
    logs.mkdir()
    assert main(["maintain", "--log-dir", str(logs), "--once", "flush", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["job"] == "flush"
    for action in ("list", "purge"):  # was a ValueError (exit 1) once the command ran
        extra = ["--all", "--dry-run"] if action == "purge" else []
        assert main(["quarantine", action, "--log-dir", str(logs), "--partition", "0", *extra]) == 2
        err = capsys.readouterr().err
        assert f"seglog quarantine {action}: error: --partition needs --topic T" in err, err


def test_vv_does_not_show_numbas_compiler() -> None:
    """``-vv`` showed numba's DEBUG lines, its compiler's bytecode analysis, whenever a kernel was
    compiled (a new install or checkout): ``seglog describe -vv`` of a 14-record directory wrote 30,927
    of its 39,423 lines from numba, and ``seglog serve -vv`` 46,901 at its first Fetch. numba's loggers
    say only their warnings at every verbosity; seglog's own DEBUG lines remain."""
    code = (
        "import logging; from numba import njit; from seglog.cli import configure_logging\n"
        "configure_logging(2)\n"
        "assert njit(lambda x: x + 1)(1) == 2\n"
        "logging.getLogger('seglog.x').debug('own line')\n"
    )
    done = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    lines = done.stderr.splitlines()
    assert not [line for line in lines if " numba" in line], lines[:5]
    assert [line.split(" ", 2)[2] for line in lines] == ["DEBUG seglog.x: own line"]


# Sends this process SIGINT when the module named in argv[1] starts being imported, then runs `seglog`
# with the rest of argv: Ctrl-C at a fixed point of the command's start (loading its module), in a
# process of its own, with no timing.
_CTRL_C_DURING_IMPORT = """
import importlib.abc, os, signal, sys

class CtrlC(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == sys.argv[1]:
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, CtrlC())
from seglog.cli import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("module", ["seglog.commands.describe", "indexer.records"])
def test_ctrl_c_while_a_command_loads_is_one_line_and_exit_130(tmp_path: Path, module: str) -> None:
    """Ctrl-C in the first half second of a command, while its module and the engine were being
    imported (before the command ran), printed Python's traceback of the import machinery instead of
    ``seglog: interrupted``: the dispatcher's Ctrl-C handling covered only the command's run."""
    logs = tmp_path / "logs"
    logs.mkdir()
    out = subprocess.run(
        [PYTHON, "-c", _CTRL_C_DURING_IMPORT, module, "describe", "--log-dir", str(logs)],
        capture_output=True,
        text=True,
    )
    assert (out.returncode, out.stderr) == (130, "seglog: interrupted\n")
