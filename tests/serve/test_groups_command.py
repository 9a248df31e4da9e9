"""``seglog groups``: an operator lists the group offsets ``seglog serve`` keeps (they never expire)
and deletes a group's offsets, beside a running server, as ``kafka-consumer-groups.sh
--describe/--delete-offsets`` against a broker."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import warnings
from collections.abc import Callable
from pathlib import Path

from indexer.config import load_settings
from indexer.log_manager import LogManager
from tests.serve.conftest import SEGLOG, ServeProcess

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition

TOPIC = "orders"


def _groups(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SEGLOG, "groups", *args], capture_output=True, text=True, timeout=60, check=False)


def _committed(bootstrap: str, group: str) -> dict[int, int | None]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        return {p: consumer.committed(TopicPartition(TOPIC, p)) for p in range(3)}
    finally:
        consumer.close()


def test_an_operator_lists_and_deletes_a_groups_offsets_beside_the_server(
    serve: Callable[..., ServeProcess], tmp_path: Path
) -> None:
    """The offsets a consumer committed through the server are listed; deleting some of them (a
    dry run first, which writes nothing) takes them from the running server's answers at once, and
    the rest stay. There was no way to see or delete them but an admin client's OffsetFetch or
    DeleteGroups (every offset of a group), and a server kept answering the offsets it had read."""
    log_dir = tmp_path / "logs"
    with LogManager(log_dir, load_settings()) as manager:
        for p in range(3):
            log = manager.get_or_create_log(TOPIC, p)
            log.append({"value": [b"v"] * 20})
            log.update_high_watermark(log.log_end_offset)
    server = serve(log_dir)
    consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id="billing", enable_auto_commit=False)
    consumer.commit({TopicPartition(TOPIC, p): OffsetAndMetadata(10 + p, "m", -1) for p in range(3)})
    consumer.close()
    base = ["--log-dir", str(log_dir)]

    listed = _groups("list", *base, "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["groups"] == [
        {
            "group": "billing",
            "state": "Empty",
            "members": [],
            "offsets": [
                {
                    "topic": TOPIC,
                    "partition": p,
                    "offset": 10 + p,
                    "leader_epoch": -1,
                    "metadata": "m",
                    "log_end_offset": 20,
                    "lag": 10 - p,
                    "consumer_id": None,
                    "host": None,
                    "client_id": None,
                }
                for p in range(3)
            ],
        }
    ]
    assert _groups("list", *base).stdout.splitlines()[1].split() == [
        "billing",
        TOPIC,
        "0",
        "10",
        "20",
        "10",
        "-",
        "-",
        "-",
    ]

    delete = ["delete-offsets", *base, "--group", "billing", "--topic", TOPIC, "--partition", "0", "--partition", "2"]
    before = (log_dir / "group-offsets-checkpoint").read_bytes()
    dry = _groups(*delete, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines() == [
        f"group billing: would delete the offset of {TOPIC}-0 (10)",
        f"group billing: would delete the offset of {TOPIC}-2 (12)",
    ]
    assert (log_dir / "group-offsets-checkpoint").read_bytes() == before
    assert _committed(server.bootstrap, "billing") == {0: 10, 1: 11, 2: 12}

    done = _groups(*delete)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == f"group billing: deleted the offset of {TOPIC}-0 (10)"
    assert _committed(server.bootstrap, "billing") == {0: None, 1: 11, 2: None}

    assert _groups("delete-offsets", *base, "--group", "billing").returncode == 0  # the rest: the group goes
    assert _committed(server.bootstrap, "billing") == {0: None, 1: None, 2: None}
    assert _groups("list", *base).stdout.splitlines() == [
        f"no committed group offsets in {log_dir / 'group-offsets-checkpoint'}"
    ]


def test_naming_what_has_no_offsets_is_one_line(tmp_path: Path) -> None:
    """A typo (a group or partition without committed offsets, --partition without --topic) is one
    line and writes nothing; it must not look like "nothing there"."""
    offsets = tmp_path / "group-offsets-checkpoint"
    offsets.write_text(
        '0\n1\n{"group": "g", "leader_epoch": -1, "metadata": "", "offset": 5, "partition": 0, "topic": "t"}\n'
    )
    before = offsets.read_bytes()
    cases = {
        (
            "list",
            "--group",
            "nope",
        ): (
            f"seglog: GroupIdNotFoundError: group 'nope' has no committed offsets in {offsets} and no members on a "
            "running server"
        ),
        ("delete-offsets", "--group", "g", "--topic", "t", "--partition", "1"): (
            f"seglog: GroupIdNotFoundError: group 'g' has no committed offset of t-1 in {offsets}"
        ),
        ("delete-offsets", "--group", "g", "--topic", "u"): (
            f"seglog: GroupIdNotFoundError: group 'g' has no committed offset of u in {offsets}"
        ),
    }
    for (action, *options), message in cases.items():
        result = _groups(action, "--log-dir", str(tmp_path), *options)
        assert (result.returncode, result.stderr.strip().splitlines()) == (1, [message])
    result = _groups("delete-offsets", "--log-dir", str(tmp_path), "--group", "g", "--partition", "0")
    assert result.returncode == 2  # a usage error
    assert result.stderr.strip().splitlines()[-1] == (
        "seglog groups delete-offsets: error: --partition needs --topic T: a partition number names a partition "
        "of one topic"
    )
    assert offsets.read_bytes() == before


def test_list_shows_each_partitions_log_end_offset_and_lag_as_kafka_consumer_groups_describe(tmp_path: Path) -> None:
    """``seglog groups list`` shows what ``kafka-consumer-groups.sh --describe`` does per partition:
    the committed offset, the log end offset a consumer can reach (the high watermark the server
    answers for "latest", here 20 of 30 records on disk) and the lag; a partition the log directory
    does not have gets "-" for both, as Kafka's tool prints for a partition without a leader. There
    was no log end offset or lag: an operator could not tell how far behind a group was."""
    log_dir = tmp_path / "logs"
    with LogManager(log_dir, load_settings()) as manager:
        for p in range(2):
            log = manager.get_or_create_log(TOPIC, p)
            log.append({"value": [b"v"] * 30})
            log.update_high_watermark(20)
        manager.checkpoint_high_watermarks()
    line = '{"group": "billing", "leader_epoch": -1, "metadata": "m", "offset": %d, "partition": %d, "topic": "%s"}\n'
    entries = [line % (5, 0, TOPIC), line % (20, 1, TOPIC), line % (7, 0, "gone")]
    (log_dir / "group-offsets-checkpoint").write_text(f"0\n{len(entries)}\n" + "".join(entries))

    text = _groups("list", "--log-dir", str(log_dir))
    assert text.returncode == 0, text.stderr
    assert [row.split() for row in text.stdout.splitlines()] == [
        ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"],
        ["billing", "gone", "0", "7", "-", "-", "-", "-", "-"],
        ["billing", TOPIC, "0", "5", "20", "15", "-", "-", "-"],
        ["billing", TOPIC, "1", "20", "20", "0", "-", "-", "-"],
    ]
    listed = _groups("list", "--log-dir", str(log_dir), "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)["groups"][0]["offsets"]
    assert [(r["topic"], r["partition"], r["offset"], r["log_end_offset"], r["lag"]) for r in rows] == [
        ("gone", 0, 7, None, None),
        (TOPIC, 0, 5, 20, 15),
        (TOPIC, 1, 20, 20, 0),
    ]
    assert rows[1]["metadata"] == "m" and rows[1]["leader_epoch"] == -1 and rows[1]["consumer_id"] is None


def _wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_deleting_a_live_groups_offsets_is_refused_as_kafka_refuses_it_until_its_server_is_gone(
    serve: Callable[..., ServeProcess], tmp_path: Path
) -> None:
    """While a member of group billing, subscribed to orders, is live on a running server, deleting
    the group's offsets of orders is refused as Kafka refuses it (GROUP_SUBSCRIBED_TO_TOPIC: the
    member would commit them again), and so is deleting all of them (NON_EMPTY_GROUP), a dry run
    too; nothing is written. Another topic's offsets go. ``list`` shows the member on its
    partitions, and "-" for the one it has not committed. A server killed (SIGKILL) blocks nothing.
    The command deleted them beside the live member, which wrote them back at its next commit."""
    log_dir = tmp_path / "logs"
    with LogManager(log_dir, load_settings()) as manager:
        for topic in (TOPIC, "audit"):
            log = manager.get_or_create_log(topic, 0)
            log.append({"value": [b"v"] * 20})
            log.update_high_watermark(log.log_end_offset)
        manager.checkpoint_high_watermarks()
    server = serve(log_dir)
    committer = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id="billing", enable_auto_commit=False)
    committer.commit({TopicPartition("audit", 0): OffsetAndMetadata(7, "", -1)})
    committer.close()
    member = KafkaConsumer(
        bootstrap_servers=server.bootstrap,
        group_id="billing",
        client_id="biller",
        enable_auto_commit=False,
        session_timeout_ms=6000,
    )
    member.subscribe([TOPIC])
    _wait_for(lambda: bool(member.poll(timeout_ms=100) is not None and member.assignment()), "no assignment")
    base = ["--log-dir", str(log_dir), "--group", "billing"]

    def listed() -> list[dict[str, object]]:
        result = _groups("list", *base, "--json")
        assert result.returncode == 0, result.stderr
        return list(json.loads(result.stdout)["groups"][0]["offsets"])

    _wait_for(lambda: listed()[1]["client_id"] == "biller", "the member is not listed")
    rows = listed()
    assert [(r["topic"], r["offset"], r["log_end_offset"], r["lag"], r["host"]) for r in rows] == [
        ("audit", 7, 20, 13, None),
        (TOPIC, None, 20, None, "/127.0.0.1"),
    ]
    text = _groups("list", *base).stdout.splitlines()
    assert text[2].split()[:6] == ["billing", TOPIC, "0", "-", "20", "-"]

    member.commit({TopicPartition(TOPIC, 0): OffsetAndMetadata(12, "", -1)})
    before = (log_dir / "group-offsets-checkpoint").read_bytes()
    pid = server.proc.pid
    subscribed = (
        f"seglog: GroupSubscribedToTopicError: group 'billing' has 1 member on a running seglog serve (pid {pid}) "
        f"subscribed to {TOPIC}: they would commit these offsets again (Kafka's GROUP_SUBSCRIBED_TO_TOPIC); stop "
        "its consumers first. Nothing deleted"
    )
    for dry in ([], ["--dry-run"]):
        refused = _groups("delete-offsets", *base, "--topic", TOPIC, *dry)
        assert (refused.returncode, refused.stderr.splitlines(), refused.stdout) == (1, [subscribed], "")
        refused = _groups("delete-offsets", *base, *dry)
        assert refused.returncode == 1
        assert refused.stderr.startswith("seglog: GroupNotEmptyError: group 'billing' has 1 member on a running")
    assert (log_dir / "group-offsets-checkpoint").read_bytes() == before
    assert _groups("delete-offsets", *base, "--topic", "audit").returncode == 0

    server.stop(signal.SIGKILL)  # a crash: its published members must not block deletes forever
    done = _groups("delete-offsets", *base, "--topic", TOPIC)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"group billing: deleted the offset of {TOPIC}-0 (12)"]
    member.close(autocommit=False)


def test_list_with_an_unreadable_high_watermark_checkpoint_still_shows_the_committed_offsets(tmp_path: Path) -> None:
    """A replication-offset-checkpoint that cannot be read leaves the log end offsets unknown ("-",
    with one warning naming the file), not the committed offsets: ``list`` failed with exit 1."""
    log_dir = tmp_path / "logs"
    with LogManager(log_dir, load_settings()) as manager:
        manager.get_or_create_log(TOPIC, 0).append({"value": [b"v"] * 3})
    (log_dir / "replication-offset-checkpoint").write_text("0\n1\nnot a line\n")
    entry = {"group": "g", "leader_epoch": -1, "metadata": "", "offset": 2, "partition": 0, "topic": TOPIC}
    (log_dir / "group-offsets-checkpoint").write_text(f"0\n1\n{json.dumps(entry)}\n")
    listed = _groups("list", "--log-dir", str(log_dir))
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[1].split() == ["g", TOPIC, "0", "2", "-", "-", "-", "-", "-"]
    warnings_said = listed.stderr.strip().splitlines()
    assert len(warnings_said) == 1 and "replication-offset-checkpoint" in warnings_said[0], warnings_said
