"""The main job and `seglog run`: settings, the clean stop on SIGTERM, and data `seglog read` can show."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession

from indexer.commit_log import SinkCommitLog
from indexer.config import LogConfig, Settings, load_settings
from indexer.errors import ConfigError, SchemaError
from indexer.log import Log
from seglog.cli import main
from streaming.job import JobSpec, run_job
from streaming.session import runs_on_one_machine, session_conf
from streaming.sink import SegmentLogSink, writes_on_executors
from tests.streaming.helpers import QUERY_TIMEOUT_S, high_watermarks, read_topic, write_json_inputs


def test_spec_defaults_come_from_the_streaming_section() -> None:
    spec = JobSpec.from_settings(load_settings())
    assert (spec.log_dir, spec.checkpoint_location, spec.topic) == (
        Path("data/logs"),
        "data/checkpoints/events",
        "events",
    )
    assert (spec.num_partitions, spec.source, spec.rows_per_second, spec.trigger_interval) == (
        4,
        "rate",
        1000,
        "2 seconds",
    )
    spec = JobSpec.from_settings(load_settings(), topic="other", num_partitions="8", log_dir=None)
    assert (spec.topic, spec.num_partitions, spec.log_dir) == ("other", 8, Path("data/logs"))
    # the log directory as the sink reads it (its LogManager and the sink's commit record in one place)
    assert JobSpec.from_settings(load_settings(), log_dir="file:///data/logs").log_dir == Path("/data/logs")


@pytest.mark.parametrize(
    "section, message",
    [
        ({"sauce": "rate"}, "unknown \\[streaming\\] key 'sauce'"),
        ({"source": "socket"}, "source must be one of"),
        ({"source": "files"}, "needs input.path"),
        ({"source": "kafka", "kafka.subscribe": "x"}, "needs kafka.bootstrap.servers"),
        ({"num.partitions": "many"}, "num.partitions must be an integer"),
        ({"num.partitions": 0}, "num.partitions: a topic needs at least 1 partition, got 0"),
        # Refused before the checkpoint or the log directory is written (they were, then the sink refused).
        ({"num.partitions": 2**31}, "num.partitions: a topic has at most 2147483647 partitions"),
        ({"topic": "bad topic"}, "topic: topic name 'bad topic' is illegal"),
        ({"writes": "workers"}, "writes must be one of auto, driver, executors"),
        ({"log.dir": "hdfs://nn/logs"}, "log directory 'hdfs://nn/logs' is not a local path"),
    ],
)
def test_bad_streaming_settings_are_rejected(section: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        JobSpec.from_settings(Settings(sections={"streaming": section}))


def test_the_driver_listens_on_loopback_only_where_every_process_is_local() -> None:
    """`seglog run --master spark://host:7077` (docs/streaming.md): executors on other machines connect
    back to spark.driver.host, so 127.0.0.1 there named each executor's own machine."""
    for master in ("local", "local[2]", "local-cluster[2,1,1024]"):
        assert runs_on_one_machine(master) and not writes_on_executors("auto", master)
        assert session_conf(master)["spark.driver.host"] == "127.0.0.1"
    for master in ("spark://host:7077", "yarn", "k8s://https://api:6443"):
        conf = session_conf(master)
        assert not runs_on_one_machine(master) and writes_on_executors("auto", master)
        assert "spark.driver.host" not in conf and "spark.driver.bindAddress" not in conf
    assert session_conf("spark://h:7077", {"spark.driver.host": "10.0.0.5"})["spark.driver.host"] == "10.0.0.5"


SPARK_SAYS = """
from streaming.session import build_spark_session
spark = build_spark_session("local[1]", "seglog-log-levels")
log4j = spark.sparkContext._jvm.org.apache.logging.log4j
log4j.LogManager.getLogger("org.apache.spark.SparkContext").warn("a warning of Spark's")
log4j.LogManager.getLogger("org.apache.spark.SparkContext").error("an error of Spark's")
spark.stop()
"""


