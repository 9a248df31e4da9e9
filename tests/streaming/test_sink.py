"""The sink's exactly-once protocol, driven with Arrow tables (no Spark): commit, skip, undo, publish."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from indexer.commit_log import SinkCommitLog
from indexer.config import LogConfig, Settings
from indexer.errors import (
    ConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    NotALogDirectoryError,
    RecordTooLargeError,
    SchemaError,
    StorageError,
    UnknownTopicOrPartitionError,
)
from indexer.log import Log
from streaming.partitioner import partition_for_keys
from streaming.sink import SegmentLogSink, writes_on_executors
from tests.streaming.helpers import high_watermarks, read_topic, snapshot

SETTINGS = Settings()  # Kafka's defaults, whatever conf/seglog.toml says


def _batch(start: int, n: int, keys: int = 10) -> pa.Table:
    return pa.table(
        {
            "key": [f"k{i % keys}".encode() for i in range(start, start + n)],
            "value": [f"v{i}".encode() for i in range(start, start + n)],
        }
    )


def _sink(log_dir: Path, **kwargs: object) -> SegmentLogSink:
    kwargs.setdefault("topic", "t")
    kwargs.setdefault("num_partitions", 3)
    return SegmentLogSink(log_dir, settings=SETTINGS, **kwargs)  # type: ignore[arg-type]


def _values(log_dir: Path, topic: str = "t") -> list[bytes]:
    return [r.value for r in read_topic(log_dir, topic)]  # type: ignore[misc]


def test_batches_land_where_kafka_would_put_them_and_commit(tmp_path: Path) -> None:
    with _sink(tmp_path) as sink:
        stats = sink.write_batch(_batch(0, 300), 0, query_id="q")
        sink.write_batch(_batch(300, 200), 1, query_id="q")
    assert not stats.skipped and stats.rows == 300
    stored = read_topic(tmp_path, "t")
    assert Counter(r.value for r in stored) == Counter(f"v{i}".encode() for i in range(500))
    expected = partition_for_keys(pa.array([r.key for r in stored]), 3)
    assert [r.partition for r in stored] == expected.tolist()
    for partition in range(3):  # per key (and per partition) in input order, offsets dense from 0
        rows = [r for r in stored if r.partition == partition]
        assert [r.offset for r in rows] == list(range(len(rows)))
        assert [int(r.value[1:]) for r in rows] == sorted(int(r.value[1:]) for r in rows)
    commit = SinkCommitLog(tmp_path, "t").read()
    assert (commit.query_id, commit.batch_id) == ("q", 1)
    assert commit.end_offsets == {("t", p): n for p, n in Counter(r.partition for r in stored).items()}
    assert high_watermarks(tmp_path) == dict(commit.end_offsets)


def test_a_committed_batch_is_skipped_and_a_new_checkpoint_is_not_a_replay(tmp_path: Path) -> None:
    with _sink(tmp_path) as sink:
        sink.write_batch(_batch(0, 50), 0, query_id="q1")
        sink.write_batch(_batch(50, 50), 1, query_id="q1")
    before = snapshot(tmp_path)
    with _sink(tmp_path) as sink:
        assert sink.write_batch(_batch(0, 50), 0, query_id="q1").skipped
        assert sink.write_batch(_batch(50, 50), 1, query_id="q1").skipped
    assert snapshot(tmp_path) == before
    with _sink(tmp_path) as sink:  # a fresh checkpoint: its batch 0 is new data
        assert not sink.write_batch(_batch(100, 50), 0, query_id="q2").skipped
    assert len(_values(tmp_path)) == 150


def test_a_query_that_committed_before_another_took_over_is_still_skipped(tmp_path: Path) -> None:
    """Batch N of query q1, committed, is a replay for q1 even after q2 wrote to the sink since: a
    backfill rerun under its own name, or an old checkpoint resumed, adds nothing twice. The record
    keeps each earlier query's last committed batch."""
    with _sink(tmp_path) as sink:
        sink.write_batch(_batch(0, 50), 0, query_id="backfill-2024")
        sink.write_batch(_batch(50, 50), 1, query_id="backfill-2024")
        sink.write_batch(_batch(100, 50), 0, query_id="backfill-2025")
    before = snapshot(tmp_path)
    with _sink(tmp_path) as sink:
        assert sink.write_batch(_batch(0, 50), 0, query_id="backfill-2024").skipped
        assert sink.write_batch(_batch(50, 50), 1, query_id="backfill-2024").skipped
        assert sink.write_batch(_batch(100, 50), 0, query_id="backfill-2025").skipped
    assert snapshot(tmp_path) == before
    with _sink(tmp_path) as sink:  # q1 goes on after q2: its next batch is new data, appended once
        assert not sink.write_batch(_batch(150, 50), 2, query_id="backfill-2024").skipped
        assert sink.write_batch(_batch(100, 50), 0, query_id="backfill-2025").skipped
    assert sorted(_values(tmp_path)) == sorted(f"v{i}".encode() for i in range(200))
    commit = SinkCommitLog(tmp_path, "t").read()
    assert (commit.query_id, commit.batch_id) == ("backfill-2024", 2)
    assert dict(commit.earlier_queries) == {"backfill-2025": 0}


