"""The ``seglog`` command line: argument parsing, lazy dispatch, logging and error reporting.

Each subcommand lives in its own module (``seglog.commands.<name>``, or another package for the
commands owned by the streaming and maintenance code) exposing::

    add_arguments(parser: argparse.ArgumentParser) -> None
    run(args: argparse.Namespace) -> int

:data:`COMMANDS` maps a subcommand to its module and a one-line summary. Only the module of the
subcommand being run is imported, and only when it runs, so ``seglog --help`` and ``seglog dump``
never import pyspark or apscheduler (kafka-python's ``kafka/cli`` works the same way).

Errors: a :class:`~indexer.errors.SeglogError`, an ``OSError`` or a ``ValueError`` (bad input)
prints one line ``seglog: <ErrorType>: <message>`` on stderr and exits 1; usage errors exit 2;
``--debug`` prints the traceback too. ``-v`` logs at INFO, ``-vv`` at DEBUG (stderr). ``--version``
prints the installed package's version.
"""

from __future__ import annotations

import argparse
import datetime
import difflib
import importlib
import importlib.metadata
import logging
import math
import os
import re
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from indexer.errors import SeglogError, raise_if_interrupted
from indexer.limits import INT32_MAX, INT64_MAX

logger = logging.getLogger(__name__)

PROG = "seglog"


@dataclass(frozen=True, slots=True)
class Command:
    """A registered subcommand: the module that implements it and its one-line help."""

    module: str
    summary: str


COMMANDS: dict[str, Command] = {
    "append": Command("seglog.commands.append", "append JSON-lines records to a partition"),
    "read": Command("seglog.commands.read", "read a partition's records as JSON lines (up to the high watermark)"),
    "dump": Command(
        "seglog.commands.dump", "print .log/.index/.timeindex/.txnindex/.snapshot files like kafka-dump-log.sh"
    ),
    "describe": Command("seglog.commands.describe", "describe a log directory: partitions, segments, offsets"),
    "topic": Command("seglog.commands.topic", "create, describe or grow a topic (its partition count is fixed)"),
    "run": Command("seglog.commands.run", "run the Spark streaming job that feeds the logs"),
    "maintain": Command("seglog.commands.maintain", "run the maintenance daemon (retention, flush, checkpoints)"),
    "recover": Command("seglog.commands.recover", "recover a log directory after a crash (Kafka's log loading)"),
    "quarantine": Command("seglog.commands.quarantine", "list or purge the bytes recovery removed (quarantine)"),
    "serve": Command("seglog.commands.serve", "serve a log directory read-only over the Kafka protocol"),
    "groups": Command("seglog.commands.groups", "list or delete the consumer group offsets seglog serve keeps"),
    "bench": Command("seglog.commands.bench", "run a benchmark suite (engine, sink, reader, maintenance, serve)"),
}

_EPILOG = """\
examples:
  seglog topic create --log-dir data/logs --topic events --partitions 4
  seglog append --log-dir data/logs --topic events --partition 0 records.jsonl
  seglog read --log-dir data/logs --topic events --partition 0 --from-offset 0 --max-records 10
  seglog dump --deep-iteration data/logs/events-0/00000000000000000000.log
  seglog describe --log-dir data/logs --json
  seglog bench engine --quick --json bench.json

Run `seglog COMMAND --help` for the options of one command.
"""


class CommandUnavailableError(SeglogError):
    """A registered subcommand whose module (or one of its dependencies) cannot be imported."""


def load_command_module(name: str, module_path: str) -> ModuleType:
    """Import ``module_path`` for the subcommand ``name``, or raise :class:`CommandUnavailableError`.

    A missing module gives one clear line instead of a traceback, whether it is the command module
    itself (not installed or not written yet) or a dependency of it (e.g. pyspark).
    """
    try:
        return importlib.import_module(module_path)
    except ModuleNotFoundError as e:
        if e.name is not None and (module_path == e.name or module_path.startswith(e.name + ".")):
            raise CommandUnavailableError(
                f"the '{name}' command is not available in this installation (module {module_path} not found)"
            ) from e
        raise CommandUnavailableError(f"the '{name}' command needs the Python package '{e.name}': {e}") from e


