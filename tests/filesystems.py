"""Real small file systems for the tests of full and read-only disks (fixture ``tiny_fs`` in
``tests/conftest.py``): a tmpfs of a few hundred KiB that a filler file makes full, where writes fail
with a real ``ENOSPC`` and pre-allocated (sparse) files get no more blocks, as on a full disk."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


class TinyFs:
    """A tmpfs mounted at ``path``; ``fill()`` takes its free space, ``free()`` gives it back."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.filler = path / "filler"

    def available(self) -> int:
        """Free bytes (whole pages)."""
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize

    def fill(self, leave: int = 0) -> None:
        """Write a filler file that leaves ``leave`` bytes (rounded down to pages) free."""
        with open(self.filler, "ab") as f:
            f.write(b"\0" * max(self.available() - leave, 0))
        assert self.available() <= leave, self.available()

    def free(self) -> None:
        """Delete the filler file."""
        self.filler.unlink(missing_ok=True)

    def remount(self, mode: str) -> None:
        """``mode`` "ro" or "rw"."""
        subprocess.run(["mount", "-o", f"remount,{mode}", str(self.path)], check=True)


def mount_tiny_fs(path: Path, size: str) -> TinyFs:
    """Mount a tmpfs of ``size`` (``mount``'s syntax, e.g. ``512k``) at ``path``; skip the test
    when mounting is not permitted (not root, or a container without ``CAP_SYS_ADMIN``)."""
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here: {done.stderr.decode().strip()}")
    return TinyFs(path)


def unmount(fs: TinyFs) -> None:
    subprocess.run(["umount", "-l", str(fs.path)], check=True)


@contextmanager
def read_only_view(directory: Path, mount_point: Path) -> Iterator[Path]:
    """``directory`` seen at ``mount_point`` through a read-only bind mount (root ignores file
    permissions, so a ``chmod`` would not make anything read-only); skips the test where bind mounts
    are not permitted."""
    mount_point.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "--bind", "-o", "ro", str(directory), str(mount_point)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"read-only bind mounts are not permitted here: {done.stderr.decode().strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=True)