@pytest.mark.parametrize("owner, phase", [(Log, "flush"), (SegmentLogSink, "_commit")])
def test_an_attempt_that_failed_before_its_commit_is_undone_then_redone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, owner: type, phase: str
) -> None:
    with _sink(tmp_path) as sink:
        sink.write_batch(_batch(0, 100), 0, query_id="q")
    committed_hw = high_watermarks(tmp_path)

    def crash(*_args: object) -> None:
        raise StorageError("injected failure")

    sink = _sink(tmp_path)
    with monkeypatch.context() as patch:
        patch.setattr(owner, phase, crash)
        with pytest.raises(StorageError, match="injected"):
            sink.write_batch(_batch(100, 100), 1, query_id="q")
    sink.close()
    assert high_watermarks(tmp_path) == committed_hw  # nothing of the failed attempt is visible
    assert len(read_topic(tmp_path, "t", up_to_high_watermark=False)) == 200  # but it is on disk
    with _sink(tmp_path) as sink:
        stats = sink.write_batch(_batch(100, 100), 1, query_id="q")
    assert sum(stats.truncated.values()) == 100
    assert Counter(_values(tmp_path)) == Counter(f"v{i}".encode() for i in range(200))


def test_a_failed_append_waits_for_the_other_partitions_before_raising(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = Log.append_encoded
    finished: list[float] = []

    def append(self: Log, *args: Any, **kwargs: Any) -> Any:
        if self.directory.name == "t-0":
            raise StorageError("injected failure")
        time.sleep(0.2)
        info = original(self, *args, **kwargs)
        finished.append(time.monotonic())
        return info

    monkeypatch.setattr(Log, "append_encoded", append)
    sink = _sink(tmp_path, max_workers=3)
    with pytest.raises(StorageError, match="injected"):
        sink.write_batch(_batch(0, 300), 0, query_id="q")
    raised = time.monotonic()
    sink.close()
    assert len(finished) == 2 and max(finished) <= raised  # no append of the failed attempt outlives it


def test_a_batch_that_committed_but_was_not_published_is_published_on_the_replay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink = _sink(tmp_path)
    monkeypatch.setattr(sink, "_publish", lambda *_a: (_ for _ in ()).throw(StorageError("injected")))
    with pytest.raises(StorageError):
        sink.write_batch(_batch(0, 100), 0, query_id="q")
    sink.close()
    assert _values(tmp_path) == []  # committed, not yet visible
    with _sink(tmp_path) as sink:
        assert sink.write_batch(_batch(0, 100), 0, query_id="q").skipped
    assert len(_values(tmp_path)) == 100


def test_existing_records_of_a_new_partition_survive_a_failed_first_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Log.open(tmp_path / "t-0", LogConfig()) as log:
        log.append({"value": [b"old-1", b"old-2"]})
    sink = _sink(tmp_path, num_partitions=1)
    monkeypatch.setattr(sink, "_commit", lambda *_a: (_ for _ in ()).throw(StorageError("injected")))
    with pytest.raises(StorageError):
        sink.write_batch(_batch(0, 10), 0, query_id="q")
    sink.close()
    assert SinkCommitLog(tmp_path, "t").read().end_offsets == {("t", 0): 2}  # the baseline, recorded first
    with _sink(tmp_path, num_partitions=1) as sink:
        sink.write_batch(_batch(0, 10), 0, query_id="q")
    assert _values(tmp_path) == [b"old-1", b"old-2"] + [f"v{i}".encode() for i in range(10)]


def _bad_inputs() -> list[tuple[pa.Table, type[Exception], str]]:
    return [
        (pa.table({"key": [b"k"]}), SchemaError, "no 'value' column"),
        (pa.table({"value": [1]}), SchemaError, "column 'value'"),
        (pa.table({"value": [b"v"], "key": [2.5]}), SchemaError, "column 'key'"),
        (pa.table({"value": [b"ok", b"x" * 5000]}), RecordTooLargeError, "max.message.bytes=1000"),
        (pa.table({"value": [b"v"], "topic": ["a/b"]}), InvalidTopicError, "illegal"),
        (pa.table({"value": [b"v", b"w"], "partition": [1, 3]}), UnknownTopicOrPartitionError, "partition 3"),
    ]


@pytest.mark.parametrize("table, error, message", _bad_inputs())
def test_bad_input_fails_the_batch_and_leaves_the_log_unchanged(
    tmp_path: Path, table: pa.Table, error: type[Exception], message: str
) -> None:
    topic = None if "topic" in table.column_names else "t"
    with _sink(tmp_path, topic=topic, sink_id="s", config={"max.message.bytes": 1000}) as sink:
        sink.write_batch(_batch(0, 30).append_column("topic", pa.array(["t"] * 30)), 0, query_id="q")
        before = snapshot(tmp_path)
        with pytest.raises(error, match=message):
            sink.write_batch(table, 1, query_id="q")
        assert snapshot(tmp_path) == before
        assert sink.committed().batch_id == 0


def test_small_segments_roll_and_every_record_is_kept(tmp_path: Path) -> None:
    with _sink(tmp_path, num_partitions=2, config={"segment.bytes": 2048}) as sink:
        for b in range(5):
            sink.write_batch(_batch(b * 200, 200), b, query_id="q")
    assert sum(1 for _ in (tmp_path / "t-0").glob("*.log")) > 3
    assert Counter(_values(tmp_path)) == Counter(f"v{i}".encode() for i in range(1000))


def test_the_partition_count_is_fixed_when_the_topic_is_created(tmp_path: Path) -> None:
    with _sink(tmp_path, num_partitions=4) as sink:  # one row: it lands in one partition, all 4 exist
        sink.write_batch(pa.table({"value": [b"v"]}), 0, query_id="q")
    assert sorted(p.name for p in tmp_path.glob("t-*")) == ["t-0", "t-1", "t-2", "t-3"]
    with _sink(tmp_path, num_partitions=None) as sink:  # the recorded count, not a guess
        sink.write_batch(pa.table({"value": [b"v"], "partition": [3]}), 1, query_id="q")
    for other in (2, 8):
        with _sink(tmp_path, num_partitions=other) as sink:
            with pytest.raises(InvalidPartitionsError, match="has 4 partitions"):
                sink.write_batch(_batch(0, 1), 2, query_id="q")


def test_a_sink_refused_at_its_first_batch_leaves_nothing_behind(tmp_path: Path) -> None:
    """The refused sink left its lock file, and the log directory it had created for it: a directory
    that looked used (a sink's lock beside no commit record). A sink that committed keeps its lock file,
    as Kafka keeps a log directory's ``.lock``."""
    log_dir = tmp_path / "logs"
    with _sink(log_dir) as sink:
        with pytest.raises(SchemaError, match="no 'value' column"):
            sink.write_batch(pa.table({"nope": [1]}), 0, query_id="q")
    assert not log_dir.exists()
    with _sink(log_dir) as sink:
        sink.write_batch(_batch(0, 30), 0, query_id="q")
    assert (log_dir / "seglog-sink.t.lock").exists() and (log_dir / "seglog-sink.t.json").exists()


def test_a_second_sink_on_a_topic_is_refused_before_it_writes(tmp_path: Path) -> None:
    """Without the check the second sink wrote, and the first then failed every batch for good ("high
    watermark above the sink's committed end: another writer published to it")."""
    with _sink(tmp_path) as first:
        first.write_batch(_batch(0, 30), 0, query_id="qa")
    before = snapshot(tmp_path)
    with _sink(tmp_path, sink_id="other") as second:
        with pytest.raises(
            ConfigError, match=r"t-0, t-1, t-2 in .* belong to sink 't' \(seglog-sink.t.json, query qa\)"
        ):
            second.write_batch(_batch(30, 30), 0, query_id="qb")
    assert snapshot(tmp_path) == before and not (tmp_path / "seglog-sink.other.json").exists()
    assert not (tmp_path / "seglog-sink.other.lock").exists()  # the refused sink never owned the id
    with _sink(tmp_path, topic="u", sink_id="other") as elsewhere:  # another topic: its own partitions
        elsewhere.write_batch(_batch(30, 30), 0, query_id="qb")
    with _sink(tmp_path) as first:
        first.write_batch(_batch(60, 30), 1, query_id="qa")
    assert len(_values(tmp_path)) == 60 and len(_values(tmp_path, "u")) == 30


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_a_compressed_topic_takes_micro_batches_too_small_to_compress(tmp_path: Path, codec: str) -> None:
    """A row or two per partition does not shrink with any codec; those batches failed the query with a
    ValueError ("its compression.type is zstd ... encode them with 'zstd'") on every micro-batch."""
    with _sink(tmp_path, config={"compression.type": codec}) as sink:
        sink.write_batch(pa.table({"key": [b"a", b"b"], "value": [b"x", b"y"]}), 0, query_id="q")
        sink.write_batch(_batch(0, 3000), 1, query_id="q")
    assert sorted(_values(tmp_path)) == sorted([b"x", b"y", *(f"v{i}".encode() for i in range(3000))])


def test_empty_batches_commit_and_a_closed_sink_refuses(tmp_path: Path) -> None:
    sink = _sink(tmp_path)
    assert sink.write_batch(pa.table({"value": pa.array([], pa.binary())}), 0, query_id="q").rows == 0
    assert sink.committed().batch_id == 0
    sink.close()
    sink.close()
    with pytest.raises(ValueError, match="closed"):
        sink.write_batch(_batch(0, 1), 1, query_id="q")


def test_options_are_validated_up_front(tmp_path: Path) -> None:
    with pytest.raises(InvalidTopicError):
        SegmentLogSink(tmp_path, topic="no spaces")
    with pytest.raises(ConfigError, match="num_partitions"):
        SegmentLogSink(tmp_path, topic="t", num_partitions=0)
    # Kafka producer options have no place here; the error names the sink's option, not the CLI's --config
    with pytest.raises(ConfigError, match=r"unknown topic config key 'kafka.bootstrap.servers' \(the sink's config=\)"):
        SegmentLogSink(tmp_path, topic="t", config={"kafka.bootstrap.servers": "host:9092"})
    with pytest.raises(ConfigError, match=r"segment.bytes must be an integer, got 'big' \(the sink's config=\)"):
        SegmentLogSink(tmp_path, topic="t", config={"segment.bytes": "big"})
    with _sink(tmp_path / "logs") as sink:
        sink.write_batch(_batch(0, 3), 0, query_id="q")
    with pytest.raises(NotALogDirectoryError, match="is the directory of partition 0 of topic 't'"):
        SegmentLogSink(tmp_path / "logs" / "t-0", topic="t")  # not at the first micro-batch
    (tmp_path / "a-file").write_text("")
    with pytest.raises(NotALogDirectoryError, match="is a file"):
        SegmentLogSink(tmp_path / "a-file", topic="t")


@pytest.mark.parametrize(
    ("writes", "master", "on_executors"),
    [
        ("auto", None, False),
        ("auto", "local", False),
        ("auto", "local[2]", False),
        ("auto", "local-cluster[2,1,1024]", False),
        ("auto", "spark://host:7077", True),
        ("auto", "yarn", True),
        ("driver", "yarn", False),
        ("executors", "local[2]", True),
    ],
)
def test_where_micro_batches_are_written(writes: str, master: str | None, on_executors: bool) -> None:
    assert writes_on_executors(writes, master) is on_executors


def test_a_log_dir_given_as_a_uri_is_a_local_path_or_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Spark takes paths as URIs (``file:///data/logs``, ``hdfs://...``): a ``file:`` URI is its local
    path, another scheme a ConfigError naming it. Before, both were taken as relative paths: the sink
    wrote into ``./file:/...`` or ``./hdfs:/nn/logs`` under the working directory."""
    monkeypatch.chdir(tmp_path)
    with _sink(f"file://{tmp_path / 'logs'}", topic="t") as sink:  # type: ignore[arg-type]
        sink.write_batch(_batch(0, 3), 0, query_id="q")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs"]
    assert len(_values(tmp_path / "logs")) == 3
    with pytest.raises(ConfigError, match=r"^log directory 'hdfs://nn/logs' is not a local path \(scheme 'hdfs'\)"):
        _sink("hdfs://nn/logs", topic="t")  # type: ignore[arg-type]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs"]
