"""A live seglog deployment on one log directory, and what its consumers must have seen.

Used by ``test_live_system.py`` (bounded) and runnable as a script for a longer run
(``python -m tests.serve.live_system WORKDIR --seconds 120``). The pieces, all real processes or
real clients: a writer (``seglog append`` in a loop, SIGKILLed at random moments), the maintenance
daemon (``seglog maintain``, SIGKILLed and restarted), ``seglog serve`` (SIGKILLed once and restarted
on its port) and three consumers reading through it: confluent-kafka in a consumer group committing
offsets (and restarted once, resuming from them), ``kcat -C -o beginning`` tailing, and kafka-python
in a group of its own. A recorder reads every committed record through the engine while they run,
so what a consumer received can be compared with what was committed even after retention removed it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import queue
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import confluent_kafka

from indexer.config import load_settings
from indexer.errors import SeglogError
from indexer.log_manager import LogManager
from tests.maintenance.conftest import maintain_daemon
from tests.serve.conftest import ServeProcess

with warnings.catch_warnings():  # kafka-python 3 imports its protocol JSON with a deprecated API
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import ConsumerRebalanceListener, KafkaConsumer, OffsetAndMetadata, TopicPartition

SEGLOG = [sys.executable, "-c", "import sys; from seglog.cli import main; sys.exit(main())"]
REPO = Path(__file__).resolve().parents[2]
TOPIC = "live"
PARTITIONS = 2
# Everything happens within seconds: a segment per append or two, retention keeping a few of them.
TOPIC_CONFIG = {
    "segment.bytes": 2048,
    "segment.ms": 1500,
    "retention.bytes": 16384,
    "retention.ms": 3_600_000,
    "file.delete.delay.ms": 300,
    "index.interval.bytes": 512,
    "segment.index.bytes": 4096,
}
MAINTENANCE = {
    "log.initial.task.delay.ms": 0,
    "log.retention.check.interval.ms": 300,
    "seglog.roll.check.interval.ms": 300,
    "seglog.index.check.interval.ms": 700,
}

Rec = tuple[int, int, str | None, str | None, tuple[tuple[str, str], ...], int]  # p, offset, key, value, headers, ts


def write_conf(path: Path) -> Path:
    """The settings file every process of the deployment reads (``$SEGLOG_CONF``)."""
    lines = ["[topic]"] + [f'"{k}" = {json.dumps(v)}' for k, v in TOPIC_CONFIG.items()]
    lines += ["[maintenance]"] + [f'"{k}" = {json.dumps(v)}' for k, v in MAINTENANCE.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _hex(b: bytes | None) -> str | None:
    return None if b is None else bytes(b).hex()


@dataclass
class ConsumerLog:
    """What one consumer saw, in order: ``("life", n)``, ``("assign", [p...])``, ``("commit", p, offset)``,
    ``("rec", p, offset, key, value, headers, ts)`` (bytes as hex), ``("error", text)``."""

    name: str
    group: bool
    events: list[tuple[object, ...]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, *event: object) -> None:
        with self.lock:
            self.events.append(event)

    def positions(self) -> dict[int, int]:
        """The next offset after the last record received, per partition."""
        with self.lock:
            out: dict[int, int] = {}
            for e in self.events:
                if e[0] == "rec":
                    out[int(e[1])] = int(e[2]) + 1  # type: ignore[call-overload]
            return out


class Recorder(threading.Thread):
    """Reads every committed record of the topic through the engine (read-only), every ``period_s``:
    ``records[p][offset]`` as the consumers' logs hold them; the log start offsets it saw."""

    def __init__(self, log_dir: Path, period_s: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.log_dir, self.period_s = log_dir, period_s
        self.records: dict[int, dict[int, Rec]] = {p: {} for p in range(PARTITIONS)}
        self.next: dict[int, int] = dict.fromkeys(range(PARTITIONS), 0)
        self.starts: dict[int, set[int]] = {p: {0} for p in range(PARTITIONS)}
        self.missed: dict[int, list[tuple[int, int]]] = {p: [] for p in range(PARTITIONS)}
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.settings = load_settings()

    def run(self) -> None:
        while not self.stop.is_set():
            self.poll()
            self.stop.wait(self.period_s)

    def poll(self) -> None:
        try:
            manager = LogManager(self.log_dir, self.settings, read_only=True)
        except (SeglogError, OSError) as e:
            self.errors.append(f"open: {type(e).__name__}: {e}")
            return
        try:
            for p in range(PARTITIONS):
                log = manager.get_log(TOPIC, p)
                if log is None:
                    continue
                start, hw = log.log_start_offset, min(log.high_watermark, log.log_end_offset)
                self.starts[p].add(start)
                if self.next[p] < start:
                    self.missed[p].append((self.next[p], start - 1))
                    self.next[p] = start
                while self.next[p] < hw:
                    table = log.read_records(self.next[p], 5000, max_offset=hw)
                    if table.num_rows == 0:
                        break
                    for r in table.to_pylist():
                        headers = tuple((h["key"], _hex(h["value"])) for h in (r["headers"] or []))
                        self.records[p][r["offset"]] = (
                            p,
                            r["offset"],
                            _hex(r["key"]),
                            _hex(r["value"]),
                            headers,  # type: ignore[arg-type]
                            r["timestamp"],
                        )
                    self.next[p] = int(table.column("offset")[-1].as_py()) + 1
        except (SeglogError, OSError, ValueError) as e:  # a segment deleted under the read: next poll
            self.errors.append(f"read: {type(e).__name__}: {e}")
        finally:
            manager.close()


class ClientLogger:
    """librdkafka's log lines (an offset reset after retention, a lost connection) kept in the consumer's log."""

    def __init__(self, log: ConsumerLog) -> None:
        self.log_ = log

    def log(self, level: int, msg: str, *args: object) -> None:
        self.log_.add("client", msg % args if args else msg)


def confluent_consumer(bootstrap: str, log: ConsumerLog, stop: threading.Event, restart: threading.Event) -> None:
    """A confluent-kafka consumer in group ``cg``, committing what it received after each record (sync);
    on ``restart`` it is dropped without a commit or a LeaveGroup (as a killed process) and a new one
    resumes from the group's committed offsets."""
    life = 0
    while not stop.is_set():
        life += 1
        log.add("life", life)
        consumer = confluent_kafka.Consumer(
            {
                "logger": ClientLogger(log),
                "bootstrap.servers": bootstrap,
                "group.id": "cg",
                "client.id": f"cg-{life}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 100,
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 500,
                "max.poll.interval.ms": 20000,
                "topic.metadata.refresh.interval.ms": 1000,
                "reconnect.backoff.max.ms": 500,
            }
        )
        consumer.subscribe(
            [TOPIC],
            on_assign=lambda c, parts: log.add("assign", sorted(tp.partition for tp in parts)),
            on_revoke=lambda c, parts: log.add("revoke", sorted(tp.partition for tp in parts)),
        )
        while not stop.is_set() and not restart.is_set():
            m = consumer.poll(0.2)
            if m is None:
                continue
            if m.error():
                log.add("error", str(m.error()))
                continue
            kind, ts = m.timestamp()
            headers = tuple((k, _hex(v)) for k, v in (m.headers() or []))
            log.add("rec", m.partition(), m.offset(), _hex(m.key()), _hex(m.value()), headers, ts)
            try:
                consumer.commit(message=m, asynchronous=False)
                log.add("commit", m.partition(), m.offset() + 1)
            except confluent_kafka.KafkaException as e:
                log.add("commit-failed", m.partition(), m.offset() + 1, str(e))
        if restart.is_set():
            restart.clear()
            del consumer  # no close: no LeaveGroup, no commit, as a killed consumer
            continue
        consumer.close()


class _FetcherLines(logging.Handler):
    """kafka-python's fetcher lines (``Fetch offset N is out of range``) kept in the consumer's log."""

    def __init__(self, log: ConsumerLog) -> None:
        super().__init__(logging.INFO)
        self.log_ = log

    def emit(self, record: logging.LogRecord) -> None:
        self.log_.add("client", record.getMessage())


def kafka_python_consumer(bootstrap: str, log: ConsumerLog, stop: threading.Event, pause: threading.Event) -> None:
    """kafka-python in group ``kp``, committing the offsets it received after each poll; while ``pause`` is
    set it does not poll, so retention overtakes it and it resets after ``OFFSET_OUT_OF_RANGE``."""
    log.add("life", 1)
    fetcher = logging.getLogger("kafka.consumer.fetcher")
    fetcher.setLevel(logging.INFO)
    fetcher.addHandler(_FetcherLines(log))

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        def on_partitions_assigned(self, parts: list[TopicPartition]) -> None:
            log.add("assign", sorted(tp.partition for tp in parts))

        def on_partitions_revoked(self, parts: list[TopicPartition]) -> None:
            log.add("revoke", sorted(tp.partition for tp in parts))

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id="kp",
        client_id="kp",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        fetch_max_wait_ms=100,
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
        reconnect_backoff_max_ms=500,
        metadata_max_age_ms=1000,
    )
    consumer.subscribe([TOPIC], listener=Listener())
    while not stop.is_set():
        if pause.is_set():
            time.sleep(0.1)
            continue
        try:
            batches = consumer.poll(timeout_ms=200)
        except Exception as e:  # noqa: BLE001 - a client error is a finding, logged for the checker
            log.add("error", f"{type(e).__name__}: {e}")
            time.sleep(0.2)
            continue
        ends: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp, messages in batches.items():
            for m in messages:
                headers = tuple((k, _hex(v)) for k, v in m.headers)
                log.add("rec", tp.partition, m.offset, _hex(m.key), _hex(m.value), headers, m.timestamp)
            ends[tp] = OffsetAndMetadata(messages[-1].offset + 1, "", -1)
        if ends:
            try:
                consumer.commit(ends)
                for tp, om in ends.items():
                    log.add("commit", tp.partition, om.offset)
            except Exception as e:  # noqa: BLE001 - it may have reached the server all the same
                for tp, om in ends.items():
                    log.add("commit-failed", tp.partition, om.offset, str(e))
    consumer.close(autocommit=False)


