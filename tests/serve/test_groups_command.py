"""``seglog groups``: an operator lists the group offsets ``seglog serve`` keeps (they never expire)
and deletes a group's offsets, beside a running server, as ``kafka-consumer-groups.sh
--describe/--delete-offsets`` against a broker."""

from __future__ import annotations

import json
import subprocess
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
            "offsets": [
                {"topic": TOPIC, "partition": p, "offset": 10 + p, "leader_epoch": -1, "metadata": "m"}
                for p in range(3)
            ],
        }
    ]
    assert _groups("list", *base).stdout.splitlines()[1].split() == ["billing", TOPIC, "0", "10", "-1", "m"]

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
        ): f"seglog: GroupIdNotFoundError: group 'nope' has no committed offsets in {offsets}",
        ("delete-offsets", "--group", "g", "--topic", "t", "--partition", "1"): (
            f"seglog: GroupIdNotFoundError: group 'g' has no committed offset of t-1 in {offsets}"
        ),
        ("delete-offsets", "--group", "g", "--topic", "u"): (
            f"seglog: GroupIdNotFoundError: group 'g' has no committed offset of u in {offsets}"
        ),
        ("delete-offsets", "--group", "g", "--partition", "0"): "seglog: ConfigError: --partition needs --topic",
    }
    for (action, *options), message in cases.items():
        result = _groups(action, "--log-dir", str(tmp_path), *options)
        assert (result.returncode, result.stderr.strip().splitlines()) == (1, [message])
    assert offsets.read_bytes() == before
