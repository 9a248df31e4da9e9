"""`seglog read` through a damaged index entry (issue 10 item 1): the records, not silence or others."""

from __future__ import annotations

import json
import logging
import struct
from pathlib import Path

import pytest

from indexer.checkpoint import OffsetCheckpointFile
from indexer.config import LogConfig
from indexer.file_names import REPLICATION_OFFSET_CHECKPOINT_FILE
from indexer.log import Log
from seglog.cli import main

TS = 1_700_000_000_000


def test_read_through_an_index_entry_moved_by_100_bytes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    log = Log.open(tmp_path / "events-0", LogConfig.from_mapping({"index.interval.bytes": 500}))
    for i in range(60):
        log.append({"value": [f"v{i}-{j}".encode() for j in range(5)], "timestamp": [TS + 10 * i] * 5})
    end = log.log_end_offset
    log.close()
    OffsetCheckpointFile(tmp_path / REPLICATION_OFFSET_CHECKPOINT_FILE).write({("events", 0): end})
    index = tmp_path / "events-0" / f"{0:020d}.index"
    raw = bytearray(index.read_bytes())
    relative, position = struct.unpack_from(">ii", raw, 8 * 3)
    struct.pack_into(">ii", raw, 8 * 3, relative, position + 100)
    index.write_bytes(bytes(raw))
    before = index.read_bytes()
    for start in (relative, relative + 1, relative + 7):
        with caplog.at_level(logging.WARNING, logger="indexer.segment"):
            args = ["read", "--log-dir", str(tmp_path), "--topic", "events", "--partition", "0"]
            assert main([*args, "--from-offset", str(start), "--max-records", "3"]) == 0
        assert [json.loads(line)["offset"] for line in capsys.readouterr().out.splitlines()] == [
            start,
            start + 1,
            start + 2,
        ]
        assert str(index) in caplog.text and "damaged entry" in caplog.text
        caplog.clear()
    assert main([*args, "--from-timestamp", str(TS + 10 * (relative // 5) + 10), "--max-records", "1"]) == 0
    assert [json.loads(line)["offset"] for line in capsys.readouterr().out.splitlines()] == [5 * (relative // 5 + 1)]
    assert index.read_bytes() == before  # a read-only reader never writes
