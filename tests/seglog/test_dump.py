"""`seglog dump` against kafka-dump-log.sh's format (spec section 7), checked with an independent decoder."""

from __future__ import annotations

import io
import os
import re
import shutil
import struct
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

with warnings.catch_warnings():  # kafka-python's package import uses a deprecated importlib API
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatch
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

from indexer.config import LogConfig
from indexer.errors import CorruptIndexError
from indexer.log import Log
from indexer.offset_index import OffsetIndex
from indexer.records.encoder import encode_batches
from indexer.transaction_index import AbortedTxn, TransactionIndex
from seglog.cli import main
from seglog.commands.dump import DumpOptions, DumpProblems, dump_files

CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


def _dump(files: list[Path | str], **options: object) -> tuple[str, str, DumpProblems]:
    out, err = io.StringIO(), io.StringIO()
    problems = dump_files([str(f) for f in files], DumpOptions(**options), out, err)  # type: ignore[arg-type]
    return out.getvalue(), err.getvalue(), problems


def _java(flag: bool) -> str:
    return "true" if flag else "false"


def _kafka_python_batches(path: Path) -> Iterator[tuple[int, DefaultRecordBatch]]:
    """(position, batch) of every v2 batch, walking the 12-byte framing independently of seglog."""
    data = path.read_bytes()
    position = 0
    while position + 17 < len(data):
        size = struct.unpack_from(">i", data, position + 8)[0]
        if position + 12 + size > len(data):
            break
        yield position, DefaultRecordBatch(data[position : position + 12 + size])
        position += 12 + size


def _expected_batch_line(position: int, b: DefaultRecordBatch) -> str:
    ts_type = "LogAppendTime" if b.timestamp_type else "CreateTime"
    return (
        f"baseOffset: {b.base_offset} lastOffset: {b.last_offset} count: {b.records_count} "
        f"baseSequence: {b.base_sequence} lastSequence: {b.last_sequence} producerId: {b.producer_id} "
        f"producerEpoch: {b.producer_epoch} partitionLeaderEpoch: {b.leader_epoch} "
        f"isTransactional: {_java(b.is_transactional)} isControl: {_java(b.is_control_batch)} "
        f"deleteHorizonMs: OptionalLong.empty position: {position} {ts_type}: {b.max_timestamp} "
        f"size: {b.size_in_bytes} magic: 2 compresscodec: {CODECS[b.compression_type]} crc: {b.crc} "
        f"isvalid: {_java(b.validate_crc())}"
    )


def _expected_record_lines(b: DefaultRecordBatch, *, print_data: bool) -> list[str]:
    ts_type = "LogAppendTime" if b.timestamp_type else "CreateTime"
    lines = []
    for r in b:
        seq = -1 if b.base_sequence < 0 else b.base_sequence + (r.offset - b.base_offset)
        line = (
            f"| offset: {r.offset} {ts_type}: {r.timestamp} keySize: {-1 if r.key is None else len(r.key)} "
            f"valueSize: {-1 if r.value is None else len(r.value)} sequence: {seq} "
            f"headerKeys: [{','.join(k for k, _ in r.headers)}]"
        )
        if print_data and not b.is_control_batch:
            if r.key is not None:
                line += f" key: {r.key.decode('utf-8', 'replace')}"
            if r.value is not None:
                line += f" payload: {r.value.decode('utf-8', 'replace')}"
        lines.append(line)
    return lines


def test_first_batch_line_of_a_broker_segment(vectors_dir: Path) -> None:
    log = vectors_dir / "multi-segment-3x" / "invoice-0" / "00000000000000000000.log"
    out, err, _ = _dump([log])
    lines = out.splitlines()
    # Hand-checked against kafka-python's decoding of the same bytes.
    assert lines[:3] == [
        f"Dumping {log}",
        "Log starting offset: 0",
        "baseOffset: 0 lastOffset: 80 count: 81 baseSequence: -1 lastSequence: -1 producerId: -1 "
        "producerEpoch: -1 partitionLeaderEpoch: 0 isTransactional: false isControl: false "
        "deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1718446825611 size: 2409 magic: 2 "
        "compresscodec: none crc: 1994968774 isvalid: true",
    ]
    position, first = next(_kafka_python_batches(log))
    assert lines[2] == _expected_batch_line(position, first)
    assert err == ""


