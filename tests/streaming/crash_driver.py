"""A Spark driver that runs the main job on a file source and can SIGKILL itself mid-batch.

Run as ``python -m tests.streaming.crash_driver --help`` (from the repository root). The crash test
starts it as a subprocess, lets it die at a chosen point of a chosen micro-batch, restarts it, and
finally lets it finish; the log must then hold every input row exactly once.

Kill points (``--kill-phase``), all inside micro-batch ``--kill-batch``:

* ``append``: after the first append of the batch's encoded pieces returns (others may be half-written);
* ``flush``: after every partition is fsynced, before the commit record;
* ``commit``: after the commit record, before the high watermarks are published;
* ``publish``: after publishing, before Spark writes ``commits/<batch>``;
* ``none``: run to the end (``availableNow``) and exit 0.

Every batch start is printed as ``BATCH <id>`` (flushed) so a test can also kill at a random time.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import Any

PHASES = ("append", "flush", "commit", "publish", "none")


def _die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def kill_after(kill_batch: int, write_method: str, target: tuple[Any, str] | None) -> None:
    """Patch ``SegmentLogSink.<write_method>`` (called ``(self, data, batch_id, query_id)`` once a batch) to
    print ``BATCH <id>``, and ``getattr(*target)`` to SIGKILL this process when it returns in batch
    ``kill_batch`` (``target`` None: never)."""
    from streaming.sink import SegmentLogSink

    current = {"batch": -1}
    original_write = getattr(SegmentLogSink, write_method)

    def write(self: SegmentLogSink, data: Any, batch_id: int, query_id: str) -> Any:
        current["batch"] = batch_id
        print(f"BATCH {batch_id}", flush=True)
        return original_write(self, data, batch_id, query_id)

    setattr(SegmentLogSink, write_method, write)
    if target is None:
        return
    owner, name = target
    original = getattr(owner, name)

    def patched(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        if current["batch"] == kill_batch:
            _die()
        return result

    setattr(owner, name, patched)


def arm(kill_batch: int, phase: str) -> None:
    """Patch the sink (and Log.append_encoded) to SIGKILL this process at ``phase`` of batch ``kill_batch``."""
    from indexer.log import Log
    from streaming.sink import SegmentLogSink

    targets: dict[str, tuple[Any, str] | None] = {
        "append": (Log, "append_encoded"),
        "flush": (SegmentLogSink, "_write_all"),
        "commit": (SegmentLogSink, "_commit"),
        "publish": (SegmentLogSink, "_publish"),
        "none": None,
    }
    kill_after(kill_batch, "_write", targets[phase])


def start_available_now(df: Any, sink: Any, checkpoint: str) -> Any:
    """Start streaming ``df`` into ``sink`` (a ``foreachBatch`` function) until its backlog is read."""
    return df.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint).trigger(availableNow=True).start()


def driver_parser(doc: str | None, phases: tuple[str, ...], *, json_input: bool) -> argparse.ArgumentParser:
    """The options the test drivers share: where to write, where to kill themselves and, with ``json_input``,
    the JSON files to stream, the topic's partitions and Kafka configuration overrides."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--log-dir", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--kill-batch", type=int, default=-1)
    parser.add_argument("--kill-phase", choices=phases, default="none")
    if json_input:
        parser.add_argument("--input", required=True, help="directory of JSON files with key/value columns")
        parser.add_argument("--partitions", type=int, default=3)
        parser.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = driver_parser(__doc__, PHASES, json_input=True)
    parser.add_argument("--files-per-batch", type=int, default=1)
    args = parser.parse_args(argv)

    from indexer.config import load_settings, parse_overrides
    from streaming.job import JobSpec, run_job
    from tests.spark_session import TEST_SPARK_CONF

    arm(args.kill_batch, args.kill_phase)
    settings = load_settings(overrides=parse_overrides(args.config))
    spec = JobSpec(
        log_dir=Path(args.log_dir),
        checkpoint_location=args.checkpoint,
        topic="crash",
        num_partitions=args.partitions,
        source="files",
        input_path=args.input,
        input_format="json",
        max_files_per_trigger=args.files_per_batch,
        available_now=True,
        progress_interval_s=3600,
        spark_conf=TEST_SPARK_CONF,
    )
    summary = run_job(spec, settings)
    print(f"DONE batches={summary.batches} skipped={summary.skipped_batches} rows={summary.rows}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
