"""Fixtures of the ``seglog serve`` tests: a real server process on a free loopback port."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

with warnings.catch_warnings():  # kafka-python 3 imports its protocol JSON with a deprecated API
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.protocol.consumer import FetchRequest

SEGLOG = [sys.executable, "-X", "faulthandler", "-c", "import sys; from seglog.cli import main; sys.exit(main())"]
_SERVING = re.compile(r"serving .* on 127\.0\.0\.1:(\d+) ")


class ServeProcess:
    """``seglog serve`` in a subprocess; ``bootstrap`` is its ``host:port``; ``env`` adds to its environment."""

    def __init__(self, log_dir: Path, stderr_path: Path, *extra: str, env: Mapping[str, str] | None = None) -> None:
        self.log_dir = log_dir
        self.stderr_path = stderr_path
        self._stderr = open(stderr_path, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [
                *SEGLOG,
                "serve",
                "--log-dir",
                str(log_dir),
                "--bind",
                "127.0.0.1:0",
                "-v",
                "--group-initial-rebalance-delay-ms",
                "200",
                *extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
            env={**os.environ, **env} if env else None,
        )
        deadline = time.monotonic() + 120  # a new checkout: numba compiles the read kernels first
        while time.monotonic() < deadline:
            found = _SERVING.search(stderr_path.read_text())
            if found:
                self.port = int(found.group(1))
                self.bootstrap = f"127.0.0.1:{self.port}"
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise AssertionError(f"seglog serve did not start:\n{stderr_path.read_text()}")

    def log_text(self) -> str:
        return self.stderr_path.read_text()

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._stderr.close()
        return self.proc.returncode


def fetch_request(
    version: int, limits: Mapping[int, int], *, max_bytes: int, fetch_offset: int = 0, topic_id: object = None
) -> FetchRequest:
    """A Fetch of topic ``t`` at ``version`` that does not wait and reads uncommitted: each partition of
    ``limits`` (partition -> its ``partition_max_bytes``) from ``fetch_offset``; ``topic_id`` for the
    versions that name topics by id."""
    topic = FetchRequest.FetchTopic(
        topic="t",
        partitions=[
            FetchRequest.FetchTopic.FetchPartition(partition=p, fetch_offset=fetch_offset, partition_max_bytes=limit)
            for p, limit in limits.items()
        ],
        **({} if topic_id is None else {"topic_id": topic_id}),
    )
    return FetchRequest(
        version=version, max_wait_ms=0, min_bytes=0, max_bytes=max_bytes, isolation_level=0, topics=[topic]
    )


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., ServeProcess]]:
    """Start servers with ``serve(log_dir, *extra_args, env=None)``; all are stopped at the end."""
    started: list[ServeProcess] = []

    def start(log_dir: Path, *extra: str, env: Mapping[str, str] | None = None) -> ServeProcess:
        server = ServeProcess(log_dir, tmp_path / f"serve-{len(started)}.stderr", *extra, env=env)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
    for server in started:  # a handler that raised is a bug, whatever the client did
        assert "request failed" not in server.log_text(), server.log_text()
