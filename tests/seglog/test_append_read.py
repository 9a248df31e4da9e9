"""`seglog append` / `seglog read`: JSON-lines parsing and rendering, and the round trip through a log."""

from __future__ import annotations

import base64
import errno
import io
import json
import os
import signal
import struct
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from indexer.config import load_settings
from indexer.errors import SchemaError
from indexer.log_manager import LogManager
from indexer.records.columns import HEADERS_TYPE, READ_SCHEMA
from seglog.cli import main
from seglog.commands.append import parse_json_lines
from seglog.output import render_records_jsonl
from tests.cli import append_file, read_records

with warnings.catch_warnings():  # kafka-python's package import uses a deprecated importlib API
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatch

TS = 1_700_000_000_000


def _jsonl(rows: list[dict]) -> str:  # type: ignore[type-arg]
    return "".join(json.dumps(r) + "\n" for r in rows)


def _append(tmp_path: Path, log_dir: Path, rows: list[dict], *extra: str, topic: str = "t") -> int:  # type: ignore[type-arg]
    source = tmp_path / "input.jsonl"
    source.write_text(_jsonl(rows))
    return append_file(log_dir, topic, source, *extra)


# --- parsing ------------------------------------------------------------------------------------


def test_parse_fields_nulls_and_headers() -> None:
    table = parse_json_lines(
        b'{"key": "k", "value": "v", "timestamp": 5, "headers": [["a", "1"], ["b", null]]}\n'
        b"\n"
        b'{"value": null}\n'
        b'{"offset": 7, "timestampType": 0, "topic": "x", "partition": 3, "key": "z", "headers": []}\n'
    )
    assert table.column_names == ["key", "value", "timestamp", "headers"]
    assert table.to_pylist() == [
        {
            "key": b"k",
            "value": b"v",
            "timestamp": 5,
            "headers": [{"key": "a", "value": b"1"}, {"key": "b", "value": None}],
        },
        {"key": None, "value": None, "timestamp": None, "headers": None},
        {"key": b"z", "value": None, "timestamp": None, "headers": []},
    ]
    assert table.column("headers").type == HEADERS_TYPE


@pytest.mark.parametrize(
    ("data", "encoding", "message"),
    [
        (b'{"key": "a"}\n\n{"key": 1}\n', "utf8", "in.jsonl: line 3: key must be a string or null, got int"),
        (b'{"key": "a"}\nnot json\n', "utf8", "in.jsonl: line 2: not valid JSON"),
        (b"[1, 2]\n", "utf8", "in.jsonl: line 1: expected a JSON object, got list"),
        (b'{"colour": "red"}\n', "utf8", "in.jsonl: line 1: unknown field(s) colour"),
        (b'{"timestamp": 1.5}\n', "utf8", "in.jsonl: line 1: timestamp must be an integer"),
        (b'{}\n{"timestamp": "5"}\n', "utf8", "in.jsonl: line 2: timestamp '5' is not an ISO-8601 time"),
        (b'{"timestamp": "1969-12-31"}\n', "utf8", "in.jsonl: line 1: timestamp '1969-12-31' is not an ISO-8601 time"),
        (
            b'{"timestamp": "2024-05-01"}\n{}\n{"timestamp": 5}\n',
            "utf8",
            "in.jsonl: line 3: timestamp is a number here but text on line 1",
        ),
        (b'{"headers": {"a": "b"}}\n', "utf8", "in.jsonl: line 1: headers must be a list of [key, value]"),
        (b'{}\n{"headers": [["a"]]}\n', "utf8", "in.jsonl: line 2: each header must be a [key, value] pair"),
        (b'{}\n{}\n{"headers": [[null, "v"]]}\n', "utf8", "in.jsonl: line 3: a header key is null"),
        (b'{"value": "abc"}\n', "base64", "in.jsonl: line 1: value is not valid base64"),
        (b'{}\n{"key": "ab!d"}\n', "base64", "in.jsonl: line 2: key is not valid base64"),
        (
            b'{"headers": [["h", "QQ=="]]}\n{"headers": [["h", "Q"]]}\n',
            "base64",
            "in.jsonl: line 2: a header value is not valid base64",
        ),
        # Arrow stores bytes that are not UTF-8 as they are: a later `seglog read` could not show them.
        (b'{}\n{"value": "caf\xe9"}\n', "utf8", "in.jsonl: line 2: not valid UTF-8 (byte 0xe9 at column 15)"),
        (b'{}\n{"headers": [["\xff", "v"]]}\n', "utf8", "in.jsonl: line 2: not valid UTF-8 (byte 0xff"),
        # What Arrow refuses without saying where.
        (b'{}\n{"key": "a", "key": "b"}\n', "utf8", "in.jsonl: line 2: field key is given twice"),
        (b'{}\n{"value": "\\ud800"}\n', "utf8", "in.jsonl: line 2: value holds a lone surrogate"),
        (b"{}\n\xef\xbb\xbf{}\n", "utf8", "in.jsonl: line 2: a byte order mark is allowed only at the start"),
        # JSON's whitespace is space, tab, CR and LF: a form feed is no blank line (Arrow said "row 1").
        (b'{}\n\x0c\n{"value": "b"}\n', "utf8", "in.jsonl: line 2: not valid JSON"),
        (b"\x0c\n", "utf8", "in.jsonl: line 1: not valid JSON"),
        # Windows PowerShell writes UTF-16: not "binary data".
        ('{"value": "a"}\n'.encode("utf-16"), "utf8", "in.jsonl: line 1: the input is UTF-16, not UTF-8"),
    ],
)
def test_parse_errors_name_the_line(data: bytes, encoding: str, message: str) -> None:
    with pytest.raises(SchemaError) as info:
        parse_json_lines(data, encoding=encoding, source="in.jsonl")
    assert str(info.value).startswith(message)


