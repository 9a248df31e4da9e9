"""A Spark driver streaming JSON files into ``SegmentLogSink`` with executor writes, that can SIGKILL
its executors' JVMs at random moments and itself at a chosen point of the protocol.

Run as ``python -m tests.streaming.cluster_driver --help`` from the repository root. The executor
crash test (``test_executor_crash.py``) starts it as a subprocess, on ``local-cluster[2,1,1024]``
(two executor JVMs with their own Python workers), and checks the log afterwards.

``--speculation``: Spark runs speculative copies of slow tasks eagerly.

``--kill-executors N``: a thread SIGKILLs one of the application's executor JVMs N times, each time
either while a partition is being written (a fence in state ``writing``) or at a random moment
(``--seed``); the local cluster's workers start replacement executors and Spark retries the tasks.
Each kill is printed as ``KILLED <pid>``.

``--kill-phase`` (in micro-batch ``--kill-batch``), the driver's own crash windows:

* ``job``: after the executors wrote every partition, before the commit record;
* ``commit``: after the commit record, before the high watermarks are published;
* ``publish``: after publishing, before Spark writes ``commits/<batch>``.

Every batch start is printed as ``BATCH <id>`` (flushed) so a test can also kill at a random time.
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from pathlib import Path
from typing import Any

from tests.streaming.crash_driver import driver_parser, kill_after, start_available_now

PHASES = ("job", "commit", "publish", "none")


def executor_pids(app_id: str) -> list[int]:
    """Pids of the JVMs running executors of Spark application ``app_id`` on this machine."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"org.apache.spark.executor.CoarseGrainedExecutorBackend" in cmdline and app_id.encode() in cmdline:
            pids.append(int(entry))
    return pids


def _writing(log_dir: Path) -> bool:
    """Whether some partition's fence says an attempt is writing it now."""
    for fence in log_dir.glob("*/.seglog-sink.*.fence"):
        try:
            if json.loads(fence.read_bytes()).get("state") == "writing":
                return True
        except (OSError, ValueError):
            continue
    return False


def kill_executors(app_id: str, log_dir: Path, kills: int, rng: random.Random, stop: threading.Event) -> None:
    """SIGKILL an executor JVM ``kills`` times: half of them while a partition is being written."""
    for k in range(kills):
        deadline = time.monotonic() + rng.uniform(1.0, 4.0)
        while not stop.is_set() and time.monotonic() < deadline:
            if k % 2 == 0 and _writing(log_dir):
                break
            time.sleep(0.002)
        pids = executor_pids(app_id)
        while not pids and not stop.wait(0.05):  # none yet: still starting (a loaded machine), or replaced
            pids = executor_pids(app_id)
        if stop.is_set():
            return
        pid = rng.choice(pids)
        try:
            os.kill(pid, signal.SIGKILL)
            print(f"KILLED {pid}", flush=True)
        except ProcessLookupError:
            pass
        time.sleep(rng.uniform(0.5, 2.0))  # let the cluster start a replacement before the next kill


def arm(kill_batch: int, phase: str) -> None:
    """Patch the sink to print each batch and SIGKILL this process at ``phase`` of batch ``kill_batch``."""
    from streaming import sink as sink_module
    from streaming.sink import SegmentLogSink

    targets: dict[str, tuple[Any, str] | None] = {
        "job": (sink_module, "run_write_job"),
        "commit": (SegmentLogSink, "_commit"),
        "publish": (SegmentLogSink, "_publish_unowned"),
        "none": None,
    }
    kill_after(kill_batch, "_write_on_executors", targets[phase])


def main(argv: list[str] | None = None) -> int:
    parser = driver_parser(__doc__, PHASES, json_input=True)
    parser.add_argument("--master", default="local-cluster[2,1,1024]")
    parser.add_argument("--kill-executors", type=int, default=0)
    parser.add_argument("--speculation", action="store_true", help="speculative copies of slow tasks, eagerly")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    from indexer.config import load_settings, parse_overrides
    from streaming.session import build_spark_session
    from streaming.sink import SegmentLogSink
    from tests.spark_session import TEST_JVM_OPTIONS, TEST_SPARK_CONF

    arm(args.kill_batch, args.kill_phase)
    conf = {
        **TEST_SPARK_CONF,
        "spark.task.maxFailures": "20",
        "spark.executor.memory": "512m",
        "spark.executor.extraJavaOptions": TEST_JVM_OPTIONS,
    }
    if args.speculation:  # a copy of any task running longer than the others so far, after 200 ms
        conf.update(
            {
                "spark.speculation": "true",
                "spark.speculation.interval": "100ms",
                "spark.speculation.quantile": "0.3",
                "spark.speculation.multiplier": "1.0",
                "spark.speculation.minTaskRuntime": "200ms",
            }
        )
    spark = build_spark_session(args.master, "seglog-cluster-driver", conf)
    log_dir = Path(args.log_dir)
    sink = SegmentLogSink(
        log_dir,
        topic="crash",
        num_partitions=args.partitions,
        writes="executors",
        settings=load_settings(overrides=parse_overrides(args.config)),
        checkpoint_location=args.checkpoint,
    )
    stop = threading.Event()
    killer = threading.Thread(
        target=kill_executors,
        daemon=True,
        args=(spark.sparkContext.applicationId, log_dir, args.kill_executors, random.Random(args.seed), stop),
    )
    df = spark.readStream.schema("key string, value string").option("maxFilesPerTrigger", 1).json(args.input)
    query = start_available_now(df, sink, args.checkpoint)
    killer.start()
    query.awaitTermination()
    stop.set()
    killer.join()
    sink.close()
    written = [b for b in sink.history if not b.skipped]
    print(f"DONE batches={len(written)} skipped={len(sink.history) - len(written)}", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
