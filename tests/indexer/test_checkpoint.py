"""Tests for indexer/checkpoint.py: Kafka's checkpoint text format (spec 6.4, 6.5), atomic writes,
and the multi-process read-merge-write of a log directory's offset checkpoints."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from indexer import file_names
from indexer.checkpoint import (
    EpochEntry,
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
    update_checkpoint,
)
from indexer.errors import LogLockedError, StorageError
from indexer.lock import FileLock


def test_write_produces_kafkas_bytes(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    OffsetCheckpointFile(path).write({("my-topic", 0): 1234, ("__consumer_offsets", 17): 0})
    assert path.read_bytes() == b"0\n2\n__consumer_offsets 17 0\nmy-topic 0 1234\n"
    assert not (tmp_path / "recovery-point-offset-checkpoint.tmp").exists()
    assert OffsetCheckpointFile(path).read() == {("my-topic", 0): 1234, ("__consumer_offsets", 17): 0}


def test_empty_map_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    OffsetCheckpointFile(path).write({})
    assert path.read_bytes() == b"0\n0\n"
    assert OffsetCheckpointFile(path).read() == {}


@pytest.mark.parametrize(
    "content, expected",
    [
        (b"", {}),
        (b"0\n", {}),  # the count line is missing: no entries
        (b"0", {}),
        (b"0\n0\n", {}),
        (b"0\r\n1\r\nt 3 7\r\n", {("t", 3): 7}),  # any line terminator Java's readLine knows
        (b"0\n1\nt\t\t3   7\n", {("t", 3): 7}),  # any run of whitespace between fields
        (b"0\n2\nt 1 5\nt 1 6\n", {("t", 1): 6}),  # duplicate: the last one wins
        (b"0\n1\nt +1 -2\n", {("t", 1): -2}),  # Integer.parseInt accepts a sign
        (b"0\n1\nt 1 5", {("t", 1): 5}),  # no final newline
    ],
)
def test_read_accepts_what_kafka_accepts(tmp_path: Path, content: bytes, expected: dict) -> None:
    path = tmp_path / "cp"
    path.write_bytes(content)
    assert OffsetCheckpointFile(path).read() == expected


def test_missing_file_reads_empty_and_is_not_created(tmp_path: Path) -> None:
    checkpoint = OffsetCheckpointFile(tmp_path / "absent")
    assert checkpoint.read() == {}
    assert not (tmp_path / "absent").exists()


@pytest.mark.parametrize(
    "content, message",
    [
        (b"1\n0\n", "Unrecognised version:1, expected version: 0 in checkpoint file at: {p}"),
        (b"x\n0\n", "Malformed line in checkpoint file [{p}]: x"),
        (b" 0\n0\n", "Malformed line in checkpoint file [{p}]:  0"),
        (b"0\nabc\n", "Malformed line in checkpoint file [{p}]: abc"),
        (b"0\n1\nt 1\n", "Malformed line in checkpoint file [{p}]: t 1"),
        (b"0\n1\nt 1 2 3\n", "Malformed line in checkpoint file [{p}]: t 1 2 3"),
        (b"0\n1\n t 1 2\n", "Malformed line in checkpoint file [{p}]:  t 1 2"),  # leading field is empty
        (b"0\n1\nt x 2\n", "Malformed line in checkpoint file [{p}]: t x 2"),
        (b"0\n1\nt 2147483648 2\n", "Malformed line in checkpoint file [{p}]: t 2147483648 2"),
        (
            b"0\n1\nt 1 9223372036854775808\n",
            "Malformed line in checkpoint file [{p}]: t 1 9223372036854775808",
        ),
        (b"0\n1\nt 1 2\n\n", "Malformed line in checkpoint file [{p}]: "),
        (b"0\n2\nt 1 2\n", "Expected [2] entries in checkpoint file [{p}], but found only [1]"),
        (b"0\n0\nt 1 2\n", "Expected [0] entries in checkpoint file [{p}], but found only [1]"),
    ],
)
def test_read_errors_use_kafkas_messages(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "cp"
    path.write_bytes(content)
    with pytest.raises(StorageError) as info:
        OffsetCheckpointFile(path).read()
    assert str(info.value) == message.format(p=path)
    assert info.value.path == str(path)


def test_unreadable_file_is_a_storage_error(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    path.mkdir()  # a directory where a file should be
    with pytest.raises(StorageError, match="Error while reading checkpoint file"):
        OffsetCheckpointFile(path).read()


def test_write_failure_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "cp"
    OffsetCheckpointFile(path).write({("t", 0): 1})

    def failing_replace(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device", str(dst))

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(StorageError, match="Error while writing to checkpoint file") as info:
        OffsetCheckpointFile(path).write({("t", 0): 2})
    assert info.value.errno == 28
    monkeypatch.undo()
    assert OffsetCheckpointFile(path).read() == {("t", 0): 1}


def test_topic_with_whitespace_cannot_be_written(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        OffsetCheckpointFile(tmp_path / "cp").write({("a b", 0): 1})


_topics = st.text(alphabet="abcxyz._-0123456789", min_size=1, max_size=20)
_offsets = st.dictionaries(st.tuples(_topics, st.integers(0, 2**31 - 1)), st.integers(-(2**63), 2**63 - 1), max_size=20)


@settings(max_examples=50, deadline=None)
@given(offsets=_offsets)
def test_offsets_round_trip(tmp_path_factory: pytest.TempPathFactory, offsets: dict) -> None:
    path = tmp_path_factory.mktemp("cp") / "cp"
    OffsetCheckpointFile(path).write(offsets, sync=False)
    assert OffsetCheckpointFile(path).read() == offsets


def test_every_vector_checkpoint_reads(vectors_dir: Path) -> None:
    names = [
        file_names.RECOVERY_POINT_CHECKPOINT_FILE,
        file_names.LOG_START_OFFSET_CHECKPOINT_FILE,
        file_names.REPLICATION_OFFSET_CHECKPOINT_FILE,
        "cleaner-offset-checkpoint",
    ]
    read = 0
    for log_dir in sorted(p for p in vectors_dir.iterdir() if p.is_dir()):
        for name in names:
            if (log_dir / name).exists():
                OffsetCheckpointFile(log_dir / name).read()
                read += 1
        for epoch_file in log_dir.glob(f"*/{file_names.LEADER_EPOCH_CHECKPOINT_FILE}"):
            entries = LeaderEpochCheckpointFile(epoch_file).read()
            assert [e.epoch for e in entries] == sorted(e.epoch for e in entries)
            read += 1
    assert read >= 200
    recovery = OffsetCheckpointFile(vectors_dir / "multi-segment-3x" / file_names.RECOVERY_POINT_CHECKPOINT_FILE)
    assert recovery.read()[("invoice", 0)] == 90867
    assert OffsetCheckpointFile(vectors_dir / "multi-segment-3x" / "cleaner-offset-checkpoint").read() == {}
    assert (
        len(OffsetCheckpointFile(vectors_dir / "gzip-large-records" / "recovery-point-offset-checkpoint").read()) == 57
    )
    epochs = LeaderEpochCheckpointFile(vectors_dir / "mixed-codecs-epochs" / "lsx1-0" / "leader-epoch-checkpoint")
    assert epochs.read() == [
        EpochEntry(0, 0),
        EpochEntry(1, 9),
        EpochEntry(3, 10),
        EpochEntry(5, 12),
        EpochEntry(6, 13),
        EpochEntry(7, 14),
    ]


def test_leader_epoch_checkpoint_round_trip_and_errors(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    checkpoint = LeaderEpochCheckpointFile(path)
    checkpoint.write([EpochEntry(0, 0), EpochEntry(1, 100), EpochEntry(3, 250)])
    assert path.read_bytes() == b"0\n3\n0 0\n1 100\n3 250\n"
    assert checkpoint.read() == [(0, 0), (1, 100), (3, 250)]
    for line in ["0 0 0", "2147483648 0", "0 x"]:  # 3 fields, epoch beyond int32, not a number
        path.write_bytes(f"0\n1\n{line}\n".encode())
        with pytest.raises(StorageError, match=rf"Malformed line in checkpoint file \[.*\]: {line}$"):
            checkpoint.read()


def test_update_checkpoint_merges_and_removes(tmp_path: Path) -> None:
    path = tmp_path / file_names.RECOVERY_POINT_CHECKPOINT_FILE
    lock_path = tmp_path / file_names.LOG_DIR_LOCK_FILE
    OffsetCheckpointFile(path).write({("a", 0): 5, ("b", 0): 7, ("c", 1): 9})
    merged = update_checkpoint(path, {("a", 0): 6, ("d", 0): 1}, lock_path=lock_path, remove=[("c", 1)])
    assert merged == {("a", 0): 6, ("b", 0): 7, ("d", 0): 1}
    assert OffsetCheckpointFile(path).read() == merged
    assert FileLock(lock_path).holder() == ""  # held only while writing


def test_update_checkpoint_never_replaces_a_file_it_cannot_read(tmp_path: Path) -> None:
    """It replaced an unreadable file with the caller's entries only (a warning): every other
    partition's entry was gone, in ``replication-offset-checkpoint`` every committed offset. It now
    refuses with one line naming the file and ``seglog recover``; only recovery replaces it."""
    path = tmp_path / file_names.REPLICATION_OFFSET_CHECKPOINT_FILE
    path.write_bytes(b"0\n2\na 0 5\nb 0 x\n")
    with pytest.raises(StorageError) as refused:
        update_checkpoint(path, {("a", 0): 6}, lock_path=tmp_path / ".lock")
    message = str(refused.value)
    assert message.startswith(f"Malformed line in checkpoint file [{path}]: b 0 x: it holds the committed offsets")
    assert f"seglog recover --log-dir {tmp_path}`" in message and "\n" not in message
    assert path.read_bytes() == b"0\n2\na 0 5\nb 0 x\n"
    merged = update_checkpoint(path, {("a", 0): 6}, lock_path=tmp_path / ".lock", replace_unreadable=True)
    assert merged == {("a", 0): 6} == OffsetCheckpointFile(path).read()


def test_update_checkpoint_waits_for_the_directory_lock(tmp_path: Path) -> None:
    lock_path = tmp_path / ".lock"
    with FileLock(lock_path):
        with pytest.raises(LogLockedError, match=f"log directory {tmp_path} is locked by pid {os.getpid()}"):
            update_checkpoint(tmp_path / "cp", {("a", 0): 1}, lock_path=lock_path, timeout=0.01)


_WRITER = """
import sys
from indexer.checkpoint import update_checkpoint
path, lock, topic, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
for i in range(n):
    update_checkpoint(path, {(topic, p): i for p in range(3)}, lock_path=lock)
"""


def test_concurrent_processes_never_lose_each_others_entries(tmp_path: Path) -> None:
    path = tmp_path / file_names.RECOVERY_POINT_CHECKPOINT_FILE
    lock_path = tmp_path / file_names.LOG_DIR_LOCK_FILE
    n = 30
    procs = [
        subprocess.Popen([sys.executable, "-c", _WRITER, str(path), str(lock_path), topic, str(n)])
        for topic in ("alpha", "beta", "gamma")
    ]
    for proc in procs:
        assert proc.wait(timeout=60) == 0
    assert OffsetCheckpointFile(path).read() == {
        (topic, p): n - 1 for topic in ("alpha", "beta", "gamma") for p in range(3)
    }