@pytest.mark.parametrize(
    "relative",
    [
        "multi-segment-3x/invoice-2/00000000000000030587.log",
        "gzip-large-records/items-0/00000000000000000000.log",
        "snappy-headers/some-topic-0/00000000000000000000.log",
        "mixed-codecs-epochs/lsx1-0/00000000000000000000.log",
        "transactions-commit/_confluent-ksql-default__command_topic-0/00000000000000000000.log",
    ],
)
def test_every_batch_and_record_line_matches_kafka_python(vectors_dir: Path, relative: str) -> None:
    log = vectors_dir / relative
    out, err, problems = _dump([log], print_data_log=True)
    expected = [f"Dumping {log}", f"Log starting offset: {int(log.name.split('.')[0])}"]
    for position, batch in _kafka_python_batches(log):
        expected.append(_expected_batch_line(position, batch))
        expected += _expected_record_lines(batch, print_data=True)
    # Compare whole texts: keys hold "\n" and other line breaks, printed raw as Kafka does.
    # Markers are not parsed by kafka-python: test_transaction_markers_are_printed checks them.
    got = re.sub(r" endTxnMarker: \w+ coordinatorEpoch: -?\d+", "", out)
    assert got == "\n".join(expected) + "\n"
    assert err == "" and not problems


def test_transaction_markers_are_printed(vectors_dir: Path) -> None:
    log = vectors_dir / "transactions-commit" / "_confluent-ksql-default__command_topic-0" / "00000000000000000000.log"
    out, _, _ = _dump([log], deep_iteration=True)
    markers = [line for line in out.splitlines() if "endTxnMarker" in line]
    assert len(markers) == 4
    assert markers[0] == (
        "| offset: 1 CreateTime: 1692287577963 keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] "
        "endTxnMarker: COMMIT coordinatorEpoch: 0"
    )


def test_kraft_control_records(vectors_dir: Path) -> None:
    metadata = vectors_dir / "transactions-commit" / "__cluster_metadata-0"
    out, _, _ = _dump([metadata / "00000000000000000000.log"], deep_iteration=True)
    assert "controlType: LEADER_CHANGE(2)" in out
    snapshot = metadata / "00000000000000007334-0000000001.checkpoint"
    out, _, _ = _dump([snapshot], deep_iteration=True)
    lines = out.splitlines()
    assert lines[1] == "Snapshot end offset: 7334, epoch: 1"
    assert lines[3].endswith('SnapshotHeader {"version":0,"lastContainedLogTimestamp":1692277637380}')
    assert lines[-1].endswith('SnapshotFooter {"version":0}')
    out, _, _ = _dump([vectors_dir / "transactions-commit" / "bootstrap.checkpoint"])
    assert out.splitlines()[1] == "KRaft bootstrap snapshot"


def test_verify_index_only_finds_every_vector_index_consistent(vectors_dir: Path) -> None:
    indexes = sorted(p for p in vectors_dir.glob("*/*/*") if p.suffix in (".index", ".timeindex"))
    assert len(indexes) > 100
    out, err, problems = _dump(indexes, verify_index_only=True)
    assert err == "" and not problems
    assert out.splitlines() == [f"Dumping {p}" for p in indexes] or all(
        line.startswith("Dumping ") or line.endswith(" is empty.") for line in out.splitlines()
    )


