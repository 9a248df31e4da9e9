"""`seglog describe` on every broker vector directory and on logs we wrote."""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Iterable
from pathlib import Path

import pytest

from indexer.config import LogConfig
from indexer.log import Log
from seglog.cli import main
from seglog.commands.describe import render_text


def _describe(capsys: pytest.CaptureFixture[str], log_dir: Path) -> dict:  # type: ignore[type-arg]
    assert main(["describe", "--log-dir", str(log_dir), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _batches(path: Path) -> list[tuple[int, int, int]]:
    """(base offset, last offset, max timestamp) of every v2 batch, walked independently."""
    data = path.read_bytes()
    out, position = [], 0
    while position + 61 <= len(data):
        base, size = struct.unpack_from(">qi", data, position)
        if position + 12 + size > len(data):
            break
        last_delta = struct.unpack_from(">i", data, position + 23)[0]
        max_ts = struct.unpack_from(">q", data, position + 35)[0]
        out.append((base, base + last_delta, max_ts))
        position += 12 + size
    return out


def _appended(tmp_path: Path, lines: Iterable[str], config: list[str]) -> Path:
    """A log directory whose partition ``t-0`` holds ``lines`` (JSON records) as ``seglog append`` with
    ``config`` (``--config`` options) writes them."""
    source = tmp_path / "in.jsonl"
    source.write_text("".join(f"{line}\n" for line in lines))
    log_dir = tmp_path / "logs"
    assert main(["append", "--log-dir", str(log_dir), "--topic", "t", "--partition", "0", *config, str(source)]) == 0
    return log_dir


def _one_batch(tmp_path: Path) -> tuple[Path, Path]:
    """A log directory whose partition ``t-0`` holds one batch of two records: (log dir, its .log)."""
    log_dir = _appended(tmp_path, ['{"value": "a"}', '{"value": "b"}'], [])
    return log_dir, log_dir / "t-0" / "00000000000000000000.log"


@pytest.mark.parametrize(
    "name", ["multi-segment-3x", "gzip-large-records", "snappy-headers", "transactions-commit", "mixed-codecs-epochs"]
)
def test_every_vector_directory_is_described(vectors_dir: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    log_dir = vectors_dir / name
    doc = _describe(capsys, log_dir)
    partition_dirs = sorted(p.name for p in log_dir.iterdir() if p.is_dir() and re.fullmatch(r".+-\d+", p.name))
    assert sorted(f"{p['topic']}-{p['partition']}" for p in doc["partitions"]) == partition_dirs
    total = 0
    for p in doc["partitions"]:
        assert "error" not in p
        directory = log_dir / f"{p['topic']}-{p['partition']}"
        logs = sorted(directory.glob("*.log"))
        assert [s["base_offset"] for s in p["segments"]] == [int(f.name.split(".")[0]) for f in logs]
        for segment, path in zip(p["segments"], logs, strict=True):
            assert segment["size_bytes"] == path.stat().st_size
            batches = _batches(path)
            assert segment["batches"] == len(batches)
            if batches:
                assert segment["first_offset"] == batches[0][0]
                assert segment["last_offset"] == batches[-1][1]
                assert segment["max_timestamp"] == max(b[2] for b in batches)
        non_empty = [s for s in p["segments"] if s["batches"]]
        if non_empty:
            assert p["log_end_offset"] == non_empty[-1]["last_offset"] + 1
        assert p["size_bytes"] == sum(s["size_bytes"] for s in p["segments"])
        total += p["size_bytes"]
    assert doc["size_bytes"] == total
    assert doc["num_partitions"] == len(partition_dirs)


def test_multi_segment_offsets_and_checkpoints(vectors_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = _describe(capsys, vectors_dir / "multi-segment-3x")
    invoice0 = next(p for p in doc["partitions"] if p["topic"] == "invoice" and p["partition"] == 0)
    assert [s["base_offset"] for s in invoice0["segments"]] == [0, 30626, 60611, 90867]
    assert invoice0["recovery_point"] == 90867  # recovery-point-offset-checkpoint
    assert invoice0["log_start_offset"] == 0
    assert invoice0["segments"][0]["index_entries"] == 90  # a 720-byte .index
    assert invoice0["segments"][-1]["index_entries"] is None  # the active segment has none on disk
    assert invoice0["segments"][0]["records"] == 30626


def test_text_output(vectors_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["describe", "--log-dir", str(vectors_dir / "snappy-headers")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"log dir {vectors_dir / 'snappy-headers'}: ")
    header = next(line for line in out if line.startswith("some-topic-0: "))
    assert "log start offset 0" in header and "high watermark" in header
    row = out[out.index(header) + 2].split()
    assert row[0] == "0" and row[5].endswith("Z")


def test_our_own_log_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text("".join(f'{{"value": "v{i}", "timestamp": {1_700_000_000_000 + i}}}\n' for i in range(50)))
    log_dir = tmp_path / "logs"
    assert main(["topic", "create", "--log-dir", str(log_dir), "--topic", "events", "--partitions", "2"]) == 0
    for partition in (0, 1):
        assert (
            main(
                [
                    "append",
                    "--log-dir",
                    str(log_dir),
                    "--topic",
                    "events",
                    "--partition",
                    str(partition),
                    "--config",
                    "segment.bytes=300",
                    "--config",
                    "max.message.bytes=120",
                    str(source),
                ]
            )
            == 0
        )
    capsys.readouterr()
    doc = _describe(capsys, log_dir)
    assert [(p["topic"], p["partition"]) for p in doc["partitions"]] == [("events", 0), ("events", 1)]
    for p in doc["partitions"]:
        assert p["log_end_offset"] == p["high_watermark"] == p["recovery_point"] == 50
        assert p["num_segments"] > 1  # small batches in 300-byte segments
        assert sum(s["records"] for s in p["segments"]) == 50
        assert p["segments"][0]["first_timestamp"] == 1_700_000_000_000
        assert p["segments"][-1]["max_timestamp"] == 1_700_000_000_049


def test_a_damaged_segment_is_reported_not_fatal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log_dir, log = _one_batch(tmp_path)
    with open(log, "ab") as f:
        f.write(b"\x00" * 30)
    capsys.readouterr()
    doc = _describe(capsys, log_dir)
    segment = doc["partitions"][0]["segments"][0]
    assert segment["invalid_bytes"] == 30
    assert "30" in "\n".join(render_text(doc))


def test_missing_log_dir_is_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["describe", "--log-dir", str(tmp_path / "nope")]) == 1
    assert capsys.readouterr().err.startswith("seglog: LogDirectoryNotFoundError: log directory ")


def test_unreadable_partition_is_listed_with_its_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty-0").mkdir()  # a partition directory without any .log file
    assert main(["describe", "--log-dir", str(tmp_path), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["partitions"][0]["topic"] == "empty" and "StorageError" in doc["partitions"][0]["error"]


def test_verify_reports_what_recover_would_salvage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Damage in the middle of a segment: ``--verify`` names the intact batches after it and the
    offsets lost exactly as ``recover --dry-run`` does, and ``recover`` then keeps those batches."""
    log_dir = tmp_path / "logs"
    for i in range(4):  # four batches of two records
        source = tmp_path / f"in{i}.jsonl"
        source.write_text(f'{{"value": "v{i}-a"}}\n{{"value": "v{i}-b"}}\n')
        assert main(["append", "--log-dir", str(log_dir), "--topic", "t", "--partition", "0", str(source)]) == 0
    log = log_dir / "t-0" / "00000000000000000000.log"
    second = _batches(log)[1]
    data = bytearray(log.read_bytes())
    size = len(data) // 4  # the batches are the same size
    data[size + 30] ^= 0xFF  # inside the second batch (offsets 2..3), covered by its CRC
    log.write_bytes(bytes(data))
    capsys.readouterr()

    assert main(["describe", "--log-dir", str(log_dir), "--verify", "--json"]) == 1
    segment = json.loads(capsys.readouterr().out)["partitions"][0]["segments"][0]
    assert segment["salvage"] == {
        "kept_batches_after_damage": 2,
        "kept_offsets_after_damage": {"first": 4, "last": 7},  # every offset range in the JSON: {first, last}
        "removed": [{"position": size, "bytes": size}],
        "lost": [{"first": second[0], "last": second[1]}],
    }
    assert main(["describe", "--log-dir", str(log_dir), "--verify"]) == 1
    assert "seglog recover would keep 2 intact batches after the damage (offsets 4..7)" in capsys.readouterr().out

    assert main(["recover", "--log-dir", str(log_dir), "--dry-run", "--json"]) == 3  # committed offsets lost
    (partition,) = json.loads(capsys.readouterr().out)["partitions"]
    assert [(r["first"], r["last"]) for r in partition["lost_offsets"]] == [(2, 3)]
    # every offset range in the JSON outputs is {first, last}, last inclusive
    assert [r for s in partition["steps"] for r in s["lost_offsets"]] == [{"first": 2, "last": 3}]
    assert main(["recover", "--log-dir", str(log_dir), "--accept-data-loss"]) == 0
    assert [(base, last) for base, last, _ in _batches(log)] == [(0, 1), (4, 5), (6, 7)]


def test_verify_under_truncate_reports_no_salvage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log_dir, log = _one_batch(tmp_path)
    data = bytearray(log.read_bytes())
    data[-1] ^= 0xFF
    log.write_bytes(bytes(data))
    capsys.readouterr()
    argv = ["describe", "--log-dir", str(log_dir), "--verify", "--json", "--config", "recovery.strategy=truncate"]
    assert main(argv) == 1
    segment = json.loads(capsys.readouterr().out)["partitions"][0]["segments"][0]
    assert segment["invalid_bytes"] == len(data) and "salvage" not in segment


def test_salvage_line_counts_one_batch_in_the_singular() -> None:
    from seglog.commands.describe import _salvage_text

    plan = {
        "kept_batches_after_damage": 1,
        "kept_offsets_after_damage": {"first": 10148, "last": 10716},
        "removed": [{"position": 65437, "bytes": 65467}],
        "lost": [{"first": 9575, "last": 10147}],
    }
    assert _salvage_text(plan) == (
        "keep 1 intact batch after the damage (offsets 10148..10716), quarantine 65467 bytes at 65437; "
        "offsets lost: 9575..10147"
    )


def test_an_open_offset_range_reads_as_recover_prints_it() -> None:
    """A lost range whose end the files no longer say: the same words in describe and recover."""
    from seglog.commands.describe import _salvage_text

    plan = {"kept_batches_after_damage": 0, "kept_offsets_after_damage": None, "removed": [], "lost": []}
    plan["lost"] = [{"first": 9575, "last": None}]
    assert _salvage_text(plan).endswith("offsets lost: 9575.. (how many: unknown)")


def test_a_segment_missing_in_the_middle_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """describe listed a partition whose middle segment's files were gone as sound (``--verify`` exit
    0), while ``seglog recover`` reports its offsets lost: both now name them."""
    small = ["--config", "segment.bytes=300", "--config", "max.message.bytes=120"]
    log_dir = _appended(tmp_path, (f'{{"value": "v{i}"}}' for i in range(50)), small)
    partition = log_dir / "t-0"
    bases = sorted(int(p.name.split(".")[0]) for p in partition.glob("*.log"))
    gone, following = bases[1], bases[2]
    for path in partition.glob(f"{gone:020d}.*"):
        path.unlink()
    capsys.readouterr()
    [p] = _describe(capsys, log_dir)["partitions"]
    assert p["offsets_in_no_segment"] == [{"first": gone, "last": following - 1}]
    assert main(["describe", "--log-dir", str(log_dir), "--verify"]) == 1
    assert f"offsets {gone}..{following - 1} are in no segment file" in capsys.readouterr().out


def test_verify_reports_batches_out_of_offset_order_as_recover_salvages_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two CRC-valid batches swapped: ``describe --verify`` said nothing (exit 0) while ``recover``
    removes one of them; it now names the segment and says what recover would do, as recover does."""
    log_dir = tmp_path / "logs"
    for i in range(4):  # four batches of two records, the same size
        source = tmp_path / f"in{i}.jsonl"
        source.write_text(f'{{"value": "v{i}-a"}}\n{{"value": "v{i}-b"}}\n')
        assert main(["append", "--log-dir", str(log_dir), "--topic", "t", "--partition", "0", str(source)]) == 0
    log = log_dir / "t-0" / "00000000000000000000.log"
    data = log.read_bytes()
    size = len(data) // 4
    log.write_bytes(data[:size] + data[2 * size : 3 * size] + data[size : 2 * size] + data[3 * size :])
    capsys.readouterr()
    assert main(["describe", "--log-dir", str(log_dir), "--verify", "--json"]) == 1
    segment = json.loads(capsys.readouterr().out)["partitions"][0]["segments"][0]
    assert main(["recover", "--log-dir", str(log_dir), "--dry-run", "--json"]) == 3
    (partition,) = json.loads(capsys.readouterr().out)["partitions"]
    lost = [{"first": r["first"], "last": r["last"]} for r in partition["lost_offsets"]]
    assert segment["salvage"]["lost"] == lost and lost, (segment, lost)
    assert main(["describe", "--log-dir", str(log_dir), "--verify"]) == 1
    assert f"segment 0: batch offsets go backwards at position {2 * size}" in capsys.readouterr().out


def test_a_directory_of_segments_that_is_no_partition_is_listed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log_dir, log = _one_batch(tmp_path)
    (log_dir / "t-x").mkdir()
    (log_dir / "t-x" / log.name).write_bytes(log.read_bytes())
    capsys.readouterr()
    assert main(["describe", "--log-dir", str(log_dir)]) == 1
    out = capsys.readouterr().out
    assert "t-x: cannot read: StorageError: " in out and "not a <topic>-<partition> directory" in out


def test_verify_reports_every_index_file_the_loader_rejects_with_recovers_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An ``.index`` cut to 7 bytes showed as "0 index entries" and ``describe --verify`` exited 0, while
    ``recover --dry-run`` warned with Kafka's message and planned a rebuild. Every index file the
    engine's check rejects (offset, time, transaction index) is now named, with recover's plan, exit 1."""
    small = ["--config", "segment.bytes=600", "--config", "max.message.bytes=200", "--config", "index.interval.bytes=1"]
    log_dir = _appended(
        tmp_path, (f'{{"value": "{i:060d}", "timestamp": {1_700_000_000_000 + i}}}' for i in range(24)), small
    )
    capsys.readouterr()
    assert main(["describe", "--log-dir", str(log_dir), "--verify", *small]) == 0  # sound: no false alarm
    partition = log_dir / "t-0"
    bases = sorted(int(p.name.split(".")[0]) for p in partition.glob("*.log"))
    assert len(bases) >= 4
    cut = partition / f"{bases[0]:020d}.index"
    with open(cut, "r+b") as f:
        f.truncate(7)
    wrong_time = partition / f"{bases[1]:020d}.timeindex"
    entries = wrong_time.read_bytes()
    assert len(entries) >= 24
    wrong_time.write_bytes(entries[12:24] + entries[:12] + entries[24:])  # two entries swapped
    txn = partition / f"{bases[2]:020d}.txnindex"
    txn.write_bytes(struct.pack(">hqqqq", 0, 1, 0, bases[2] - 1, 0))  # an aborted txn ending before the segment
    capsys.readouterr()
    assert main(["describe", "--log-dir", str(log_dir), "--verify", "--json", *small]) == 1
    [p] = json.loads(capsys.readouterr().out)["partitions"]
    problems = {Path(i["file"]).name: i["error"] for s in p["segments"] for i in s.get("index_problems", ())}
    assert set(problems) == {cut.name, wrong_time.name, txn.name}, problems
    assert "found 7 bytes which is neither positive nor a multiple of 8" in problems[cut.name]
    assert main(["describe", "--log-dir", str(log_dir), "--verify", *small]) == 1
    out = capsys.readouterr().out
    for path in (cut, wrong_time, txn):
        assert f"segment {int(path.name.split('.')[0])}: index file {path.name} cannot be trusted: " in out, out
    assert out.count("seglog recover would rebuild its indexes from the .log") == 3, out
    assert main(["recover", "--log-dir", str(log_dir), "--dry-run", "--json", *small]) == 0
    [planned] = json.loads(capsys.readouterr().out)["partitions"]
    assert planned["indexes_rebuilt"] == 3


def test_verify_leaves_a_live_writers_preallocated_active_index_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A writer keeps its active segment's indexes pre-allocated (zero-filled slots): no index damage
    while it holds the partition; once it let go as a crash does, the same files are reported."""
    log_dir = tmp_path / "logs"
    log = Log.open(log_dir / "t-0", LogConfig(index_interval_bytes=1))
    try:
        log.append({"value": [b"a" * 50] * 3})
        log.append({"value": [b"b" * 50] * 3})
        log.flush()
        assert (log_dir / "t-0" / "00000000000000000000.index").stat().st_size > 8  # pre-allocated
        assert main(["describe", "--log-dir", str(log_dir), "--verify", "--json"]) == 0
        [p] = json.loads(capsys.readouterr().out)["partitions"]
        assert "index_problems" not in p["segments"][-1]
    finally:
        log.abandon()  # let go as a crash would: the indexes stay untrimmed
    assert main(["describe", "--log-dir", str(log_dir), "--verify", "--json"]) == 1
    [p] = json.loads(capsys.readouterr().out)["partitions"]
    names = [Path(i["file"]).name for i in p["segments"][-1]["index_problems"]]
    assert names == ["00000000000000000000.index", "00000000000000000000.timeindex"]


def test_verify_names_leftover_swap_cleaned_and_deleted_files_with_what_opening_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A process killed mid-salvage, mid-split or mid-deletion leaves ``.swap``, ``.cleaned`` and
    ``.deleted`` files, which the next writable open completes, drops or deletes: ``describe --verify``
    said nothing of them (exit 0), reading the directory as settled. Each is now named with what
    loading does with it (the loader's own decisions); ``.cleaned`` and ``.swap`` are findings (exit
    1), ``.deleted`` files, which any run ending before ``file.delete.delay.ms`` leaves, are named
    only; a partition a live process holds has no leftovers but its own work in progress."""
    small = ["--config", "segment.bytes=600", "--config", "max.message.bytes=200"]
    log_dir = _appended(tmp_path, (f'{{"value": "{i:060d}"}}' for i in range(24)), small)
    partition = log_dir / "t-0"
    logs = sorted(partition.glob("*.log"))
    assert len(logs) >= 3
    deleted = partition / (logs[0].name + ".deleted")  # a retention pass's file, its delay not yet over
    deleted.write_bytes(logs[0].read_bytes())
    capsys.readouterr()
    assert main(["describe", "--log-dir", str(log_dir), "--verify", *small]) == 0
    out = capsys.readouterr().out
    assert "files an interrupted roll, clean, salvage or deletion left; the next writable open" in out, out
    assert f"    {deleted.name}: deletes it (stray temporary file; " in out, out

    cleaned = partition / (logs[2].name + ".cleaned")  # a salvage killed before its rename to .swap
    cleaned.write_bytes(logs[2].read_bytes())
    swap = partition / (logs[1].name + ".swap")  # a salvage killed after it, before the rename into place
    swap.write_bytes(logs[1].read_bytes())
    assert main(["describe", "--log-dir", str(log_dir), "--verify", "--json", *small]) == 1
    [p] = json.loads(capsys.readouterr().out)["partitions"]
    actions = {f["file"]: (f["action"], f["finding"]) for f in p["leftover_files"]}
    assert actions == {
        deleted.name: ("delete-stray-deleted-file", False),
        cleaned.name: ("delete-cleaned-file", True),
        swap.name: ("rename-swap-file", True),
        logs[1].name: ("delete-file-replaced-by-swap", True),
        logs[1].with_suffix(".index").name: ("delete-file-replaced-by-swap", True),
        logs[1].with_suffix(".timeindex").name: ("delete-file-replaced-by-swap", True),
    }, actions
    assert main(["describe", "--log-dir", str(log_dir), "--verify", *small]) == 1
    out = capsys.readouterr().out
    assert f"    {swap.name}: completes the swap: renames it over the segment file (renamed to {logs[1].name})" in out
    assert f"    {cleaned.name}: deletes it: the segment it was written for stays as it is" in out, out
    assert f"    {logs[1].name}: deletes it: a swap file replaces it" in out, out
    assert main(["recover", "--log-dir", str(log_dir), "--dry-run", "--json", *small]) == 0
    [planned] = json.loads(capsys.readouterr().out)["partitions"]
    steps = {(Path(s["path"]).name, s["kind"]) for s in planned["steps"]}
    assert {(name, kind) for name, (kind, _) in actions.items()} <= steps, steps

    with Log.open(partition, LogConfig(segment_bytes=600, max_message_bytes=200)) as log:  # a live holder
        assert main(["describe", "--log-dir", str(log_dir), "--verify", "--json", *small]) == 0
        [p] = json.loads(capsys.readouterr().out)["partitions"]
        assert p["leftover_files"] == [] and log.log_end_offset == 24
    assert not [f for f in partition.iterdir() if f.name.endswith((".cleaned", ".swap"))]


def test_a_log_ending_below_its_recovery_point_is_reported(
    cut_below_recovery_point: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without a high watermark entry, the recovery point is the offset the log must reach: describe
    said nothing of the flushed offsets 236..436 a cut segment lost; it names them (and ``--verify``
    fails), and ``seglog recover --dry-run`` reports them as committed data it would lose."""
    doc = _describe(capsys, cut_below_recovery_point)
    (items,) = doc["partitions"]
    assert items["missing_committed"] == {"first": 236, "last": 436, "checkpoint": "recovery point"}
    assert main(["describe", "--log-dir", str(cut_below_recovery_point), "--verify"]) == 1
    out = capsys.readouterr().out
    assert "committed records missing: offsets 236..436 (the checkpointed recovery point is 437)" in out, out
    assert main(["recover", "--log-dir", str(cut_below_recovery_point), "--dry-run"]) == 3
    assert "items-0: would lose committed offsets 236..436" in capsys.readouterr().out
