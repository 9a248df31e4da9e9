from __future__ import annotations

import errno
from pathlib import Path

import pytest

from indexer import errors
from indexer.errors import SeglogError, StorageError, storage_errors


def test_every_error_derives_from_seglog_error() -> None:
    classes = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, Exception)]
    assert len(classes) >= 15
    assert all(issubclass(c, SeglogError) for c in classes)


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EACCES, errno.EIO, errno.EMFILE, errno.ENOENT])
def test_os_errors_become_storage_errors_naming_the_path(tmp_path: Path, code: int) -> None:
    target = tmp_path / "00000000000000000000.log"
    with pytest.raises(StorageError) as info, storage_errors(target, "append to"):
        raise OSError(code, "boom")
    assert info.value.errno == code
    assert info.value.path == str(target)
    assert str(info.value) == f"Failed to append to {target}: boom"
    assert isinstance(info.value.__cause__, OSError)


def test_other_errors_pass_through(tmp_path: Path) -> None:
    with pytest.raises(KeyError), storage_errors(tmp_path, "read"):
        raise KeyError("x")


def test_a_rename_error_names_source_and_target(tmp_path: Path) -> None:
    source, target = tmp_path / "0.index", tmp_path / "missing" / "0.index.deleted"
    with pytest.raises(StorageError) as info, storage_errors(source, "rename", target=target):
        source.replace(target)
    assert info.value.errno == errno.ENOENT and info.value.path == str(source)
    assert str(info.value) == f"Failed to rename {source} to {target}: No such file or directory"
