"""User mistakes, dry runs, read-only places and damage, met through the command line as a user meets
them (issue 10 items 4, 6, 7, 8 and its list of user mistakes): one line ``seglog: <Error>: ...``,
exit 1, no traceback, nothing written, nothing hidden."""

from __future__ import annotations

import hashlib
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from indexer.config import Settings
from indexer.errors import InvalidPartitionsError, TopicExistsError
from indexer.file_names import PARTITION_LOCK_FILE, TOPICS_FILE
from indexer.lock import FileLock
from indexer.log_manager import LogManager
from seglog.cli import main
from tests.cli import append_file, maintain_once, read_records
from tests.filesystems import TinyFs, read_only_view
from tests.maintenance.conftest import lines_of, wait_for

REPO = Path(__file__).resolve().parents[2]
TS = 1_700_000_000_000


def _records(n: int, start: int = 0) -> str:
    return "".join(
        json.dumps({"key": f"k{i}", "value": f"value-{i}" * 20, "timestamp": TS + i}) + "\n"
        for i in range(start, start + n)
    )


def _append(tmp_path: Path, log_dir: Path, text: str, partition: int = 0, *extra: str) -> int:
    source = tmp_path / "in.jsonl"
    source.write_text(text)
    return append_file(log_dir, "events", source, *extra, partition=partition)


@pytest.fixture
def log_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """A 2-partition topic of 3 batches of 1000 records each, made by `seglog topic create` and `append`."""
    logs = tmp_path / "logs"
    assert main(["topic", "create", "--log-dir", str(logs), "--topic", "events", "--partitions", "2"]) == 0
    for partition in (0, 1):
        for batch in range(3):
            assert _append(tmp_path, logs, _records(1000, batch * 1000), partition) == 0
    capsys.readouterr()
    return logs


def _snapshot(root: Path) -> dict[str, tuple[int, int, str]]:
    """Every entry under ``root``: size, mtime and content digest (a dry run must change none)."""
    out = {}
    for path in sorted(root.rglob("*")):
        st = path.stat()
        digest = hashlib.blake2b(path.read_bytes()).hexdigest() if path.is_file() else "dir"
        out[str(path.relative_to(root))] = (st.st_size, st.st_mtime_ns, digest)
    return out


def _one_error_line(err: str, error_type: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("seglog: ")]
    assert len(lines) == 1, err
    assert lines[0].startswith(f"seglog: {error_type}: "), err
    assert "Traceback" not in err and "looks like a bug" not in err, err
    return lines[0]


def _cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``seglog ARGS`` in a subprocess, with this worktree first on the path."""
    full_env = {k: v for k, v in os.environ.items() if k != "SEGLOG_CONF"}
    full_env.update({"PYTHONPATH": str(REPO), **(env or {})})
    code = "import sys; from seglog.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=120
    )


# --- item 4: a topic's partition count is fixed at creation ------------------------------------


def test_topic_create_makes_every_partition_and_records_the_count(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logs = tmp_path / "logs"
    assert main(["topic", "create", "--log-dir", str(logs), "--topic", "events", "--partitions", "4"]) == 0
    assert sorted(p.name for p in logs.glob("events-*")) == [f"events-{i}" for i in range(4)]
    assert json.loads((logs / TOPICS_FILE).read_text())["topics"] == {"events": {"partitions": 4}}
    capsys.readouterr()
    assert main(["topic", "describe", "--log-dir", str(logs), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["topics"] == [{"topic": "events", "partitions": 4}]

    assert main(["topic", "create", "--log-dir", str(logs), "--topic", "events", "--partitions", "4"]) == 1
    _one_error_line(capsys.readouterr().err, "TopicExistsError")
    assert main(["topic", "alter", "--log-dir", str(logs), "--topic", "events", "--partitions", "3"]) == 1
    assert "never lose" in _one_error_line(capsys.readouterr().err, "InvalidPartitionsError")
    assert main(["topic", "alter", "--log-dir", str(logs), "--topic", "events", "--partitions", "6"]) == 0
    assert sorted(p.name for p in logs.glob("events-*")) == [f"events-{i}" for i in range(6)]


@pytest.mark.parametrize("action", [["create", "--partitions", "4"], ["alter", "--partitions", "6"], ["describe"]])
def test_topic_configs_given_to_seglog_topic_are_refused_not_dropped(
    action: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`kafka-topics.sh --create --config retention.ms=...` stores the config with the topic; seglog
    keeps topic configs in the settings files, so `seglog topic ... --config` must say where they
    go instead of creating the topic with the default retention in silence."""
    logs = tmp_path / "logs"
    if action[0] != "create":
        assert main(["topic", "create", "--log-dir", str(logs), "--topic", "events", "--partitions", "2"]) == 0
    before = _snapshot(tmp_path)
    capsys.readouterr()
    args = ["topic", action[0], "--log-dir", str(logs), "--topic", "events", *action[1:]]
    assert main([*args, "--config", "retention.ms=1000"]) == 1
    line = _one_error_line(capsys.readouterr().err, "ConfigError")
    assert "retention.ms" in line and '[topics."events"]' in line, line
    assert _snapshot(tmp_path) == before
    assert main(["topic", action[0], "--help"]) == 0
    assert "--config" not in capsys.readouterr().out  # the option is not offered