class Kcat:
    """``kcat -C -o beginning`` without ``-e``, tailing every partition. kcat ends itself when every broker
    is down ("All broker connections are down: terminating"), so after the server's restart it is
    started again (``restart``): a new life, from the beginning again."""

    def __init__(self, bootstrap: str, workdir: Path) -> None:
        self.bootstrap, self.workdir = bootstrap, workdir
        self.lives: list[tuple[subprocess.Popen[bytes], Path]] = []
        self.restart()

    def restart(self) -> None:
        if self.lives and self.lives[-1][0].poll() is None:
            self.lives[-1][0].terminate()
            self.lives[-1][0].wait(10)
        out = self.workdir / f"kcat-{len(self.lives) + 1}.jsonl"
        args = ["-X", "auto.offset.reset=earliest", "-X", "fetch.wait.max.ms=100", "-X", "reconnect.backoff.max.ms=500"]
        with out.open("w") as stdout, out.with_suffix(".stderr").open("w") as stderr:
            cmd = ["kcat", "-C", "-b", self.bootstrap, "-t", TOPIC, "-o", "beginning", "-J", "-u", *args]
            self.lives.append((subprocess.Popen(cmd, stdout=stdout, stderr=stderr), out))

    def log(self) -> ConsumerLog:
        log = ConsumerLog("kcat", group=False)
        for life, (_, out) in enumerate(self.lives, 1):
            log.add("life", life)
            for line in out.read_text().splitlines():
                try:
                    m = json.loads(line)
                except json.JSONDecodeError:  # the line being written
                    continue
                raw = m.get("headers") or []
                headers = tuple(
                    (raw[i], None if raw[i + 1] is None else raw[i + 1].encode().hex()) for i in range(0, len(raw), 2)
                )
                key = None if m["key"] is None else m["key"].encode().hex()
                value = None if m["payload"] is None else m["payload"].encode().hex()
                log.add("rec", m["partition"], m["offset"], key, value, headers, m["ts"])
        return log

    def stop(self) -> str:
        """Stops the last life; what every life said on stderr."""
        proc = self.lives[-1][0]
        if proc.poll() is None:
            proc.terminate()
            proc.wait(10)
        return "".join(out.with_suffix(".stderr").read_text() for _, out in self.lives)


