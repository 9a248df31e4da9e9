"""A reader in another process survives every rewrite of the index files it has mapped.

Readers (``seglog read``, ``seglog serve``, the Spark reader) open partitions read-only and map
their ``.index``/``.timeindex`` files while a writer, the maintenance daemon or ``seglog recover``
opens the same partition and rebuilds or truncates those indexes. A file that shrank below a page
a reader had mapped killed the reader with SIGBUS, without a message. The readers here run in a
subprocess, and the test asserts on its exit status and its stderr.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from indexer.clock import MockClock
from indexer.config import LogConfig
from indexer.file_names import INDEX_TEMP_SUFFIX
from indexer.log import Log
from indexer.offset_index import OffsetIndex

REPO = Path(__file__).resolve().parents[2]
T0 = 1_700_000_000_000
WRITER = {"segment.bytes": 400, "index.interval.bytes": 100}  # one index entry per segment of 4 batches
SECONDS = 4.0

READER = """
    import sys, time
    from pathlib import Path
    from indexer.config import LogConfig
    from indexer.log import Log

    directory, seconds, end = Path(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
    config = LogConfig.from_mapping({"segment.bytes": 400})
    deadline, reads = time.monotonic() + seconds, 0
    print("reading", flush=True)
    while time.monotonic() < deadline:
        with Log.open(directory, config, read_only=True) as log:
            for _ in range(5):  # reads through the same mappings while the files are rewritten
                offsets = log.read_records(0).column("offset").to_pylist()
                assert offsets == list(range(end)), (len(offsets), end)
                reads += 1
    print("reads", reads)
"""


def start_reader(directory: Path, seconds: float, end: int) -> subprocess.Popen[str]:
    """The reader process, once it has started reading (imports done)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(READER), str(directory), str(seconds), str(end)],
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline() == "reading\n"
    return proc


def finished(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err


def written_partition(directory: Path, batches: int) -> int:
    """``batches`` appends of 3 records under ``WRITER``; returns the log end offset."""
    with Log.open(directory, LogConfig.from_mapping(WRITER), clock=MockClock(T0)) as log:
        for i in range(batches):
            log.append({"value": [b"%06d" % (3 * i + j) for j in range(3)], "timestamp": [T0 + i] * 3})
        log.update_high_watermark(log.log_end_offset)
        return log.log_end_offset


def test_a_reader_survives_recoveries_that_rebuild_its_mapped_indexes(tmp_path: Path) -> None:
    """Another process recovers the partition over and over (an open after an unclean shutdown, as
    the maintenance daemon's first open and ``seglog recover`` do: every index rebuilt). Every other
    recovery runs with the default ``index.interval.bytes`` (4096, as the daemon did beside a writer
    configured with 100), so the rebuilt indexes have fewer entries than the files the reader mapped:
    rebuilt in place, each ``.index`` shrank from 8 bytes to 0 under the reader's mapping, and its
    next lookup died of SIGBUS (exit status -7)."""
    directory = tmp_path / "t-0"
    end = written_partition(directory, 60)
    sparse = LogConfig.from_mapping({"segment.bytes": 400})
    reader = start_reader(directory, SECONDS, end)
    recoveries = 0
    try:
        while reader.poll() is None:
            Log.open(directory, sparse if recoveries % 2 else LogConfig.from_mapping(WRITER)).close()
            recoveries += 1
    finally:
        status, out, err = finished(reader)
    assert status == 0, (status, err[-3000:])
    assert err == "", err[-3000:]  # no warning either: a reader never sees a half-rebuilt index
    assert recoveries > 4 and int(out.split()[-1]) > 4, (recoveries, out)
    # The files are what a writer with the last recovery's settings writes: Kafka's bytes, no leftovers.
    assert not list(directory.glob(f"*{INDEX_TEMP_SUFFIX}"))
    assert {p.stat().st_size for p in directory.glob("*.index")} == {0 if recoveries % 2 == 0 else 8}


def test_a_reader_survives_the_writer_truncating_the_index_it_has_mapped(tmp_path: Path) -> None:
    """A writer cuts its index (``truncate_to``: an uncommitted tail cut at open, a failed append
    undone), then trims it on close or roll. A reader in another process that mapped the entries
    removed kept pages past the new end of the file: SIGBUS on its next lookup."""
    path = tmp_path / "00000000000000000000.index"
    writer = OffsetIndex(path, 0, 8 * 4096)
    for i in range(1, 2000):  # 4 pages of entries
        writer.append(i * 10, i * 100)
    writer.flush()
    script = """
        import sys, time
        from indexer.offset_index import OffsetIndex
        index = OffsetIndex(sys.argv[1], 0, writable=False)
        print(index.entries, flush=True)
        sys.stdin.readline()  # the writer has cut the file
        print(index.lookup(19_990).offset)
    """
    reader = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), str(path)],
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert reader.stdout is not None and reader.stdout.readline() == "1999\n"
    writer.truncate_to(15)
    writer.trim_to_valid_size()
    out, err = reader.communicate("cut\n", timeout=60)
    assert reader.returncode == 0, (reader.returncode, err[-3000:])
    assert out == "19990\n"  # the reader's snapshot of the file as it opened it
    assert path.stat().st_size == 8 and writer.lookup(10**6).offset == 10
    assert os.listdir(tmp_path) == [path.name]
    writer.close()


