"""``seglog quarantine list|purge``: the bytes recovery removed from damaged segments.

Recovery never deletes record bytes without a copy: damaged ranges, torn tails and anything a
truncation cut are kept beside their segment in ``<base>.log.<position>.quarantine`` files (the
position is where the bytes sat in that ``.log``). ``list`` shows them per partition; ``purge``
deletes them, all of them (``--all``) or those older than ``--older-than-ms``, optionally for one
topic or partition. The maintenance service purges them itself once they are older than the
topic's ``quarantine.retention.ms`` (default -1: never). A quarantine file holds exactly the raw
bytes removed, nothing added. A purge first records the offsets it makes lost for good (the gaps of
the segments whose quarantine files all go) in ``seglog-accepted-data-loss.jsonl``, which ``seglog
describe`` lists, and prints them.

examples:
  seglog quarantine list --log-dir data/logs
  seglog quarantine purge --log-dir data/logs --topic events --older-than-ms 604800000
  seglog quarantine purge --log-dir data/logs --all --dry-run
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``seglog quarantine``."""
    from seglog.cli import add_action, non_negative_int, option_needs, partition_number

    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = add_action(
        actions,
        "list",
        "list the quarantine files of every partition",
        "List the quarantine files of every partition (or of --topic / --partition): each file with its\n"
        "segment, the position its bytes came from in that .log, its size and when recovery wrote it.\n"
        "Read-only.",
        [
            "seglog quarantine list --log-dir data/logs",
            "seglog quarantine list --log-dir data/logs --topic events --json",
        ],
    )
    purge = add_action(
        actions,
        "purge",
        "delete quarantine files (say which: --all or --older-than-ms)",
        "Delete quarantine files: all those selected (--all) or those last modified at least MS ms ago\n"
        "(--older-than-ms), of every partition or of --topic / --partition. The offsets whose bytes go\n"
        "for good with them are first recorded in seglog-accepted-data-loss.jsonl (seglog describe lists\n"
        "them) and printed. --dry-run lists what would be deleted and recorded, and changes nothing.",
        [
            "seglog quarantine purge --log-dir data/logs --all --dry-run",
            "seglog quarantine purge --log-dir data/logs --topic events --older-than-ms 604800000",
        ],
    )
    for sub in (listing, purge):
        sub.add_argument("--log-dir", required=True, metavar="DIR", help="the log directory")
        sub.add_argument("--topic", metavar="T", help="only this topic's partitions")
        sub.add_argument("--partition", type=partition_number, metavar="P", help="only this partition (with --topic)")
        sub.add_argument("--json", action="store_true", help="print one JSON document")
        option_needs(sub, "--partition", "--topic", "a partition number names a partition of one topic")
    which = purge.add_mutually_exclusive_group(required=True)
    which.add_argument("--all", action="store_true", help="delete every quarantine file selected")
    which.add_argument(
        "--older-than-ms",
        type=non_negative_int,
        metavar="MS",
        help="delete only files last modified at least MS ms ago",
    )
    purge.add_argument("--dry-run", action="store_true", help="list what would be deleted; delete nothing")


def _selected(args: argparse.Namespace) -> list[tuple[str, Path]]:
    """The partitions ``--topic``/``--partition`` select; naming one that does not exist is an
    :class:`~indexer.errors.UnknownTopicOrPartitionError` (a typo must not look like "nothing there")."""
    from indexer.errors import UnknownTopicOrPartitionError
    from indexer.file_names import partition_dirs
    from maintenance.access import partition_name

    every = partition_dirs(args.log_dir)
    selected = [
        (partition_name(tp), path)
        for tp, path in every
        if (args.topic is None or tp[0] == args.topic) and (args.partition is None or tp[1] == args.partition)
    ]
    if args.topic is not None and not selected:
        what = f"topic {args.topic!r}" + ("" if args.partition is None else f" partition {args.partition}")
        known = ", ".join(partition_name(tp) for tp, _ in every) or "none"
        raise UnknownTopicOrPartitionError(f"{what} does not exist in {args.log_dir}; its partitions: {known}")
    return selected


def _text(doc: dict[str, Any]) -> Iterator[str]:
    from indexer.file_names import DATA_LOSS_FILE
    from seglog.output import format_table, offset_range_text

    files = [f for p in doc["partitions"] for f in p["files"]]
    verb = {"list": "", "purge": "deleted: ", "purge-dry-run": "would delete: "}[doc["action"]]
    yield f"{verb}{len(files)} quarantine files, {sum(f['size'] for f in files)} bytes in {doc['log_dir']}"
    rows = [
        (
            p["partition"],
            Path(f["path"]).name,
            f["base_offset"],
            f["position"],
            f["size"],
            time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(f["modified_ms"] / 1000)),
        )
        for p in doc["partitions"]
        for f in p["files"]
    ]
    if rows:
        yield from format_table(
            ("partition", "file", "segment", "position", "bytes", "quarantined at"), rows, indent="  "
        )
    recorded = "would be recorded" if doc["action"] == "purge-dry-run" else "recorded"
    for p in doc["partitions"]:
        if p.get("lost"):
            lost = ", ".join(offset_range_text(r) for r in p["lost"])
            yield (
                f"  {p['partition']}: offsets {lost} lost for good with these files ({recorded} in "
                f"{Path(doc['log_dir']) / DATA_LOSS_FILE}; seglog describe lists it)"
            )


def run(args: argparse.Namespace) -> int:
    """List or purge; print what was found or deleted."""
    from indexer.data_loss import purge_quarantine
    from indexer.log_manager import check_log_dir_writable
    from indexer.quarantine import list_quarantine
    from seglog.cli import log_dir_from_args
    from seglog.output import Output

    args.log_dir = log_dir_from_args(args)  # missing, or a partition directory: one line, nothing done
    if args.action == "purge" and not args.dry_run:
        check_log_dir_writable(args.log_dir, "seglog quarantine purge can delete nothing there")
    partitions = []
    now_ms = int(time.time() * 1000)
    for name, path in _selected(args):
        lost: list[dict[str, Any]] = []
        if args.action == "purge":
            command = "seglog quarantine purge" + (" --all" if args.all else f" --older-than-ms {args.older_than_ms}")
            purged = purge_quarantine(
                path, command=command, older_than_ms=args.older_than_ms, now_ms=now_ms, dry_run=args.dry_run
            )
            files, lost = purged.files, [r.to_dict() for r in purged.lost]
        else:
            files = list_quarantine(path)
        if files:
            one = {"partition": name, "files": [f.to_dict() for f in files]}
            partitions.append(one if args.action == "list" else {**one, "lost": lost})
    action = args.action + ("-dry-run" if args.action == "purge" and args.dry_run else "")
    Output(json_mode=args.json).emit({"log_dir": str(args.log_dir), "action": action, "partitions": partitions}, _text)
    return 0
