"""Run a benchmark suite; every figure is a ratio against a baseline run side by side.

Suites (each in ``seglog/bench/<suite>.py``, imported only when chosen):
  engine        record encoding, append, offset-index lookups, page faults, recovery
  sink          the Spark foreachBatch sink against Spark's own file sink
  reader        readStream.format("seglog") against Spark's Parquet file source
  maintenance   recovery of a whole log directory, one retention pass
  serve         consumers through `seglog serve` vs sendfile of the files; commit-to-receipt latency

Each suite prints a table and, with ``--json FILE``, writes a list of objects with ``name``,
``unit``, ``value``, ``baseline``, ``baseline_value``, ``ratio``, ``goal`` (see
docs/benchmarks.md). Run ``seglog bench SUITE --help`` for a suite's options.

examples:
  seglog bench engine --quick
  seglog bench engine --json bench-engine.json
"""

from __future__ import annotations

import argparse

from seglog.cli import SeglogParser, common_options, configure_logging, help_texts, load_command_module

SUITES: dict[str, str] = {
    "engine": "seglog.bench.engine",
    "sink": "seglog.bench.sink",
    "reader": "seglog.bench.reader",
    "maintenance": "seglog.bench.maintenance",
    "serve": "seglog.bench.serve",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``SUITE`` and whatever follows it (parsed by the suite's own parser in :func:`run`)."""
    parser.add_argument("suite", choices=sorted(SUITES), help="the benchmark suite to run")
    parser.add_argument("suite_args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    """Import the chosen suite, parse its options, run it."""
    module = load_command_module(f"bench {args.suite}", SUITES[args.suite])
    description, epilog = help_texts(module.__doc__ or "")
    parser = SeglogParser(
        prog=f"seglog bench {args.suite}",
        description=description,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common_options()],
    )
    module.add_arguments(parser)
    try:
        suite_args = parser.parse_args(args.suite_args)
    except SystemExit as e:  # --help (0) or a usage error (2), already printed by argparse
        return e.code if isinstance(e.code, int) else 2
    verbosity = getattr(suite_args, "verbose", 0) or getattr(args, "verbose", 0)
    if verbosity:
        configure_logging(verbosity)
    suite_args.debug = getattr(suite_args, "debug", False) or getattr(args, "debug", False)
    return int(module.run(suite_args))