def test_iso_timestamps_are_read_as_seglog_read_takes_them() -> None:
    table = parse_json_lines(
        b'{"timestamp": "2024-05-01T12:00:00Z"}\n{"timestamp": null}\n{"timestamp": "2024-05-01T14:00:00.250+02:00"}\n'
        b'{"timestamp": "2024-05-01"}\n'
    )
    assert table.column("timestamp").to_pylist() == [1714564800000, None, 1714564800250, 1714521600000]


def test_empty_input_is_an_empty_table() -> None:
    assert parse_json_lines(b" \n\n").num_rows == 0


def test_line_ends_bom_and_a_last_line_without_newline() -> None:
    data = b'\xef\xbb\xbf{"value": "a"}\r\n\r\n{"value": ""}\r\n{"key": "", "value": null}'
    assert parse_json_lines(data).to_pylist() == [
        {"key": None, "value": b"a", "timestamp": None, "headers": None},
        {"key": None, "value": b"", "timestamp": None, "headers": None},
        {"key": b"", "value": None, "timestamp": None, "headers": None},
    ]


def test_a_line_longer_than_arrows_block_is_read() -> None:
    # Arrow's JSON reader parses 1 MiB blocks and refuses an object straddling two block boundaries.
    big = "x" * (3 << 20)
    data = f'{{"value": "a"}}\n{{"value": "{big}"}}\n{{"value": "b"}}\n'.encode()
    assert parse_json_lines(data).column("value").to_pylist() == [b"a", big.encode(), b"b"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.none(), st.binary(max_size=70)), min_size=1, max_size=30))
def test_base64_decoding_matches_the_standard_library(values: list[bytes | None]) -> None:
    lines = "".join(
        json.dumps(
            {
                "value": None if v is None else base64.b64encode(v).decode(),
                "headers": [] if v is None else [["h", base64.b64encode(v[::-1]).decode()]],
            }
        )
        + "\n"
        for v in values
    )
    table = parse_json_lines(lines.encode(), encoding="base64")
    assert table.column("value").to_pylist() == values
    assert [h[0]["value"] if h else None for h in table.column("headers").to_pylist()] == [
        None if v is None else v[::-1] for v in values
    ]


# --- rendering ---------------------------------------------------------------------------------------

_record = st.fixed_dictionaries(
    {
        "offset": st.integers(-(2**63), 2**63 - 1),
        "timestamp": st.integers(-(2**63), 2**63 - 1),
        "timestampType": st.sampled_from([-1, 0, 1]),
        "key": st.one_of(st.none(), st.binary(max_size=40)),
        "value": st.one_of(st.none(), st.binary(max_size=40)),
        "headers": st.one_of(
            st.none(),
            st.lists(
                st.fixed_dictionaries(
                    {"key": st.text(max_size=8), "value": st.one_of(st.none(), st.binary(max_size=10))}
                ),
                max_size=3,
            ),
        ),
    }
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_record, min_size=1, max_size=20), st.integers(0, 5))
def test_base64_rendering_round_trips(rows: list[dict], cut: int) -> None:  # type: ignore[type-arg]
    table = pa.Table.from_pylist(rows, schema=READ_SCHEMA).slice(min(cut, len(rows) - 1))
    lines = render_records_jsonl(table, "base64").decode().split("\n")[:-1]  # header keys may hold U+0085

    def unb64(s: str | None) -> bytes | None:
        return None if s is None else base64.b64decode(s)

    assert len(lines) == table.num_rows
    for line, row in zip(lines, table.to_pylist(), strict=True):
        doc = json.loads(line)
        assert list(doc) == ["offset", "timestamp", "timestampType", "key", "value", "headers"]
        assert (doc["offset"], doc["timestamp"], doc["timestampType"]) == (
            row["offset"],
            row["timestamp"],
            row["timestampType"],
        )
        assert unb64(doc["key"]) == row["key"] and unb64(doc["value"]) == row["value"]
        assert [[k, unb64(v)] for k, v in doc["headers"]] == [[h["key"], h["value"]] for h in row["headers"] or []]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.none(), st.text(max_size=20)), st.text(max_size=20)), min_size=1, max_size=20))
def test_text_rendering_round_trips(pairs: list[tuple[str | None, str]]) -> None:
    rows = [
        {
            "offset": i,
            "timestamp": TS,
            "timestampType": 0,
            "key": None if k is None else k.encode(),
            "value": v.encode(),
            "headers": [{"key": v, "value": v.encode()}],
        }
        for i, (k, v) in enumerate(pairs)
    ]
    out = render_records_jsonl(pa.Table.from_pylist(rows, schema=READ_SCHEMA), "utf8")
    docs = [json.loads(line) for line in out.decode("utf-8").split("\n")[:-1]]
    assert [(d["key"], d["value"], d["headers"]) for d in docs] == [(k, v, [[v, v]]) for k, v in pairs]


def test_text_rendering_refuses_invalid_utf8() -> None:
    rows = [
        {"offset": 41, "timestamp": TS, "timestampType": 0, "key": b"ok", "value": b"ok", "headers": []},
        {"offset": 42, "timestamp": TS, "timestampType": 0, "key": b"ok", "value": b"\xff", "headers": []},
    ]
    with pytest.raises(SchemaError, match="the value of the record at offset 42 is not valid UTF-8; use --encoding"):
        render_records_jsonl(pa.Table.from_pylist(rows, schema=READ_SCHEMA), "utf8")
    rows[1]["value"], rows[1]["headers"] = b"ok", [{"key": "h", "value": b"\xfe"}]
    with pytest.raises(SchemaError, match="a header value of the record at offset 42"):
        render_records_jsonl(pa.Table.from_pylist(rows, schema=READ_SCHEMA), "utf8")


# --- through a log ----------------------------------------------------------------------------------