def package_version() -> str:
    """The version of the installed ``seglog`` distribution (its metadata, set by pyproject.toml)."""
    try:
        return importlib.metadata.version(PROG)
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed: pip install -e .)"


def common_options() -> SeglogParser:
    """``-v/--verbose`` and ``--debug``, accepted before and after the subcommand name.

    Defaults are suppressed so that a subparser does not reset what was given before it.
    """
    parent = SeglogParser(add_help=False)
    parent.add_argument(
        "-v", "--verbose", action="count", default=argparse.SUPPRESS, help="log at INFO level (-vv: DEBUG)"
    )
    parent.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks of errors")
    return parent


def add_action(
    actions: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    summary: str,
    description: str,
    examples: Sequence[str],
) -> argparse.ArgumentParser:
    """The parser of one action of a command with actions (``seglog topic create``): its ``--help``
    says what it does (``description``) and shows ``examples``; ``summary`` is its line in the
    command's list. It takes ``-v`` and ``--debug`` after its own options too."""
    return actions.add_parser(
        name,
        help=summary,
        description=description,
        epilog="examples:\n" + "".join(f"  {example}\n" for example in examples),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common_options()],
    )


# Sections of the settings file whose keys `--config` also takes, for the commands that use them:
# section -> (module, function returning {key: description}).
CONFIG_SECTIONS: dict[str, tuple[str, str]] = {
    "maintenance": ("maintenance.settings", "maintenance_keys"),
    "streaming": ("streaming.job", "streaming_keys"),
}


def add_log_config_arguments(
    parser: argparse.ArgumentParser, *, sections: Sequence[str] = (), topic_keys: bool = True
) -> None:
    """``--config KEY=VALUE`` (repeatable) and ``--conf FILE``.

    ``--config`` takes Kafka's topic config keys (unless ``topic_keys`` is false: a command that
    only records a topic, whose configs live in the settings files) and the keys of the settings
    file's ``sections`` this command uses (e.g. ``[maintenance]``'s ``log.retention.check.interval.ms``).
    A command that takes no key still parses ``--config``, unlisted, to say where the keys belong.
    """
    unknown = [name for name in sections if name not in CONFIG_SECTIONS]
    assert not unknown, f"no such settings section: {unknown}"
    takes = (["a topic config key with Kafka's name, e.g. segment.bytes=1048576"] if topic_keys else []) + [
        f"a [{name}] key" for name in sections
    ]
    group = parser.add_argument_group("configuration")
    group.add_argument(
        "--config",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help=f"{', or '.join(takes)} (repeatable)" if takes else argparse.SUPPRESS,
    )
    group.add_argument(
        "--conf",
        metavar="FILE",
        default=None,
        help="settings file, read after the packaged conf/seglog.toml and $SEGLOG_CONF (-v names the files read)",
    )
    parser.set_defaults(config_sections=tuple(sections), config_topic_keys=topic_keys)


def settings_from_args(args: argparse.Namespace) -> Any:
    """The :class:`indexer.config.Settings` selected by ``--conf`` and ``--config``.

    Each ``--config`` key goes to the topic config or to the section of the settings file that
    knows it; a key no section of this command knows is a :class:`~indexer.errors.ConfigError`
    listing what the command accepts.
    """
    from indexer.config import load_settings, parse_overrides, topic_config_keys
    from indexer.errors import ConfigError

    topic_keys = topic_config_keys() if getattr(args, "config_topic_keys", True) else ()
    section_keys = {
        name: getattr(importlib.import_module(CONFIG_SECTIONS[name][0]), CONFIG_SECTIONS[name][1])()
        for name in getattr(args, "config_sections", ())
    }
    topic: dict[str, str] = {}
    sections: dict[str, dict[str, str]] = {}
    for key, value in parse_overrides(args.config).items():
        owner = next((name for name, keys in section_keys.items() if key in keys), None)
        if key in topic_keys:
            topic[key] = value
        elif owner is not None:
            sections.setdefault(owner, {})[key] = value
        elif key in topic_config_keys():
            topic_table = f'[topics."{getattr(args, "topic", None) or "<topic>"}"]'
            raise ConfigError(
                f"seglog {args.command} does not store topic configs such as {key}: a topic's configs are read from the"
                f" settings files' [topic] and {topic_table} tables (and each command's own --config) by every"
                " command that writes or maintains it; put it there (docs/cli.md, Configuration)"
            )
        else:
            known = [f"topic keys: {', '.join(topic_keys)}"] if topic_keys else []
            known += [f"[{name}] keys: {', '.join(keys)}" for name, keys in section_keys.items()]
            takes = f"accepts {'; '.join(known)}" if known else "takes no --config keys"
            raise ConfigError(f"unknown --config key {key!r}; seglog {args.command} {takes}")
    return load_settings(args.conf, topic, section_overrides=sections)