def test_append_beyond_the_topic_is_refused_and_writes_nothing(
    log_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = _snapshot(log_dir)
    assert _append(tmp_path, log_dir, _records(3), 2) == 1
    line = _one_error_line(capsys.readouterr().err, "UnknownTopicOrPartitionError")
    assert "has 2 partitions" in line and "seglog topic alter" in line
    after = _snapshot(log_dir)
    marker = ".kafka_cleanshutdown"  # the writer's open and close rewrote the marker: same bytes, new mtime
    assert after.pop(marker)[2] == before.pop(marker)[2] and after == before


def test_a_refused_append_to_a_new_topic_creates_nothing(
    log_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    big = json.dumps({"value": "x" * 2_000_000}) + "\n"
    source = tmp_path / "big.jsonl"
    source.write_text(_records(2) + big)
    before = _snapshot(log_dir)
    assert append_file(log_dir, "fresh", source) == 1
    line = _one_error_line(capsys.readouterr().err, "RecordTooLargeError")
    assert "big.jsonl: line 3: " in line and "max.message.bytes = 1048588 of fresh-0" in line, line
    assert _snapshot(log_dir) == before  # no fresh-0, no count recorded, no marker rewritten
    assert append_file(tmp_path / "new", "fresh", source) == 1
    _one_error_line(capsys.readouterr().err, "RecordTooLargeError")
    assert not (tmp_path / "new").exists()


def test_a_file_where_a_partition_directory_goes_is_named_and_nothing_recorded(
    log_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A refused topic creation or growth recorded the new count anyway, so `topic describe` listed
    a topic that `read` said does not exist."""
    (log_dir / "fresh-0").write_text("not a partition")
    (log_dir / "events-2").write_text("not a partition")
    (tmp_path / "in.jsonl").write_text(_records(2))
    before = _snapshot(log_dir)
    for command in (
        ["append", "--log-dir", str(log_dir), "--topic", "fresh", "--partition", "0", str(tmp_path / "in.jsonl")],
        ["topic", "create", "--log-dir", str(log_dir), "--topic", "fresh", "--partitions", "3"],
        ["topic", "alter", "--log-dir", str(log_dir), "--topic", "events", "--partitions", "3"],
    ):
        assert main(command) == 1
        line = _one_error_line(capsys.readouterr().err, "StorageError")
        assert "is a file where the directory of partition" in line, line
    # The same files with the same bytes (the writer's open and close rewrote the marker and took the
    # directory's lock: new mtimes).
    assert {k: (size, digest) for k, (size, _, digest) in _snapshot(log_dir).items()} == {
        k: (size, digest) for k, (size, _, digest) in before.items()
    }


@pytest.mark.parametrize(
    "command, error",
    [
        (("append", "--topic", "bad topic", "--partition", "0"), "InvalidTopicError"),
        (("topic", "create", "--topic", "bad topic", "--partitions", "2"), "InvalidTopicError"),
    ],
)
def test_a_refused_topic_name_or_count_creates_no_log_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: tuple[str, ...], error: str
) -> None:
    """These were refused after the writer had created the log directory (and its clean-shutdown marker)."""
    (tmp_path / "in.jsonl").write_text(_records(1))
    name = command[:2] if command[0] == "topic" else command[:1]
    args = [*name, "--log-dir", str(tmp_path / "new"), *command[len(name) :]]
    assert main(args + ([str(tmp_path / "in.jsonl")] if command[0] == "append" else [])) == 1
    _one_error_line(capsys.readouterr().err, error)
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("count", ["2147483647", "10001"])
def test_a_topic_creation_makes_at_most_kafkas_partitions_per_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], count: str
) -> None:
    """`topic create --partitions 2147483647` went on to make two billion partition directories (after
    checking each path first). Kafka's controller creates at most 10,000 partitions per request; so
    does seglog, creation and growth alike, and says so before the log directory is created."""
    logs = tmp_path / "logs"
    assert main(["topic", "create", "--log-dir", str(logs), "--topic", "t", "--partitions", count]) == 1
    line = _one_error_line(capsys.readouterr().err, "InvalidPartitionsError")
    assert f"topic 't' would get {int(count)} new partitions at once, more than 10000" in line, line
    assert "seglog topic alter" in line
    assert not logs.exists()


def test_a_topic_grows_by_at_most_kafkas_partitions_per_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logs = tmp_path / "logs"
    assert main(["topic", "create", "--log-dir", str(logs), "--topic", "t", "--partitions", "2"]) == 0
    before = {name: (size, digest) for name, (size, _, digest) in _snapshot(logs).items()}
    capsys.readouterr()
    assert main(["topic", "alter", "--log-dir", str(logs), "--topic", "t", "--partitions", "10003"]) == 1
    line = _one_error_line(capsys.readouterr().err, "InvalidPartitionsError")
    assert "topic 't' would get 10001 new partitions at once, more than 10000" in line, line
    assert {name: (size, digest) for name, (size, _, digest) in _snapshot(logs).items()} == before


@pytest.mark.parametrize("count", ["0", "-1"])
def test_a_partition_count_below_one_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], count: str
) -> None:
    logs = tmp_path / "logs"
    assert main(["topic", "create", "--log-dir", str(logs), "--topic", "t", "--partitions", count]) == 2
    assert "argument --partitions: expected a partition count 1..2147483647" in capsys.readouterr().err
    assert not logs.exists()


def test_an_append_creates_a_new_topic_with_kafkas_default_of_one_partition(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    assert _append(tmp_path, logs, _records(3), 0) == 0
    assert sorted(p.name for p in logs.glob("events-*")) == ["events-0"]
    assert json.loads((logs / TOPICS_FILE).read_text())["topics"] == {"events": {"partitions": 1}}


@pytest.mark.parametrize("partition", [1, 5000, 2147483646])
def test_an_append_past_a_new_topics_one_partition_creates_nothing_and_names_topic_create(
    tmp_path: Path, log_dir: Path, capsys: pytest.CaptureFixture[str], partition: int
) -> None:
    """`append --partition 5000` to a new topic (a typo) created partitions 0..5000, 20 s and more
    (2147483646: forever); killed part-way, the topics file claimed partitions that had no directory.
    Kafka auto-creates a topic with num.partitions (1) and refuses a produce past it."""
    (tmp_path / "in.jsonl").write_text(_records(2))
    before = _snapshot(log_dir)
    for logs in (log_dir, tmp_path / "new"):
        argv = ["append", "--log-dir", str(logs), "--topic", "fresh", "--partition", str(partition)]
        started = time.monotonic()
        assert main([*argv, str(tmp_path / "in.jsonl")]) == 1
        assert time.monotonic() - started < 60
        line = _one_error_line(capsys.readouterr().err, "UnknownTopicOrPartitionError")
        assert f"seglog topic create --log-dir {logs} --topic fresh --partitions" in line, line
        assert f"partition {partition}" in line and "1 partition" in line, line
    assert _snapshot(log_dir) == before
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("action", ["create", "alter"])
def test_a_topic_creation_interrupted_part_way_says_so_and_the_same_command_again_completes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, action: str
) -> None:
    """Ctrl-C during `topic create --partitions 3000` left the count recorded and partitions without a
    directory, silently: `read` said such a partition does not exist although the topic 'has' it, and
    the same command again said TopicExistsError, leaving them missing."""
    import indexer.log_manager

    logs, count = tmp_path / "logs", 3000
    command = ["topic", action, "--log-dir", str(logs), "--topic", "t", "--partitions", str(count)]
    if action == "alter":
        assert main(["topic", "create", "--log-dir", str(logs), "--topic", "t", "--partitions", "2"]) == 0
    created = []
    real = indexer.log_manager.create_empty_partition

    def interrupted_at_1500(directory: Path) -> None:
        if len(created) == 1500:
            raise KeyboardInterrupt
        created.append(directory)
        real(directory)

    monkeypatch.setattr(indexer.log_manager, "create_empty_partition", interrupted_at_1500)
    capsys.readouterr()
    assert main(command) == 130
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == "seglog: interrupted", err
    assert f"run `seglog topic {action} --log-dir {logs} --topic t --partitions {count}` again" in err, err
    assert json.loads((logs / TOPICS_FILE).read_text())["topics"] == {"t": {"partitions": count}}
    assert not (logs / "t-2999").exists()
    assert main(["read", "--log-dir", str(logs), "--topic", "t", "--partition", "2999", "--from-beginning"]) == 1
    line = _one_error_line(capsys.readouterr().err, "UnknownTopicOrPartitionError")
    assert "has no directory" in line and f"seglog topic create --log-dir {logs} --topic t --partitions {count}" in line

    monkeypatch.setattr(indexer.log_manager, "create_empty_partition", real)
    assert main(command) == 0
    out = capsys.readouterr().out
    assert str(count) in out and f"in {logs}" in out, out
    assert sorted(p.name for p in logs.glob("t-*")) == sorted(f"t-{p}" for p in range(count))
    assert read_records(capsys, logs, "t", "--from-beginning", partition=2999) == []
    assert main(["topic", "create", "--log-dir", str(logs), "--topic", "t", "--partitions", str(count)]) == 1
    _one_error_line(capsys.readouterr().err, "TopicExistsError")


def test_an_old_directory_gets_its_count_inferred_once_and_recorded(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    with LogManager(logs, Settings()) as manager:  # partition directories only, as before the record existed
        manager.get_or_create_log("t", 0)
        manager.get_or_create_log("t", 2)
    assert not (logs / TOPICS_FILE).exists()
    with LogManager(logs, Settings(), read_only=True) as reader:
        assert reader.topic_partitions("t") == 3  # inferred, not written by a reader
    assert not (logs / TOPICS_FILE).exists()
    with LogManager(logs, Settings()) as manager:
        assert manager.topic_partitions("t") == 3
        assert manager.create_topic("t", None, exist_ok=True) == 3
        with pytest.raises(InvalidPartitionsError, match="has 3 partitions"):
            manager.create_topic("t", 4, exist_ok=True)
        with pytest.raises(TopicExistsError):
            manager.create_topic("t", 3)
    assert json.loads((logs / TOPICS_FILE).read_text())["topics"] == {"t": {"partitions": 3}}
    assert (logs / "t-1").is_dir()  # the missing partition was created


def test_a_smaller_count_than_the_topics_is_not_told_to_alter_to_it(tmp_path: Path) -> None:
    """`seglog run --partitions 3` on a 4-partition topic: `topic alter --partitions 3` would be
    refused (topics never shrink), so the error names the count to pass instead; a larger count is
    told how to grow the topic."""
    with LogManager(tmp_path, Settings()) as manager:
        manager.create_topic("t", 4)
        with pytest.raises(InvalidPartitionsError) as smaller:
            manager.create_topic("t", 3, exist_ok=True)
        with pytest.raises(InvalidPartitionsError) as larger:
            manager.create_topic("t", 6, exist_ok=True)
    assert "--partitions 3" not in str(smaller.value) and "never shrink" in str(smaller.value)
    assert "use 4 partitions" in str(smaller.value)
    assert "seglog topic alter" in str(larger.value) and "--partitions 6" in str(larger.value)


# --- item 6: dry runs write nothing; read-only places fail in one line per partition ---------------


def test_recover_dry_run_writes_nothing_not_even_lock_files(log_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for lock in log_dir.glob(f"*/{PARTITION_LOCK_FILE}"):
        lock.unlink()  # as in a copied or broker-written directory
    data = log_dir / "events-0" / "00000000000000000000.log"
    with open(data, "r+b") as f:  # damage the second batch: the dry run has something to report
        f.seek(data.stat().st_size // 2)
        f.write(b"\xff" * 16)
    before = _snapshot(log_dir)
    assert main(["recover", "--log-dir", str(log_dir), "--dry-run", "--no-progress"]) == 3
    out = capsys.readouterr().out
    assert _snapshot(log_dir) == before
    # it says what recovery would do, not that anything is gone or quarantined already (it said both)
    assert "COMMITTED DATA WOULD BE LOST" in out and "would lose committed offsets" in out, out
    assert "would keep removed bytes in quarantine: " in out, out
    assert " are gone" not in out and "lost committed" not in out and "kept in quarantine" not in out, out


def test_recover_dry_run_of_a_clean_directory_logs_no_error(log_dir: Path) -> None:
    result = _cli("recover", "--log-dir", str(log_dir), "--dry-run", "--no-progress")
    assert result.returncode == 0, result.stderr
    assert "ERROR" not in result.stderr and "no committed data would be lost" in result.stdout


def test_recover_dry_run_counts_a_missing_index_without_calling_it_damage(log_dir: Path) -> None:
    """A missing index file is no damage (a broker creates them lazily, as in the broker-written
    vectors; `describe` shows `-`, and recovery creates it without a word), yet `recover --dry-run`
    logged a WARNING `index file ... is missing` for each one (143 lines for the transactions
    vector). It still counts the segment in `indexes rebuilt`, as the recovery that creates the file
    does, and logs nothing."""
    (log_dir / "events-0" / "00000000000000000000.index").unlink()
    dry_run = _cli("recover", "--log-dir", str(log_dir), "--dry-run", "--no-progress", "--json")
    assert dry_run.returncode == 0 and dry_run.stderr == "", dry_run.stderr
    counts = {p["partition"]: p["indexes_rebuilt"] for p in json.loads(dry_run.stdout)["partitions"]}
    recovered = _cli("recover", "--log-dir", str(log_dir), "--no-progress", "--json")
    assert recovered.returncode == 0 and recovered.stderr == "", recovered.stderr
    assert counts == {p["partition"]: p["indexes_rebuilt"] for p in json.loads(recovered.stdout)["partitions"]}
    assert counts == {"events-0": 1, "events-1": 0}


@pytest.mark.parametrize("dry_run", [False, True])
def test_recover_leaves_a_directory_that_holds_no_partition_file_alone(
    log_dir: Path, capsys: pytest.CaptureFixture[str], dry_run: bool
) -> None:
    """`seglog recover --log-dir` of a directory that also holds another program's directories named
    like partitions (`cache-2`, or `/tmp` and its `<name>-<pid>` directories, given by mistake)
    made each a partition: an empty segment, index files and a lock file written into it, reported as
    recovered. A directory that holds files but no segment or other partition file, and that no
    checkpoint or sink commit names, is no partition: recover skips it, says why, changes nothing
    there and exits 1 (the dry run says the same). (An empty one is a partition without a segment
    yet: test_dry_run_changes_nothing_and_predicts_the_recovery.)"""
    foreign = log_dir / "cache-2"
    foreign.mkdir()
    (foreign / "readme").write_text("not a partition")
    before = _snapshot(foreign)
    argv = ["recover", "--log-dir", str(log_dir), "--no-progress", *(["--dry-run"] if dry_run else [])]
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert _snapshot(foreign) == before
    assert f"cache-2: {foreign} holds other files but no segment or other partition file, and no" in out, out
    statuses = {line.split()[0]: line.split()[1] for line in out.splitlines()[2:5]}
    assert statuses == {
        "cache-2": "skipped",
        **dict.fromkeys(("events-0", "events-1"), "checked" if dry_run else "recovered"),
    }


@pytest.fixture
def read_only(log_dir: Path, tmp_path: Path) -> Iterator[Path]:
    """``log_dir`` seen through a read-only bind mount."""
    with read_only_view(log_dir, tmp_path / "ro") as mount_point:
        yield mount_point


@pytest.mark.parametrize(
    "command",
    [("recover", "--no-progress"), ("maintain", "--once", "retention", "--config", "retention.ms=1")],
)
def test_read_only_file_system_is_one_line_for_the_directory(read_only: Path, command: tuple[str, ...]) -> None:
    before = _snapshot(read_only)
    result = _cli(command[0], "--log-dir", str(read_only), *command[1:])
    assert result.returncode == 1, result.stderr
    line = _one_error_line(result.stderr, "ReadOnlyLogDirectoryError")
    assert f"log directory {read_only} is on a read-only file system" in line, line
    assert result.stderr.strip() == line, result.stderr  # nothing per partition
    assert _snapshot(read_only) == before


def test_read_only_file_system_writers_say_so_in_one_line(read_only: Path, tmp_path: Path) -> None:
    """A writer's open said only that the clean-shutdown marker could not be deleted."""
    source = tmp_path / "in.jsonl"
    source.write_text(_records(2))
    before = _snapshot(read_only)
    for command in (
        ("append", "--log-dir", str(read_only), "--topic", "events", "--partition", "0", str(source)),
        ("topic", "create", "--log-dir", str(read_only), "--topic", "more", "--partitions", "2"),
        ("topic", "alter", "--log-dir", str(read_only), "--topic", "events", "--partitions", "3"),
    ):
        result = _cli(*command)
        assert result.returncode == 1, result.stderr
        line = _one_error_line(result.stderr, "ReadOnlyLogDirectoryError")
        assert f"log directory {read_only} is on a read-only file system" in line, line
    assert _snapshot(read_only) == before


def test_a_log_directory_to_create_on_a_read_only_file_system_is_said_so_in_one_line(
    read_only: Path, tmp_path: Path
) -> None:
    """A writer creating its log directory under a read-only place said `StorageError: Failed to create
    the log directory ...: Read-only file system`, where an existing directory there is a
    `ReadOnlyLogDirectoryError` naming what works instead; it is that error now, naming the place."""
    source = tmp_path / "in.jsonl"
    source.write_text(_records(2))
    new_dir = read_only / "new" / "logs"
    for command in (
        ("append", "--log-dir", str(new_dir), "--topic", "events", "--partition", "0", str(source)),
        ("topic", "create", "--log-dir", str(new_dir), "--topic", "more", "--partitions", "2"),
    ):
        result = _cli(*command)
        assert result.returncode == 1, result.stderr
        line = _one_error_line(result.stderr, "ReadOnlyLogDirectoryError")
        assert f"log directory {new_dir} cannot be created: {read_only} is on a read-only file system" in line, line
    assert not (read_only / "new").exists()


def test_read_only_file_system_quarantine_purge_says_so_once(read_only: Path) -> None:
    """A purge failed on the first quarantine file it could not delete (or said it deleted none)."""
    result = _cli("quarantine", "purge", "--log-dir", str(read_only), "--all")
    assert result.returncode == 1, result.stderr
    line = _one_error_line(result.stderr, "ReadOnlyLogDirectoryError")
    assert "seglog quarantine purge can delete nothing there" in line, line
    assert _cli("quarantine", "purge", "--log-dir", str(read_only), "--all", "--dry-run").returncode == 0


def test_read_only_file_system_dry_run_and_readers_work(read_only: Path) -> None:
    result = _cli("recover", "--log-dir", str(read_only), "--dry-run", "--no-progress")
    assert result.returncode == 0 and not result.stderr.strip(), result.stderr
    assert _cli("describe", "--log-dir", str(read_only), "--verify").returncode == 0
    read = _cli("read", "--log-dir", str(read_only), "--topic", "events", "--partition", "1", "--from-beginning")
    assert read.returncode == 0 and len(read.stdout.splitlines()) == 3000


def test_append_on_a_full_disk_names_the_file_it_could_not_write(
    tiny_fs: TinyFs, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The append fails for lack of space, and so does the checkpoint written as the command closes
    the log directory: the line names the first failure (the `.log`), not the checkpoint file."""
    logs = tiny_fs.path / "logs"
    assert _append(tmp_path, logs, _records(10)) == 0
    tiny_fs.fill()
    assert _append(tmp_path, logs, _records(50, 10)) == 1  # more than the .log's last page holds
    line = _one_error_line(capsys.readouterr().err, "StorageError")
    assert str(logs / "events-0" / "00000000000000000000.log") in line and "No space left on device" in line, line
    tiny_fs.free()
    assert _append(tmp_path, logs, _records(50, 10)) == 0
    capsys.readouterr()
    assert main(["read", "--log-dir", str(logs), "--topic", "events", "--partition", "0", "--from-beginning"]) == 0
    assert [json.loads(line)["key"] for line in capsys.readouterr().out.splitlines()] == [f"k{i}" for i in range(60)]


# --- item 7: a partition directory given as --log-dir ---------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ("recover",),
        ("recover", "--dry-run"),
        ("describe",),
        ("maintain", "--once", "retention"),
        ("read", "--topic", "events", "--partition", "0", "--from-beginning"),
        ("append", "--topic", "events", "--partition", "0"),
        ("topic", "describe"),
        ("quarantine", "list"),
    ],
)
def test_a_partition_directory_is_not_a_log_directory(
    log_dir: Path, command: tuple[str, ...], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    partition_dir = log_dir / "events-0"
    before = _snapshot(log_dir)
    name, *rest = command
    argv = (
        [name, *rest, "--log-dir", str(partition_dir)]
        if name in ("topic", "quarantine")
        else [name, "--log-dir", str(partition_dir), *rest]
    )
    monkeypatch.setattr(sys, "stdin", open(os.devnull))  # append reads stdin: nothing
    assert main(argv) == 1
    line = _one_error_line(capsys.readouterr().err, "NotALogDirectoryError")
    assert f"--log-dir {log_dir.absolute()}" in line and "partition 0 of topic 'events'" in line
    assert _snapshot(log_dir) == before


# --- item 8: read streams what is good, then fails at the first record it cannot show -------------


def test_read_prints_the_records_before_a_damaged_batch(log_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from indexer.records.file_records import FileRecords

    data = log_dir / "events-0" / "00000000000000000000.log"
    size = data.stat().st_size
    with FileRecords.open(data, mutable=False) as records:  # the batch holding the middle byte
        damaged = [b for b in records.batches() if b.position <= size // 2 < b.position + b.size_in_bytes][0]
        first, position = damaged.base_offset, damaged.position
    assert first > 0
    with open(data, "r+b") as f:
        f.seek(size // 2)
        f.write(b"\xff" * 16)
    assert main(["read", "--log-dir", str(log_dir), "--topic", "events", "--partition", "0", "--from-beginning"]) == 1
    out, err = capsys.readouterr()
    assert [json.loads(line)["offset"] for line in out.splitlines()] == list(range(first))
    line = _one_error_line(err, "CorruptRecordError")
    assert f"cannot read offset {first} of events-0" in line and str(data) in line and f"position {position}" in line

    assert main(["describe", "--log-dir", str(log_dir), "--verify", "--json"]) == 1
    segment = json.loads(capsys.readouterr().out)["partitions"][0]["segments"][0]
    assert segment["last_offset"] == first - 1 and segment["invalid_bytes"] == size - position
    assert main(["describe", "--log-dir", str(log_dir)]) == 0  # headers only: the CRC is not checked
    assert "invalid from position" not in capsys.readouterr().out


def test_read_prints_the_records_before_one_that_is_not_utf8(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import base64

    logs = tmp_path / "logs"
    rows = [
        {
            "key": base64.b64encode(b"\xff\xfe" if i == 7 else f"k{i}".encode()).decode(),
            "value": base64.b64encode(b"v").decode(),
        }
        for i in range(10)
    ]
    assert _append(tmp_path, logs, "".join(json.dumps(r) + "\n" for r in rows), 0, "--encoding", "base64") == 0
    capsys.readouterr()
    assert main(["read", "--log-dir", str(logs), "--topic", "events", "--partition", "0", "--from-beginning"]) == 1
    out, err = capsys.readouterr()
    assert [json.loads(line)["key"] for line in out.splitlines()] == [f"k{i}" for i in range(7)]
    line = _one_error_line(err, "SchemaError")
    assert "the key of the record at offset 7" in line and "00000000000000000000.log" in line


@pytest.mark.parametrize(
    "log_dir_arg, topic, partition, error, fragment",
    [
        ("missing", "events", "0", "LogDirectoryNotFoundError", "does not exist"),
        (".", "nope", "0", "UnknownTopicOrPartitionError", "topic 'nope' does not exist"),
        (".", "events", "5", "UnknownTopicOrPartitionError", "partition 5 of topic 'events' does not exist"),
    ],
)
def test_read_names_what_does_not_exist(
    log_dir: Path,
    capsys: pytest.CaptureFixture[str],
    log_dir_arg: str,
    topic: str,
    partition: str,
    error: str,
    fragment: str,
) -> None:
    where = log_dir / "missing" if log_dir_arg == "missing" else log_dir
    assert main(["read", "--log-dir", str(where), "--topic", topic, "--partition", partition, "--from-beginning"]) == 1
    assert fragment in _one_error_line(capsys.readouterr().err, error)


# --- the list of user mistakes -----------------------------------------------------------------


def test_append_refuses_negative_timestamps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logs = tmp_path / "logs"
    assert _append(tmp_path, logs, '{"value": "a"}\n{"value": "b", "timestamp": -1}\n') == 1
    assert "line 2: timestamp must be >= 0" in _one_error_line(capsys.readouterr().err, "SchemaError")
    assert not logs.exists()


def test_dump_exit_status_and_bounded_output(log_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dump", str(tmp_path / "nope.log")]) == 1
    assert "does not exist" in _one_error_line(capsys.readouterr().err, "InputFileError")
    assert main(["dump", str(log_dir)]) == 1  # a directory exists: say what it is, not "no such file"
    assert "is a directory, not a file" in _one_error_line(capsys.readouterr().err, "InputFileError")
    data = log_dir / "events-0" / "00000000000000000000.log"
    assert main(["dump", str(data)]) == 0
    capsys.readouterr()

    torn = tmp_path / "torn" / data.name
    torn.parent.mkdir()
    torn.write_bytes(data.read_bytes()[:-100])
    assert main(["dump", str(torn)]) == 1
    out, err = capsys.readouterr()
    assert "invalid bytes at the end" in out and "Invalid data in" in err

    damaged = tmp_path / "damaged" / data.name
    damaged.parent.mkdir()
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2 : len(raw) // 2 + 16] = b"\xff" * 16
    damaged.write_bytes(bytes(raw))
    assert main(["dump", str(damaged)]) == 1
    assert "isvalid: false" in capsys.readouterr().out

    index = damaged.with_suffix(".index")
    index.write_bytes(os.urandom(16000))  # garbage: 2000 entries
    assert main(["dump", str(index)]) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) < 30 and "more (" in err


def test_recover_exits_1_when_a_writer_holds_a_partition(log_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lock = FileLock(log_dir / "events-1" / PARTITION_LOCK_FILE)
    lock.acquire()
    try:
        assert main(["recover", "--log-dir", str(log_dir), "--no-progress"]) == 1
        assert main(["recover", "--log-dir", str(log_dir), "--no-progress", "--dry-run"]) == 1
    finally:
        lock.release()
    out = capsys.readouterr().out
    assert out.count("skipped") >= 2


def test_maintain_counts_every_partition_and_takes_maintenance_keys(
    log_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = ["--config", "log.retention.check.interval.ms=1000", "--config", "retention.ms=-1"]
    assert maintain_once(log_dir, "retention", *config) == 0
    assert capsys.readouterr().out.startswith("retention: 2 partitions checked, 0 worked on")
    assert maintain_once(log_dir, "retention", "--config", "retention.ms=1") == 0
    out = capsys.readouterr().out.splitlines()  # the records are from 2023: every segment breaches retention.ms
    assert out[0].startswith("retention: 2 partitions checked, 2 worked on")
    assert out[1:] == [f"  events-{p}: deleted segment 0 (retention.ms breached)" for p in (0, 1)]
    assert maintain_once(log_dir, "retention", "--config", "bogus.key=1") == 1
    line = _one_error_line(capsys.readouterr().err, "ConfigError")
    assert "log.retention.check.interval.ms" in line and "retention.ms" in line
    # A command that does not use [maintenance] keys does not take them.
    assert main(["describe", "--log-dir", str(log_dir), "--config", "log.retention.check.interval.ms=1"]) == 1
    _one_error_line(capsys.readouterr().err, "ConfigError")


def test_settings_files_layer_and_verbose_names_them(log_dir: Path, tmp_path: Path) -> None:
    env_conf = tmp_path / "env.toml"
    env_conf.write_text('[topic]\n"retention.ms" = 5\n"segment.bytes" = 2000000\n')
    cli_conf = tmp_path / "cli.toml"
    cli_conf.write_text('[topic]\n"retention.ms" = 7\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code = (
        "import sys; from seglog.cli import main, build_parser, settings_from_args\n"
        "parser, _ = build_parser(sys.argv[1:]); args = parser.parse_args(sys.argv[1:])\n"
        "c = settings_from_args(args).log_config('events'); print(c.retention_ms, c.segment_bytes)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "SEGLOG_CONF": str(env_conf)}
    done = subprocess.run(
        [sys.executable, "-c", code, "describe", "--log-dir", str(log_dir), "--conf", str(cli_conf)],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.split() == ["7", "2000000"], done.stderr  # --conf over $SEGLOG_CONF over the packaged file
    verbose = _cli(
        "-v",
        "describe",
        "--log-dir",
        str(log_dir),
        "--conf",
        str(cli_conf),
        cwd=elsewhere,
        env={"SEGLOG_CONF": str(env_conf)},
    )
    assert verbose.returncode == 0, verbose.stderr
    [line] = [line for line in verbose.stderr.splitlines() if "settings:" in line]
    assert line.endswith(f"{REPO / 'conf' / 'seglog.toml'} then {env_conf} then {cli_conf}")
    missing = _cli("describe", "--log-dir", str(log_dir), env={"SEGLOG_CONF": str(tmp_path / "nope.toml")})
    assert missing.returncode == 1 and "$SEGLOG_CONF" in _one_error_line(missing.stderr, "InputFileError")


def _run_without_spark(monkeypatch: pytest.MonkeyPatch, log_dir: Path, tmp_path: Path, *extra: str) -> int:
    """``seglog run`` on 2 partitions of ``events`` with ``extra`` options; a Spark start fails the test."""
    import streaming.job

    monkeypatch.setattr(streaming.job, "build_spark_session", lambda *a, **k: pytest.fail("Spark started"))
    args = ["--log-dir", str(log_dir), "--topic", "events", "--partitions", "2"]
    return main(["run", *args, "--checkpoint-location", str(tmp_path / "ckpt"), *extra])


def test_bench_checks_its_json_file_before_measuring(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--json`` naming a directory (or a path under a file) failed only at the end, after the whole
    run: the measurements were lost. Now it is a usage error before anything runs."""
    (tmp_path / "file").write_text("")
    assert main(["bench", "engine", "--quick", "--json", str(tmp_path)]) == 2
    assert f"argument --json: {tmp_path} is a directory; name a file in it" in capsys.readouterr().err
    assert main(["bench", "engine", "--quick", "--json", str(tmp_path / "file" / "out.json")]) == 2
    assert f"argument --json: cannot write {tmp_path / 'file' / 'out.json'}: {tmp_path / 'file'} is a file" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize(
    "option, value",
    [
        ("--duration", "-1"),
        ("--duration", "0"),
        ("--duration", "nan"),
        ("--progress-interval", "0"),
        ("--progress-interval", "inf"),
    ],
)
def test_run_refuses_a_time_that_is_no_positive_number_of_seconds(
    log_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    option: str,
    value: str,
) -> None:
    """``--duration -1`` ran the job (three micro-batches written) and ``nan`` never stopped it."""
    assert _run_without_spark(monkeypatch, log_dir, tmp_path, option, value) == 2
    assert f"argument {option}: expected a number of seconds > 0, got {value!r}" in capsys.readouterr().err


@pytest.mark.parametrize(
    "extra, error, fragment",
    [
        (("--trigger", "banana"), "ConfigError", "trigger interval 'banana'"),
        (("--source", "files", "--input", "/missing/input"), "ConfigError", "/missing/input does not exist"),
        (("--source", "files", "--input", __file__), "ConfigError", "is a file; give the directory"),
        (("--partitions", "3"), "InvalidPartitionsError", "has 2 partitions"),
        (("--config", "log.retention.check.interval.ms=0"), "ConfigError", "must be >= 1"),
        (("--config", "trigger.interval=banana"), "ConfigError", "trigger interval 'banana'"),  # a [streaming] key
    ],
)
def test_run_checks_options_before_spark_starts(
    log_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    extra: tuple[str, ...],
    error: str,
    fragment: str,
) -> None:
    assert _run_without_spark(monkeypatch, log_dir, tmp_path, *extra) == 1
    assert fragment in _one_error_line(capsys.readouterr().err, error)
    assert not (tmp_path / "ckpt").exists()  # a refused run records nothing in its checkpoint


def test_a_run_refused_for_its_partition_count_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """More new partitions than Kafka creates at once were refused only after the run had written its
    checkpoint's source record and created the log directory."""
    new_dir = tmp_path / "new-logs"
    assert _run_without_spark(monkeypatch, new_dir, tmp_path, "--partitions", "10001") == 1
    line = _one_error_line(capsys.readouterr().err, "InvalidPartitionsError")
    assert "would get 10001 new partitions at once" in line, line
    assert not new_dir.exists()
    assert not (tmp_path / "ckpt").exists()


def test_run_on_a_locked_log_dir_fails_before_spark_starts(
    log_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with LogManager(log_dir, Settings()) as writer:  # a live writer holds events-1
        writer.get_log("events", 1)
        assert _run_without_spark(monkeypatch, log_dir, tmp_path) == 1
    assert "events-1 is locked by pid" in _one_error_line(capsys.readouterr().err, "LogLockedError")
    assert not (tmp_path / "ckpt").exists()


def test_a_second_run_on_a_checkpoint_in_use_is_refused_before_it_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A second `seglog run` on the checkpoint of a running one, into another log directory, ran: both
    queries advanced one checkpoint, and the batches each ran went to its own log directory only."""
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    with FileLock(checkpoint / "seglog-run.lock", what="checkpoint"):  # the running `seglog run`
        assert _run_without_spark(monkeypatch, tmp_path / "other-logs", tmp_path) == 1
    line = _one_error_line(capsys.readouterr().err, "LogLockedError")
    assert line.startswith(f"seglog: LogLockedError: checkpoint {checkpoint} is locked by pid {os.getpid()}"), line
    assert not (tmp_path / "other-logs").exists()
    assert sorted(p.name for p in checkpoint.iterdir()) == ["seglog-run.lock"]


def test_other_files_do_not_make_a_log_directory_a_partition(log_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (log_dir / "app.log").write_text("an application's own log file beside the partitions\n")
    assert main(["describe", "--log-dir", str(log_dir)]) == 0
    assert "2 partitions" in capsys.readouterr().out


def test_two_processes_creating_one_topic_agree_on_its_count(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    code = "import sys; from seglog.cli import main; sys.exit(main(sys.argv[1:]))"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, "topic", "create", "--log-dir", str(logs), "--topic", "t", "--partitions", n],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in ("3", "5")
    ]
    results = [(p.wait(timeout=120), p.stderr.read() if p.stderr else "") for p in procs]
    assert sorted(code for code, _ in results) == [0, 1], results
    [(_, err)] = [r for r in results if r[0] == 1]
    assert "TopicExistsError" in err or "InvalidPartitionsError" in err, err
    winner = 3 if results[0][0] == 0 else 5
    assert json.loads((logs / TOPICS_FILE).read_text())["topics"] == {"t": {"partitions": winner}}
    assert sorted(p.name for p in logs.glob("t-*")) == [f"t-{i}" for i in range(winner)]


@pytest.mark.parametrize(
    "text, ms",
    [
        ("2 seconds", 2000),
        ("1 second", 1000),
        ("interval 500 milliseconds", 500),
        ("1 minute 30 seconds", 90_000),
        ("0 seconds", 0),
        ("1.5 seconds", 1500),
        ("2 HOURS", 7_200_000),
    ],
)
def test_trigger_intervals_spark_takes_are_accepted(text: str, ms: float) -> None:
    from streaming.job import trigger_interval_ms

    assert trigger_interval_ms(text) == ms


@pytest.mark.parametrize("text", ["banana", "2", "2seconds", "2 secs", "", "seconds", "1 month"])
def test_trigger_intervals_spark_refuses_are_refused(text: str) -> None:
    from indexer.errors import ConfigError
    from streaming.job import trigger_interval_ms

    with pytest.raises(ConfigError, match="trigger interval"):
        trigger_interval_ms(text)


@pytest.mark.parametrize("segment_bytes", [1 << 30, 150_000])  # one segment; several (the read jumps to the next)
def test_read_fails_at_a_cut_size_field_instead_of_stopping_quietly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], segment_bytes: int
) -> None:
    from indexer.records.file_records import FileRecords

    logs = tmp_path / "logs"
    for batch in range(3):
        assert (
            _append(tmp_path, logs, _records(1000, batch * 1000), 0, "--config", f"segment.bytes={segment_bytes}") == 0
        )
    capsys.readouterr()
    segments = sorted((logs / "events-0").glob("*.log"))
    assert (len(segments) > 1) == (segment_bytes < 1 << 30)
    first_segment = segments[0]
    with FileRecords.open(first_segment, mutable=False) as records:
        victim = list(records.batches())[1]  # the second batch of the first segment
        first, position = victim.base_offset, victim.position
    with open(first_segment, "r+b") as f:  # its size field now claims ~2 GB: the batch no longer fits
        f.seek(position + 8)
        f.write((0x7FFF0000).to_bytes(4, "big"))
    assert main(["read", "--log-dir", str(logs), "--topic", "events", "--partition", "0", "--from-beginning"]) == 1
    out, err = capsys.readouterr()
    assert [json.loads(line)["offset"] for line in out.splitlines()] == list(range(first))
    line = _one_error_line(err, "CorruptRecordError")
    assert f"cannot read offset {first} of events-0" in line and f"position {position} of {first_segment}" in line


@pytest.mark.parametrize("partition", ["2147483647", "99999999999999999999"])
def test_a_partition_number_past_kafkas_int32_is_a_usage_error_naming_the_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], partition: str
) -> None:
    """``seglog append --partition 2147483647`` said "a topic has at most 2147483647 partitions (Kafka's
    int32), got 2147483648" (a count the user never gave), and a larger number "num_partitions must be
    an integer in -9223372036854775808..9223372036854775807". Now it is a usage error of the option
    naming the range of partition numbers (exit 2), and nothing is created."""
    source = tmp_path / "in.jsonl"
    source.write_text(_records(1))
    log_dir = tmp_path / "logs"
    args = ["append", "--log-dir", str(log_dir), "--topic", "t", "--partition", partition, str(source)]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == (
        "seglog append: error: argument --partition: expected a partition number 0..2147483646 (a topic has at "
        f"most 2147483647 partitions, Kafka's int32), got '{partition}'"
    )
    assert not log_dir.exists()


@pytest.mark.parametrize(("verbose", "apscheduler"), [("-v", False), ("-vv", True)])
def test_v_shows_the_daemons_info_lines_without_apschedulers(
    tmp_path: Path, log_dir: Path, verbose: str, apscheduler: bool
) -> None:
    """``seglog -v maintain`` printed two APScheduler INFO lines per job run ("Running job ...", "Job ...
    executed successfully"), drowning seglog's own. They are now kept at WARNING unless ``-vv``."""
    conf = tmp_path / "seglog.toml"
    conf.write_text(
        '[topic]\n"retention.ms" = 1\n'  # the first retention run has work: it says so at INFO
        '[maintenance]\n"log.initial.task.delay.ms" = 0\n"log.retention.check.interval.ms" = 100\n'
    )
    command = [sys.executable, "-c", "import sys; from seglog.cli import main; sys.exit(main())"]
    proc = subprocess.Popen(
        [*command, verbose, "maintain", "--log-dir", str(log_dir), "--conf", str(conf)],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = lines_of(proc.stderr)  # type: ignore[arg-type]
        seen = wait_for(lines, "INFO maintenance.daemon: seglog maintain on")  # it handles SIGTERM from now on
        seen += wait_for(lines, "retention: 2 partitions checked")  # a whole run of the retention job
        proc.terminate()
        assert proc.wait(timeout=30) == 0, seen
        seen += wait_for(lines, "stopped")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = "".join(seen)
    assert ("apscheduler" in err) is apscheduler, err


def test_an_empty_input_appends_nothing_and_creates_or_commits_nothing(
    tmp_path: Path, log_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An empty input created the log directory, the topic and its partition (and rewrote the
    checkpoints of an existing one), then said 'nothing appended'."""
    (tmp_path / "empty.jsonl").write_text("\n \n")
    assert append_file(tmp_path / "new", "fresh", tmp_path / "empty.jsonl") == 0
    assert capsys.readouterr().out == "fresh-0 nothing appended: the input holds no records (nothing created)\n"
    assert not (tmp_path / "new").exists()
    before = _snapshot(log_dir)
    assert append_file(log_dir, "events", tmp_path / "empty.jsonl", "--json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["records"] == 0 and doc["log_end_offset"] == doc["high_watermark"] == 3000, doc
    assert _snapshot(log_dir) == before


def test_append_from_a_terminal_says_how_to_end_the_input(tmp_path: Path) -> None:
    """`seglog append ... ` without a file waited silently for stdin when stdin was a terminal."""
    import pty

    controller, terminal = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k != "SEGLOG_CONF"} | {"PYTHONPATH": str(REPO)}
    code = "import sys; from seglog.cli import main; sys.exit(main(sys.argv[1:]))"
    argv = ["append", "--log-dir", str(tmp_path / "logs"), "--topic", "t", "--partition", "0"]
    with subprocess.Popen(
        [sys.executable, "-c", code, *argv], stdin=terminal, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    ) as process:
        os.close(terminal)
        assert process.stderr is not None and process.stdout is not None
        # The line comes before the command reads; without it, the test stops at the deadline.
        ready, _, _ = select.select([process.stderr], [], [], 120)
        hint = process.stderr.readline().decode() if ready else ""
        if not ready:
            process.kill()
        assert "reading JSON lines from the terminal" in hint and "Ctrl-D" in hint, hint
        os.write(controller, b'{"value": "typed"}\n\x04')
        assert process.wait(timeout=120) == 0, process.stderr.read()
        assert process.stdout.read().decode() == "t-0 0..0\n"
    os.close(controller)


@pytest.mark.parametrize(
    "command",
    [
        ["append", "--topic", "t", "--partition", "0", "in.jsonl"],
        ["topic", "create", "--topic", "t", "--partitions", "1"],
        ["describe"],
        ["recover", "--dry-run"],
        ["maintain", "--once", "flush"],
        ["quarantine", "list"],
    ],
)
def test_an_empty_log_dir_is_refused_not_taken_for_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    """`--log-dir "$LOGS"` with LOGS unset: `append` wrote a log directory into the current directory
    (and `describe` described it)."""
    (tmp_path / "in.jsonl").write_text(_records(1))
    monkeypatch.chdir(tmp_path)
    name = command[:2] if command[0] in ("topic", "quarantine") else command[:1]
    assert main([*name, "--log-dir", "", *command[len(name) :]]) == 1
    line = _one_error_line(capsys.readouterr().err, "NotALogDirectoryError")
    assert "empty" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]


def test_an_empty_conf_is_refused_not_ignored(log_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--conf "$CONF"` with CONF unset read no settings file, silently ($SEGLOG_CONF empty stays unset)."""
    assert main(["describe", "--log-dir", str(log_dir), "--conf", ""]) == 1
    line = _one_error_line(capsys.readouterr().err, "ConfigError")
    assert "--conf is an empty path" in line, line


def _input_problems(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """Paths that cannot be read as an input file, and how seglog says so."""
    (tmp_path / "a-directory").mkdir()
    (tmp_path / "a-file").write_text("")
    loop = tmp_path / "a-loop"
    loop.symlink_to(loop)
    return {
        "missing": (tmp_path / "missing.in", "does not exist"),
        "in a file": (tmp_path / "a-file" / "x.in", "does not exist"),
        "directory": (tmp_path / "a-directory", "is a directory, not a file"),
        "loop": (loop, "cannot be read: too many levels of symbolic links"),
    }


@pytest.mark.parametrize("problem", ["missing", "in a file", "directory", "loop"])
@pytest.mark.parametrize(
    "command, names",
    [
        (("append", "--topic", "t", "--partition", "0", "{path}"), "JSON-lines input {path} (seglog append FILE)"),
        (("dump", "{path}"), "file to dump {path} (seglog dump FILE)"),
        (("dump", "--files", "{path}"), "file to dump {path} (seglog dump FILE)"),
        (("describe", "--conf", "{path}"), "configuration file {path} (--conf)"),
        (("maintain", "--once", "flush", "--conf", "{path}"), "configuration file {path} (--conf)"),
        (("topic", "describe", "--conf", "{path}"), "configuration file {path} (--conf)"),
        (("SEGLOG_CONF", "describe"), "configuration file {path} ($SEGLOG_CONF)"),
    ],
)
def test_an_input_file_that_cannot_be_read_is_one_line_naming_the_option_and_the_path(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    command: tuple[str, ...],
    names: str,
    problem: str,
) -> None:
    """`seglog append --partition 0 x` said `FileNotFoundError: [Errno 2] No such file or directory:
    'x'` (Python's words, naming neither the option nor what the file was for), `IsADirectoryError:
    [Errno 21] Is a directory` for a directory; `dump` and `--conf` said it their own ways. One rule
    now (``indexer.errors.check_input_file``), before anything is read or written."""
    path, says = _input_problems(tmp_path)[problem]
    logs = tmp_path / "logs"
    logs.mkdir()
    if command[0] == "SEGLOG_CONF":
        monkeypatch.setenv("SEGLOG_CONF", str(path))
        command = command[1:]
    argv = [part.format(path=path) for part in command]
    if argv[0] != "dump":
        name = argv[:2] if argv[0] == "topic" else argv[:1]
        argv = [*name, "--log-dir", str(logs), *argv[len(name) :]]
    before = _snapshot(logs)
    assert main(argv) == 1
    line = _one_error_line(capsys.readouterr().err, "InputFileError")
    assert line == f"seglog: InputFileError: {names.format(path=path)} {says}", line
    assert _snapshot(logs) == before


def test_an_input_file_without_read_permission_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    secret = tmp_path / "secret.jsonl"
    secret.write_text(_records(1))
    secret.chmod(0)
    if os.geteuid() == 0:  # root reads any file of ours; a write-only sysctl refuses even root
        secret = Path("/proc/sys/vm/drop_caches")
    assert main(["append", "--log-dir", str(tmp_path / "logs"), "--topic", "t", "--partition", "0", str(secret)]) == 1
    line = _one_error_line(capsys.readouterr().err, "InputFileError")
    assert line.endswith(f"{secret} (seglog append FILE) cannot be read: permission denied"), line
    assert not (tmp_path / "logs").exists()


def _as_nobody(*args: str) -> subprocess.CompletedProcess[str]:
    """``seglog ARGS`` run as user 65534 (nobody) with no home, as a service account runs it: it can
    write neither the source tree (root's) nor a cache directory of its own."""
    # Not measured by coverage either: its data file would go to the working directory, root's alone.
    mine = ("SEGLOG_CONF", "XDG_CACHE_HOME", "NUMBA_CACHE_DIR", "COVERAGE_PROCESS_CONFIG", "COVERAGE_PROCESS_START")
    env = {k: v for k, v in os.environ.items() if k not in mine}
    env.update({"PYTHONPATH": str(REPO), "HOME": "/nonexistent"})
    code = "import sys; from seglog.cli import main; sys.exit(main(sys.argv[1:]))"
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    return subprocess.run([*nobody, sys.executable, "-c", code, *args], env=env, capture_output=True, text=True)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="runs a command as another user")
def test_a_user_who_can_write_neither_the_source_tree_nor_a_home_runs_the_commands(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A user who may write neither seglog's source tree (installed by root) nor a home directory (a
    service account, HOME=/nonexistent) got a traceback from every command that touches the engine,
    `RuntimeError: cannot cache function 'get_be': no locator available for file .../indexer/_bytes.py`:
    numba caches compiled kernels beside their source or under ~/.cache and found neither writable.
    The commands now run, their kernels cached in a directory of that user's own."""
    place = Path(tempfile.mkdtemp(prefix="seglog-nobody-"))  # tmp_path's parents are root's alone
    try:
        place.chmod(0o755)
        logs = place / "logs"
        source = place / "in.jsonl"
        source.write_text(_records(10))
        assert main(["append", "--log-dir", str(logs), "--topic", "events", "--partition", "0", str(source)]) == 0
        capsys.readouterr()
        for path in [logs, *logs.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        if _as_nobody("--version").returncode != 0:
            pytest.skip("this Python cannot be run by user 65534")
        read = _as_nobody("read", "--log-dir", str(logs), "--topic", "events", "--partition", "0", "--from-beginning")
        assert (read.returncode, read.stderr) == (0, ""), read.stderr
        assert len(read.stdout.splitlines()) == 10
        append = _as_nobody("append", "--log-dir", str(logs), "--topic", "events", "--partition", "0", str(source))
        assert append.returncode == 1
        _one_error_line(append.stderr, "ReadOnlyLogDirectoryError")
    finally:
        shutil.rmtree(place)
