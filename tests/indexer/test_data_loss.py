"""``seglog-accepted-data-loss.jsonl``: an acceptance that could not be written completely (a full
disk, a crash) leaves no torn line behind, so the file stays readable and later acceptances land on
lines of their own."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path
from typing import Any

import pytest

from indexer.data_loss import data_loss_file, read_accepted_losses, record_accepted_loss
from indexer.errors import StorageError
from tests.filesystems import TinyFs

ENTRY = {"topic": "events", "partition": 0, "lost": [{"first": 5, "last": 9}], "committed_offset": 10}


def _earlier_acceptance(log_dir: Path, size: int) -> bytes:
    """An acceptance line (padded) making the file ``size`` bytes long."""
    line = {"accepted_at_ms": 1, "topic": "old", "partition": 0, "pad": ""}
    line["pad"] = "p" * (size - len(json.dumps(line)) - 1)
    data = (json.dumps(line) + "\n").encode()
    assert len(data) == size
    data_loss_file(log_dir).write_bytes(data)
    return data


def test_an_acceptance_the_full_disk_cuts_short_leaves_the_file_as_it_was(tiny_fs: TinyFs) -> None:
    """The file ends 100 bytes before a page boundary: the kernel writes those 100 bytes of the new
    line and then has no page for the rest. The torn line made the file unreadable (``seglog
    describe`` failed on it) and the next acceptance was appended to it."""
    log_dir = tiny_fs.path
    before = _earlier_acceptance(log_dir, 4096 - 100)
    tiny_fs.fill()
    with pytest.raises(StorageError, match="No space left on device"):
        record_accepted_loss(log_dir, ENTRY)
    assert data_loss_file(log_dir).read_bytes() == before
    tiny_fs.free()
    record_accepted_loss(log_dir, ENTRY)
    assert [e["topic"] for e in read_accepted_losses(log_dir)] == ["old", "events"]


def test_a_line_torn_by_a_crash_is_ignored_and_cut_by_the_next_acceptance(tmp_path: Path) -> None:
    before = _earlier_acceptance(tmp_path, 200)
    with open(data_loss_file(tmp_path), "ab") as f:
        f.write(b'{"accepted_at_ms": 17, "command": "seglog rec')  # the process died here
    assert [e["topic"] for e in read_accepted_losses(tmp_path)] == ["old"]
    record_accepted_loss(tmp_path, ENTRY)
    data = data_loss_file(tmp_path).read_bytes()
    assert data.startswith(before) and data.count(b"\n") == 2
    assert [e["topic"] for e in read_accepted_losses(tmp_path)] == ["old", "events"]


def test_a_bad_line_in_the_middle_is_still_an_error(tmp_path: Path) -> None:
    data_loss_file(tmp_path).write_text('{"topic": "a"}\nnot json\n{"topic": "b"}\n')
    with pytest.raises(StorageError, match="line 2 is not JSON"):
        read_accepted_losses(tmp_path)


def _append_many(log_dir: str, writer: int, n: int, go: Any) -> None:
    go.wait()
    for i in range(n):
        record_accepted_loss(log_dir, {"writer": writer, "i": i, "pad": "x" * 300})


def test_appends_of_several_processes_at_once_all_land_whole(tmp_path: Path) -> None:
    """The retention job's quarantine purge records its loss beside a ``seglog recover
    --accept-data-loss`` in another process: each append finds the end of the file, then writes there,
    so two at once wrote over each other's line (lost acceptances, or a torn line that made the file
    unreadable). They are serialised: every line of every process lands whole."""
    ctx = multiprocessing.get_context("spawn")
    go = ctx.Event()
    procs = [ctx.Process(target=_append_many, args=(str(tmp_path), w, 150, go)) for w in range(4)]
    for p in procs:
        p.start()
    go.set()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    lines = read_accepted_losses(tmp_path)
    assert sorted((e["writer"], e["i"]) for e in lines) == [(w, i) for w in range(4) for i in range(150)]