def log_dir_from_args(args: argparse.Namespace, *, must_exist: bool = True) -> Any:
    """``--log-dir`` as a :class:`~pathlib.Path`, checked by the engine's one test
    (:func:`indexer.log_manager.check_log_dir`): a missing directory (when ``must_exist``) or a
    partition directory given instead of its log directory is a one-line error, before anything
    is written."""
    from indexer.log_manager import check_log_dir

    return check_log_dir(args.log_dir, must_exist=must_exist)


def existing_directory(path: str, what: str) -> Path:
    """``path``, checked to be a directory (named ``what`` in the error), before anything runs.

    Raises:
        FileNotFoundError: it does not exist.
        NotADirectoryError: it is something else.
    """
    directory = Path(path)
    if not directory.exists():
        raise FileNotFoundError(f"{what} {directory} does not exist")
    if not directory.is_dir():
        raise NotADirectoryError(f"{what} {directory} is not a directory")
    return directory


def add_partition_arguments(parser: argparse.ArgumentParser) -> None:
    """``--log-dir``, ``--topic`` and ``--partition`` (all required)."""
    parser.add_argument(
        "--log-dir", required=True, metavar="DIR", help="the log directory (holds <topic>-<partition>/)"
    )
    parser.add_argument("--topic", required=True, metavar="T", help="topic name")
    parser.add_argument("--partition", required=True, metavar="P", type=partition_number, help="partition number")


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value}")
    return value


def partition_number(text: str) -> int:
    """argparse type: a partition number, ``0..2147483646`` (a topic has at most Kafka's int32
    ``2147483647`` partitions), so that a number past it is a usage error naming the option rather
    than an error about a partition count the user never gave."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value < INT32_MAX:
        raise argparse.ArgumentTypeError(
            f"expected a partition number 0..{INT32_MAX - 1} (a topic has at most {INT32_MAX} partitions, "
            f"Kafka's int32), got {text!r}"
        )
    return value


def partition_count(text: str) -> int:
    """argparse type: a topic's partition count, ``1..2147483647`` (Kafka's int32), so that another
    number is a usage error naming the option, not an error about an argument the user never named."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= INT32_MAX:
        raise argparse.ArgumentTypeError(f"expected a partition count 1..{INT32_MAX} (Kafka's int32), got {text!r}")
    return value


