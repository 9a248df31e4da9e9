"""The sink's commit record: round trip, atomic replacement, malformed files."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from indexer.commit_log import SinkCommit, SinkCommitLog, commit_file
from indexer.errors import StorageError


def test_missing_record_reads_as_never_committed(tmp_path: Path) -> None:
    commit = SinkCommitLog(tmp_path, "events").read()
    assert commit == SinkCommit(sink_id="events")
    assert not commit.is_committed("q", 0)


def test_round_trip_and_identity(tmp_path: Path) -> None:
    log = SinkCommitLog(tmp_path, "events")
    commit = SinkCommit("events", "q-1", 7, {("events", 0): 10, ("events", 3): 4, ("other", 1): 2}, 1700)
    log.write(commit)
    assert log.path == tmp_path / "seglog-sink.events.json"
    assert log.read() == commit
    assert not (tmp_path / "seglog-sink.events.json.tmp").exists()
    assert commit.is_committed("q-1", 7) and commit.is_committed("q-1", 0)
    assert not commit.is_committed("q-1", 8)
    # A fresh checkpoint (another query id) starts a new sequence: batch 0 is not a replay.
    assert not commit.is_committed("q-2", 0)
    doc = json.loads(log.path.read_text())
    assert doc["end_offsets"] == {"events": {"0": 10, "3": 4}, "other": {"1": 2}}


def test_a_query_taking_over_keeps_the_earlier_queries_committed_batches(tmp_path: Path) -> None:
    log = SinkCommitLog(tmp_path, "events")
    first = SinkCommit("events").successor("q-1", 0, {("events", 0): 5}, 1).successor("q-1", 3, {("events", 0): 9}, 2)
    assert first.earlier_queries == {}
    second = first.successor("q-2", 0, {("events", 0): 12}, 3)
    log.write(second)
    assert log.read() == second and dict(second.earlier_queries) == {"q-1": 3}
    assert second.is_committed("q-1", 3) and not second.is_committed("q-1", 4)
    assert second.is_committed("q-2", 0) and not second.is_committed("q-3", 0)
    back = second.successor("q-1", 4, {("events", 0): 15}, 4)  # q-1 resumed: q-2 joins the earlier ones
    assert (back.query_id, back.batch_id, dict(back.earlier_queries)) == ("q-1", 4, {"q-2": 0})


def test_a_record_without_earlier_queries_reads_as_having_none(tmp_path: Path) -> None:
    log = SinkCommitLog(tmp_path, "events")
    doc = {"version": 1, "sink_id": "events", "query_id": "q", "batch_id": 2, "committed_at_ms": 1, "end_offsets": {}}
    log.path.write_text(json.dumps(doc))
    assert log.read() == SinkCommit("events", "q", 2, {}, 1)


def test_unreadable_record_is_a_storage_error(tmp_path: Path) -> None:
    log = SinkCommitLog(tmp_path, "s")
    log.path.mkdir()  # a directory where the file should be
    with pytest.raises(StorageError, match="Failed to read sink commit record") as info:
        log.read()
    assert info.value.errno == errno.EISDIR


def test_failed_write_keeps_previous_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = SinkCommitLog(tmp_path, "s")
    first = SinkCommit("s", "q", 1, {("t", 0): 5})
    log.write(first)

    def no_space(src: str, dst: str) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dst))

    monkeypatch.setattr(os, "replace", no_space)
    with pytest.raises(
        StorageError, match="Failed to write sink commit record .*seglog-sink.s.json: No space left"
    ) as info:
        log.write(SinkCommit("s", "q", 2, {("t", 0): 9}))
    assert info.value.errno == errno.ENOSPC
    monkeypatch.undo()
    assert log.read() == first


@pytest.mark.parametrize(
    "content, message",
    [
        (b"{not json", "not valid JSON"),
        (b"[]", "not a JSON object"),
        (b'{"version": 9}', "has version 9"),
        (b'{"version": 1, "sink_id": "s"}', "is malformed"),
        (
            b'{"version": 1, "sink_id": "x", "query_id": null, "batch_id": 0, "committed_at_ms": 0, "end_offsets": {}}',
            "belongs to sink 'x'",
        ),
    ],
)
def test_malformed_records_name_the_file(tmp_path: Path, content: bytes, message: str) -> None:
    log = SinkCommitLog(tmp_path, "s")
    log.path.write_bytes(content)
    with pytest.raises(StorageError, match=message) as info:
        log.read()
    assert info.value.path == str(log.path)


@pytest.mark.parametrize("sink_id", ["", "a/b", "..", "x" * 201, "spaces no"])
def test_sink_id_must_be_a_safe_file_name(tmp_path: Path, sink_id: str) -> None:
    with pytest.raises(ValueError, match="sink id"):
        commit_file(tmp_path, sink_id)
