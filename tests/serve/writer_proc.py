"""A writer beside ``seglog serve`` (run as a subprocess by test_tail.py): appends batches to
``tail-0`` of LOG_DIR, each one visible for a while uncommitted, then commits it the way the sink does
(high watermark, then ``replication-offset-checkpoint``), rolling small segments and applying
``retention.bytes`` as it goes (the maintenance daemon's job, done here to keep the test short).

Usage: python writer_proc.py LOG_DIR BATCHES COMMITS_FILE GO_FILE

COMMITS_FILE gets ``<batch> <time.time() before publishing>`` per commit. Batch 0 is committed at once;
the rest wait for GO_FILE to exist. A last batch is appended and never committed.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from indexer.config import load_settings
from indexer.log_manager import LogManager

RECORDS_PER_BATCH = 20
UNCOMMITTED_S = 0.03


def main() -> None:
    log_dir, batches, commits_path, go = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])
    settings = load_settings(
        overrides={"segment.bytes": "4096", "retention.bytes": "12288", "file.delete.delay.ms": "0"}
    )
    with LogManager(log_dir, settings) as manager, commits_path.open("w") as commits:
        log = manager.get_or_create_log("tail", 0)
        for batch in range(batches + 1):
            log.append(
                {
                    "key": [b"b%d" % batch] * RECORDS_PER_BATCH,
                    "value": [b"batch %d record %d " % (batch, i) * 4 for i in range(RECORDS_PER_BATCH)],
                }
            )
            log.flush()
            if batch == batches:
                break  # the last batch stays uncommitted
            time.sleep(UNCOMMITTED_S)
            published = time.time()
            log.update_high_watermark(log.log_end_offset)
            manager.checkpoint_high_watermarks()
            commits.write(f"{batch} {published}\n")
            commits.flush()
            if batch % 5 == 4:
                log.delete_old_segments()
                log.delete_pending_files()
                manager.checkpoint_log_start_offsets()
            while batch == 0 and not go.exists():
                time.sleep(0.01)
        time.sleep(1.5)  # let the server see the uncommitted batch on disk before we close


if __name__ == "__main__":
    main()