@pytest.mark.spark
def test_spark_says_its_errors_only(tmp_path: Path) -> None:
    """Every session seglog builds (`seglog run`, the benchmarks) printed Spark's start-up lines and its
    warnings (a micro-batch falling behind, a stop interrupting a checkpoint write with a Java stack
    trace) between seglog's own; its errors stay."""
    done = subprocess.run(
        [sys.executable, "-c", SPARK_SAYS], capture_output=True, text=True, timeout=QUERY_TIMEOUT_S, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert "an error of Spark's" in done.stderr
    for spark_line in ("a warning of Spark's", "Using Spark's default log4j profile", "Setting default log level"):
        assert spark_line not in done.stderr, done.stderr
    assert " WARN " not in done.stderr, done.stderr


@pytest.mark.spark
def test_seglog_run_stops_cleanly_on_sigterm_and_seglog_read_shows_the_data(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    logs, checkpoint = tmp_path / "logs", tmp_path / "checkpoint"
    done = threading.Event()

    terminated = threading.Event()

    def terminate_after_three_batches() -> None:  # then SIGTERM, as a service manager would
        while not done.wait(0.2):
            if SinkCommitLog(logs, "events").read().batch_id >= 2:
                terminated.set()
                os.kill(os.getpid(), signal.SIGTERM)
                return

    killer = threading.Thread(target=terminate_after_three_batches, daemon=True)
    killer.start()
    try:
        code = main(
            [
                "run",
                "--log-dir",
                str(logs),
                "--checkpoint-location",
                str(checkpoint),
                "--rows-per-second",
                "300",
                "--trigger",
                "1 second",
                "--progress-interval",
                "1",
                "--duration",  # only stops a job that would run on: the SIGTERM ends it
                str(QUERY_TIMEOUT_S),
            ]
        )
    finally:
        done.set()
        killer.join()
    assert code == 0
    assert terminated.is_set() and "SIGTERM received: stopping cleanly" in caplog.text
    progress = [r.getMessage() for r in caplog.records if r.name == "streaming.job" and "rows/s" in r.getMessage()]
    assert progress and "committed end offsets events-0@" in progress[-1]
    assert "segments per partition 1/1/1/1" in progress[-1] and "rows/s over the last" in progress[-1]
    summary = capsys.readouterr().out
    assert "micro-batches" in summary and "events-0:" in summary
    hws = high_watermarks(logs)
    assert sorted(hws) == [("events", p) for p in range(4)] and sum(hws.values()) > 0
    stored = read_topic(logs, "events")
    assert len(stored) == sum(hws.values())
    assert len({r.value for r in stored}) == len(stored)  # event ids are unique: no duplicates
    event = json.loads(stored[0].value or b"")
    assert set(event) >= {"event_id", "user_id", "type", "time"} and stored[0].key == event["user_id"].encode()
    assert dict(stored[0].headers)["source"] == b"seglog-rate"
    for partition in range(4):  # the job closed every partition: its write lock is free again
        Log.open(logs / f"events-{partition}", LogConfig()).close()
    assert main(["read", "--log-dir", str(logs), "--topic", "events", "--partition", "0", "--from-offset", "0"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == hws[("events", 0)]
    assert json.loads(lines[0])["offset"] == 0


@pytest.mark.spark
def test_a_stop_lets_the_running_micro_batch_finish_and_starts_no_other(
    spark: SparkSession, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With micro-batches back to back (each longer than the trigger interval: a loaded machine, a
    backlog; here a sink made slow), the stop waited for a moment between two of them, which hardly ever
    comes: ``seglog run --trigger '0 seconds' --duration 1`` ran 43 s and 8 micro-batches, and up to
    ``STOP_WAIT_S`` (60 s) of them. It now waits for the micro-batch running when the stop began only."""
    logs = tmp_path / "logs"
    write = SegmentLogSink.__call__

    def slow(self: SegmentLogSink, batch_df: DataFrame, batch_id: int) -> None:
        time.sleep(1.5)  # longer than the rate source's 1 s steps: every trigger has rows waiting
        write(self, batch_df, batch_id)

    monkeypatch.setattr(SegmentLogSink, "__call__", slow)
    stop = threading.Event()
    committed_at_stop: list[int] = []

    class AtStop(logging.Handler):  # the sink's last committed batch when the job begins to stop
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().startswith("stopping query"):
                committed_at_stop.append(SinkCommitLog(logs, "events").read().batch_id)

    def stop_after_two_batches() -> None:
        while SinkCommitLog(logs, "events").read().batch_id < 1 and not stop.wait(0.05):
            pass
        stop.set()

    spec = JobSpec(
        log_dir=logs,
        checkpoint_location=str(tmp_path / "cp"),
        num_partitions=2,
        rows_per_second=500,
        trigger_interval="0 seconds",
        progress_interval_s=3600,
    )
    handler = AtStop()
    caplog.set_level(logging.INFO, logger="streaming.job")
    logging.getLogger("streaming.job").addHandler(handler)
    stopper = threading.Thread(target=stop_after_two_batches, daemon=True)
    stopper.start()
    try:
        summary = run_job(spec, Settings(), stop=stop, spark=spark)
    finally:
        stop.set()
        stopper.join()
        logging.getLogger("streaming.job").removeHandler(handler)
    assert len(committed_at_stop) == 1
    # The micro-batch running then, and at most the one Spark started as it ended (stopped at its start).
    assert summary.batches - 1 - committed_at_stop[0] <= 2, (summary.batches, committed_at_stop)


@pytest.mark.spark
def test_ctrl_c_stops_seglog_run_cleanly(tmp_path: Path) -> None:
    """SIGINT (Ctrl-C) reaches `seglog run`'s own handler, not the one a new SparkContext installs (which
    cancels every job and raises KeyboardInterrupt): the running batch finishes and the job exits 0."""

    from seglog.commands.serve import SEGLOG_MAIN

    logs = tmp_path / "logs"
    argv = ["run", "--log-dir", str(logs), "--checkpoint-location", str(tmp_path / "cp"), "--trigger", "1 second"]
    proc = subprocess.Popen(
        [sys.executable, "-c", SEGLOG_MAIN, *argv, "--rows-per-second", "200", "--duration", str(QUERY_TIMEOUT_S)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + QUERY_TIMEOUT_S
        while SinkCommitLog(logs, "events").read().batch_id < 1:  # two micro-batches committed
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "no second micro-batch"
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=QUERY_TIMEOUT_S)
    finally:
        proc.kill()
    assert proc.returncode == 0, err[-3000:]
    assert "micro-batches" in out and "KeyboardInterrupt" not in err and "interrupted" not in err
    assert "SIGINT received: stopping cleanly" in err and "Failed to cancel job group" not in err
    assert "resolves to a loopback address" not in err and "adaptive.enabled is not supported" not in err, err
    stored = read_topic(logs, "events")
    assert stored and len(stored) == sum(high_watermarks(logs).values())


def _run_files_once(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    """``seglog run --source files --available-now`` in a subprocess over one JSON file holding ``text``."""
    from seglog.commands.serve import SEGLOG_MAIN

    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.json").write_text(text)
    argv = ["run", "--source", "files", "--input", str(tmp_path / "in"), "--available-now"]
    argv += ["--log-dir", str(tmp_path / "logs"), "--checkpoint-location", str(tmp_path / "cp")]
    return subprocess.run(
        [sys.executable, "-c", SEGLOG_MAIN, *argv], capture_output=True, text=True, timeout=QUERY_TIMEOUT_S
    )


@pytest.mark.spark
def test_seglog_run_reports_bad_input_in_one_line(tmp_path: Path) -> None:
    """The sink's error once, as the last line: not after py4j's Python traceback and Spark's Java stack
    trace of the same error (both logged before the job raised it); --debug still shows the traceback.
    Nor after Spark's start-up lines (its log4j profile, its log level, NativeCodeLoader's warning)."""
    done = _run_files_once(tmp_path, '{"key": "k", "value": "v", "headers": "h"}\n')
    for spark_line in ("Using Spark's default log4j profile", "Setting default log level", "WARN NativeCodeLoader"):
        assert spark_line not in done.stderr, done.stderr
    assert done.returncode == 1
    # (values that are numbers, the input here before, are refused before Spark starts now)
    last = (
        "seglog: SchemaError: column 'headers': found type string, "
        "expected array<struct<key:string,value:binary>>, as Spark's Kafka sink takes it"
    )
    assert done.stderr.splitlines()[-1] == last
    assert "Traceback" not in done.stderr and "SchemaError" not in done.stderr.replace(last, ""), done.stderr


def _files_job(tmp_path: Path) -> JobSpec:
    """The job over the JSON files of ``tmp_path / "in"`` into ``tmp_path / "logs"`` (2 partitions),
    checkpoint ``tmp_path / "cp"``, until they are all read."""
    return JobSpec(
        log_dir=tmp_path / "logs",
        checkpoint_location=str(tmp_path / "cp"),
        num_partitions=2,
        source="files",
        input_path=str(tmp_path / "in"),
        available_now=True,
        progress_interval_s=3600,
    )


@pytest.mark.spark
def test_a_restart_with_another_source_on_the_checkpoint_is_refused_before_spark_runs_it(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Spark cannot resume a checkpoint under another source ("not allowed", Spark's guide): it failed the
    query with its own error (`For input string: "{"path":...`, `Wrong basePath ...`) that the CLI
    printed as "this looks like a bug". The job names both sources instead, before the query starts."""
    from dataclasses import replace

    from streaming.job import run_job

    rows = write_json_inputs(tmp_path / "in", files=1, rows_per_file=20, keys=3)
    write_json_inputs(tmp_path / "other", files=1, rows_per_file=5, keys=3)
    spec = _files_job(tmp_path)
    assert run_job(spec, Settings(), spark=spark).rows == 20
    refused = {
        "rate": replace(spec, source="rate", input_path=None),
        "files": replace(spec, input_path=str(tmp_path / "other")),
    }
    for source, changed in refused.items():
        with pytest.raises(
            ConfigError,
            match=f"checkpoint .*cp was written by a query reading the files source "
            f"from .*in; this run reads the {source} source",
        ) as caught:
            run_job(changed, Settings(), spark=spark)
        assert "--checkpoint-location" in str(caught.value)
    assert len(read_topic(tmp_path / "logs", "events")) == len(rows)
    assert run_job(replace(spec, input_format="json"), Settings(), spark=spark).rows == 0  # the same source resumes


@pytest.mark.spark
def test_a_new_checkpoint_over_a_log_the_sink_wrote_warns_that_the_source_is_read_again(
    spark: SparkSession, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A deleted checkpoint with the log kept: the new query is another query (its batch 0 is new data, as
    with Spark's Kafka sink), so the files source's rows are all written a second time. That was silent;
    the job now says so in one warning line before Spark starts. A new log directory stays quiet."""
    import logging
    import shutil
    from dataclasses import replace

    from streaming.job import run_job

    rows = write_json_inputs(tmp_path / "in", files=1, rows_per_file=20, keys=3)
    spec = _files_job(tmp_path)
    caplog.set_level(logging.INFO)
    run_job(spec, Settings(), spark=spark)
    first_query = SinkCommitLog(tmp_path / "logs", "events").read().query_id
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and r.name == "streaming.job"]
    shutil.rmtree(tmp_path / "cp")
    caplog.clear()
    assert run_job(spec, Settings(), spark=spark).rows == len(rows)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name == "streaming.job"]
    assert len(warnings) == 1, warnings
    assert f"checkpoint {tmp_path / 'cp'} is new" in warnings[0] and f"query {first_query}" in warnings[0]
    assert "written again" in warnings[0]
    assert len(read_topic(tmp_path / "logs", "events")) == 2 * len(rows)
    caplog.clear()
    run_job(
        replace(spec, log_dir=tmp_path / "logs2", checkpoint_location=str(tmp_path / "cp2")), Settings(), spark=spark
    )
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and r.name == "streaming.job"]


@pytest.mark.spark
def test_a_malformed_input_row_stops_the_files_source_in_one_line_instead_of_becoming_a_tombstone(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Spark's JSON and CSV readers turn a line they cannot parse into a row of nulls: the job wrote a JSON
    line cut short as a record with a null key and a null value (a tombstone), and a CSV row with a field
    too many as ``{"user": "bob", "clicks": 5}``, silently. The files source now fails the micro-batch,
    before anything is written, naming the file and the line."""
    from streaming.job import run_job

    inputs = {
        "json": (
            '{"key": "a", "value": "1"}\n{"key": "a", "value": \n{"key": "b", "value": "2"}\n',
            '{"key": "a", "value": ',
        ),
        "csv": ("user,clicks\nann,3\nbob,5,extra\n", "bob,5,extra"),
    }
    for file_format, (text, bad) in inputs.items():
        (tmp_path / file_format).mkdir()
        (tmp_path / file_format / f"a.{file_format}").write_text(text)
        spec = JobSpec(
            log_dir=tmp_path / "logs",
            checkpoint_location=str(tmp_path / f"cp-{file_format}"),
            topic=file_format,
            num_partitions=2,
            source="files",
            input_path=str(tmp_path / file_format),
            input_format=file_format,
            key_column="user" if file_format == "csv" else None,
            available_now=True,
            progress_interval_s=3600,
        )
        with pytest.raises(SchemaError) as caught:
            run_job(spec, Settings(), spark=spark)
        message = str(caught.value)
        assert (
            message == f"malformed {file_format} record in file://{tmp_path / file_format / f'a.{file_format}'}: {bad}"
        )
        assert read_topic(tmp_path / "logs", file_format) == []


@pytest.mark.spark
def test_iso_8601_timestamps_of_json_files_are_record_timestamps(spark: SparkSession, tmp_path: Path) -> None:
    """JSON has no timestamp type: Spark writes a timestamp column to JSON as an ISO-8601 string, and its
    reader infers a string column back. The files source gave the sink that string column, which it
    refused with a bare SchemaError ("found type string, expected int64 (ms since epoch) or an Arrow
    timestamp"). A ``timestamp`` field of JSON files is now read as Spark's timestamp type (what Spark's
    Kafka sink takes), so ISO-8601 strings become the records' timestamps, and a string that is no
    timestamp stops the job naming the file and the line, as any line Spark cannot parse."""
    from streaming.job import run_job

    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.json").write_text(
        '{"key": "a", "value": "1", "timestamp": "2024-01-02T03:04:05.678Z"}\n'
        '{"key": "a", "value": "2", "timestamp": "2024-01-02T04:04:05+01:00"}\n'
        '{"key": "a", "value": "3", "timestamp": null}\n'
    )
    spec = _files_job(tmp_path)
    assert run_job(spec, Settings(), spark=spark).rows == 3
    stored = sorted(read_topic(tmp_path / "logs", "events"), key=lambda r: r.value)
    assert [r.timestamp for r in stored[:2]] == [1_704_164_645_678, 1_704_164_645_000]
    assert stored[2].timestamp > 1_704_164_645_678  # null: the time of the micro-batch
    (tmp_path / "in" / "b.json").write_text('{"key": "b", "value": "4", "timestamp": "yesterday"}\n')
    with pytest.raises(SchemaError) as caught:
        run_job(spec, Settings(), spark=spark)
    assert str(caught.value).startswith(f"malformed json record in file://{tmp_path / 'in' / 'b.json'}: ")
    assert "yesterday" in str(caught.value)
    assert len(read_topic(tmp_path / "logs", "events")) == 3


@pytest.mark.spark
def test_seglog_run_reports_a_malformed_input_line_in_one_line_without_spark_task_stack_traces(tmp_path: Path) -> None:
    """The malformed line fails a Spark task (not the driver's sink): Spark's Executor and TaskSetManager
    logged that task's error with its Java stack trace (twice) before the job's one line."""
    done = _run_files_once(tmp_path, '{"key": "k", "value": "v"}\n{"key": "k", \n')
    assert done.returncode == 1
    last = f'seglog: SchemaError: malformed json record in file://{tmp_path}/in/a.json: {{"key": "k",'
    assert done.stderr.splitlines()[-1] == last  # the CLI drops the line's trailing blank
    assert "\tat org.apache.spark" not in done.stderr and "seglog-malformed-input" not in done.stderr, done.stderr


@pytest.mark.spark
def test_a_checkpoint_resumed_on_a_log_without_its_batches_warns_that_they_are_elsewhere(
    spark: SparkSession, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Another --log-dir with the same checkpoint, or the log deleted and the checkpoint kept: the query
    goes on after its committed batches, whose rows are not in this log. That was silent."""
    import logging
    import shutil
    from dataclasses import replace

    from streaming.job import run_job

    write_json_inputs(tmp_path / "in", files=1, rows_per_file=20, keys=3)
    spec = _files_job(tmp_path)
    run_job(spec, Settings(), spark=spark)
    query = SinkCommitLog(tmp_path / "logs", "events").read().query_id

    def warnings() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name == "streaming.job"]

    caplog.set_level(logging.INFO)
    run_job(spec, Settings(), spark=spark)  # the same log: quiet
    assert warnings() == []
    write_json_inputs(tmp_path / "more", files=1, rows_per_file=5, keys=3)
    (tmp_path / "more" / "part-0000.json").rename(tmp_path / "in" / "second.json")
    assert run_job(replace(spec, log_dir=tmp_path / "logs2"), Settings(), spark=spark).rows == 5
    shutil.rmtree(tmp_path / "logs")
    run_job(spec, Settings(), spark=spark)
    assert len(warnings()) == 2, warnings()
    for log_dir, last, message in zip(("logs2", "logs"), (0, 1), warnings(), strict=True):
        assert f"query {query} committed batches up to {last} in checkpoint {tmp_path / 'cp'}" in message
        assert f"events in {tmp_path / log_dir} has none of them" in message
    assert read_topic(tmp_path / "logs", "events") == []


def test_a_job_may_name_a_topic_of_more_partitions_than_one_creation_makes(tmp_path: Path) -> None:
    """A topic grown past 10,000 partitions in steps (`seglog topic alter`) is one a job may write: the
    bound is on what one creation makes (``LogManager.create_topic``), not on a job's count."""
    spec = JobSpec(log_dir=tmp_path / "logs", checkpoint_location=str(tmp_path / "cp"), num_partitions=15_000)
    assert spec.num_partitions == 15_000
