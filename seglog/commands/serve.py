"""Serve a log directory over Kafka's protocol, read-only: any Kafka consumer can read it.

Kafka consumers (Java, librdkafka/kcat/confluent-kafka, kafka-python, ...) connect with
``bootstrap.servers=HOST:PORT`` and consume what the writer committed (up to each partition's high
watermark, from ``replication-offset-checkpoint``), with consumer groups whose committed offsets are
kept in ``group-offsets-checkpoint`` in the log directory (or ``--group-offsets-dir``; they never
expire: ``seglog groups`` lists and deletes them). It runs beside a live writer (``seglog run``, the
sink) and the maintenance daemon and takes none of their locks; new commits, rolls and retention are
picked up as they happen. Produce and topic changes are refused with Kafka's authorization errors.
Started before its log directory exists (before the writer that creates it), it says so once and
serves the topics once they appear, as ``seglog maintain`` does.

WARNING: there is no authentication and no TLS. It binds to 127.0.0.1 by default; bind elsewhere
(``--bind 0.0.0.0:9092``) only on a network where everyone may read every topic. Details:
docs/serve.md.

examples:
  seglog serve --log-dir data/logs
  seglog serve --log-dir data/logs --bind 127.0.0.1:19092 -v
  seglog serve --log-dir data/logs --brokers 4     # nodes on ports 9092-9095, partitions fetched in parallel
  kcat -b 127.0.0.1:9092 -C -t events -o beginning -e
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
import signal
import sys
from pathlib import Path

from indexer.limits import INT32_MAX
from indexer.stop_signals import stop_signals
from seglog.cli import (
    add_log_config_arguments,
    existing_directory,
    integer_in,
    log_dir_from_args,
    settings_from_args,
)

SEGLOG_MAIN = "import sys; from seglog.cli import main; sys.exit(main())"  # ``python -c`` this: the CLI
# The line a server logs (with -v) once it listens on a loopback port: Server.start's.
MAX_PORT = 65535
_LISTENING = re.compile(r"serving .* on 127\.0\.0\.1:(\d+) ")


def loopback_command(log_dir: Path, *options: str) -> list[str]:
    """The command line of ``seglog serve`` over ``log_dir`` in a subprocess of this Python, on a free
    loopback port and with ``-v``, so that its stderr says which port (:func:`listening_port`): how
    benchmarks and tests start a real server."""
    serve = ["serve", "--log-dir", str(log_dir), "--bind", "127.0.0.1:0", "-v", *options]
    return [sys.executable, "-c", SEGLOG_MAIN, *serve]


def listening_port(stderr: str) -> int | None:
    """The port a server started by :func:`loopback_command` listens on, from what it wrote to stderr so
    far (None while it has not said)."""
    found = _LISTENING.search(stderr)
    return int(found.group(1)) if found else None


def _bind(text: str) -> tuple[str, int]:
    """argparse type: ``HOST:PORT`` (``[::1]:9092`` for IPv6; ``:PORT`` for 127.0.0.1), the port 0..65535
    (0: a free one)."""
    host, sep, port = text.rpartition(":")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT (such as 127.0.0.1:9092), got {text!r}")
    if not (port.isascii() and port.isdigit() and int(port) <= MAX_PORT):
        raise argparse.ArgumentTypeError(
            f"the port must be 0..{MAX_PORT}, got {int(port) if port.isascii() and port.isdigit() else repr(port)}"
        )
    return host.strip("[]") or "127.0.0.1", int(port)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``seglog serve``."""
    parser.add_argument("--log-dir", required=True, metavar="DIR", help="the log directory to serve")
    parser.add_argument(
        "--bind",
        type=_bind,
        default=("127.0.0.1", 9092),
        metavar="HOST:PORT",
        help="where to listen (default 127.0.0.1:9092; no authentication, see the warning)",
    )
    parser.add_argument(
        "--advertised-host", metavar="HOST", help="host name given to clients in metadata (default: the bound host)"
    )
    parser.add_argument(
        "--group-offsets-dir",
        metavar="DIR",
        help="where group offsets are kept (default: the log directory; use this when it is not writable)",
    )
    parser.add_argument(
        "--group-initial-rebalance-delay-ms",
        type=integer_in(0, INT32_MAX),
        default=3000,
        metavar="MS",
        help="group.initial.rebalance.delay.ms: how long a new group waits for more members (default 3000)",
    )
    parser.add_argument(
        "--socket-request-max-bytes",
        type=integer_in(1, INT32_MAX),
        default=1024 * 1024,
        metavar="N",
        help="socket.request.max.bytes: larger requests close their connection (default 1048576)",
    )
    parser.add_argument(
        "--brokers",
        type=integer_in(1, MAX_PORT),
        default=1,
        metavar="N",
        help="present N broker nodes, node i on PORT+i, leading the partitions in turn, so that a consumer "
        "fetches from N connections at once (default 1)",
    )
    parser.add_argument(
        "--poll-ms",
        type=integer_in(1, INT32_MAX),
        default=10,
        metavar="MS",
        help="how often the writer's checkpoints are checked for new commits (default 10)",
    )
    add_log_config_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Serve until SIGINT, SIGTERM or SIGHUP (unless ignored at the start: nohup); 0 after a clean stop."""
    from seglog.serve.server import ServeOptions, serve_forever

    log_dir = log_dir_from_args(args, must_exist=False)  # a service waits for it (serve_forever says so)
    host, port = args.bind
    options = ServeOptions(
        host=host,
        port=port,
        advertised_host=args.advertised_host,
        group_offsets_dir=existing_directory(args.group_offsets_dir, "group offsets directory")
        if args.group_offsets_dir
        else None,
        max_request_bytes=args.socket_request_max_bytes,
        group_initial_rebalance_delay_ms=args.group_initial_rebalance_delay_ms,
        poll_ms=args.poll_ms,
        brokers=args.brokers,
    )
    settings = settings_from_args(args)
    said = logging.getLogger("seglog.serve.server")
    if said.getEffectiveLevel() > logging.INFO:
        said.setLevel(logging.INFO)  # where it listens (port 0: which port) is worth a line even without -v

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def on_signal(sig: signal.Signals) -> None:
            said.info("received %s, stopping", sig.name)
            stop.set()

        for sig in stop_signals():  # SIGHUP too, unless ignored at the start (nohup)
            loop.add_signal_handler(sig, on_signal, sig)
        await serve_forever(log_dir, settings, options, stop)

    asyncio.run(main())
    return 0
