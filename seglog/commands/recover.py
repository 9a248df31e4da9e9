"""``seglog recover --log-dir DIR [--dry-run] [--strategy salvage|truncate] [--accept-data-loss]``.

Recovers a log directory after a crash or damage, as Kafka's log loader does after an unclean
shutdown (finish or undo interrupted operations, validate every batch, rebuild missing or corrupt
indexes, repair the checkpoints), and marks it cleanly shut down. Where a segment is damaged the
default strategy, ``salvage``, keeps every intact batch before and after the damage and leaves an
offset gap; ``truncate`` is Kafka's own answer (cut at the first damage, delete later segments).
Either way every removed byte is kept in a quarantine file beside its segment (``seglog
quarantine``). A checkpoint file that cannot be read is named and rewritten from the recovered logs
(high watermarks from the sink's commit records where they exist), the report saying from what.
Committed records below a damaged log start offset are removed only with ``--accept-data-loss``.
Partitions a live writer holds are skipped (one the maintenance daemon borrows is waited for, up to
60 s), and so are directories of segment files not named ``<topic>-<partition>`` (each named in the
report). Prints a per-partition report naming the offsets lost and whether they were committed.
``--dry-run`` writes nothing at all (no lock file either: it only tests whether a writer holds the
lock), so it also works on a read-only file system.

Exit status: 0 when all is well, 1 when the log directory cannot be written (a read-only file
system: one line, nothing tried), when a partition failed (one line per partition on stderr) or
was skipped (a writer holds it, or it is not named as a partition),
3 when committed data was lost (offsets below a partition's recovery point, high watermark or sink
commit are gone) and not accepted with ``--accept-data-loss``; 1 also when an unreadable checkpoint
was left as it was (a partition was not recovered). Ctrl-C lets the report say which partitions
were recovered before it (one closed when it came is recovered; the one in progress is left as a
crash leaves it, the rest not started;
their checkpoint entries are kept), then one line ``seglog: interrupted``, exit 130.

examples:
  seglog recover --log-dir data/logs --dry-run            # what recovery would do; nothing written
  seglog recover --log-dir data/logs
  seglog recover --log-dir data/logs --strategy truncate --json
  seglog recover --log-dir data/logs --accept-data-loss   # after exit status 3, if the loss is final
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``seglog recover``."""
    from seglog.cli import add_log_config_arguments

    parser.add_argument("--log-dir", required=True, metavar="DIR", help="the log directory to recover")
    parser.add_argument(
        "--dry-run", action="store_true", help="report what recovery would do; write nothing (not even lock files)"
    )
    parser.add_argument(
        "--from-recovery-point",
        action="store_true",
        help="validate only from each partition's checkpointed recovery point on, as a broker's startup does "
        "(default: validate every segment)",
    )
    parser.add_argument(
        "--strategy",
        choices=("salvage", "truncate"),
        default=None,
        help="what to do with a damaged segment: salvage keeps every intact batch around the damage (default); "
        "truncate is Kafka's recovery: cut at the first damage and drop every later segment (sets "
        "recovery.strategy)",
    )
    parser.add_argument(
        "--accept-data-loss",
        action="store_true",
        help="when committed records are lost for good, record the loss in DIR/seglog-accepted-data-loss.jsonl "
        "and move each such partition's end up to its committed offset, so the sink can start again "
        "(the lost offsets stay a gap)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_log_config_arguments(parser)


def _text(doc: dict[str, Any]) -> Iterator[str]:
    from seglog.output import format_table, offset_range_text

    head = "dry run of recovery" if doc["dry_run"] else "recovery"
    yield (
        f"{head} of {doc['log_dir']}: {len(doc['partitions'])} partitions, {doc['bytes_total']} bytes, "
        f"{doc['duration_s']:.2f} s"
    )
    rows = [
        (
            p["partition"],
            p["status"],
            p["log_end_offset"],
            p["committed_offset"],
            p["segments_recovered"],
            p["bytes_truncated"],
            p["batches_dropped"],
            p["segments_deleted"],
            p["indexes_rebuilt"],
            p["committed_offsets_lost"],
        )
        for p in doc["partitions"]
    ]
    yield from format_table(
        (
            "partition",
            "status",
            "log end",
            "committed",
            "recovered",
            "bytes truncated",
            "batches dropped",
            "segments deleted",
            "indexes rebuilt",
            "committed lost",
        ),
        rows,
        indent="  ",
    )
    dry = doc["dry_run"]  # a dry run removed nothing: it says what recovery would do
    for c in doc["checkpoints"]:
        yield f"  checkpoint {c['file']}: cannot read: {c['error']}"
        yield f"  checkpoint {c['file']}: {c['message']}"
    for p in doc["partitions"]:
        if p["message"]:
            yield f"  {p['partition']}: {p['message']}"
        for r in p["lost_offsets"]:
            what = "committed" if r["committed"] else "uncommitted"
            lost = "would lose" if dry else "lost"
            yield f"  {p['partition']}: {lost} {what} offsets {offset_range_text(r)}"
        if p["quarantined"]:
            kept = "would keep removed bytes" if dry else "removed bytes kept"
            yield f"  {p['partition']}: {kept} in quarantine: {', '.join(p['quarantined'])}"
        if p["accepted_data_loss"]:
            verb = "would be" if dry else "is"
            yield f"  {p['partition']}: the loss {verb} accepted and recorded; the log ends at {p['log_end_offset']}"
    if doc["committed_data_lost"] and dry:
        yield (
            "COMMITTED DATA WOULD BE LOST: recovery would remove the offsets above (their bytes, if any, to "
            "quarantine). First see whether they can be restored; to recover and accept the loss: seglog recover "
            f"--log-dir {doc['log_dir']} --accept-data-loss"
        )
    elif doc["committed_data_lost"]:
        yield (
            "COMMITTED DATA LOST: the offsets above are gone (their bytes, if any, are in quarantine). To accept "
            f"the loss and let writers go on: seglog recover --log-dir {doc['log_dir']} --accept-data-loss"
        )
    elif doc["interrupted"]:
        pass  # the partitions not recovered are named below
    elif doc["marked_clean"]:
        yield "no committed data lost; the directory is marked cleanly shut down"
    elif doc["dry_run"]:
        yield "no committed data would be lost"
    if doc["interrupted"]:
        done = [p["partition"] for p in doc["partitions"] if p["status"] in ("recovered", "checked")]
        rest = [p["partition"] for p in doc["partitions"] if p["status"] in ("interrupted", "not started")]
        yield (
            f"INTERRUPTED: {'checked' if dry else 'recovered'} before the interrupt: {', '.join(done) or 'none'}; "
            f"not {'checked' if dry else 'recovered'}: {', '.join(rest)}"
        )


def run(args: argparse.Namespace) -> int:
    """Recover (or check) the directory, print the report, return the exit status."""
    from maintenance.recovery import RecoveryInterrupted, recover_log_dir
    from seglog.cli import log_dir_from_args, settings_from_args
    from seglog.output import Output

    log_dir = log_dir_from_args(args)
    if args.strategy is not None:
        args.config = [*args.config, f"recovery.strategy={args.strategy}"]
    output = Output(json_mode=args.json)
    try:
        outcome = recover_log_dir(
            log_dir,
            settings_from_args(args),
            dry_run=args.dry_run,
            from_recovery_point=args.from_recovery_point,
            accept_data_loss=args.accept_data_loss,
            progress=None if not args.no_progress else False,
        )
    except RecoveryInterrupted as interrupted:
        output.emit(interrupted.outcome.to_json(), _text)
        raise  # after the report: main() says so in one line, exit 130
    output.emit(outcome.to_json(), _text)
    return outcome.exit_status()
