"""List or delete the committed consumer-group offsets that ``seglog serve`` keeps.

``seglog serve`` keeps each group's committed offsets in ``group-offsets-checkpoint`` in the log
directory (or ``--group-offsets-dir``), and never expires them: a broker removes an empty group's
offsets after ``offsets.retention.minutes`` (7 days), a read-only endpoint keeps a consumer's
position however long it was away. ``list`` shows them as ``kafka-consumer-groups.sh --describe``
does: per partition the committed offset, the log end offset a consumer can reach (the high
watermark), the lag, and the member it is assigned to on a running server. ``delete-offsets``
removes a group's offsets, of one topic or of some of its partitions (``kafka-consumer-groups.sh
--delete-offsets``), so that its consumers start from ``auto.offset.reset`` there. It runs beside a
running server (one file lock; the server answers from the new file from its next request on), and
refuses as Kafka while the group has members on a running server: the offsets of a topic they
subscribe to (they would commit them again), or all of the group's. ``--dry-run`` says what would
go and writes nothing.

examples:
  seglog groups list --log-dir data/logs
  seglog groups list --log-dir data/logs --group billing --json
  seglog groups delete-offsets --log-dir data/logs --group billing --topic events --partition 3 --dry-run
  seglog groups delete-offsets --log-dir data/logs --group billing
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from indexer.config import load_settings
from indexer.errors import (
    GroupIdNotFoundError,
    GroupNotEmptyError,
    GroupSubscribedToTopicError,
    StorageError,
)
from indexer.file_names import TopicPartition
from indexer.lock import holder_fields
from seglog.cli import add_action, existing_directory, log_dir_from_args, option_needs, partition_number
from seglog.output import Output, format_table
from seglog.serve.catalog import Catalog
from seglog.serve.group_offsets import CommittedOffset, GroupOffsets
from seglog.serve.live_groups import LiveGroup, LiveMember, live_groups

logger = logging.getLogger(__name__)

# kafka-consumer-groups.sh --describe's columns, which operators and their scripts know.
DESCRIBE_COLUMNS = (
    "GROUP",
    "TOPIC",
    "PARTITION",
    "CURRENT-OFFSET",
    "LOG-END-OFFSET",
    "LAG",
    "CONSUMER-ID",
    "HOST",
    "CLIENT-ID",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``seglog groups``: ``list`` or ``delete-offsets``."""
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = add_action(
        actions,
        "list",
        "list the groups and their committed offsets",
        "List each group's partitions as kafka-consumer-groups.sh --describe does: the committed offset,\n"
        "the log end offset a consumer can reach (the high watermark), the lag, and the member on a\n"
        "running seglog serve that has the partition ('-': not known). --json adds each offset's leader\n"
        "epoch and metadata, and each group's state and members. Read-only.",
        ["seglog groups list --log-dir data/logs", "seglog groups list --log-dir data/logs --group billing --json"],
    )
    delete = add_action(
        actions,
        "delete-offsets",
        "delete a group's committed offsets (all, a topic's, or some partitions')",
        "Delete a group's committed offsets: all of them, --topic's, or those of the --partition(s) of\n"
        "--topic (kafka-consumer-groups.sh --delete-offsets); each one deleted is printed. Its consumers\n"
        "then start from auto.offset.reset there. Refused, as by Kafka, while the group has members on a\n"
        "running seglog serve: the offsets of a topic they subscribe to (their next commit would write\n"
        "them back), or all of the group's. --dry-run prints what would go and writes nothing.",
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
    option_needs(delete, "--partition", "--topic", "a partition number names a partition of one topic")
    delete.add_argument("--dry-run", action="store_true", help="say what would be deleted; write nothing")


def run(args: argparse.Namespace) -> int:
    """List, or delete and say what was deleted; 0 on success.

    Raises:
        GroupIdNotFoundError: the group (or a named partition of it) has no committed offset.
        GroupNotEmptyError: deleting all of a group's offsets while it has members on a running server.
        GroupSubscribedToTopicError: deleting offsets of a topic that such members subscribe to.
        StorageError: the offsets file cannot be read or written.
    """
    log_dir = log_dir_from_args(args)
    where = existing_directory(args.group_offsets_dir, "group offsets directory") if args.group_offsets_dir else log_dir
    offsets = GroupOffsets(where)
    if args.action == "list":
        _list(args, log_dir, where, offsets)
    else:
        _delete(args, where, offsets)
    return 0


def _list(args: argparse.Namespace, log_dir: Path, where: Path, offsets: GroupOffsets) -> None:
    """Every group with committed offsets or members on a running server, or ``--group``."""
    live = live_groups(where)
    if args.group is not None and not offsets.get(args.group) and args.group not in live:
        raise GroupIdNotFoundError(  # a typo must not look like "nothing there"
            f"group {args.group!r} has no committed offsets in {offsets.path} and no members on a running server"
        )
    groups = [args.group] if args.group is not None else sorted({*offsets.groups(), *live})
    committed = {group: offsets.get(group) for group in groups}
    members = {group: live[group].members if group in live else () for group in groups}
    partitions = {
        group: sorted({*committed[group], *(tp for m in members[group] for tp in m.assignment)}) for group in groups
    }
    ends = _log_end_offsets(log_dir, {tp for group in groups for tp in partitions[group]})
    doc = {
        "file": str(offsets.path),
        "groups": [
            {
                "group": group,
                "state": live[group].state if group in live else "Empty",
                "members": [
                    {**dataclasses.asdict(m), "assignment": [list(tp) for tp in m.assignment]} for m in members[group]
                ],
                "offsets": [
                    _row(
                        tp,
                        committed[group].get(tp),
                        ends[tp],
                        next((m for m in members[group] if tp in m.assignment), None),
                    )
                    for tp in partitions[group]
                ],
            }
            for group in groups
        ],
    }
    Output(json_mode=args.json).emit(doc, _text)


def _delete(args: argparse.Namespace, where: Path, offsets: GroupOffsets) -> None:
    """Delete what was chosen (or say what would go), unless members on a running server refuse it."""
    with warnings.catch_warnings():  # kafka-python's package import uses a deprecated importlib API
        warnings.simplefilter("ignore", DeprecationWarning)
        from seglog.serve import protocol
        from seglog.serve.groups import offset_delete_errors

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

    def refuse_if_live() -> None:
        """Kafka's refusals for a group with members (DeleteGroups' NON_EMPTY_GROUP for all of its
        offsets, OffsetDelete's for some), from what the running servers published."""
        group = live_groups(where).get(args.group)
        if group is None:
            return
        error, codes = offset_delete_errors(group.protocol_type, group.subscribed, chosen)
        subscribed = sorted({tp[0] for tp, code in codes.items() if code != protocol.NONE})
        members = f"{len(group.members)} member{'s' if len(group.members) > 1 else ''}"
        who = f"group {args.group!r} has {members} on a running seglog serve ({_servers(group)})"
        if args.topic is None or error != protocol.NONE:
            raise GroupNotEmptyError(
                f"{who}: its offsets go only once it is empty (Kafka's NON_EMPTY_GROUP); stop its consumers first. "
                "Nothing deleted"
            )
        if subscribed:
            raise GroupSubscribedToTopicError(
                f"{who} subscribed to {', '.join(subscribed)}: they would commit these offsets again (Kafka's "
                "GROUP_SUBSCRIBED_TO_TOPIC); stop its consumers first. Nothing deleted"
            )

    if args.dry_run:
        refuse_if_live()
    else:
        asyncio.run(offsets.delete(args.group, chosen if args.topic is not None else None, check=refuse_if_live))
    verb = "would delete" if args.dry_run else "deleted"
    for topic, partition in chosen:
        print(f"group {args.group}: {verb} the offset of {topic}-{partition} ({committed[topic, partition].offset})")


def _servers(group: LiveGroup) -> str:
    """The pids of the servers ``group`` has members on, from their lock files' holder lines."""
    pids = [holder_fields(line).get("pid", "?") for line in group.server.split("; ")]
    return ", ".join(f"pid {pid}" for pid in pids)


def _log_end_offsets(log_dir: Path, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
    """Each partition's log end offset as a consumer sees it: the high watermark the server answers for
    "latest" (its :class:`~seglog.serve.catalog.Catalog`'s read-only log); None for a partition the
    log directory does not have or that cannot be opened (the catalog says why), and for every one
    when the high watermarks cannot be read (said once: the committed offsets are still listed)."""
    try:
        catalog = Catalog(log_dir, load_settings())
    except StorageError as e:
        logger.warning("log end offsets unknown: %s", e)
        return dict.fromkeys(partitions)
    try:
        ends: dict[TopicPartition, int | None] = {}
        for topic, partition in partitions:
            log = catalog.log(topic, partition)
            ends[topic, partition] = None if log is None else log.high_watermark
        return ends
    finally:
        catalog.close()


def _row(
    tp: TopicPartition, committed: CommittedOffset | None, end: int | None, member: LiveMember | None
) -> dict[str, Any]:
    """One partition of a group, with the fields of ``kafka-consumer-groups.sh --describe``: the
    committed offset (None: none, a partition assigned but not committed yet), the lag (log end
    offset - committed offset; None where either is unknown), the member it is assigned to."""
    topic, partition = tp
    return {
        "topic": topic,
        "partition": partition,
        "offset": None if committed is None else committed.offset,
        "leader_epoch": None if committed is None else committed.leader_epoch,
        "metadata": None if committed is None else committed.metadata,
        "log_end_offset": end,
        "lag": None if end is None or committed is None else end - committed.offset,
        "consumer_id": None if member is None else member.member_id,
        "host": None if member is None else member.host,
        "client_id": None if member is None else member.client_id,
    }


def _text(doc: dict[str, Any]) -> list[str]:
    """``kafka-consumer-groups.sh --describe``'s columns, "-" for what is not known (as it prints)."""
    fields = ("offset", "log_end_offset", "lag", "consumer_id", "host", "client_id")
    rows = [
        (g["group"], o["topic"], o["partition"], *("-" if o[f] is None else o[f] for f in fields))
        for g in doc["groups"]
        for o in g["offsets"]
    ]
    if not rows:
        return [f"no committed group offsets in {doc['file']}"]
    return format_table(DESCRIBE_COLUMNS, rows)