def test_index_entries_are_printed_as_stored(vectors_dir: Path) -> None:
    index = vectors_dir / "multi-segment-3x" / "invoice-0" / "00000000000000000000.index"
    pairs = np.frombuffer(index.read_bytes(), dtype=">i4").reshape(-1, 2)
    out, err, _ = _dump([index])
    assert out.splitlines()[1:] == [f"offset: {rel} position: {pos}" for rel, pos in pairs.tolist()]
    assert err == ""
    timeindex = index.with_suffix(".timeindex")
    raw = timeindex.read_bytes()
    entries = [struct.unpack_from(">qi", raw, i) for i in range(0, len(raw), 12)]
    out, err, _ = _dump([timeindex])
    assert out.splitlines()[1:] == [f"timestamp: {ts} offset: {rel}" for ts, rel in entries]


def test_empty_index_and_sanity_check(vectors_dir: Path, tmp_path: Path) -> None:
    empty = vectors_dir / "gzip-large-records" / "__consumer_offsets-0" / "00000000000000000000.index"
    out, _, _ = _dump([empty])
    assert out.splitlines() == [f"Dumping {empty}", f"{empty} is empty."]
    index = vectors_dir / "multi-segment-3x" / "invoice-0" / "00000000000000000000.index"
    out, _, _ = _dump([index, index.with_suffix(".timeindex")], index_sanity_check=True)
    assert out.splitlines()[1] == f"{index} passed sanity check."
    assert out.splitlines()[3] == f"{index.with_suffix('.timeindex')} passed sanity check."
    corrupt = tmp_path / "00000000000000000000.index"
    corrupt.write_bytes(b"\x00" * 12)  # not a multiple of 8
    (tmp_path / "00000000000000000000.log").write_bytes(b"")
    with pytest.raises(CorruptIndexError, match="neither positive nor a multiple of 8"):
        _dump([corrupt], index_sanity_check=True)


def _write_log(directory: Path, batches: int = 30, records_per_batch: int = 20) -> Log:
    config = LogConfig(index_interval_bytes=1, segment_bytes=1 << 20)
    log = Log.open(directory, config)
    for i in range(batches):
        rows = [
            {"key": f"k{i}-{j}", "value": f"value {i} {j}", "timestamp": 1_700_000_000_000 + 10 * i + j}
            for j in range(records_per_batch)
        ]
        log.append(rows)
    return log


