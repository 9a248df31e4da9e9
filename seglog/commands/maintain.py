"""``seglog maintain --log-dir DIR [--once JOB]``: the maintenance daemon for a log directory.

Runs the retention, roll and index jobs on the periods of the ``[maintenance]`` section of
``conf/seglog.toml`` (Kafka's key names, e.g. ``log.retention.check.interval.ms``) until SIGTERM,
SIGHUP or Ctrl-C, then lets the running jobs finish and exits 0. Started before its log directory exists
(before the writer that creates it), it says so once and maintains the partitions when they appear.
Partitions a live writer holds are only checked read-only; the writer runs its own maintenance
in-process. While a checkpoint file of the directory cannot be read, no partition is touched and
one ERROR line names the file and ``seglog recover`` (the file is never replaced). ``--once JOB``
runs one job (any of them, including flush and the checkpoint jobs) and exits: 0 when it ran
cleanly, 1 when a partition failed (one line per partition on stderr) or the log directory cannot be
written (a read-only file system: one line; the daemon says that once and skips its passes until
the directory is writable again); it prints the job's summary and one line per finding (each
deleted segment with the limit it breached: ``retention.ms``, ``retention.bytes`` or the log start
offset); ``--json`` prints that report as JSON, and so needs ``--once`` (the daemon prints no report).
``--config`` takes the ``[maintenance]`` keys as well as the topic keys. See docs/maintenance.md.

examples:
  seglog maintain --log-dir data/logs
  seglog maintain --log-dir data/logs --config log.retention.check.interval.ms=60000
  seglog maintain --log-dir data/logs --once retention --config retention.ms=3600000
"""

from __future__ import annotations

import argparse
import json
import logging
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``seglog maintain``."""
    from maintenance.jobs import JOBS
    from seglog.cli import add_log_config_arguments, option_needs

    parser.add_argument("--log-dir", required=True, metavar="DIR", help="the log directory to maintain")
    parser.add_argument(
        "--once",
        metavar="JOB",
        choices=sorted(JOBS),
        help=f"run one job and exit instead of running the daemon ({', '.join(JOBS)})",
    )
    parser.add_argument("--json", action="store_true", help="with --once: print the job report as JSON")
    option_needs(
        parser,
        "--json",
        "--once",
        "it prints the report of the one job --once runs; the daemon prints no report (its findings are "
        "log lines on stderr)",
    )
    add_log_config_arguments(parser, sections=("maintenance",))


def run(args: argparse.Namespace) -> int:
    """Run the daemon, or one job with ``--once``; 1 if that job failed or hit a partition error."""
    from maintenance.daemon import run_daemon, run_once
    from maintenance.settings import MaintenanceSettings
    from seglog.cli import log_dir_from_args, settings_from_args

    # The daemon may start before the writer that creates the directory (it waits for it); --once may not.
    log_dir = log_dir_from_args(args, must_exist=args.once is not None)
    settings = settings_from_args(args)
    MaintenanceSettings.from_settings(settings)  # a bad [maintenance] value fails now, in one line
    if args.once is None:
        progress = logging.getLogger("maintenance")
        if progress.getEffectiveLevel() > logging.INFO:
            progress.setLevel(logging.INFO)  # what the daemon does (its start, each deletion), even without -v
        return run_daemon(log_dir, settings)
    report = run_once(log_dir, settings, args.once)
    if report is None:
        print(f"seglog: maintenance job {args.once} failed (see the log)", file=sys.stderr)
        return 1
    if getattr(args, "json", False):
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(report.summary())  # each partition error was logged as one line on stderr
        for finding in report.findings:  # e.g. each deleted segment and the limit it breached
            print(f"  {finding}")
    return 1 if report.errors else 0
