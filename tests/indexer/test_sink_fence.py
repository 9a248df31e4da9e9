"""The executor-side sink's fence record: round trip, malformed files, and what a fence keeps from
truncation (FenceToken.kept_end)."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexer.commit_log import SinkCommit
from indexer.errors import StorageError
from indexer.limits import INT64_MAX
from indexer.sink_fence import DONE, FenceFile, FenceToken, fence_file, sink_fences

TP = ("t", 0)


def test_round_trip_atomic_and_listed(tmp_path: Path) -> None:
    fence = FenceFile(tmp_path, "events")
    assert fence.read() is None
    token = FenceToken("q", 4, "w/17", 100, 160, DONE)
    fence.write(token)
    assert fence.path == fence_file(tmp_path, "events") == tmp_path / ".seglog-sink.events.fence"
    assert fence.read() == token
    FenceFile(tmp_path, "other").write(FenceToken("q", 1, "a", 0))
    (tmp_path / ".seglog-sink.x.fence.tmp").write_text("{")  # a write cut short is not a fence
    assert sink_fences(tmp_path) == {"events": fence.path, "other": tmp_path / ".seglog-sink.other.fence"}


@pytest.mark.parametrize("body", [b"{not json", b'{"version": 2}', b'{"version": 1, "query_id": "q"}'])
def test_malformed_fence_is_a_storage_error_naming_the_file(tmp_path: Path, body: bytes) -> None:
    fence = FenceFile(tmp_path, "s")
    fence.path.write_bytes(body)
    with pytest.raises(StorageError, match="is malformed") as info:
        fence.read()
    assert info.value.path == str(fence.path) and str(fence.path) in str(info.value)


def _record(batch_id: int, end: int, query_id: str = "q") -> SinkCommit:
    return SinkCommit("s", query_id, batch_id, {TP: end})


@pytest.mark.parametrize(
    ("token", "commit", "kept"),
    [
        # done, its batch not committed, the partition still ends where it starts: the range stays
        (FenceToken("q", 5, "a", 100, 160, DONE), _record(4, 100), 160),
        # the same after a restart of the query from its checkpoint (the record names batch 4 of q)
        (FenceToken("q", 5, "a", 100, 160, DONE), _record(4, 100, "other"), 160),
        # a record that does not know the partition yet cannot have moved it on
        (FenceToken("q", 5, "a", 100, 160, DONE), SinkCommit("s"), 160),
        # its batch committed: the record holds what was kept
        (FenceToken("q", 5, "a", 100, 160, DONE), _record(5, 160), -1),
        # a later batch committed from another offset: the range can never commit
        (FenceToken("q", 5, "a", 100, 160, DONE), _record(3, 90), -1),
        # an attempt writing (or dead, or a zombie): only the sink's next attempt may cut its bytes
        (FenceToken("q", 5, "a", 100), _record(4, 100), INT64_MAX),
        (FenceToken("q", 5, "a", 100), _record(5, 130), -1),
    ],
)
def test_kept_end(token: FenceToken, commit: SinkCommit, kept: int) -> None:
    assert token.kept_end(commit, TP) == kept