def _kafka_python_records(log_file: Path) -> list[tuple[int, int, bytes | None, bytes | None, list]]:  # type: ignore[type-arg]
    data = log_file.read_bytes()
    out, position = [], 0
    while position < len(data):
        size = struct.unpack_from(">i", data, position + 8)[0]
        batch = DefaultRecordBatch(data[position : position + 12 + size])
        assert batch.validate_crc()
        out += [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
        position += 12 + size
    return out


def test_append_then_read_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [
        {"key": "k1", "value": "hello", "timestamp": TS, "headers": [["source", "web"]]},
        {"value": "tombstone next", "timestamp": TS + 1},
        {"key": "k1", "value": None, "timestamp": TS + 2},
        {"key": "ünï", "value": 'line\nbreak "quoted"', "timestamp": TS + 3, "headers": [["h", None]]},
    ]
    log_dir = tmp_path / "logs"
    assert _append(tmp_path, log_dir, rows) == 0
    assert capsys.readouterr().out == "t-0 0..3\n"
    assert _append(tmp_path, log_dir, rows[:2], "--json") == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["first_offset"], result["last_offset"], result["high_watermark"]) == (4, 5, 6)

    records = read_records(capsys, log_dir, "t", "--from-offset", "0")
    expected = rows + rows[:2]
    assert [r["offset"] for r in records] == list(range(6))
    for got, want in zip(records, expected, strict=True):
        assert got["key"] == want.get("key") and got["value"] == want.get("value")
        assert got["timestamp"] == want["timestamp"] and got["timestampType"] == 0
        assert got["headers"] == want.get("headers", [])
    # An independent decoder sees the same records, every CRC valid.
    independent = _kafka_python_records(log_dir / "t-0" / "00000000000000000000.log")
    assert [(o, ts, k, v) for o, ts, k, v, _ in independent] == [
        (
            r["offset"],
            r["timestamp"],
            None if r["key"] is None else r["key"].encode(),
            None if r["value"] is None else r["value"].encode(),
        )
        for r in records
    ]
    assert (log_dir / "replication-offset-checkpoint").read_text() == "0\n1\nt 0 6\n"
    assert "t 0 6" in (log_dir / "recovery-point-offset-checkpoint").read_text()


def test_append_fits_batches_to_a_small_segment_bytes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 10 item 5: with segment.bytes below the batches' size limit, batches are cut to fit."""
    log_dir = tmp_path / "logs"
    rows = [{"key": f"k{i}", "value": f'{{"n":{i},"pad":"{"x" * 150}"}}'} for i in range(4000)]
    overrides = ["--config", "segment.bytes=262144", "--config", "batch.size=1048588"]
    assert _append(tmp_path, log_dir, rows, *overrides) == 0
    capsys.readouterr()
    stored = [row["value"] for row in read_records(capsys, log_dir, "t", "--from-offset", "0")]
    assert stored == [r["value"] for r in rows]
    segments = sorted((log_dir / "t-0").glob("*.log"))
    assert len(segments) > 2 and all(p.stat().st_size <= 262144 for p in segments)