class Service:
    """A ``seglog`` command as a long-running process of its own (``start``/``kill``), its stderr in
    ``workdir/NAME-<life>.stderr``."""

    def __init__(self, name: str, args: list[str], workdir: Path, env: dict[str, str], ready: str | None) -> None:
        self.name, self.args, self.workdir, self.env, self.ready = name, args, workdir, env, ready
        self.proc: subprocess.Popen[bytes] | None = None
        self.lives = 0
        self.stderr_paths: list[Path] = []

    def start(self) -> None:
        self.lives += 1
        path = self.workdir / f"{self.name}-{self.lives}.stderr"
        self.stderr_paths.append(path)
        with path.open("w") as err:
            self.proc = subprocess.Popen(
                [*SEGLOG, *self.args],
                cwd=REPO,
                env=self.env,
                stderr=err,
                stdout=subprocess.DEVNULL,
                start_new_session=True,
            )
        deadline = time.monotonic() + 120
        while self.ready and self.ready not in path.read_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{self.name} did not start:\n{path.read_text()}")
            time.sleep(0.05)

    def kill(self, sig: int = signal.SIGKILL) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            if sig == signal.SIGKILL:
                os.killpg(self.proc.pid, sig)  # seglog run's Spark JVM too
            else:
                self.proc.send_signal(sig)
        return self.proc.wait(60)

    def text(self) -> str:
        return "".join(p.read_text() for p in self.stderr_paths)


