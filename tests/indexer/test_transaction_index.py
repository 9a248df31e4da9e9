"""TransactionIndex (``.txnindex``) and AbortedTxn: Kafka's TransactionIndexTest cases, Appendix B
bytes, the version-byte quirk and read-only opening."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from indexer.errors import CorruptIndexError, StorageError
from indexer.transaction_index import ABORTED_TXN_SIZE, AbortedTxn, TransactionIndex, TxnIndexSearchResult

TXNS = [
    AbortedTxn(0, 0, 10, 11),
    AbortedTxn(1, 5, 15, 13),
    AbortedTxn(2, 18, 35, 25),
    AbortedTxn(3, 32, 50, 40),
]


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "00000000000000000000.txnindex"


@pytest.fixture
def index(path: Path):
    idx = TransactionIndex(path, 0)
    yield idx
    idx.close()


def append_all(idx: TransactionIndex, txns: list[AbortedTxn]) -> None:
    for txn in txns:
        idx.append(txn)


def test_appendix_b_bytes() -> None:
    txn = AbortedTxn(producer_id=983493, first_offset=137, last_offset=299, last_stable_offset=200)
    data = txn.to_bytes()
    assert data == bytes.fromhex("0000 00000000000f01c5 0000000000000089 000000000000012b 00000000000000c8")
    assert len(data) == ABORTED_TXN_SIZE
    assert AbortedTxn.from_bytes(data) == txn
    assert txn.version == 0


def test_version_is_read_from_byte_zero_only() -> None:
    record = bytearray(AbortedTxn(1, 2, 3, 4).to_bytes())
    record[1] = 7  # low byte of the int16: ignored, as Kafka reads only byte 0
    assert AbortedTxn.from_bytes(bytes(record)).version == 0
    record[0] = 0xFF
    assert AbortedTxn.from_bytes(bytes(record)).version == -1
    with pytest.raises(ValueError, match="34 bytes"):
        AbortedTxn.from_bytes(bytes(33))


def test_file_is_not_created_until_first_append(path: Path) -> None:
    idx = TransactionIndex(path, 0)
    assert not path.exists()
    idx.reset()
    idx.flush()
    assert idx.collect_aborted_txns(0, 100) == TxnIndexSearchResult([], False)
    assert idx.all_aborted_txns() == [] and idx.is_empty()
    idx.sanity_check()
    idx.truncate_to(0)
    idx.close()
    assert not path.exists()
    idx.append(AbortedTxn(0, 0, 10, 2))
    assert path.stat().st_size == ABORTED_TXN_SIZE
    assert not idx.is_empty()
    idx.close()


def test_position_set_correctly_when_reopened(index: TransactionIndex, path: Path) -> None:
    append_all(index, TXNS)
    index.close()
    reopened = TransactionIndex(path, 0)
    another = AbortedTxn(3, 50, 60, 55)
    reopened.append(another)
    assert reopened.all_aborted_txns() == [*TXNS, another]
    reopened.close()


def test_first_append_after_reopen_is_unchecked(index: TransactionIndex, path: Path) -> None:
    append_all(index, TXNS)
    index.close()
    with TransactionIndex(path, 0) as reopened:
        reopened.append(AbortedTxn(9, 0, 1, 1))  # last offset 1 < 50: Kafka forgets lastOffset on reopen
        with pytest.raises(ValueError):
            reopened.append(AbortedTxn(9, 0, 1, 1))


def test_sanity_check(index: TransactionIndex, path: Path) -> None:
    append_all(index, TXNS)
    index.sanity_check()
    index.close()
    with TransactionIndex(path, 100) as reopened:
        with pytest.raises(CorruptIndexError) as info:
            reopened.sanity_check()
        assert str(info.value).startswith(
            "Last offset of aborted transaction AbortedTxn(producer_id=0, first_offset=0, last_offset=10, "
        )
        assert str(info.value).endswith(f"in index {path.absolute()} is less than start offset 100")
        assert info.value.path == str(path.absolute())
        reopened.sanity_check(base_offset=0)


def test_last_offset_must_increase(index: TransactionIndex) -> None:
    index.append(AbortedTxn(1, 5, 15, 13))
    with pytest.raises(ValueError) as info:
        index.append(AbortedTxn(0, 0, 15, 11))
    assert str(info.value) == (
        "The last offset of appended transactions must increase sequentially, but 15 is not greater than "
        f"current last offset 15 of index {index.path.absolute()}"
    )
    with pytest.raises(ValueError):
        index.append(AbortedTxn(0, 0, 10, 11))


def test_collect_aborted_transactions(index: TransactionIndex) -> None:
    append_all(index, TXNS)
    assert index.collect_aborted_txns(0, 100) == TxnIndexSearchResult(TXNS, False)
    assert index.collect_aborted_txns(0, 32) == TxnIndexSearchResult(TXNS[:3], True)
    assert index.collect_aborted_txns(0, 35) == TxnIndexSearchResult(TXNS, True)
    assert index.collect_aborted_txns(10, 35) == TxnIndexSearchResult(TXNS, True)
    assert index.collect_aborted_txns(11, 35) == TxnIndexSearchResult(TXNS[1:], True)
    assert index.collect_aborted_txns(20, 41) == TxnIndexSearchResult(TXNS[2:], False)


def test_truncate(index: TransactionIndex) -> None:
    txns = [
        AbortedTxn(0, 0, 10, 2),
        AbortedTxn(1, 5, 15, 16),
        AbortedTxn(2, 18, 35, 25),
        AbortedTxn(3, 32, 50, 40),
    ]
    append_all(index, txns)
    index.truncate_to(51)
    assert index.collect_aborted_txns(0, 100).aborted_transactions == txns
    index.truncate_to(50)
    assert index.collect_aborted_txns(0, 100).aborted_transactions == txns[:3]
    assert index.path.stat().st_size == 3 * ABORTED_TXN_SIZE
    with pytest.raises(ValueError):  # last offset is now 35
        index.append(AbortedTxn(4, 30, 35, 40))
    index.append(AbortedTxn(4, 30, 36, 40))
    index.truncate_to(0)
    assert index.all_aborted_txns() == [] and index.path.stat().st_size == 0
    index.append(AbortedTxn(5, 0, 1, 1))  # last offset forgotten
    index.reset()
    assert index.collect_aborted_txns(0, 100).aborted_transactions == []
    assert index.path.exists()


def test_partial_trailing_record_is_ignored(index: TransactionIndex, path: Path) -> None:
    append_all(index, TXNS[:2])
    index.close()
    with open(path, "ab") as f:
        f.write(TXNS[2].to_bytes()[:20])
    with TransactionIndex(path, 0) as reopened:
        assert reopened.all_aborted_txns() == TXNS[:2]


def test_unknown_version_fails_only_when_reached(index: TransactionIndex, path: Path) -> None:
    append_all(index, TXNS)
    index.close()
    data = bytearray(path.read_bytes())
    data[3 * ABORTED_TXN_SIZE] = 1  # version byte of the 4th record
    path.write_bytes(bytes(data))
    with TransactionIndex(path, 0) as reopened:
        # The walk stops at the 3rd record (LSO 25 >= 20) before reading the bad one, as in Kafka.
        assert reopened.collect_aborted_txns(0, 20) == TxnIndexSearchResult(TXNS[:3], True)
        with pytest.raises(CorruptIndexError, match="Unexpected aborted transaction version 1") as info:
            reopened.all_aborted_txns()
        assert str(path.absolute()) in str(info.value) and "position 102" in str(info.value)
        with pytest.raises(CorruptIndexError):
            reopened.collect_aborted_txns(0, 100)
        reopened.truncate_to(35)  # stops at the 3rd record
        assert reopened.all_aborted_txns() == TXNS[:2]


def test_rename_and_append(index: TransactionIndex, tmp_path: Path) -> None:
    index.append(AbortedTxn(0, 0, 10, 2))
    renamed = tmp_path / "renamed.txnindex"
    index.rename_to(renamed)
    index.append(AbortedTxn(1, 5, 15, 16))
    assert [t.first_offset for t in index.collect_aborted_txns(0, 100).aborted_transactions] == [0, 5]
    assert index.path == renamed and renamed.exists()


def test_rename_of_missing_file_only_updates_path(path: Path, tmp_path: Path) -> None:
    idx = TransactionIndex(path, 0)
    target = tmp_path / "x.txnindex.deleted"
    idx.rename_to(target)
    assert idx.path == target and not target.exists()


def test_update_parent_dir(index: TransactionIndex, tmp_path: Path) -> None:
    parent = tmp_path / "parent"
    parent.mkdir()
    index.update_parent_dir(parent)
    assert index.path.parent == parent and index.path.name == "00000000000000000000.txnindex"


def test_flush_and_delete_if_exists(path: Path) -> None:
    idx = TransactionIndex(path, 0)
    idx.flush()
    idx.append(AbortedTxn(0, 0, 10, 2))
    idx.flush()
    assert path.stat().st_size > 0
    assert idx.delete_if_exists() is True and not path.exists()
    assert idx.delete_if_exists() is False


def test_append_and_collect_after_close(index: TransactionIndex) -> None:
    index.close()
    index.append(AbortedTxn(0, 0, 10, 2))
    index.close()
    index.append(AbortedTxn(1, 5, 15, 16))
    index.close()
    assert [t.first_offset for t in index.collect_aborted_txns(0, 100).aborted_transactions] == [0, 5]


def test_read_only_index(path: Path) -> None:
    with TransactionIndex(path, 0) as idx:
        append_all(idx, TXNS)
    before = (path.read_bytes(), path.stat().st_mtime_ns)
    os.chmod(path, 0o444)
    try:
        with TransactionIndex(path, 0, writable=False) as ro:
            assert ro.all_aborted_txns() == TXNS
            ro.sanity_check()
            ro.flush()
            for mutate in (lambda: ro.append(AbortedTxn(9, 60, 70, 70)), lambda: ro.truncate_to(0), ro.reset):
                with pytest.raises(ValueError, match="read-only"):
                    mutate()
        missing = TransactionIndex(path.with_name("1.txnindex"), 1, writable=False)
        assert missing.all_aborted_txns() == [] and not missing.path.exists()
    finally:
        os.chmod(path, 0o644)
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before


def test_os_error_becomes_storage_error(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import indexer.transaction_index as module

    idx = TransactionIndex(path, 0)

    def fail(*args: object) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(module.os, "pwrite", fail)
    with pytest.raises(StorageError) as info:
        idx.append(AbortedTxn(0, 0, 10, 2))
    assert info.value.errno == 28 and info.value.path == str(path)
    idx.close()
