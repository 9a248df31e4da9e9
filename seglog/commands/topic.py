"""Create, describe or grow the topics of a log directory; a topic's partition count is fixed.

A topic is created with all its partitions (``<topic>-0`` .. ``<topic>-<N-1>``, each an empty
segment at offset 0), as Kafka creates them, and its partition count is recorded in the log
directory (``seglog-topics.json``). Every writer then hashes keys over that one count: a sink or
``seglog run`` asked for another count fails instead of sending keys to other partitions. Growing
a topic is this explicit command (Kafka's ``kafka-topics.sh --alter --partitions``); as in Kafka,
keys written before hash to other partitions afterwards, and a topic never shrinks.

``describe`` lists each topic with its partition count (read-only; a log directory written before
the count was recorded shows the count its partition directories imply).

Unlike ``kafka-topics.sh --config``, a topic's configs (``retention.ms``, ...) are not stored with it:
every command that writes or maintains the topic reads them from the settings files'
``[topics."<name>"]`` table (``$SEGLOG_CONF``, ``--conf``) and its own ``--config``.

examples:
  seglog topic create --log-dir data/logs --topic events --partitions 4
  seglog topic describe --log-dir data/logs
  seglog topic alter --log-dir data/logs --topic events --partitions 8
"""

from __future__ import annotations

import argparse
from typing import Any

from indexer.errors import UnknownTopicOrPartitionError
from indexer.log_manager import LogManager, check_new_partitions, check_topic_request
from seglog.cli import (
    add_action,
    add_log_config_arguments,
    log_dir_from_args,
    partition_count,
    settings_from_args,
)
from seglog.output import Output, format_table


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``seglog topic``: one of ``create``, ``describe``, ``alter``."""
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = add_action(
        actions,
        "create",
        "create a topic with all its partitions",
        "Create a topic with all its partitions (<topic>-0 .. <topic>-<N-1>, each an empty segment at\n"
        "offset 0) and record its partition count in the log directory (seglog-topics.json), which is\n"
        "created if missing. A topic that exists already is a TopicExistsError, whatever its count;\n"
        "but a creation interrupted part-way (the count recorded, some partitions missing) is completed\n"
        "by the same command run again.",
        ["seglog topic create --log-dir data/logs --topic events --partitions 4"],
    )
    alter = add_action(
        actions,
        "alter",
        "grow a topic to more partitions (keys re-hash, as in Kafka)",
        "Grow a topic to N partitions (kafka-topics.sh --alter --partitions): the new partitions are\n"
        "created and the count recorded. Keys written before hash to other partitions afterwards; a\n"
        "topic never shrinks (a smaller or equal N is an InvalidPartitionsError).",
        ["seglog topic alter --log-dir data/logs --topic events --partitions 8"],
    )
    describe = add_action(
        actions,
        "describe",
        "list topics and their partition counts",
        "List the topics of a log directory and their partition counts, read-only (a directory written\n"
        "before counts were recorded shows the count its partition directories imply).",
        [
            "seglog topic describe --log-dir data/logs",
            "seglog topic describe --log-dir data/logs --topic events --json",
        ],
    )
    for sub in (create, alter, describe):
        sub.add_argument("--log-dir", required=True, metavar="DIR", help="the log directory")
        add_log_config_arguments(sub, topic_keys=False)
    for sub, required in ((create, True), (alter, True), (describe, False)):
        sub.add_argument("--topic", required=required, metavar="T", help="topic name")
    create.add_argument("--partitions", required=True, type=partition_count, metavar="N", help="partition count")
    alter.add_argument("--partitions", required=True, type=partition_count, metavar="N", help="the new, larger count")
    describe.add_argument("--json", action="store_true", help="print one JSON document")


def run(args: argparse.Namespace) -> int:
    """Do the action; 0 on success."""
    settings = settings_from_args(args)
    if args.action == "describe":
        manager = LogManager(log_dir_from_args(args), settings, read_only=True)
        try:
            topics = manager.topics()
        finally:
            manager.close()
        if args.topic is not None:
            if args.topic not in topics:
                raise UnknownTopicOrPartitionError(f"topic {args.topic!r} does not exist in {args.log_dir}")
            topics = {args.topic: topics[args.topic]}
        doc = {"log_dir": str(manager.log_dir), "topics": [{"topic": t, "partitions": n} for t, n in topics.items()]}
        Output(json_mode=args.json).emit(doc, _text)
        return 0
    log_dir = log_dir_from_args(args, must_exist=args.action == "alter")
    check_topic_request(args.topic, args.partitions)  # before the writer creates the log directory
    if args.action == "create":  # (alter's exists: add_partitions checks its growth against the count)
        check_new_partitions(args.topic, 0, args.partitions)
    with LogManager(log_dir, settings) as manager:
        if args.action == "create":
            manager.create_topic(args.topic, args.partitions)
            print(f"created topic {args.topic} with {args.partitions} partitions in {args.log_dir}")
        else:
            old = manager.add_partitions(args.topic, args.partitions)
            if old == args.partitions:  # an interrupted alter, run again
                print(f"topic {args.topic}: created its missing partitions, {old} in all, in {args.log_dir}")
            else:
                print(f"topic {args.topic}: {old} -> {args.partitions} partitions in {args.log_dir}")
    return 0


def _text(doc: dict[str, Any]) -> list[str]:
    if not doc["topics"]:
        return [f"no topics in {doc['log_dir']}"]
    return format_table(("topic", "partitions"), [(t["topic"], t["partitions"]) for t in doc["topics"]])