def test_read_by_timestamp_and_max_records(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log_dir = tmp_path / "logs"
    rows = [{"value": f"v{i}", "timestamp": TS + 10 * i} for i in range(100)]
    assert _append(tmp_path, log_dir, rows, "--config", "segment.bytes=400", "--config", "max.message.bytes=150") == 0
    capsys.readouterr()
    got = read_records(capsys, log_dir, "t", "--from-timestamp", str(TS + 421), "--max-records", "3")
    assert [(r["offset"], r["value"]) for r in got] == [(43, "v43"), (44, "v44"), (45, "v45")]
    assert read_records(capsys, log_dir, "t", "--from-timestamp", str(TS + 10_000)) == []
    assert len(read_records(capsys, log_dir, "t", "--from-offset", "0")) == 100
    assert read_records(capsys, log_dir, "t", "--from-offset", "97", "--max-records", "0") == []
    assert [r["offset"] for r in read_records(capsys, log_dir, "t", "--from-offset", "97")] == [97, 98, 99]


def test_read_takes_iso_timestamps_and_says_when_there_is_nothing_to_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An ISO-8601 time is a timestamp too (UTC without a zone); a negative one (Kafka's -1 "latest"
    sentinel) is refused rather than read as "everything"; an empty result is said on stderr, not
    left to look like an empty partition."""
    log_dir = tmp_path / "logs"
    assert _append(tmp_path, log_dir, [{"value": f"v{i}", "timestamp": TS + 1000 * i} for i in range(5)]) == 0
    capsys.readouterr()
    iso = "2023-11-14T22:13:22.500Z"  # TS + 2500
    assert [r["offset"] for r in read_records(capsys, log_dir, "t", "--from-timestamp", iso)] == [3, 4]
    naive = "2023-11-14T22:13:22.500"
    assert [r["offset"] for r in read_records(capsys, log_dir, "t", "--from-timestamp", naive)] == [3, 4]
    args = ["read", "--log-dir", str(log_dir), "--topic", "t", "--partition", "0"]
    for bad in ("-1", "yesterday", str(2**63)):  # beyond a long: an engine error that offered negative times
        assert main([*args, "--from-timestamp", bad]) == 2
        assert "expected milliseconds since the epoch (0..9223372036854775807) or an ISO-8601 time" in (
            capsys.readouterr().err
        )
    for start, said in (
        (["--from-timestamp", str(TS + 10_000)], "no record of t-0 has a timestamp >= 1700000010000"),
        (["--from-offset", "5"], "t-0 has no committed records from offset 5 (high watermark 5)"),
    ):
        assert main([*args, *start]) == 0
        out, err = capsys.readouterr()
        assert out == "" and f"nothing to read: {said}" in err, err
    assert main([*args, "--from-offset", "4", "--max-records", "0"]) == 0
    assert capsys.readouterr() == ("", "")  # nothing asked, nothing said


def test_read_from_beginning_starts_at_the_log_start_offset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log_dir = tmp_path / "logs"
    assert _append(tmp_path, log_dir, [{"value": f"v{i}"} for i in range(10)]) == 0
    capsys.readouterr()
    manager = LogManager(log_dir, load_settings())
    try:  # as retention does: the log start moves past offset 0
        log = manager.get_log("t", 0)
        assert log is not None and log.maybe_increment_log_start_offset(4)
        manager.checkpoint_log_start_offsets()
    finally:
        manager.close()
    assert main(["read", "--log-dir", str(log_dir), "--topic", "t", "--partition", "0", "--from-offset", "0"]) == 1
    assert "OffsetOutOfRangeError" in capsys.readouterr().err
    assert [r["offset"] for r in read_records(capsys, log_dir, "t", "--from-beginning")] == list(range(4, 10))


def test_a_log_start_checkpoint_above_the_log_end_is_an_error_not_an_empty_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A damaged ``log-start-offset-checkpoint`` (99999, above the log end 10) made ``seglog read
    --from-beginning`` print nothing and exit 0 over ten committed records, and ``describe`` list the
    partition as sound. Both now fail naming the partition and the two offsets."""
    log_dir = tmp_path / "logs"
    assert _append(tmp_path, log_dir, [{"value": f"v{i}"} for i in range(10)]) == 0
    (log_dir / "log-start-offset-checkpoint").write_text("0\n1\nt 0 99999\n")
    capsys.readouterr()
    assert main(["read", "--log-dir", str(log_dir), "--topic", "t", "--partition", "0", "--from-beginning"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("seglog: StorageError: partition t-0 in ") and "log start offset 99999" in err, err
    assert "log end offset 10" in err and len(err.splitlines()) == 1, err
    assert main(["describe", "--log-dir", str(log_dir)]) == 1
    assert "log start offset 99999" in capsys.readouterr().out


def test_a_log_ending_below_its_committed_offset_is_named_not_read_short_in_silence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Committed records missing from the end of a log (its last batch cut off: the high watermark
    checkpoint says 10, the log ends at 6) made ``seglog read`` print the six records left and exit 0
    without a word, as if the partition held six. It still prints them (as ``seglog serve`` and the
    Spark source read such a log), and says in one line which committed offsets are missing."""
    log_dir = tmp_path / "logs"
    assert _append(tmp_path, log_dir, [{"value": f"v{i}"} for i in range(6)]) == 0
    assert _append(tmp_path, log_dir, [{"value": f"v{i}"} for i in range(6, 10)]) == 0
    segment = log_dir / "t-0" / "00000000000000000000.log"
    os.truncate(segment, 12 + int.from_bytes(segment.read_bytes()[8:12], "big"))  # the first batch only
    capsys.readouterr()
    assert main(["read", "--log-dir", str(log_dir), "--topic", "t", "--partition", "0", "--from-beginning"]) == 0
    out, err = capsys.readouterr()
    assert [json.loads(line)["value"] for line in out.splitlines()] == [f"v{i}" for i in range(6)]
    assert len(err.splitlines()) == 1, err
    assert "committed records (offsets 6..9) are missing" in err and "seglog recover" in err, err


def test_a_log_ending_below_its_recovery_point_is_named_not_read_short_in_silence(
    cut_below_recovery_point: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A broker's partition without a high watermark entry, cut mid-batch below its recovery point
    (every offset below it was flushed): ``seglog read`` printed the 236 records left without a word.
    It still prints them, and names the lost offsets 236..436 and ``seglog recover``."""
    args = ["read", "--log-dir", str(cut_below_recovery_point), "--topic", "items", "--partition", "0"]
    assert main([*args, "--from-beginning"]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 236
    assert "ends at offset 236, below its checkpointed recovery point 437" in err, err
    assert "(offsets 236..436) are missing" in err and "seglog recover" in err, err


def test_read_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log_dir = tmp_path / "logs"
    assert _append(tmp_path, log_dir, [{"value": "x"}]) == 0
    capsys.readouterr()
    assert main(["read", "--log-dir", str(log_dir), "--topic", "t", "--partition", "0", "--from-offset", "5"]) == 1
    assert capsys.readouterr().err.startswith("seglog: OffsetOutOfRangeError: offset 5 is outside t-0")
    assert main(["read", "--log-dir", str(log_dir), "--topic", "u", "--partition", "0", "--from-offset", "0"]) == 1
    assert "UnknownTopicOrPartitionError: topic 'u' does not exist" in capsys.readouterr().err


def test_bad_input_appends_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log_dir = tmp_path / "logs"
    assert _append(tmp_path, log_dir, [{"value": "ok"}]) == 0
    source = tmp_path / "bad.jsonl"
    source.write_text('{"value": "fine"}\n{"value": 3}\n')
    assert main(["append", "--log-dir", str(log_dir), "--topic", "t", "--partition", "0", str(source)]) == 1
    assert capsys.readouterr().err.endswith("bad.jsonl: line 2: value must be a string or null, got int\n")
    assert len(read_records(capsys, log_dir, "t", "--from-offset", "0")) == 1
    assert main(["append", "--log-dir", str(tmp_path / "other"), "--topic", "t", "--partition", "0", str(source)]) == 1
    assert not (tmp_path / "other").exists()


def test_a_record_over_max_message_bytes_names_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log_dir = tmp_path / "logs"
    assert _append(tmp_path, log_dir, [{"value": "ok"}]) == 0
    source = tmp_path / "big.jsonl"
    source.write_text(_jsonl([{"value": "fine"}]) + "\n" + _jsonl([{"value": "x" * 2_000_000}]))
    assert append_file(log_dir, "t", source) == 1
    assert capsys.readouterr().err == (
        f"seglog: RecordTooLargeError: {source}: line 3: the record, alone in a batch of 2000074 bytes, "
        "is larger than max.message.bytes = 1048588 of t-0\n"
    )
    assert len(read_records(capsys, log_dir, "t", "--from-offset", "0")) == 1


def test_an_append_whose_flush_fails_is_not_made_visible(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The high watermark moves only after the records are on disk (flush, then high watermark, as the
    sink commits). An fsync of the segment that fails (EIO; a real one cannot be made here, so it is
    injected into the real command) fails the command, and readers do not see its records: before,
    the high watermark was advanced first and the shutdown checkpointed it, so `seglog read` showed
    records that the command reported as failed and that a power loss then takes away."""
    log_dir = tmp_path / "logs"
    assert _append(tmp_path, log_dir, [{"value": "kept"}]) == 0
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".log"):
            raise OSError(errno.EIO, "Input/output error")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    assert _append(tmp_path, log_dir, [{"value": "unflushed"}]) == 1
    assert "StorageError: Failed to flush" in capsys.readouterr().err
    monkeypatch.undo()
    assert [r["value"] for r in read_records(capsys, log_dir, "t", "--from-beginning")] == ["kept"]
    # The failed append's records are gone, not committed by the next append's high watermark.
    assert _append(tmp_path, log_dir, [{"value": "next"}]) == 0
    assert capsys.readouterr().out == "t-0 1..1\n"
    assert [r["value"] for r in read_records(capsys, log_dir, "t", "--from-beginning")] == ["kept", "next"]


def test_an_append_interrupted_by_ctrl_c_leaves_nothing_a_later_append_commits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C after the records were written, before they were committed (the SIGINT arrives in the
    segment's fsync, injected there as the interpreter raises it): one line, exit 130, and the next
    append commits only its own records (the interrupted ones used to get committed with them)."""
    log_dir = tmp_path / "logs"
    assert _append(tmp_path, log_dir, [{"value": "kept"}]) == 0
    real_fsync = os.fsync
    pressed = []

    def fsync(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".log") and not pressed:
            pressed.append(fd)  # one Ctrl-C
            raise KeyboardInterrupt
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    assert _append(tmp_path, log_dir, [{"value": "interrupted"}] * 3) == 130
    monkeypatch.undo()
    assert capsys.readouterr().err.splitlines()[-1] == "seglog: interrupted"
    assert _append(tmp_path, log_dir, [{"value": "next"}]) == 0
    assert capsys.readouterr().out == "t-0 1..1\n"
    assert [r["value"] for r in read_records(capsys, log_dir, "t", "--from-beginning")] == ["kept", "next"]


# `seglog append` killed outright (SIGKILL) after its records were written and flushed, before its high
# watermark moved: the moment a crash leaves uncommitted records on disk.
_KILLED_BEFORE_COMMIT = """
import os, signal, sys
from indexer.log import Log
Log.update_high_watermark = lambda self, offset: os.kill(os.getpid(), signal.SIGKILL)
from seglog.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("created_by", ["topic create", "the append"])
def test_the_first_append_to_a_partition_killed_before_its_commit_shows_readers_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], created_by: str
) -> None:
    """The first append to a new partition, killed before its commit, left its records visible to
    every reader (`seglog read`, `describe`, `seglog serve`) and kept by the daemon: no
    `replication-offset-checkpoint` entry existed yet, and a partition without one is read to its log
    end (a finished broker directory). A new partition now has its entry (0) from its creation, so
    the records stay above the high watermark until the daemon's `index` job cuts them, as after any
    later append killed so."""
    log_dir = tmp_path / "logs"
    if created_by == "topic create":
        assert main(["topic", "create", "--log-dir", str(log_dir), "--topic", "t", "--partitions", "2"]) == 0
    source = tmp_path / "in.jsonl"
    source.write_text(_jsonl([{"value": "never committed"}] * 3))
    append = ["append", "--log-dir", str(log_dir), "--topic", "t", "--partition", "0", str(source)]
    proc = subprocess.run([sys.executable, "-c", _KILLED_BEFORE_COMMIT, *append], capture_output=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    capsys.readouterr()
    assert read_records(capsys, log_dir, "t", "--from-beginning") == []
    assert main(["maintain", "--log-dir", str(log_dir), "--once", "index"]) == 0
    assert "t-0: truncated 3 uncommitted offsets above 0 left by a dead writer" in capsys.readouterr().err
    assert _append(tmp_path, log_dir, [{"value": "next"}]) == 0
    assert capsys.readouterr().out == "t-0 0..0\n"
    assert [r["value"] for r in read_records(capsys, log_dir, "t", "--from-beginning")] == ["next"]


def test_stdin_and_base64(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    blobs = [bytes(range(256)), b"\x00", b""]
    lines = _jsonl([{"key": base64.b64encode(b).decode(), "value": base64.b64encode(b[::-1]).decode()} for b in blobs])
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(lines.encode())))
    log_dir = tmp_path / "logs"
    assert (
        main(["append", "--log-dir", str(log_dir), "--topic", "bin", "--partition", "0", "--encoding", "base64", "-"])
        == 0
    )
    capsys.readouterr()
    got = read_records(capsys, log_dir, "bin", "--from-offset", "0", "--encoding", "base64")
    assert [base64.b64decode(r["key"]) for r in got] == blobs
    assert [base64.b64decode(r["value"]) for r in got] == [b[::-1] for b in blobs]
    assert main(["read", "--log-dir", str(log_dir), "--topic", "bin", "--partition", "0", "--from-offset", "0"]) == 1
    assert "not valid UTF-8; use --encoding base64" in capsys.readouterr().err


def test_read_output_appends_elsewhere_unchanged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log_dir = tmp_path / "logs"
    rows = [{"key": f"k{i}", "value": f"v{i}", "timestamp": TS + i, "headers": [["n", str(i)]]} for i in range(20)]
    assert _append(tmp_path, log_dir, rows) == 0
    capsys.readouterr()
    first = read_records(capsys, log_dir, "t", "--from-offset", "0")
    (tmp_path / "copy.jsonl").write_text(_jsonl(first))
    assert (
        main(["append", "--log-dir", str(log_dir), "--topic", "copy", "--partition", "0", str(tmp_path / "copy.jsonl")])
        == 0
    )
    capsys.readouterr()
    assert read_records(capsys, log_dir, "copy", "--from-offset", "0") == first


def test_read_works_while_a_writer_holds_the_partition(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log_dir = tmp_path / "logs"
    assert _append(tmp_path, log_dir, [{"value": "a"}, {"value": "b"}]) == 0
    capsys.readouterr()
    writer = LogManager(log_dir, load_settings())
    try:
        log = writer.get_or_create_log("t", 0)
        log.append([{"value": "c"}])  # written, but the high watermark has not moved yet
        assert [r["value"] for r in read_records(capsys, log_dir, "t", "--from-offset", "0")] == ["a", "b"]
    finally:
        writer.close()


def test_read_broker_vectors(vectors_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log_dir = vectors_dir / "snappy-headers"
    records = read_records(capsys, log_dir, "some-topic", "--from-offset", "0", "--encoding", "base64")
    independent = _kafka_python_records(log_dir / "some-topic-0" / "00000000000000000000.log")
    assert len(records) == len(independent) > 0
    for got, (offset, ts, key, value, headers) in zip(records, independent, strict=True):
        assert (got["offset"], got["timestamp"]) == (offset, ts)
        assert base64.b64decode(got["key"]) == key and base64.b64decode(got["value"]) == value
        assert [[k, base64.b64decode(v)] for k, v in got["headers"]] == [[k, v] for k, v in headers]


def _checkpoint(path: Path) -> dict[tuple[str, int], int]:
    lines = path.read_text().split("\n")[2:]
    return {(t, int(p)): int(o) for t, p, o in (line.split() for line in lines if line.strip())}


@pytest.mark.parametrize(
    "name", ["gzip-large-records", "snappy-headers", "transactions-commit", "mixed-codecs-epochs", "multi-segment-3x"]
)
def test_every_vector_partition_reads_like_kafka_python(
    vectors_dir: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    log_dir = vectors_dir / name
    high_watermarks = _checkpoint(log_dir / "replication-offset-checkpoint")
    # Records below the checkpointed log start offset are not exposed to readers (as in Kafka).
    log_start_offsets = _checkpoint(log_dir / "log-start-offset-checkpoint")
    for directory in sorted(p for p in log_dir.iterdir() if p.is_dir() and list(p.glob("*.log"))):
        topic, _, partition = directory.name.rpartition("-")
        if partition != "0":
            continue  # read's --partition is tested on 0; other partitions are the same code path
        expected = []
        for log_file in sorted(directory.glob("*.log")):
            data = log_file.read_bytes()
            position = 0
            while position + 61 <= len(data):
                size = struct.unpack_from(">i", data, position + 8)[0]
                batch = DefaultRecordBatch(data[position : position + 12 + size])
                if not batch.is_control_batch:
                    expected += [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
                position += 12 + size
        end = expected[-1][0] + 1 if expected else 0
        visible = min(high_watermarks.get((topic, 0), end), end)
        start = log_start_offsets.get((topic, 0), 0)
        expected = [r for r in expected if start <= r[0] < visible]
        got = read_records(capsys, log_dir, topic, "--from-offset", str(start), "--encoding", "base64")

        def unb64(s: str | None) -> bytes | None:
            return None if s is None else base64.b64decode(s)

        assert [
            (r["offset"], r["timestamp"], unb64(r["key"]), unb64(r["value"]), [(k, unb64(v)) for k, v in r["headers"]])
            for r in got
        ] == expected, directory.name


def test_reader_closing_the_pipe_is_not_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log_dir = tmp_path / "logs"
    value = "x" * 200
    assert _append(tmp_path, log_dir, [{"value": value}] * 5_000) == 0
    reader = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\nfrom seglog.cli import main\nsys.exit(main(sys.argv[1:]))",
            "read",
            "--log-dir",
            str(log_dir),
            "--topic",
            "t",
            "--partition",
            "0",
            "--from-offset",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert reader.stdout is not None and reader.stderr is not None
    first = json.loads(reader.stdout.readline())
    reader.stdout.close()  # like `| head -1`
    assert reader.wait(timeout=60) == 0
    assert reader.stderr.read() == b""
    assert first["offset"] == 0 and first["value"] == value


def _seglog(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``seglog ARGS`` in a process of its own; ``env`` adds to its environment."""
    code = "import sys\nfrom seglog.cli import main\nsys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env} if env else None,
    )


def test_a_first_append_and_read_compile_each_kernel_once(tmp_path: Path) -> None:
    """numba compiles a kernel at its first call, and a kernel called from another one with a
    constant argument once per constant value: the first `seglog read` (an empty numba cache: a new
    install or checkout) compiled the JSON renderer's byte writer 14 times, the record parser's field
    reader 4 times and the index search twice, with slice assignments compiling numba's string
    formatting for their error message besides (16 CPU seconds on 2 cores, 9 once fixed). Every
    kernel the two commands run now has one entry (``.1.nbc``) in the cache."""
    cache = tmp_path / "numba-cache"
    cache.mkdir()
    source = tmp_path / "in.jsonl"
    source.write_text(_jsonl([{"key": "k", "value": "v\n", "headers": [["h", "x"]]}, {"value": None}]))
    where = ("--log-dir", str(tmp_path / "logs"), "--topic", "t", "--partition", "0")
    env = {"NUMBA_CACHE_DIR": str(cache)}
    assert _seglog("append", *where, str(source), env=env).returncode == 0
    read = _seglog("read", *where, "--from-beginning", env=env)
    assert read.returncode == 0, read.stderr
    assert len(read.stdout.splitlines()) == 2
    compiled = sorted(p.name for p in cache.rglob("*.nbc"))
    assert any("_render_jsonl" in name for name in compiled)
    assert [name for name in compiled if not name.endswith(".1.nbc")] == []


def _four_segments_of_three(tmp_path: Path) -> Path:
    """A log directory whose t-0 holds 4 segments (bases 0, 3, 6, 9) of one 3-record batch each, committed."""
    log_dir = tmp_path / "logs"
    with LogManager(log_dir, load_settings(overrides={"segment.bytes": "2000"})) as manager:
        log = manager.get_or_create_log("t", 0)
        for i in range(4):
            log.append({"value": [f"v{i}-{j}".encode() * 40 for j in range(3)]})
            log.roll()
        log.update_high_watermark(log.log_end_offset)
    return log_dir


def test_a_missing_middle_segment_is_an_error_until_its_loss_is_accepted(tmp_path: Path) -> None:
    """A middle segment's ``.log`` deleted by hand: ``seglog read --from-beginning`` printed the records
    before and after the hole as if contiguous and exited 0. It now prints those before it and fails
    with one line naming the partition, the missing offsets and ``seglog recover``; once the loss is
    accepted (``seglog recover --accept-data-loss``) it reads on past the gap."""
    log_dir = _four_segments_of_three(tmp_path)
    (log_dir / "t-0" / "00000000000000000003.log").unlink()
    read = ["read", "--log-dir", str(log_dir), "--topic", "t", "--partition", "0", "--from-beginning"]
    before = _seglog(*read)
    assert before.returncode == 1
    assert [json.loads(line)["offset"] for line in before.stdout.splitlines()] == [0, 1, 2]
    assert before.stderr.startswith("seglog: OffsetsInNoSegmentError: cannot read offsets 3..5 of t-0: ")
    assert f"seglog recover --log-dir {log_dir}" in before.stderr and len(before.stderr.splitlines()) == 1
    assert _seglog("recover", "--log-dir", str(log_dir)).returncode == 3  # names the loss, changes nothing
    assert _seglog(*read).returncode == 1
    assert _seglog("recover", "--log-dir", str(log_dir), "--accept-data-loss").returncode == 0
    after = _seglog(*read)
    assert after.returncode == 0, after.stderr
    assert [json.loads(line)["offset"] for line in after.stdout.splitlines()] == [0, 1, 2, 6, 7, 8, 9, 10, 11]


def test_read_stops_at_a_damaged_base_offset_of_a_segments_last_batch(tmp_path: Path) -> None:
    """+1 on the base offset of segment 0's last (here only) batch, outside the CRC: ``seglog read
    --from-beginning`` printed its records one offset late (offset 0 skipped, 1..3 holding the values
    of 0..2, then offset 3 again from segment 3) and exited 0, though ``seglog recover`` removes that
    batch. It now prints nothing before it and fails with one line naming offset 0, the file and the
    batch's position."""
    log_dir = _four_segments_of_three(tmp_path)
    segment = log_dir / "t-0" / "00000000000000000000.log"
    raw = bytearray(segment.read_bytes())
    position = 0
    assert 12 + int.from_bytes(raw[8:12]) == len(raw)  # one batch of 3 records per segment
    raw[position + 7] ^= 0x01
    segment.write_bytes(bytes(raw))
    read = _seglog("read", "--log-dir", str(log_dir), "--topic", "t", "--partition", "0", "--from-beginning")
    assert read.returncode == 1, read.stdout
    assert read.stdout == ""
    assert read.stderr.startswith(f"seglog: CorruptRecordError: cannot read offset 0 of t-0 (position 0 of {segment})")
    assert "reaches the next segment's base offset" in read.stderr and len(read.stderr.splitlines()) == 1


def test_append_after_an_unclean_shutdown_refuses_a_log_start_checkpoint_above_the_log(tmp_path: Path) -> None:
    """``log-start-offset-checkpoint`` damaged to 99999 (above the log end, 10) after an unclean shutdown:
    ``seglog append`` quarantined every segment and wrote at offset 99999, exit 0, with only a warning.
    It now exits 1 with one line naming the checkpoint file, the value and ``seglog recover``, and
    changes nothing."""
    log_dir = tmp_path / "logs"
    assert _append(tmp_path, log_dir, [{"value": f"v{i}"} for i in range(10)]) == 0
    (log_dir / "log-start-offset-checkpoint").write_text("0\n1\nt 0 99999\n")
    (log_dir / "replication-offset-checkpoint").write_text("0\n0\n")  # or its high watermark is named first
    (log_dir / ".kafka_cleanshutdown").unlink()
    before = sorted((p.name, p.read_bytes()) for p in (log_dir / "t-0").iterdir())
    source = tmp_path / "more.jsonl"
    source.write_text(_jsonl([{"value": "more"}]))
    appended = _seglog("append", "--log-dir", str(log_dir), "--topic", "t", "--partition", "0", str(source))
    assert appended.returncode == 1 and len(appended.stderr.splitlines()) == 1, appended.stderr
    assert appended.stderr.startswith("seglog: StorageError: partition t-0 in "), appended.stderr
    assert f"log start offset 99999 ({log_dir / 'log-start-offset-checkpoint'})" in appended.stderr
    assert "above its log end offset 10" in appended.stderr and "seglog recover" in appended.stderr
    assert sorted((p.name, p.read_bytes()) for p in (log_dir / "t-0").iterdir()) == before


def test_recover_refusing_to_remove_committed_records_says_so_and_nothing_about_a_dry_run(tmp_path: Path) -> None:
    """``log-start-offset-checkpoint`` damaged to 99999 after an unclean shutdown: a real ``seglog
    recover`` refuses to remove the committed offsets below it, but logged "[dry run] delete-segment-
    below-log-start: ... deleted (the .log quarantined)" first, so the user read that nothing happened
    because it was a dry run. Now stderr says what was refused and why, and nothing about a dry run."""
    log_dir = tmp_path / "logs"
    assert _append(tmp_path, log_dir, [{"value": f"v{i}"} for i in range(10)]) == 0
    lso = log_dir / "log-start-offset-checkpoint"
    lso.write_text("0\n1\nt 0 99999\n")
    (log_dir / ".kafka_cleanshutdown").unlink()
    before = sorted((p.name, p.read_bytes()) for p in (log_dir / "t-0").iterdir() if p.name != ".seglog.lock")
    for verbosity in ((), ("-v",)):
        recovered = _seglog(*verbosity, "recover", "--log-dir", str(log_dir), "--no-progress")
        assert recovered.returncode == 1, recovered.stderr
        output = recovered.stdout + recovered.stderr
        assert "dry run" not in output and "quarantined" not in output, output
        [error] = [line for line in recovered.stderr.splitlines() if " ERROR " in line]
        assert f"t-0: recovery failed: StorageError: partition t-0 in {log_dir}: refused to remove committed " in error
        assert f"offsets 0..9, nothing changed: its checkpointed log start offset 99999 ({lso})" in error
        assert "--accept-data-loss" in error
        after = sorted((p.name, p.read_bytes()) for p in (log_dir / "t-0").iterdir() if p.name != ".seglog.lock")
        assert after == before


def _interrupted_after(args: list[str], ready: Callable[[bytes, str], bool]) -> tuple[int, bytes, str]:
    """``seglog ARGS`` in a process of its own, sent SIGINT once ``ready(stdout so far, stderr so far)``;
    its stdout is read 4 KiB at a time (a slow reader behind a pipe) to the end. Returns the exit
    status, stdout and stderr."""
    code = "import sys\nfrom seglog.cli import main\nsys.exit(main(sys.argv[1:]))"
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    for stream in (proc.stdout, proc.stderr):
        os.set_blocking(stream.fileno(), False)
    out, err, sent = b"", b"", False
    deadline = time.monotonic() + 120
    while True:
        assert time.monotonic() < deadline, (out[-200:], err)
        chunk = proc.stdout.read(4096)  # None: nothing yet; b"": the end
        out += chunk or b""
        err += proc.stderr.read() or b""
        if not sent and ready(out, err.decode()):
            proc.send_signal(signal.SIGINT)
            sent = True
        if chunk == b"" and proc.poll() is not None:
            break
        time.sleep(0.002)
    err += proc.stderr.read() or b""
    return proc.wait(), out, err.decode()


def test_read_interrupted_by_ctrl_c_ends_with_whole_lines_and_one_line_saying_so(tmp_path: Path) -> None:
    """``seglog read`` interrupted (SIGINT) while writing its output stopped in the middle of a JSON
    line (266,240 bytes, the last line cut). It now finishes the line being written, then says
    ``seglog: interrupted`` on stderr and exits 130."""
    log_dir = tmp_path / "logs"
    with LogManager(log_dir, load_settings()) as manager:
        log = manager.get_or_create_log("t", 0)
        for i in range(20):
            log.append({"value": [b"%06d" % i + b"x" * 1000] * 1000})
        log.update_high_watermark(log.log_end_offset)
    read = ["read", "--log-dir", str(log_dir), "--topic", "t", "--partition", "0", "--from-beginning"]
    status, out, err = _interrupted_after(read, lambda out, err: len(out) > 200_000)
    assert (status, err) == (130, "seglog: interrupted\n"), err
    assert out.endswith(b"\n") and len(out) < 20_000 * 1000, len(out)
    offsets = [json.loads(line)["offset"] for line in out.splitlines()]
    assert offsets == list(range(len(offsets)))


def test_recover_interrupted_by_ctrl_c_says_which_partitions_it_recovered(tmp_path: Path) -> None:
    """``seglog recover`` interrupted (SIGINT) printed no report: the user could not tell which
    partitions were recovered. It now prints the report (recovered, the one interrupted, those not
    started), then ``seglog: interrupted``, exit 130; the directory is not marked clean, and the next
    recovery recovers everything."""
    log_dir = tmp_path / "logs"
    with LogManager(log_dir, load_settings(overrides={"segment.bytes": "20000"})) as manager:
        for partition in range(16):  # recovering those after t-1 takes longer than a signal's delivery
            log = manager.get_or_create_log("t", partition)
            for _ in range(30):
                log.append({"value": [b"x" * 100] * 100})
            log.update_high_watermark(log.log_end_offset)
    (log_dir / ".kafka_cleanshutdown").unlink()
    recover = ["-v", "recover", "--log-dir", str(log_dir), "--no-progress"]
    status, out, err = _interrupted_after(recover, lambda out, err: "[LogLoader partition=t-1," in err)
    assert status == 130 and err.endswith("\nseglog: interrupted\n"), err
    assert "Traceback" not in err, err
    rows = [line.split()[:2] for line in out.decode().splitlines() if line.startswith("  t-") and ":" not in line]
    statuses = [status for _, status in rows]
    recovered, cut = statuses.count("recovered"), statuses.count("interrupted")  # none: between two partitions
    assert statuses[0] == "recovered" and cut <= 1, out.decode()
    assert statuses == ["recovered"] * recovered + ["interrupted"] * cut + ["not"] * (16 - recovered - cut), (
        out.decode()
    )
    names = ", ".join(name for name, _ in rows[:recovered])
    assert f"INTERRUPTED: recovered before the interrupt: {names}; not recovered: " in out.decode(), out.decode()
    assert not (log_dir / ".kafka_cleanshutdown").exists()
    again = _seglog("recover", "--log-dir", str(log_dir), "--no-progress")
    assert again.returncode == 0 and "the directory is marked cleanly shut down" in again.stdout, again.stdout
