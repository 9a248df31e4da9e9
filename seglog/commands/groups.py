"""List or delete the committed consumer-group offsets that ``seglog serve`` keeps.

``seglog serve`` keeps each group's committed offsets in ``group-offsets-checkpoint`` in the log
directory (or ``--group-offsets-dir``), and never expires them: a broker removes an empty group's
offsets after ``offsets.retention.minutes`` (7 days), a read-only endpoint keeps a consumer's
position however long it was away. ``list`` shows them (``kafka-consumer-groups.sh --describe``'s
CURRENT-OFFSET); ``delete-offsets`` removes a group's offsets, of one topic or of some of its
partitions (``kafka-consumer-groups.sh --delete-offsets``), so that its consumers start from
``auto.offset.reset`` there. It runs beside a running server (one file lock; the server answers from
the new file from its next request on); use it for a group without members, as Kafka refuses to
delete the offsets of a topic a live group consumes: a member's next commit writes its offset back.
``--dry-run`` says what would go and writes nothing.

examples:
  seglog groups list --log-dir data/logs
  seglog groups list --log-dir data/logs --group billing --json
  seglog groups delete-offsets --log-dir data/logs --group billing --topic events --partition 3 --dry-run
  seglog groups delete-offsets --log-dir data/logs --group billing
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from indexer.errors import ConfigError, GroupIdNotFoundError
from seglog.cli import add_action, existing_directory, log_dir_from_args, partition_number
from seglog.output import Output, format_table
from seglog.serve.group_offsets import GroupOffsets


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``seglog groups``: ``list`` or ``delete-offsets``."""
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = add_action(
        actions,
        "list",
        "list the groups and their committed offsets",
        "List each group's committed offset, leader epoch and metadata per partition, as seglog serve\n"
        "keeps them (kafka-consumer-groups.sh --describe's CURRENT-OFFSET). Read-only.",
        ["seglog groups list --log-dir data/logs", "seglog groups list --log-dir data/logs --group billing --json"],
    )
    delete = add_action(
        actions,
        "delete-offsets",
        "delete a group's committed offsets (all, a topic's, or some partitions')",
        "Delete a group's committed offsets: all of them, --topic's, or those of the --partition(s) of\n"
        "--topic (kafka-consumer-groups.sh --delete-offsets); each one deleted is printed. Its consumers\n"
        "then start from auto.offset.reset there. Use it for a group without members: a member's next\n"
        "commit writes its offset back. --dry-run prints what would go and writes nothing.",
        [
            "seglog groups delete-offsets --log-dir data/logs --group billing --topic events --partition 3 --dry-run",
            "seglog groups delete-offsets --log-dir data/logs --group billing",
        ],
    )
    for sub in (listing, delete):
        sub.add_argument("--log-dir", required=True, metavar="DIR", help="the log directory seglog serve serves")
        sub.add_argument(
            "--group-offsets-dir",
            metavar="DIR",
            help="where the server keeps the offsets, if it was given --group-offsets-dir (default: the log directory)",
        )
    listing.add_argument("--group", metavar="G", help="only this group")
    listing.add_argument("--json", action="store_true", help="print one JSON document")
    delete.add_argument("--group", required=True, metavar="G", help="the group")
    delete.add_argument("--topic", metavar="T", help="only this topic's offsets")
    delete.add_argument(
        "--partition",
        type=partition_number,
        action="append",
        metavar="P",
        help="only this partition of --topic (repeatable)",
    )
    delete.add_argument("--dry-run", action="store_true", help="say what would be deleted; write nothing")


def run(args: argparse.Namespace) -> int:
    """List, or delete and say what was deleted; 0 on success.

    Raises:
        GroupIdNotFoundError: the group (or a named partition of it) has no committed offset.
        StorageError: the offsets file cannot be read or written.
    """
    log_dir = log_dir_from_args(args)
    where = existing_directory(args.group_offsets_dir, "group offsets directory") if args.group_offsets_dir else log_dir
    offsets = GroupOffsets(where)
    if args.action == "list":
        if args.group is not None and not offsets.get(args.group):  # a typo must not look like "nothing there"
            raise GroupIdNotFoundError(f"group {args.group!r} has no committed offsets in {offsets.path}")
        groups = [args.group] if args.group is not None else offsets.groups()
        doc = {
            "file": str(offsets.path),
            "groups": [
                {
                    "group": group,
                    "offsets": [
                        {"topic": t, "partition": p, **committed._asdict()}
                        for (t, p), committed in sorted(offsets.get(group).items())
                    ],
                }
                for group in groups
            ],
        }
        Output(json_mode=args.json).emit(doc, _text)
        return 0
    if args.partition and args.topic is None:
        raise ConfigError("--partition needs --topic")
    committed = offsets.get(args.group)
    if args.topic is None:
        chosen = sorted(committed)
    elif args.partition:
        chosen = sorted({(args.topic, p) for p in args.partition})
    else:
        chosen = sorted(tp for tp in committed if tp[0] == args.topic)
    missing = [tp for tp in chosen if tp not in committed]
    if not chosen or missing:
        named = ", ".join(f"{t}-{p}" for t, p in missing) or (args.topic or "any partition")
        raise GroupIdNotFoundError(f"group {args.group!r} has no committed offset of {named} in {offsets.path}")
    if not args.dry_run:
        asyncio.run(offsets.delete(args.group, chosen if args.topic is not None else None))
    verb = "would delete" if args.dry_run else "deleted"
    for topic, partition in chosen:
        print(f"group {args.group}: {verb} the offset of {topic}-{partition} ({committed[topic, partition].offset})")
    return 0


def _text(doc: dict[str, Any]) -> list[str]:
    rows = [
        (g["group"], o["topic"], o["partition"], o["offset"], o["leader_epoch"], o["metadata"])
        for g in doc["groups"]
        for o in g["offsets"]
    ]
    if not rows:
        return [f"no committed group offsets in {doc['file']}"]
    return format_table(("group", "topic", "partition", "offset", "leader epoch", "metadata"), rows)