def test_our_logs_dump_clean_and_mismatches_are_reported(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    _write_log(directory).close()
    files = sorted(directory.glob("00000000000000000000.*"))
    out, err, problems = _dump(files, verify_index_only=True, deep_iteration=True)
    assert err == "" and not problems
    index_path = directory / "00000000000000000000.index"
    with OffsetIndex(index_path, 0, writable=False) as index:
        entries = [index.entry(i) for i in range(index.entries)]
    # Point the third entry at the wrong offset (same position): a mismatch Kafka reports too.
    raw = bytearray(index_path.read_bytes())
    struct.pack_into(">i", raw, 2 * 8, entries[2].offset + 5)
    index_path.write_bytes(bytes(raw))
    out, err, problems = _dump([index_path], verify_index_only=True)
    assert err.splitlines() == [
        f"Mismatches in :{index_path.absolute()}",
        f"  Index offset: {entries[2].offset + 5}, log offset: {entries[2].offset}",
    ]
    assert main(["dump", "--verify-index-only", str(index_path)]) == 1


@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
def test_an_index_kafka_would_refuse_is_said_first_without_the_sanity_flag(tmp_path: Path, suffix: str) -> None:
    """A length that is not a whole number of entries is the summary's first line, no flag needed."""
    directory = tmp_path / "t-0"
    _write_log(directory).close()
    path = directory / f"00000000000000000000{suffix}"
    path.write_bytes(path.read_bytes() + b"\0\0\0")
    out, err, problems = _dump([path])
    first = err.splitlines()[0]
    assert first.startswith(f"Index sanity check failed for :{path.absolute()}: ") and "multiple of" in first
    assert out.startswith(f"Dumping {path}")  # the entries are still dumped, as Kafka does
    assert main(["dump", str(path)]) == 1


def test_time_index_problems_are_reported(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    _write_log(directory).close()
    path = directory / "00000000000000000000.timeindex"
    raw = bytearray(path.read_bytes())
    first_ts, first_rel = struct.unpack_from(">qi", raw, 0)
    struct.pack_into(">q", raw, 0, first_ts + 1)  # not the batch's max timestamp
    struct.pack_into(">q", raw, 12, first_ts)  # and now the second entry goes backwards
    path.write_bytes(bytes(raw))
    _, err, problems = _dump([path], verify_index_only=True)
    lines = err.splitlines()
    assert lines[0] == f"Found timestamp mismatch in :{path.absolute()}"
    assert lines[1] == f"  Index timestamp: {first_ts + 1}, log timestamp: {first_ts}"
    assert f"Found out of order timestamp in :{path.absolute()}" in lines
    assert f"  Index timestamp: {first_ts}, Previously indexed timestamp: {first_ts + 1}" in lines


def test_non_consecutive_offsets_and_trailing_bytes(tmp_path: Path) -> None:
    from indexer.records.columns import to_append_table

    table = to_append_table({"value": [b"a", b"b", b"c"]}, now_ms=1_700_000_000_000)
    log = tmp_path / "00000000000000000000.log"
    first = encode_batches(table, 0).buffer.tobytes()
    second = encode_batches(table, 10).buffer.tobytes()  # offsets 10..12 after 0..2
    log.write_bytes(first + second + b"\x00" * 7)
    out, err, problems = _dump([log], deep_iteration=True)
    assert out.splitlines()[-1] == "Found 7 invalid bytes at the end of 00000000000000000000.log"
    assert err.splitlines() == [
        f"Non-consecutive offsets in {log.absolute()}",
        "  2 is followed by 10",
        f"Invalid data in :{log.absolute()}: 7 invalid bytes at the end",
    ]
    assert problems.non_consecutive_offsets == {str(log.absolute()): [(2, 10)]}
    out, _, _ = _dump([log], max_bytes=len(first))
    assert len([line for line in out.splitlines() if line.startswith("baseOffset")]) == 1
    assert "invalid bytes" not in out  # Kafka only reports them when --max-bytes is not given


def test_print_data_log_and_skip_record_metadata(tmp_path: Path) -> None:
    from indexer.records.columns import to_append_table

    table = to_append_table({"key": [b"k1", None, b"\xff"], "value": [b"v1", b"v2", None]}, now_ms=1_700_000_000_000)
    log = tmp_path / "00000000000000000000.log"
    log.write_bytes(encode_batches(table, 0).buffer.tobytes())
    out, _, _ = _dump([log], print_data_log=True, skip_record_metadata=True)
    assert out.splitlines()[3:] == ["| key: k1 payload: v1", " payload: v2", "| key: \ufffd"]
    out, _, _ = _dump([log], deep_iteration=True, skip_record_metadata=True)
    assert out.splitlines()[3:] == ["", "", ""]


def test_legacy_message_sets(tmp_path: Path) -> None:
    builder = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
    builder.append(0, timestamp=1_600_000_000_000, key=b"k", value=b"hello")
    builder.append(1, timestamp=1_600_000_000_001, key=None, value=b"world")
    log = tmp_path / "00000000000000000000.log"
    log.write_bytes(bytes(builder.build()))
    out, err, problems = _dump([log], print_data_log=True)
    lines = out.splitlines()
    first_crc = struct.unpack_from(">I", log.read_bytes(), 12)[0]
    assert lines[2] == (
        f"offset: 0 position: 0 CreateTime: 1600000000000 size: 40 magic: 1 compresscodec: none "
        f"crc: {first_crc} isvalid: true"
    )
    assert lines[3] == (
        f"| offset: 0 CreateTime: 1600000000000 keySize: 1 valueSize: 5 isValid: true crc: {first_crc}}}"
        " key: k payload: hello"
    )
    assert lines[5].startswith("| offset: 1 CreateTime: 1600000000001 keySize: -1 valueSize: 5 isValid: true")
    assert err == "" and not problems


def test_txn_index_and_producer_snapshot(vectors_dir: Path, tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.txnindex"
    index = TransactionIndex(path, 100)
    index.append(AbortedTxn(983493, 137, 299, 200))
    index.close()
    out, _, _ = _dump([path])
    assert out.splitlines()[1:] == [
        "version: 0 producerId: 983493 firstOffset: 137 lastOffset: 299 lastStableOffset: 200"
    ]
    snapshot = vectors_dir / "gzip-large-records" / "tenitems-0" / "00000000000000000009.snapshot"
    out, err, _ = _dump([snapshot])
    assert out.splitlines()[1] == (
        "producerId: 2 producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: OptionalLong.empty "
        "lastTimestamp: 1676143806952 firstSequence: 3 lastSequence: 3 lastOffset: 3 offsetDelta: 0 "
        "timestamp: 1676143806952"
    )
    assert len(out.splitlines()) == 4 and err == ""
    corrupt = tmp_path / "00000000000000000009.snapshot"
    raw = bytearray(snapshot.read_bytes())
    raw[-1] ^= 0xFF
    corrupt.write_bytes(bytes(raw))
    out, err, _ = _dump([corrupt])
    assert out.splitlines() == [f"Dumping {corrupt}"]
    assert err.startswith("Snapshot is corrupt (CRC is no longer valid). Stored crc: 2032811315. Computed crc: ")


def test_unknown_files_and_files_option(vectors_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    checkpoint = vectors_dir / "multi-segment-3x" / "recovery-point-offset-checkpoint"
    index = vectors_dir / "multi-segment-3x" / "invoice-0" / "00000000000000060611.index"
    assert main(["dump", "--files", f"{checkpoint},{index}", "--verify-index-only"]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == [f"Dumping {checkpoint}", f"Dumping {index}"]
    assert captured.err == f"Ignoring unknown file {checkpoint}\n"
    assert main(["dump"]) == 1


def test_read_only_files_are_left_untouched(vectors_dir: Path, tmp_path: Path) -> None:
    source = vectors_dir / "multi-segment-3x" / "invoice-0"
    copy = tmp_path / "invoice-0"
    shutil.copytree(source, copy)
    for f in copy.iterdir():
        f.chmod(0o444)
    copy.chmod(0o555)
    before = {f.name: (f.stat().st_size, f.stat().st_mtime_ns, f.read_bytes()) for f in copy.iterdir()}
    try:
        files = sorted(p for p in copy.iterdir() if p.suffix in (".log", ".index", ".timeindex"))
        out, err, problems = _dump(files, deep_iteration=True)
        assert err == "" and not problems
        after = {f.name: (f.stat().st_size, f.stat().st_mtime_ns, f.read_bytes()) for f in copy.iterdir()}
        assert after == before
    finally:
        copy.chmod(0o755)
        for f in copy.iterdir():
            os.chmod(f, 0o644)


def test_every_vector_file_dumps_deeply_without_problems(vectors_dir: Path) -> None:
    files = sorted(p for p in vectors_dir.glob("*/*/*") if p.suffix in (".log", ".snapshot", ".checkpoint"))
    out, err, problems = _dump(files, print_data_log=True)
    assert err == "" and not problems
    assert out.count("Dumping ") == len(files)
    assert "isvalid: false" not in out and "invalid bytes" not in out


def test_a_file_name_without_an_offset_is_refused_in_the_engines_words(tmp_path: Path) -> None:
    """The base offset comes from ``indexer.file_names.offset_from_file_name``, as everywhere."""
    path = tmp_path / "segment.log"
    path.write_bytes(b"")
    with pytest.raises(ValueError, match="file name 'segment.log' does not start with an offset"):
        _dump([path])