def integer_in(low: int, high: int) -> Callable[[str], int]:
    """argparse type: an integer in ``low..high`` (the range of what the option sets: Kafka's int for its
    int configs, a port, ...); anything else is a usage error naming the range."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected an integer in {low}..{high}, got {text!r}")
        return value

    return parse


def timestamp_ms(text: str) -> int:
    """argparse type: a record timestamp, milliseconds since the epoch (0..2**63 - 1) or an ISO-8601 time
    (:func:`iso_timestamp_ms`)."""
    try:
        value = non_negative_int(text)
    except argparse.ArgumentTypeError:
        try:
            value = iso_timestamp_ms(text)
        except ValueError:
            value = -1
    if not 0 <= value <= INT64_MAX:
        raise argparse.ArgumentTypeError(
            f"expected milliseconds since the epoch (0..{INT64_MAX}) or an ISO-8601 time such as"
            f" 2024-05-01T12:00:00Z, got {text!r}"
        )
    return value


def iso_timestamp_ms(text: str) -> int:
    """An ISO-8601 time (``2024-05-01``, ``2024-05-01T12:00:00Z``; without a zone, UTC) as milliseconds
    since the epoch: the one reading of a textual timestamp (``seglog read --from-timestamp``, the
    ``timestamp`` of ``seglog append``'s lines).

    Raises:
        ValueError: not an ISO-8601 time, or one before the epoch (Kafka has no negative timestamps).
    """
    moment = datetime.datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    value = (moment - datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)) // datetime.timedelta(milliseconds=1)
    if value < 0:
        raise ValueError(f"{text!r} is before the epoch (1970-01-01T00:00:00Z)")
    return value


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    value = non_negative_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def positive_seconds(text: str) -> float:
    """argparse type: a number of seconds > 0 (finite: ``nan`` would never be reached, ``inf`` never end)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
    return value


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is when a record is logged (``main`` may run several times in
    one process, e.g. under tests that capture stderr)."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


QUIET_LIBRARIES = ("apscheduler",)
"""Loggers of libraries whose INFO lines (APScheduler: every job run, twice) drown seglog's own with
``-v``: kept at WARNING unless ``-vv``."""


SILENT_LIBRARIES = ("numba",)
"""Loggers of libraries whose DEBUG lines are their own internals: numba's compiler dumps its bytecode
analysis, tens of thousands of lines whenever a kernel is compiled (a new install or checkout), which
drown seglog's own with ``-vv``. Kept at WARNING at every verbosity."""


def configure_logging(verbosity: int) -> None:
    """WARNING by default, INFO with ``-v``, DEBUG with ``-vv``; messages go to stderr. The
    :data:`QUIET_LIBRARIES` say only their warnings below ``-vv``, the :data:`SILENT_LIBRARIES` at
    every verbosity."""
    level = logging.WARNING if verbosity <= 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    for name in QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(max(level, logging.WARNING) if verbosity < 2 else logging.NOTSET)
    for name in SILENT_LIBRARIES:
        logging.getLogger(name).setLevel(logging.WARNING)
    root = logging.getLogger()
    if not any(getattr(h, "_seglog", False) for h in root.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        handler._seglog = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    root.setLevel(level)


def _selected_command(argv: Sequence[str]) -> str | None:
    """The subcommand named in ``argv`` (the first registered name that is not an option)."""
    for token in argv:
        if token.startswith("-"):
            continue
        return token if token in COMMANDS else None
    return None


class SeglogParser(argparse.ArgumentParser):
    """argparse, but an option no parser knows is named first, with the nearest one it knows, by the
    (sub)command it was given to: argparse names it only after every required option was found (a
    misspelt ``--from-begining`` read as 'one of --from-beginning ... is required') and in the usage
    of ``seglog`` itself. Subcommands and their actions get this class too (``add_subparsers``), and
    so do ``seglog bench``'s suites, whose options a ``REMAINDER`` hands on to them.

    An option that means something only with another one (:func:`option_needs`) given without it is a
    usage error naming both, not an option ignored in silence."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.needs: list[tuple[str, str, str]] = []

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        tokens = list(sys.argv[1:] if args is None else args)
        unknown = self._unknown_option(tokens)
        if unknown is not None:
            meant = difflib.get_close_matches(unknown, self._long_options(), n=1)
            self.error(f"unrecognized argument {unknown}" + (f" (did you mean {meant[0]}?)" if meant else ""))
        parsed, rest = super().parse_known_args(tokens, namespace)
        for option, needed, why in self.needs:
            if self._given(parsed, option) and not self._given(parsed, needed):
                metavar = self._option_string_actions[needed].metavar
                self.error(f"{option} needs {needed}{f' {metavar}' if metavar else ''}: {why}")
        return parsed, rest

    def _given(self, parsed: argparse.Namespace, option: str) -> bool:
        action = self._option_string_actions[option]
        return bool(getattr(parsed, action.dest, action.default) != action.default)

    def _long_options(self) -> list[str]:
        return [option for option in self._option_string_actions if option.startswith("--")]

    def _unknown_option(self, tokens: Sequence[str]) -> str | None:
        """The first ``--option`` of ``tokens`` this parser neither has nor abbreviates, before its
        subcommand (whose parser checks the rest) or ``--``."""
        commands = {
            name
            for action in self._actions
            if isinstance(action, argparse._SubParsersAction)
            for name in action.choices
        }
        if any(action.nargs == argparse.REMAINDER for action in self._actions):
            return None  # what follows is another parser's to check
        known = self._long_options()
        for token in tokens:
            if token == "--" or token in commands:
                return None
            name = token.partition("=")[0]
            if token.startswith("--") and not any(option.startswith(name) for option in known):
                return name
        return None


def option_needs(parser: argparse.ArgumentParser, option: str, needed: str, why: str) -> None:
    """Make ``option`` given without ``needed`` a usage error (exit 2): ``seglog CMD: error: OPTION
    needs NEEDED: WHY``, before the command runs, rather than an option the command ignores in silence.
    Both options must be ``parser``'s (a :class:`SeglogParser`, as every command's is)."""
    assert isinstance(parser, SeglogParser), "every seglog parser is a SeglogParser"
    assert option in parser._option_string_actions and needed in parser._option_string_actions, (option, needed)
    parser.needs.append((option, needed, why))


def build_parser(argv: Sequence[str]) -> tuple[argparse.ArgumentParser, ModuleType | None]:
    """The parser for ``argv``: every subcommand is listed, only the selected one is imported.

    Returns the parser and the selected command's module (None when no known command is named).
    """
    parser = SeglogParser(
        prog=PROG,
        description="Kafka's log storage engine in Python: segment logs with offset and time indexes.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common_options()],
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {package_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    selected = _selected_command(argv)
    module = None
    for name, command in COMMANDS.items():
        if name != selected:
            sub.add_parser(name, help=command.summary, description=command.summary)
            continue
        module = load_command_module(name, command.module)
        description, epilog = help_texts(module.__doc__ or command.summary)
        subparser = sub.add_parser(
            name,
            help=command.summary,
            description=description,
            epilog=epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter,
            parents=[common_options()],
        )
        module.add_arguments(subparser)
    return parser, module


def help_texts(doc: str) -> tuple[str, str | None]:
    """A command module's docstring as ``--help`` text: the description, and the ``examples:``
    section (if any) as the epilog, shown after the options. RST backquotes become plain ones, and a
    literal block's ``::`` a colon."""
    text = re.sub(r"::$", ":", doc.strip().replace("``", "`"), flags=re.MULTILINE)
    description, marker, examples = text.partition("\nexamples:")
    return description.rstrip(), (marker.strip() + examples) if marker else None


def _report_error(exc: BaseException, debug: bool) -> None:
    if debug:
        traceback.print_exception(exc, file=sys.stderr)
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
    print(f"{PROG}: {type(exc).__name__}: {message}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``seglog`` with ``argv`` (default ``sys.argv[1:]``); returns the exit code.

    Ctrl-C is one line and exit 130 from the start on: loading a command's module (the engine,
    pyarrow, numba) takes most of a second, so an early Ctrl-C lands there more often than not.
    """
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


def _main(argv: list[str]) -> int:
    """:func:`main` but for Ctrl-C."""
    debug = "--debug" in argv
    try:
        parser, module = build_parser(argv)
    except CommandUnavailableError as e:
        _report_error(e, debug)
        return 1
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # usage error (2) or --help (0); argparse has printed the message
        return e.code if isinstance(e.code, int) else 2
    configure_logging(getattr(args, "verbose", 0))
    debug = getattr(args, "debug", False)
    assert module is not None, "the pre-scan and argparse pick the same command"
    try:
        try:
            return int(module.run(args))
        except Exception as e:
            raise_if_interrupted(e)  # Ctrl-C inside a compiled kernel
            raise
    except BrokenPipeError:
        # The reader of our stdout went away (`seglog read ... | head`): not an error of ours.
        _silence_stdout()
        return 0
    except (SeglogError, OSError, ValueError) as e:
        _report_error(e, debug)
        return 1
    except Exception as e:  # a bug: still one line unless --debug, as the user asked for no tracebacks
        _report_error(e, debug)
        if not debug:
            print(f"{PROG}: this looks like a bug; rerun with --debug for the traceback", file=sys.stderr)
        return 1


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not raise again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