class AppendWriter(threading.Thread):
    """``seglog append`` in a loop over the partitions, each append of some records numbered by a sequence
    (:func:`written` gives the key, value and headers of each); a share ``kill_rate`` of the appends, picked
    by ``rng``, is SIGKILLed after a random delay. ``appended`` holds the sequence numbers of the appends
    that exited 0, ``killed_seqs`` those of the appends killed (committed or not)."""

    def __init__(self, log_dir: Path, workdir: Path, env: dict[str, str], rng: random.Random, kill_rate: float) -> None:
        super().__init__(daemon=True)
        self.log_dir, self.workdir, self.env, self.rng, self.kill_rate = log_dir, workdir, env, rng, kill_rate
        self.stop = threading.Event()
        self.appends = self.killed = 0
        self.failures: list[str] = []
        self.seq = 0
        self.appended: set[int] = set()
        self.killed_seqs: set[int] = set()

    def run(self) -> None:
        while not self.stop.is_set():
            p = self.appends % PARTITIONS
            self.appends += 1
            n = self.rng.randint(10, 40)
            lines = []
            now_ms = int(time.time() * 1000)
            seqs = range(self.seq, self.seq + n)
            self.seq += n
            for s in seqs:
                key, value, headers = written(p, s)
                lines.append(
                    json.dumps({"key": key, "value": value, "timestamp": now_ms + s % 1000, "headers": headers})
                )
            batch = self.workdir / "batch.jsonl"
            batch.write_text("\n".join(lines) + "\n")
            kill_after = self.rng.uniform(0.3, 1.6) if self.rng.random() < self.kill_rate else None
            cmd = ["append", "--log-dir", str(self.log_dir), "--topic", TOPIC, "--partition", str(p), str(batch)]
            proc = subprocess.Popen(
                [*SEGLOG, *cmd], cwd=REPO, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
            try:
                out, err = proc.communicate(timeout=kill_after)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                self.killed += 1
                self.killed_seqs.update(seqs)
                continue
            if proc.returncode != 0:
                self.failures.append(err.decode())
            else:
                self.appended.update(seqs)


def written(p: int, s: int) -> tuple[str | None, str, list[list[str]]]:
    """Key, value and headers of record ``s`` the writer appends to partition ``p``."""
    key = None if s % 11 == 0 else f"k{s % 7}"
    return key, f"p{p}-s{s}-" + "v" * (60 + s % 90), [["seq", str(s)], ["src", "live"]] if s % 3 else []


def check_writes(writer: AppendWriter, recorder: Recorder) -> list[str]:
    """What the writer appended against what was committed: every record of an append that exited 0 is
    committed once, with the key, value and headers written; a killed append's records at most once."""
    problems: list[str] = []
    seen: set[int] = set()
    for p, records in recorder.records.items():
        for _, offset, key, value, headers, _ in records.values():
            text = bytes.fromhex(value or "").decode()
            s = int(text.split("-")[1][1:])
            want_key, want_value, want_headers = written(p, s)
            expected = (
                None if want_key is None else want_key.encode().hex(),
                want_value.encode().hex(),
                tuple((k, v.encode().hex()) for k, v in want_headers),
            )
            if (key, value, headers) != expected:
                problems.append(f"{TOPIC}-{p}@{offset}: {(key, value, headers)} is not what was written: {expected}")
            if s in seen:
                problems.append(f"{TOPIC}-{p}@{offset}: record {s} committed twice")
            if s not in writer.appended and s not in writer.killed_seqs:
                problems.append(f"{TOPIC}-{p}@{offset}: record {s} committed but never appended")
            seen.add(s)
    lost = sorted(writer.appended - seen)
    if lost:
        problems.append(f"records of appends that exited 0 are not committed: {lost[:20]} ({len(lost)} in all)")
    return problems


class Daemon:
    """``seglog maintain`` through ``tests.maintenance.conftest.maintain_daemon``, SIGKILLed and started again
    (``restart``); ``lines`` holds what every life said."""

    def __init__(self, log_dir: Path, conf: Path, stack: contextlib.ExitStack) -> None:
        self.log_dir, self.conf, self.stack = log_dir, conf, stack
        self.lives = 0
        self.lines: list[str] = []
        self.start()

    def start(self) -> None:
        self.lives += 1
        self.proc, self.err = self.stack.enter_context(maintain_daemon(self.log_dir, self.conf))

    def kill(self, sig: int = signal.SIGKILL) -> int:
        self.proc.send_signal(sig)
        code = self.proc.wait(60)
        time.sleep(0.1)  # the pump thread reads what was left in the pipe
        with contextlib.suppress(queue.Empty):
            while True:
                self.lines.append(self.err.get_nowait())
        return code


def deploy_and_check(
    workdir: Path, seconds: float, seed: int, say: Callable[[str], None] = print, writer_kind: str = "append"
) -> list[str]:
    """Run the deployment for ``seconds`` of writes with chaos from ``seed``, let the consumers catch up,
    stop everything and return the problems found (empty: every invariant held)."""
    with contextlib.ExitStack() as stack:
        return _deploy_and_check(workdir, seconds, seed, say, writer_kind, stack)
    raise AssertionError("unreachable")  # pragma: no cover - mypy: ExitStack may swallow exceptions


def _deploy_and_check(
    workdir: Path, seconds: float, seed: int, say: Callable[[str], None], writer_kind: str, stack: contextlib.ExitStack
) -> list[str]:
    rng = random.Random(seed)
    log_dir = workdir / "logs"
    conf = write_conf(workdir / "seglog.toml")
    env = {**os.environ, "SEGLOG_CONF": str(conf)}  # every process reads the same settings
    subprocess.run(
        [*SEGLOG, "topic", "create", "--log-dir", str(log_dir), "--topic", TOPIC, "--partitions", str(PARTITIONS)],
        cwd=REPO, env=env, check=True, capture_output=True,
    )  # fmt: skip
    bootstrap = f"127.0.0.1:{free_port()}"  # a fixed port, so that clients find the server after its restart
    serves = [ServeProcess(log_dir, workdir / "serve-1.stderr", "--bind", bootstrap, env=env)]
    stack.callback(lambda: serves[-1].stop(signal.SIGKILL))
    daemon = Daemon(log_dir, conf, stack)
    recorder = Recorder(log_dir)
    recorder.start()
    stop, cg_restart, kp_pause = threading.Event(), threading.Event(), threading.Event()
    stack.callback(stop.set)
    cg, kp = ConsumerLog("confluent", group=True), ConsumerLog("kafka-python", group=True)
    threads = [
        threading.Thread(target=confluent_consumer, args=(bootstrap, cg, stop, cg_restart), daemon=True),
        threading.Thread(target=kafka_python_consumer, args=(bootstrap, kp, stop, kp_pause), daemon=True),
    ]
    for t in threads:
        t.start()
    kcat = Kcat(bootstrap, workdir)
    stack.callback(kcat.stop)
    writer = AppendWriter(log_dir, workdir, env, rng, kill_rate=0.3)
    run_args = [
        "run",
        "--log-dir",
        str(log_dir),
        "--checkpoint-location",
        str(workdir / "checkpoint"),
        "--topic",
        TOPIC,
    ]
    run_args += [
        "--partitions",
        str(PARTITIONS),
        "--rows-per-second",
        "40",
        "--trigger",
        "1 second",
        "--progress-interval",
        "5",
    ]
    job = Service("run", run_args, workdir, env, ready=None)
    next_job_kill = float("inf")
    if writer_kind == "append":
        writer.start()
    else:
        job.start()
        stack.callback(lambda: job.kill(signal.SIGKILL))
        next_job_kill = time.monotonic() + rng.uniform(20, 40)

    started = time.monotonic()
    serve_killed = cg_restarted = kp_paused = False
    next_daemon_kill = started + rng.uniform(3, 10)
    # Writes go on for ``seconds``, and until retention overtook the paused kafka-python (at most 60 s more).
    while time.monotonic() - started < seconds or kp_pause.is_set() and time.monotonic() - started < seconds + 60:
        now = time.monotonic()
        if now >= next_daemon_kill:
            daemon.kill()
            time.sleep(rng.uniform(0.1, 1.0))
            daemon.start()
            next_daemon_kill = time.monotonic() + rng.uniform(3, 10)
        if now >= next_job_kill:
            say("SIGKILL seglog run")
            job.kill()
            job.start()
            next_job_kill = time.monotonic() + rng.uniform(20, 40)
        if not cg_restarted and now - started > seconds * 0.3:
            cg_restarted = True
            cg_restart.set()
        if not kp_paused and now - started > seconds * 0.35:  # kafka-python lags until retention overtakes it
            kp_paused = True
            kp_pause.set()
        if kp_pause.is_set() and any(
            min(kp.positions().get(p, 0), recorder.next[p]) < max(recorder.starts[p]) for p in range(PARTITIONS)
        ):
            kp_pause.clear()
        if not serve_killed and now - started > seconds * 0.6:
            serve_killed = True
            say("SIGKILL serve")
            serves[-1].stop(signal.SIGKILL)
            serves.append(ServeProcess(log_dir, workdir / "serve-2.stderr", "--bind", bootstrap, env=env))
            kcat.restart()
        time.sleep(0.1)
    problems: list[str] = []
    if kp_pause.is_set():
        problems.append("retention never overtook the paused kafka-python consumer: that path went unchecked")
    kp_pause.clear()
    writer.stop.set()
    if writer_kind == "append":
        writer.join(30)
    elif job.kill(signal.SIGTERM) != 0:
        writer.failures.append(f"seglog run did not stop cleanly:\n{job.text()[-3000:]}")
    say(
        f"writes stopped: {writer.appends} appends, {writer.killed} SIGKILLed, "
        f"run lives {job.lives}, daemon lives {daemon.lives}"
    )

    problems += [f"append failed: {f}" for f in writer.failures]
    # Catch up: every consumer reaches every partition's high watermark.
    deadline = time.monotonic() + 60
    while True:
        recorder.poll()
        ends = dict(recorder.next)
        behind = {
            log.name: (log.positions(), ends)
            for log in (cg, kp, kcat.log())
            if any(log.positions().get(p, 0) < ends[p] for p in range(PARTITIONS) if ends[p] > 0)
        }
        if not behind:
            break
        if time.monotonic() > deadline:
            problems.append(f"consumers did not catch up: {behind}")
            break
        time.sleep(0.3)
    stop.set()
    for t in threads:
        t.join(30)
    kcat_err = kcat.stop()
    recorder.stop.set()
    recorder.join(10)
    if writer_kind == "append":
        problems += check_writes(writer, recorder)
    daemon.kill(signal.SIGTERM)
    if serves[-1].stop() != 0:
        problems.append("serve did not exit 0 on SIGTERM")

    kcat_log = kcat.log()
    for log in (cg, kp, kcat_log):
        problems += check_consumer(log, recorder, log_dir)
        count = {
            kind: sum(1 for e in log.events if e[0] == kind) for kind in ("rec", "life", "assign", "commit-failed")
        }
        resets = sum(1 for e in log.events if e[0] == "client" and "out of range" in str(e[1]).lower())
        say(f"{log.name}: {count} out-of-range resets {resets}")
    serve_text = "".join(s.log_text() for s in serves)
    for name, text in (("serve", serve_text), ("kcat", kcat_err), ("maintain", "".join(daemon.lines))):
        for line in text.splitlines():
            if "CORRUPT" in line.upper() or " ERROR " in line or "Traceback" in line or "request failed" in line:
                problems.append(f"{name}: {line}")
    for log in (cg, kp):
        problems += [
            f"{log.name}: client error {e[1]}" for e in log.events if e[0] == "error" and "CORRUPT" in str(e[1]).upper()
        ]
    missed = [f"recorder missed committed offsets {m} of {TOPIC}-{p}" for p, ms in recorder.missed.items() for m in ms]
    if writer_kind == "append":  # seglog run's catch-up batch after a restart may be retained for less than a poll
        problems += missed
    for line in missed:
        say(line)
    say(f"recorder: {sum(len(r) for r in recorder.records.values())} records, ends {recorder.next}, "
        f"log starts seen {[len(s) for s in recorder.starts.values()]}, read errors {recorder.errors[:3]}")  # fmt: skip

    verify = subprocess.run(
        [*SEGLOG, "describe", "--verify", "--log-dir", str(log_dir)], cwd=REPO, env=env, capture_output=True, text=True
    )
    if verify.returncode != 0:
        problems.append(f"describe --verify exit {verify.returncode}:\n{verify.stdout}{verify.stderr}")
    dry = subprocess.run(
        [*SEGLOG, "recover", "--dry-run", "--no-progress", "--log-dir", str(log_dir)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    if dry.returncode != 0 or "WOULD BE LOST" in dry.stdout:
        problems.append(f"recover --dry-run exit {dry.returncode}:\n{dry.stdout}{dry.stderr}")
    (workdir / "recover-dry-run.txt").write_text(dry.stdout + dry.stderr)
    return problems


def check_consumer(log: ConsumerLog, recorder: Recorder, log_dir: Path) -> list[str]:
    """What ``log`` received against what was committed: each record one the recorder read at its offset
    (same key, value, headers, timestamp); per partition strictly increasing offsets within a life, but
    for a group consumer's return, after an assignment, to an offset its group committed; a gap only
    to a log start offset (a reset after retention) over offsets retention removed since."""
    problems: list[str] = []
    end_starts = _final_log_starts(log_dir)
    committed: dict[int, set[int]] = {p: set() for p in range(PARTITIONS)}
    last: dict[int, int] = {}
    assigned_since: set[int] = set()
    count = 0
    for e in log.events:
        kind = e[0]
        if kind == "life":
            last, assigned_since = {}, set()
        elif kind == "assign":
            assigned_since |= set(e[1])  # type: ignore[arg-type]
        elif kind in ("commit", "commit-failed"):  # a failed commit may have reached the server all the same
            committed[int(e[1])].add(int(e[2]))  # type: ignore[call-overload]
        elif kind == "rec":
            count += 1
            p, o = int(e[1]), int(e[2])  # type: ignore[call-overload]
            want = recorder.records[p].get(o)
            got = (p, o, e[3], e[4], tuple(e[5]), e[6])  # type: ignore[arg-type]
            if want is None:
                if o >= end_starts.get(p, 0) or o >= recorder.next[p]:
                    problems.append(f"{log.name}: {TOPIC}-{p}@{o} was never committed: {got}")
            elif got != want:
                problems.append(f"{log.name}: {TOPIC}-{p}@{o} differs from what was committed: {got} != {want}")
            prev = last.get(p)
            expected_first = committed[p] | recorder.starts[p] if log.group else recorder.starts[p]
            if prev is None:
                if o not in expected_first:
                    problems.append(f"{log.name}: {TOPIC}-{p} started at {o}, not at a committed offset or log start")
            elif o <= prev:
                if not (log.group and p in assigned_since and o in committed[p]):
                    problems.append(f"{log.name}: {TOPIC}-{p}@{o} after {prev} (duplicate or out of order)")
            elif o > prev + 1:
                if o not in recorder.starts[p]:  # not where a reset after retention lands
                    problems.append(f"{log.name}: {TOPIC}-{p} skipped offsets {prev + 1}..{o - 1}")
            last[p] = o
            assigned_since.discard(p)
    if count == 0:
        problems.append(f"{log.name}: received nothing")
    return problems


def _final_log_starts(log_dir: Path) -> dict[int, int]:
    manager = LogManager(log_dir, load_settings(), read_only=True)
    try:
        return {p: log.log_start_offset for p in range(PARTITIONS) if (log := manager.get_log(TOPIC, p)) is not None}
    finally:
        manager.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--writer", choices=["append", "run"], default="append")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    problems = deploy_and_check(
        args.workdir, args.seconds, args.seed, say=lambda s: print(s, flush=True), writer_kind=args.writer
    )
    print("\n".join(problems) or "all invariants held")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
