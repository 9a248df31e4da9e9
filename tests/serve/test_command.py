"""`seglog serve` and `seglog bench serve` from the command line: user mistakes get one line, the
bench writes the shared JSON shape."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

from indexer.config import load_settings
from indexer.log_manager import LogManager
from seglog.cli import main
from tests.serve.clients import kafka_python
from tests.serve.conftest import SEGLOG, ServeProcess


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SEGLOG, *args], capture_output=True, text=True, timeout=60, check=False)


def test_serve_started_before_its_log_directory_exists_says_so_and_serves_it_once_it_appears(
    tmp_path: Path, serve: Callable[..., ServeProcess]
) -> None:
    """``seglog serve`` started before the writer that creates the log directory exited 1
    (``LogDirectoryNotFoundError``) while ``seglog maintain`` waits for it: services started in any
    order failed or not by command. Now serve, like the daemon, says once that the directory does not
    exist yet (a wrong path is one line, not silence) and serves its topics once a writer made it."""
    log_dir = tmp_path / "not-yet"
    server = serve(log_dir)
    time.sleep(0.5)
    assert server.proc.poll() is None
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"value": f"v{i}"}) + "\n" for i in range(5)))
    assert main(["append", "--log-dir", str(log_dir), "--topic", "t", "--partition", "0", str(source)]) == 0
    received = kafka_python(server.bootstrap, 5, assign=[("t", 0)], timeout_s=30)
    assert [r.value for r in received[("t", 0)]] == [f"v{i}".encode() for i in range(5)]
    said = [line for line in server.log_text().splitlines() if "does not exist yet" in line]
    assert said == [
        said[0][: said[0].index("WARNING")]
        + f"WARNING seglog.serve.server: log directory {log_dir} does not exist yet: serving its topics once it "
        "appears"
    ], server.log_text()


def test_missing_group_offsets_dir_is_one_line(tmp_path: Path) -> None:
    """Checked before serving: the server used to start and then fail every OffsetCommit (kcat -G
    retried them forever)."""
    result = _run(
        "serve", "--log-dir", str(tmp_path), "--group-offsets-dir", str(tmp_path / "nope"), "--bind", "127.0.0.1:0"
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"seglog: FileNotFoundError: group offsets directory {tmp_path / 'nope'} does not exist"
    ]


def test_a_file_as_log_dir_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "file").touch()
    result = _run("serve", "--log-dir", str(tmp_path / "file"), "--bind", "127.0.0.1:0")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"seglog: NotALogDirectoryError: {tmp_path / 'file'} is a file, not a log directory"
    ]


def test_brokers_past_the_last_port_is_one_line(tmp_path: Path) -> None:
    """Node i listens on PORT+i: ports past 65535 are refused up front (it was an OverflowError from
    bind, reported as a bug)."""
    result = _run("serve", "--log-dir", str(tmp_path), "--bind", "127.0.0.1:65534", "--brokers", "3")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "seglog: ValueError: 3 brokers from port 65534 need ports up to 65536 (the last is 65535)"
    ]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_stop_with_clients_connected_exits_0_without_tracebacks(
    serve: Callable[..., ServeProcess], tmp_path: Path, sig: int
) -> None:
    """Ctrl-C or SIGTERM while a tailing kcat waits in a Fetch and another connection is idle: the
    server closes them and exits 0 (Python 3.11 logged each cancelled connection as "Exception in
    callback" with a traceback)."""
    log_dir = tmp_path / "logs"
    with LogManager(log_dir, load_settings()) as manager:
        manager.create_topic("t", 1)
    server = serve(log_dir)
    kcat = subprocess.Popen(
        ["kcat", "-b", server.bootstrap, "-C", "-t", "t", "-q", "-d", "fetch"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with socket.create_connection(("127.0.0.1", server.port)):
            assert kcat.stderr is not None
            while "Fetch" not in kcat.stderr.readline():  # its first Fetch is sent: the server holds it
                pass
            assert server.stop(sig) == 0
    finally:
        kcat.kill()
        kcat.wait()
    assert "Traceback" not in server.log_text() and "Exception" not in server.log_text(), server.log_text()


def test_sighup_stops_it_cleanly(serve: Callable[..., ServeProcess], tmp_path: Path) -> None:
    """SIGHUP (the terminal or ssh session that started it closed) killed the server with the default
    action (exit 129, no close of its connections and group offsets); it stops as on SIGTERM, as
    ``seglog maintain`` and ``seglog run`` do, and says so."""
    log_dir = tmp_path / "logs"
    with LogManager(log_dir, load_settings()) as manager:
        manager.create_topic("t", 1)
    server = serve(log_dir)
    assert server.stop(signal.SIGHUP) == 0
    assert "received SIGHUP, stopping" in server.log_text(), server.log_text()
    assert server.log_text().rstrip().endswith("stopped"), server.log_text()


def test_a_server_started_under_nohup_keeps_serving_on_sighup(tmp_path: Path) -> None:
    """SIGHUP ignored when it starts (``nohup``) stays ignored: the server keeps serving."""
    log_dir = tmp_path / "logs"
    with LogManager(log_dir, load_settings()) as manager:
        manager.get_or_create_log("t", 0).append([{"value": "v"}])
        manager.get_log("t", 0).update_high_watermark(1)  # type: ignore[union-attr]
    proc = subprocess.Popen(
        ["nohup", *SEGLOG, "serve", "--log-dir", str(log_dir), "--bind", "127.0.0.1:0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        found = re.search(r"serving .* on (127\.0\.0\.1:\d+) ", line)
        assert found, line
        proc.send_signal(signal.SIGHUP)
        got = subprocess.run(
            ["kcat", "-b", found.group(1), "-C", "-e", "-t", "t", "-q", "-f", "%s\n"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        assert got.stdout == "v\n" and proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0


def test_where_it_listens_is_said_without_v(tmp_path: Path) -> None:
    """Started without -v it said nothing at all: not that it runs, nor on which port (port 0)."""
    proc = subprocess.Popen(
        [*SEGLOG, "serve", "--log-dir", str(tmp_path), "--bind", "127.0.0.1:0"], stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert re.search(r"serving .* on 127\.0\.0\.1:\d+ \(read-only, no authentication\)", line), line
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0


def test_port_in_use_is_one_line(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = _run("serve", "--log-dir", str(tmp_path), "--bind", f"127.0.0.1:{port}")
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("seglog: OSError:") and "address already in use" in lines[0]


def test_a_taken_port_of_another_broker_is_one_line(tmp_path: Path) -> None:
    """``--brokers 2`` binds PORT and PORT+1: the second taken fails the command in one line."""
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1] - 1
        result = _run("serve", "--log-dir", str(tmp_path), "--bind", f"127.0.0.1:{port}", "--brokers", "2")
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("seglog: OSError:"), lines


def test_brokers_lead_the_partitions_in_turn_each_on_a_port_of_its_own(
    serve: Callable[..., ServeProcess], tmp_path: Path
) -> None:
    from confluent_kafka.admin import AdminClient

    log_dir = tmp_path / "logs"
    with LogManager(log_dir, load_settings()) as manager:
        manager.create_topic("t", 5)
    server = serve(log_dir, "--brokers", "3")
    metadata = AdminClient({"bootstrap.servers": server.bootstrap}).list_topics(timeout=20)
    ports = {node: broker.port for node, broker in metadata.brokers.items()}
    assert ports == {0: server.port, 1: ports[1], 2: ports[2]} and len(set(ports.values())) == 3
    assert {p: part.leader for p, part in metadata.topics["t"].partitions.items()} == {p: p % 3 for p in range(5)}
    assert "brokers 1..2 on ports" in server.log_text()


def test_bad_bind_is_a_usage_error(tmp_path: Path) -> None:
    result = _run("serve", "--log-dir", str(tmp_path), "--bind", "localhost")
    assert result.returncode == 2
    assert "expected HOST:PORT" in result.stderr


def test_bench_serve_writes_the_figures(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert main(["bench", "serve", "--quick", "--scale", "0.05", "--json", str(out), "--dir", str(tmp_path)]) == 0
    rows = json.loads(out.read_text())
    assert [r["name"] for r in rows] == [
        "consume via seglog serve (confluent-kafka)",
        "confluent-kafka consume loop, records already queued",
        "consume via seglog serve (kafka-python)",
        "consume 4 partitions via seglog serve --brokers 4 (confluent-kafka)",
        "commit to consumer receipt p50",
        "commit to consumer receipt p99",
    ]
    for row in rows:
        assert row["suite"] == "serve" and row["value"] > 0 and row["baseline_value"] > 0
    assert rows[0]["goal"] == 0.5
    assert 0 < rows[0]["details"]["first_fetch_records"] < rows[0]["details"]["records"]  # left out of the timed part
    assert rows[0]["details"]["startup_s"] > 0 and rows[2]["details"]["startup_s"] > 0
    assert rows[4]["details"]["lost"] == 0 and rows[4]["details"]["writer_publish_ms_p50"] > 0
    assert (
        not any(tmp_path.glob("throughput*"))
        and not any(tmp_path.glob("brokers*"))
        and not any(tmp_path.glob("latency*"))
    )


pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
