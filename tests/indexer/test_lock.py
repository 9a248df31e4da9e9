"""Tests for indexer/lock.py: flock-based writer locks within one process and across processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from indexer.config import LogConfig
from indexer.errors import LogLockedError, StorageError
from indexer.lock import BORROWER_WAIT_S, MAINTENANCE_ROLE, FileLock, left_by_writer
from indexer.log import Log
from tests.indexer.helpers import start_lock_holder


def test_acquire_writes_holder_and_release_clears_it(tmp_path: Path) -> None:
    lock = FileLock(tmp_path / ".seglog.lock")
    lock.acquire()
    assert lock.locked
    assert lock.holder().startswith(f"pid={os.getpid()} host=")
    lock.release()
    assert not lock.locked
    assert (tmp_path / ".seglog.lock").read_text() == ""
    lock.release()  # idempotent


def test_second_lock_in_same_process_conflicts(tmp_path: Path) -> None:
    path = tmp_path / ".seglog.lock"
    with FileLock(path):
        with pytest.raises(LogLockedError) as info:
            FileLock(path).acquire()
        assert info.value.path == str(path)
        assert str(info.value).startswith(f"partition {tmp_path} is locked by pid {os.getpid()} (host ")
        assert "this process" in str(info.value)
    with FileLock(path):  # free again after the with block
        pass


def test_acquiring_twice_on_one_object_is_misuse(tmp_path: Path) -> None:
    lock = FileLock(tmp_path / "l")
    with lock:
        with pytest.raises(RuntimeError):
            lock.acquire()


def test_waiting_acquire_gets_the_lock_once_released(tmp_path: Path) -> None:
    path = tmp_path / ".lock"
    first = FileLock(path, what="log directory x")
    first.acquire()
    threading.Timer(0.05, first.release).start()
    second = FileLock(path)
    second.acquire(timeout=5)
    assert second.locked
    second.release()


def _opened_by_this_process(path: Path) -> int:
    """How many of this process's file descriptors are open on ``path`` (its current file)."""
    return sum(1 for fd in Path("/proc/self/fd").iterdir() if os.path.realpath(fd) == str(path))


def test_a_lock_file_removed_by_its_holder_is_never_held_twice(tmp_path: Path) -> None:
    """A waiter that opened the file before its holder removed it (``release(remove=True)``) locked the
    removed file: a newcomer then created a new file and held it at the same time."""
    path = tmp_path / "seglog-sink.s.lock"
    first = FileLock(path, what="sink s")
    first.acquire()
    second = FileLock(path, what="sink s")
    waiter = threading.Thread(target=second.acquire, kwargs={"timeout": 30})
    waiter.start()
    while _opened_by_this_process(path) < 2:  # the waiter has the file open and polls its lock
        time.sleep(0.001)
    first.release(remove=True)
    waiter.join()
    assert second.locked and path.exists()
    with pytest.raises(LogLockedError, match="^sink s is locked by pid"):
        FileLock(path, what="sink s").acquire()
    second.release(remove=True)
    assert not path.exists()


def test_waiting_acquire_times_out_with_custom_name(tmp_path: Path) -> None:
    path = tmp_path / ".lock"
    with FileLock(path):
        start = time.monotonic()
        with pytest.raises(LogLockedError, match=r"^log directory d is locked by pid \d+"):
            FileLock(path, what="log directory d").acquire(timeout=0.05)
        assert time.monotonic() - start >= 0.05


def test_lock_held_by_other_process_names_its_pid(tmp_path: Path) -> None:
    path = tmp_path / ".seglog.lock"
    proc = start_lock_holder(path)
    try:
        with pytest.raises(LogLockedError, match=rf"is locked by pid {proc.pid} \(host "):
            FileLock(path).acquire()
    finally:
        proc.kill()
        proc.wait()


def test_a_holder_that_never_appends_leaves_no_dead_writer_behind(tmp_path: Path) -> None:
    """A maintenance holder is named with its role; SIGKILLed, its line stays (the next open recovers)
    but is no dead writer's, unlike a writer's line."""
    path = tmp_path / ".seglog.lock"
    proc = start_lock_holder(path, MAINTENANCE_ROLE)
    try:
        with pytest.raises(LogLockedError, match=rf"is locked by pid {proc.pid} \(host .*, maintenance\)"):
            FileLock(path, role=MAINTENANCE_ROLE).acquire()  # a borrower does not wait for another
    finally:
        proc.kill()
        proc.wait()
    assert FileLock(path).holder() and not left_by_writer(FileLock(path).holder())
    writer = start_lock_holder(path)
    writer.kill()
    writer.wait()
    assert left_by_writer(FileLock(path).holder())
    assert not left_by_writer("")


def test_lock_dies_with_sigkilled_holder(tmp_path: Path) -> None:
    path = tmp_path / ".seglog.lock"
    proc = start_lock_holder(path)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    lock = FileLock(path)
    lock.acquire()  # no stale lock: the kernel dropped it with the process
    assert lock.holder().startswith(f"pid={os.getpid()} ")
    lock.release()


def test_lock_is_not_inherited_by_child_processes(tmp_path: Path) -> None:
    path = tmp_path / ".seglog.lock"
    lock = FileLock(path)
    lock.acquire()
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(30)"],
        close_fds=False,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "up"  # exec'd: close-on-exec descriptors are gone
        # Close our descriptor without LOCK_UN: the lock survives only if the child shares the open file.
        assert lock._fd is not None
        os.close(lock._fd)
        lock._fd = None
        FileLock(path).acquire()
    finally:
        child.kill()
        child.wait()


def test_unopenable_lock_file_is_a_storage_error(tmp_path: Path) -> None:
    with pytest.raises(StorageError) as info:
        FileLock(tmp_path / "missing-dir" / ".lock").acquire()
    assert info.value.path == str(tmp_path / "missing-dir" / ".lock")
    assert not isinstance(info.value, LogLockedError)


def test_a_writer_waits_for_the_maintenance_daemon_to_give_a_partition_back(tmp_path: Path) -> None:
    """A writer (re)started while `seglog maintain` borrows one of its partitions for one partition's
    work used to fail at once with LogLockedError (`seglog run` exited 1 after a crash in about half
    of the restarts beside a daemon); it waits for the borrower to give the partition back. A writer
    holding the partition still fails at once: it does not give it back."""
    directory = tmp_path / "t-0"
    directory.mkdir()
    lock_path = directory / ".seglog.lock"
    config = LogConfig.from_mapping({})
    borrower = start_lock_holder(lock_path, MAINTENANCE_ROLE, 1.0)
    try:
        with Log.open(directory, config) as log:
            opened = time.monotonic()
            log.append({"value": [b"x"]})
        assert borrower.stdout is not None
        released = float(borrower.stdout.readline().split()[1])
        # Opened after the borrower let go, and not after a full BORROWER_WAIT_S. (Not timed against
        # the 1 s hold: that starts before this process reads "locked", so under load it can be over.)
        assert released < opened < released + BORROWER_WAIT_S / 2
    finally:
        borrower.kill()
        borrower.wait()
    writer = start_lock_holder(lock_path)
    try:
        start = time.monotonic()
        with pytest.raises(LogLockedError, match=rf"is locked by pid {writer.pid} \(host "):
            Log.open(directory, config)
        assert time.monotonic() - start < BORROWER_WAIT_S / 2  # at once, not after waiting as for a borrower
    finally:
        writer.kill()
        writer.wait()
