"""A writer process for the maintenance tests: holds one partition and appends to it.

Run as ``python -m tests.maintenance.writer_proc --help`` from the repository root. Record ``i``
(offset ``i``) has the value ``b"r<i>"``, so a test can check any surviving offset. After each
append the writer commits: fsync, high watermark to the log end, ``replication-offset-checkpoint``
and ``recovery-point-offset-checkpoint`` written; then it prints ``COMMITTED <offset>`` (flushed).

``--appends 0`` appends forever (until killed); otherwise it closes cleanly after that many and,
with ``--hold``, keeps the partition (and its lock) until stdin is closed. ``--tail N`` then appends
N more records, flushed but never committed (what a writer killed mid-batch leaves above the high
watermark), and prints ``TAIL <log end offset>``. It prints ``READY`` once the partition is open.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from indexer.checkpoint import update_checkpoint
from indexer.config import LogConfig
from indexer.file_names import (
    LOG_DIR_LOCK_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
)
from indexer.log import Log


def values_for(start: int, count: int) -> list[bytes]:
    return [b"r%d" % i for i in range(start, start + count)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--log-dir", type=Path, required=True)
    parser.add_argument("--topic", default="t")
    parser.add_argument("--partition", type=int, default=0)
    parser.add_argument("--appends", type=int, default=0, help="0 = forever")
    parser.add_argument("--records", type=int, default=5, help="records per append")
    parser.add_argument("--segment-bytes", type=int, default=2000)
    parser.add_argument("--tail", type=int, default=0, help="uncommitted records appended after the commits")
    parser.add_argument("--hold", action="store_true", help="keep the partition open until stdin closes")
    args = parser.parse_args(argv)
    config = LogConfig.from_mapping(
        {"segment.bytes": args.segment_bytes, "index.interval.bytes": 200, "segment.index.bytes": 4096}
    )
    tp = (args.topic, args.partition)
    log = Log.open(args.log_dir / f"{args.topic}-{args.partition}", config)  # waits while the daemon borrows it
    print("READY", flush=True)
    done = 0
    while args.appends == 0 or done < args.appends:
        start = log.log_end_offset
        log.append({"value": values_for(start, args.records)})
        log.flush()
        log.update_high_watermark(log.log_end_offset)
        lock = args.log_dir / LOG_DIR_LOCK_FILE
        update_checkpoint(args.log_dir / REPLICATION_OFFSET_CHECKPOINT_FILE, {tp: log.high_watermark}, lock_path=lock)
        update_checkpoint(args.log_dir / RECOVERY_POINT_CHECKPOINT_FILE, {tp: log.recovery_point}, lock_path=lock)
        print(f"COMMITTED {log.high_watermark}", flush=True)
        done += 1
    if args.tail:
        log.append({"value": values_for(log.log_end_offset, args.tail)})
        log.flush()
        print(f"TAIL {log.log_end_offset}", flush=True)
    if args.hold:
        sys.stdin.read()
    log.close()
    print("CLOSED", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