KILLED_BEFORE_THE_RENAME = """
    import os, signal, sys
    from indexer.config import LogConfig
    from indexer.log import Log

    rename = os.replace

    def killed_before_renaming_a_new_index(source, target):
        if str(source).endswith(".index.tmp"):
            os.kill(os.getpid(), signal.SIGKILL)
        rename(source, target)

    os.replace = killed_before_renaming_a_new_index
    Log.open(sys.argv[1], LogConfig.from_mapping({"segment.bytes": 400}))  # recovers: rebuilds every index
"""


def seglog(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "import sys; from seglog.cli import main; sys.exit(main())", *args],
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_new_index_file_left_by_a_killed_rebuild_is_reported_and_deleted_never_read(tmp_path: Path) -> None:
    """A process SIGKILLed while it rebuilt an index leaves ``<base>.index.tmp`` beside the index it was
    to replace: ``describe`` names it, ``recover --dry-run`` says it would delete it (and does not),
    ``recover`` and every writable open delete it, and no reader takes it for an index."""
    log_dir = tmp_path / "logs"
    directory = log_dir / "t-0"
    end = written_partition(directory, 20)
    killed = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(KILLED_BEFORE_THE_RENAME), str(directory)],
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert killed.returncode == -9, killed.stderr[-2000:]
    leftover = directory / f"{0:020d}.index{INDEX_TEMP_SUFFIX}"
    assert [p.name for p in directory.glob(f"*{INDEX_TEMP_SUFFIX}")] == [leftover.name]
    with Log.open(directory, LogConfig.from_mapping(WRITER), read_only=True) as reader:
        assert reader.read_records(0).column("offset").to_pylist() == list(range(end))
    described = seglog("describe", "--log-dir", str(log_dir), "--verify")
    assert described.returncode == 0, described.stderr
    assert f"unfinished index files: {leftover.name}" in described.stdout
    dry = seglog("recover", "--log-dir", str(log_dir), "--dry-run", "--json")
    assert "delete-unfinished-index-file" in dry.stdout and leftover.exists(), dry.stdout + dry.stderr
    done = seglog("recover", "--log-dir", str(log_dir), "--json")
    assert done.returncode == 0, done.stderr
    assert "delete-unfinished-index-file" in done.stdout and not leftover.exists()
    assert seglog("describe", "--log-dir", str(log_dir)).stdout.count("unfinished index files") == 0


CUT_UNDER_THE_SCAN = """
    import os, sys
    from pathlib import Path
    from indexer.records import _batch_scan
    from seglog.cli import main

    log_path = Path(sys.argv[1])
    kernel = _batch_scan.scan_entries

    def cut_by_a_writer(buf, start, end):  # a writer cuts its uncommitted tail while the tool walks the .log
        if end - start > 1_000_000 and log_path.stat().st_size > 100:  # a walk of the whole file
            os.truncate(log_path, 100)
        return kernel(buf, start, end)

    _batch_scan.scan_entries = cut_by_a_writer
    sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize(
    "command",
    [["describe", "--verify"], ["recover", "--dry-run"], ["dump"]],
    ids=["describe-verify", "recover-dry-run", "dump"],
)
def test_read_only_tools_survive_a_writer_cutting_the_log_they_scan(tmp_path: Path, command: list[str]) -> None:
    """``seglog describe``, ``recover --dry-run`` and ``dump`` take no lock and run beside writers. They
    walked the ``.log`` through a memory map: a writer cutting the file during the walk (its uncommitted
    tail at open, a torn tail its recovery cuts) killed them with SIGBUS (exit status -7). Here the file
    is cut to 100 bytes right before the walk; the tool ends with a report, whatever it says."""
    log_dir = tmp_path / "logs"
    with Log.open(log_dir / "t-0", LogConfig.from_mapping({"batch.size": 16 * 1024}), clock=MockClock(T0)) as log:
        log.append({"value": [b"x" * 4000] * 400})  # 1.6 MB: the walk reaches pages past the cut
        log.update_high_watermark(log.log_end_offset)
    log_path = log_dir / "t-0" / f"{0:020d}.log"
    where = [str(log_path)] if command == ["dump"] else ["--log-dir", str(log_dir)]
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CUT_UNDER_THE_SCAN), str(log_path), *command, *where],
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode in (0, 1, 3), (done.returncode, done.stderr[-3000:])
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert log_path.stat().st_size == 100  # the cut happened under the walk
