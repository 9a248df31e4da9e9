"""``seglog recover``: damage a log directory in many ways, recover, check what survived."""

from __future__ import annotations

import hashlib
import json
import random
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from indexer.clock import MockClock
from indexer.config import LogConfig, Settings
from indexer.file_names import PARTITION_LOCK_FILE, partition_dirs
from indexer.index_check import segment_index_problem
from indexer.lock import FileLock
from indexer.log import Log
from indexer.log_loader import LogLoader
from indexer.log_manager import LogManager
from indexer.records.file_records import FileRecords
from indexer.records.isolation import IsolationLevel
from maintenance import recovery
from maintenance.access import partition_name
from maintenance.recovery import EXIT_COMMITTED_DATA_LOST, recover_log_dir
from seglog.cli import main
from tests.budget import scaled
from tests.indexer.test_read_committed import COMMITTED_OFFSETS, write_transactional_partition
from tests.maintenance.conftest import append_batches, settings_for, small_config


def index_problem(directory: Path, base: int, _size: int, following: int | None) -> str | None:
    problem = segment_index_problem(directory, base, next_base_offset=following, against_log=True)
    return None if problem is None else str(problem)


PARTITIONS = ("t-0", "t-1")


@dataclass(frozen=True)
class Batch:
    segment: int  # base offset of its segment
    position: int
    size: int
    last_offset: int


def batches_of(partition: Path) -> list[Batch]:
    """Every valid batch of every segment, in offset order (what `recover` must keep a prefix of)."""
    out = []
    for path in sorted(partition.glob("*.log")):
        base = int(path.name.split(".")[0])
        with FileRecords.open(path, mutable=False) as records:
            scan = records.scan(0)
        rows = zip(scan.positions, scan.sizes, scan.last_offsets, strict=True)
        out += [Batch(base, int(p), int(s), int(o)) for p, s, o in rows]
    return out


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cleanly closed log directory: two partitions of ~8 small segments, every offset committed."""
    log_dir = tmp_path_factory.mktemp("template") / "logs"
    clock = MockClock()
    settings = settings_for(small_config())
    with LogManager(log_dir, settings, clock=clock) as manager:
        for name in PARTITIONS:
            log = manager.get_or_create_log("t", int(name[-1]))
            append_batches(log, clock, 24, records=2)
            log.update_high_watermark(log.log_end_offset)
    return log_dir


def digest(log_dir: Path) -> dict[str, str]:
    return {
        str(p.relative_to(log_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(log_dir.rglob("*"))
        if p.is_file()
    }


DAMAGE = (
    "bit-flip",
    "torn-write",
    "garbage-tail",
    "zeroed-index",
    "missing-index",
    "wrong-size-index",
    "stray-swap",
    "stray-deleted",
    "stray-cleaned",
)


def damage(partition: Path, kind: str, rng: random.Random) -> Batch | None:
    """Damage a random segment of ``partition`` by ``kind``; returns the first batch lost, if any."""
    batches = batches_of(partition)
    victim = rng.choice(batches)
    log_path = partition / f"{victim.segment:020d}.log"
    index_path = partition / f"{victim.segment:020d}{rng.choice(['.index', '.timeindex'])}"
    if kind == "bit-flip":  # anywhere the CRC covers (crc field included)
        position = rng.randrange(victim.position + 17, victim.position + victim.size)
        data = bytearray(log_path.read_bytes())
        data[position] ^= 1 << rng.randrange(8)
        log_path.write_bytes(bytes(data))
        return victim
    if kind == "torn-write":  # the segment ends inside the victim batch
        cut = rng.randrange(victim.position + 1, victim.position + victim.size)
        with open(log_path, "r+b") as f:
            f.truncate(cut)
        return victim
    if kind == "garbage-tail":  # garbage after the segment's last batch: the next segment counts as after it
        with open(log_path, "ab") as f:
            f.write(bytes(rng.randrange(1, 256) for _ in range(rng.randrange(1, 100))))
        following = [b for b in batches if b.segment > victim.segment]
        return following[0] if following else None
    if kind == "zeroed-index":
        index_path.write_bytes(bytes(index_path.stat().st_size or 8))
    elif kind == "missing-index":
        index_path.unlink()
    elif kind == "wrong-size-index":
        with open(index_path, "ab") as f:
            f.write(b"\x01\x02\x03")
    elif kind == "stray-swap":  # an interrupted swap of an identical copy: finished, nothing lost
        shutil.copyfile(log_path, partition / (log_path.name + ".swap"))
    elif kind == "stray-deleted":
        shutil.copyfile(log_path, partition / (log_path.name + ".deleted"))
    else:
        shutil.copyfile(log_path, partition / (log_path.name + ".cleaned"))
    return None


def test_recovery_keeps_every_batch_before_the_damage_and_nothing_after(
    template: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fuzz(template, tmp_path, capsys, trials=len(DAMAGE), seed=20261122)


@pytest.mark.slow
def test_recovery_fuzz_long(template: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fuzz(template, tmp_path, capsys, trials=scaled(10, ci=10, soak=200) * len(DAMAGE), seed=7)


def fuzz(template: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], *, trials: int, seed: int) -> None:
    """Each trial: copy the template, damage one partition (every kind in turn), `seglog recover`,
    then compare the surviving batches with the expected prefix and read the partition back."""
    rng = random.Random(seed)
    originals = {name: batches_of(template / name) for name in PARTITIONS}
    # The topic config the template was written with (index.interval.bytes decides the index entries).
    config = [arg for key, value in small_config().to_dict().items() for arg in ("--config", f"{key}={value}")]
    for trial in range(trials):
        log_dir = tmp_path / f"trial-{trial}" / "logs"
        shutil.copytree(template, log_dir)
        damaged = rng.choice(PARTITIONS)
        kind = DAMAGE[trial % len(DAMAGE)]
        first_lost = damage(log_dir / damaged, kind, rng)
        truncate = ["--strategy", "truncate"]  # Kafka's recovery; salvage is tested in test_salvage.py
        status = main(["recover", "--log-dir", str(log_dir), "--json", "--no-progress", *truncate, *config])
        report = json.loads(capsys.readouterr().out)
        for name in PARTITIONS:
            before = originals[name]
            expected = before if (name != damaged or first_lost is None) else before[: before.index(first_lost)]
            after = batches_of(log_dir / name)
            assert [b.last_offset for b in after] == [b.last_offset for b in expected], (trial, kind, name)
            assert [(b.position, b.size) for b in after] == [(b.position, b.size) for b in expected], (trial, kind)
        history = originals[damaged]
        expected = history if first_lost is None else history[: history.index(first_lost)]
        survivors = (expected[-1].last_offset + 1) if expected else 0
        lost = first_lost is not None
        assert status == (EXIT_COMMITTED_DATA_LOST if lost else 0), (trial, kind, report)
        assert report["committed_data_lost"] is lost and report["marked_clean"] is True
        row = next(p for p in report["partitions"] if p["partition"] == damaged)
        assert row["committed_offsets_lost"] == originals[damaged][-1].last_offset + 1 - survivors
        if kind in ("zeroed-index", "missing-index", "wrong-size-index"):
            assert row["indexes_rebuilt"] == 1, (trial, kind, row)
        # `seglog read` works afterwards and returns exactly the surviving records.
        assert (
            main(["read", "--log-dir", str(log_dir), "--topic", "t", "--partition", damaged[-1], "--from-offset", "0"])
            == 0
        )
        records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert [r["offset"] for r in records] == list(range(survivors))
        assert [r["value"] for r in records] == ["v" * 40] * survivors
        shutil.rmtree(log_dir)


def test_dry_run_changes_nothing_and_predicts_the_recovery(template: Path, tmp_path: Path) -> None:
    rng = random.Random(5)
    log_dir = tmp_path / "logs"
    shutil.copytree(template, log_dir)
    partition = log_dir / "t-1"
    batches = batches_of(partition)
    victim = batches[len(batches) // 2]
    with open(partition / f"{victim.segment:020d}.log", "r+b") as f:
        f.seek(victim.position + 30)
        f.write(bytes([rng.randrange(256) ^ 0xFF]))
    (log_dir / "u-0").mkdir()  # a partition directory without a segment: recovery starts one at 0
    before = digest(log_dir)
    settings = settings_for(small_config())
    dry = recover_log_dir(log_dir, settings, dry_run=True, progress=False)
    assert digest(log_dir) == before
    assert {p.status for p in dry.partitions} == {"checked"}, [p.message for p in dry.partitions]
    real = recover_log_dir(log_dir, settings, progress=False)
    assert {p.status for p in real.partitions} == {"recovered"}
    for d, r in zip(dry.partitions, real.partitions, strict=True):
        assert (d.partition, d.bytes_truncated, d.batches_dropped, d.segments_deleted, d.log_end_offset) == (
            r.partition,
            r.bytes_truncated,
            r.batches_dropped,
            r.segments_deleted,
            r.log_end_offset,
        )
    assert dry.committed_data_lost and real.committed_data_lost and real.exit_status() == EXIT_COMMITTED_DATA_LOST
    assert not dry.marked_clean and real.marked_clean


def test_partitions_of_a_live_writer_are_skipped(log_dir: Path, live_writer: object) -> None:
    outcome = recover_log_dir(log_dir, settings_for(small_config()), progress=False)
    [row] = outcome.partitions
    assert row.status == "skipped" and "locked by pid" in row.message
    assert not outcome.marked_clean and outcome.exit_status() == 1  # not recovered: the user must know


def test_recovers_real_broker_directories(vectors_dir: Path, tmp_path: Path) -> None:
    log_dir = tmp_path / "multi-segment-3x"
    shutil.copytree(vectors_dir / "multi-segment-3x", log_dir)
    for path in log_dir.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    outcome = recover_log_dir(log_dir, Settings(), progress=False)  # the broker's (default) topic config
    assert [p.status for p in outcome.partitions] == ["recovered"] * 5
    for row in outcome.partitions:
        assert (row.bytes_truncated, row.batches_dropped, row.segments_deleted) == (0, 0, 0), row
    # The broker indexed follower appends of several batches (entries keyed by a later batch's offset);
    # recovery indexes batch by batch, as Kafka's own recovery does. Either way the result is sound,
    # and recovering again finds nothing to change.
    for partition in sorted(p for p in log_dir.iterdir() if p.is_dir()):
        bases = sorted(int(p.name.split(".")[0]) for p in partition.glob("*.log"))
        for base, following in zip(bases, bases[1:], strict=False):
            size = (partition / f"{base:020d}.log").stat().st_size
            assert index_problem(partition, base, size, following) is None
    again = recover_log_dir(log_dir, Settings(), progress=False)
    assert [(p.status, p.indexes_rebuilt, p.bytes_truncated) for p in again.partitions] == [("recovered", 0, 0)] * 5


def test_recover_command_prints_a_report(template: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log_dir = tmp_path / "logs"
    shutil.copytree(template, log_dir)
    config = [arg for key, value in small_config().to_dict().items() for arg in ("--config", f"{key}={value}")]
    assert main(["recover", "--log-dir", str(log_dir), "--no-progress", *config]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"recovery of {log_dir}: 2 partitions")
    assert lines[1].split() == [
        "partition",
        "status",
        "log",
        "end",
        "committed",
        "recovered",
        "bytes",
        "truncated",
        "batches",
        "dropped",
        "segments",
        "deleted",
        "indexes",
        "rebuilt",
        "committed",
        "lost",
    ]
    assert [line.split()[:2] for line in lines[2:4]] == [["t-0", "recovered"], ["t-1", "recovered"]]
    assert lines[-1] == "no committed data lost; the directory is marked cleanly shut down"
    assert (log_dir / ".kafka_cleanshutdown").exists()
    assert main(["recover", "--log-dir", str(tmp_path / "nowhere")]) == 1


def test_recovery_of_a_cleanly_shut_down_directory_does_not_call_it_unclean(
    template: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``recover`` validates every segment whatever the shutdown was: its steps and logs say so, and
    do not claim an unclean shutdown the directory never had."""
    log_dir = tmp_path / "logs"
    shutil.copytree(template, log_dir)
    assert (log_dir / ".kafka_cleanshutdown").exists()
    with caplog.at_level("INFO"):
        outcome = recover_log_dir(log_dir, settings_for(small_config()), progress=False)
    details = [s["detail"] for p in outcome.partitions for s in p.steps if s["kind"] == "recover-segment"]
    assert details and all(d.startswith("validated by seglog recover:") for d in details), details
    assert "unclean" not in caplog.text


def test_an_interrupted_recovery_leaves_its_partition_to_be_recovered(
    template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Ctrl-C in the middle of a partition's recovery (the SIGINT arrives in its loader, injected there
    as the interpreter raises it) released the partition's lock as a clean close does, erasing its
    holder line: with the directory's clean-shutdown marker, the next writer trusted a half-recovered
    partition. The line now stays, so the next open recovers it and says why."""
    log_dir = tmp_path / "logs"
    shutil.copytree(template, log_dir)
    assert (log_dir / ".kafka_cleanshutdown").exists()

    def interrupted(_self: LogLoader) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(LogLoader, "load", interrupted)
    with pytest.raises(KeyboardInterrupt):
        recover_log_dir(log_dir, settings_for(small_config()), progress=False)
    monkeypatch.undo()
    [(tp, path)] = partition_dirs(log_dir)[:1]
    assert "role=recovery" in FileLock(path / PARTITION_LOCK_FILE).holder()
    with caplog.at_level("INFO"), LogManager(log_dir, settings_for(small_config())) as manager:
        assert manager.get_log(*tp) is not None
    assert f"{partition_name(tp)}: lock file names" in caplog.text and "not clean" in caplog.text


def test_a_log_start_checkpoint_above_the_log_end_names_the_committed_records_recovery_removes(
    template: Path, tmp_path: Path
) -> None:
    """A damaged ``log-start-offset-checkpoint`` (t-0 at 99999, above its log end 48 and its high
    watermark) makes recovery remove every segment, as Kafka does for files deleted by hand. Those
    records were committed: the dry run names them and exits 3; recovery removes them only with
    ``--accept-data-loss`` (before, a plain recovery removed them, and the next one, finding a log
    starting above the committed offset, reported nothing); the quarantine holds their bytes."""
    log_dir = tmp_path / "logs"
    shutil.copytree(template, log_dir)
    partition = log_dir / "t-0"
    sizes = {p.name: p.stat().st_size for p in partition.glob("*.log")}
    end = batches_of(partition)[-1].last_offset + 1
    (log_dir / "log-start-offset-checkpoint").write_text("0\n1\nt 0 99999\n")
    settings = settings_for(small_config())
    before = digest(log_dir)
    dry = recover_log_dir(log_dir, settings, dry_run=True, progress=False)
    assert digest(log_dir) == before
    assert dry.exit_status() == EXIT_COMMITTED_DATA_LOST
    refused = recover_log_dir(log_dir, settings, progress=False)
    [row] = [p for p in refused.partitions if p.partition == "t-0"]
    assert row.status == "failed" and f"committed offsets 0..{end - 1}" in row.message and refused.exit_status() == 1
    assert {p.name: p.stat().st_size for p in partition.glob("*.log")} == sizes
    real = recover_log_dir(log_dir, settings, progress=False, accept_data_loss=True)
    for outcome in (dry, real):
        row = next(p for p in outcome.partitions if p.partition == "t-0")
        assert row.lost_offsets == [{"first": 0, "last": end - 1, "committed": True}], row.lost_offsets
    assert real.exit_status() == 0
    assert {p.name: p.stat().st_size for p in partition.glob("*.log.0.quarantine")} == {
        f"{name}.0.quarantine": size for name, size in sizes.items()
    }


def test_a_segment_missing_in_the_middle_is_a_loss_of_its_offsets_until_accepted(
    template: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A middle segment's files gone (deleted by mistake, an incomplete copy): its committed offsets
    are in no segment. The dry run (writing nothing) and every recovery name them and exit 3 until
    the loss is accepted; then it is recorded and no longer reported."""
    log_dir = tmp_path / "logs"
    shutil.copytree(template, log_dir)
    partition = log_dir / "t-0"
    bases = sorted(int(p.name.split(".")[0]) for p in partition.glob("*.log"))
    gone, following = bases[2], bases[3]
    for path in partition.glob(f"{gone:020d}.*"):
        path.unlink()
    settings = settings_for(small_config())
    lost = [{"first": gone, "last": following - 1, "committed": True}]
    before = digest(log_dir)
    dry = recover_log_dir(log_dir, settings, dry_run=True, progress=False)
    assert digest(log_dir) == before
    for attempt in range(2):
        outcome = recover_log_dir(log_dir, settings, progress=False)
        for o in (dry, outcome):
            row = next(p for p in o.partitions if p.partition == "t-0")
            assert row.lost_offsets == lost, (attempt, row.lost_offsets)
            assert o.exit_status() == EXIT_COMMITTED_DATA_LOST
    accepted = recover_log_dir(log_dir, settings, accept_data_loss=True, progress=False)
    assert accepted.exit_status() == 0 and accepted.partitions[0].accepted_data_loss
    again = recover_log_dir(log_dir, settings, progress=False)
    assert [p.lost_offsets for p in again.partitions] == [[], []] and again.exit_status() == 0


def test_a_deleted_file_holding_the_only_copy_of_missing_offsets_is_quarantined_not_deleted(
    template: Path, tmp_path: Path
) -> None:
    """A middle segment's ``.log`` renamed ``.log.deleted`` (retention only deletes from the front, a
    truncation only the tail: nothing of seglog's leaves one between live segments) holds the only copy
    of its committed records. Recovery deleted it as a stray temporary file; it now goes to quarantine,
    named with the offsets lost."""
    log_dir = tmp_path / "logs"
    shutil.copytree(template, log_dir)
    partition = log_dir / "t-0"
    bases = sorted(int(p.name.split(".")[0]) for p in partition.glob("*.log"))
    gone, following = bases[2], bases[3]
    log_path = partition / f"{gone:020d}.log"
    data = log_path.read_bytes()
    log_path.rename(partition / f"{log_path.name}.deleted")
    settings = settings_for(small_config())
    before = digest(log_dir)
    dry = recover_log_dir(log_dir, settings, dry_run=True, progress=False)
    assert digest(log_dir) == before
    real = recover_log_dir(log_dir, settings, progress=False)
    quarantine = f"{gone:020d}.log.0.quarantine"
    for outcome in (dry, real):
        row = next(p for p in outcome.partitions if p.partition == "t-0")
        assert row.lost_offsets == [{"first": gone, "last": following - 1, "committed": True}]
        assert row.quarantined == [quarantine], row.quarantined
    assert (partition / quarantine).read_bytes() == data
    assert not list(partition.glob("*.deleted"))


@pytest.mark.parametrize("name", ["t-x", "t-00", "events"])
def test_a_directory_of_segments_that_is_no_partition_is_named_not_ignored(
    template: Path, tmp_path: Path, name: str
) -> None:
    """A directory holding segment files whose name is not ``<topic>-<partition>`` (renamed by hand, a
    typo) was skipped in silence: recover said '2 partitions' and exit 0 over records no partition
    holds. It is now a skipped row naming it (exit 1), in the dry run too; nothing is written to it."""
    log_dir = tmp_path / "logs"
    shutil.copytree(template, log_dir)
    shutil.copytree(log_dir / "t-1", log_dir / name)
    before = digest(log_dir)
    settings = settings_for(small_config())
    dry = recover_log_dir(log_dir, settings, dry_run=True, progress=False)
    assert digest(log_dir) == before
    real = recover_log_dir(log_dir, settings, progress=False)
    for outcome in (dry, real):
        [row] = [p for p in outcome.partitions if p.partition == name]
        assert row.status == "skipped" and "not a <topic>-<partition> directory" in row.message, row
        assert outcome.exit_status() == 1 and not outcome.marked_clean
    assert digest(log_dir / name) == {k.split("/", 1)[1]: v for k, v in before.items() if k.startswith(name + "/")}


def test_recovering_a_partition_that_retention_moved_reads_each_segment_once(
    template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a log start above 0 (every partition after retention) recovery ran a dry run of the whole
    load first, to refuse removing committed records below a damaged log start: every segment was
    scanned twice. The dry run now runs only when the file names allow the log to end below its start."""
    log_dir = tmp_path / "logs"
    shutil.copytree(template, log_dir)
    partition = log_dir / "t-0"
    bases = sorted(int(p.name.split(".")[0]) for p in partition.glob("*.log"))
    (log_dir / "log-start-offset-checkpoint").write_text(f"0\n1\nt 0 {bases[1]}\n")
    scanned: list[Path] = []
    original = FileRecords.scan

    def counting(self: FileRecords, *args: object, **kwargs: object) -> object:
        scanned.append(self.path)
        return original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(FileRecords, "scan", counting)
    outcome = recover_log_dir(log_dir, settings_for(small_config()), progress=False)
    assert outcome.exit_status() == 0
    t0 = [path.name for path in scanned if path.parent == partition]
    assert t0 and sorted(set(t0)) == sorted(t0), t0  # no segment file scanned twice


def test_ctrl_c_after_a_partition_was_closed_reports_it_recovered(
    template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ctrl-C between a partition's close (recovered, flushed, lock released) and its result being
    recorded reported it "interrupted ... run seglog recover again" and dropped its checkpoint
    entries. It is now reported recovered, with its entries; the next partition is not started."""
    log_dir = tmp_path / "logs"
    shutil.copytree(template, log_dir)
    (log_dir / ".kafka_cleanshutdown").unlink()
    (log_dir / "recovery-point-offset-checkpoint").write_text("0\n0\n")
    digests = recovery._index_digests
    calls = []

    def interrupted_after_the_close(path: Path) -> dict[str, bytes]:
        calls.append(path)
        if len(calls) == 2:  # the count after the first partition's close
            raise KeyboardInterrupt
        return digests(path)

    monkeypatch.setattr(recovery, "_index_digests", interrupted_after_the_close)
    with pytest.raises(recovery.RecoveryInterrupted) as raised:
        recover_log_dir(log_dir, settings_for(small_config()), progress=False)
    outcome = raised.value.outcome
    assert [(p.partition, p.status) for p in outcome.partitions] == [("t-0", "recovered"), ("t-1", "not started")]
    assert outcome.partitions[0].log_end_offset == 48 and not outcome.partitions[0].message
    assert (log_dir / "recovery-point-offset-checkpoint").read_text().splitlines()[2:] == ["t 0 48"]
    assert not (log_dir / ".kafka_cleanshutdown").exists()


@pytest.mark.parametrize("dry_run", [True, False])
def test_a_damaged_swap_file_never_replaces_an_intact_segment(template: Path, tmp_path: Path, dry_run: bool) -> None:
    """A ``<base>.log.swap`` cut in half (no writer leaves one: a swap is renamed from a whole, fsynced
    ``.cleaned``) replaced the intact ``.log`` beside it: recovery deleted the ``.log`` and salvaged the
    swap, losing committed offsets the ``.log`` held (exit 3, the bytes nowhere). The damaged swap is
    now quarantined whole instead, the ``.log`` kept, and nothing is lost."""
    log_dir = tmp_path / "logs"
    shutil.copytree(template, log_dir)
    partition = log_dir / "t-0"
    log_path = sorted(partition.glob("*.log"))[1]
    data = log_path.read_bytes()
    swap = partition / (log_path.name + ".swap")
    swap.write_bytes(data[: len(data) // 2 + 5])
    outcome = recover_log_dir(log_dir, settings_for(small_config()), dry_run=dry_run, progress=False)
    [row] = [p for p in outcome.partitions if p.partition == "t-0"]
    assert row.lost_offsets == [] and not outcome.committed_data_lost, row
    steps = [(s["kind"], Path(s["path"]).name) for s in row.steps]
    assert ("quarantine-damaged-swap-file", swap.name) in steps and not any(
        kind == "delete-file-replaced-by-swap" for kind, _ in steps
    ), steps
    assert log_path.read_bytes() == data
    if dry_run:
        assert swap.exists()
    else:
        assert not swap.exists() and row.quarantined == [f"{log_path.name}.0.quarantine"], row.quarantined
        assert (partition / row.quarantined[0]).read_bytes() == data[: len(data) // 2 + 5]


@pytest.mark.parametrize("damaged", [False, True])
def test_recovery_keeps_the_aborted_transactions_of_the_batches_it_keeps(tmp_path: Path, damaged: bool) -> None:
    """``seglog recover`` (every segment recovered, its indexes rebuilt) emptied the ``.txnindex`` of a
    broker-written transactional partition and nothing rebuilt it: read_committed reads then returned
    the aborted transaction's records 2..4 as committed. Recovery now keeps the entries of the batches
    it keeps, also when it salvages the segment into a new file (a damaged batch of offsets 8..9)."""
    log_dir = tmp_path / "logs"
    write_transactional_partition(log_dir / "tx-0")
    (log_dir / "replication-offset-checkpoint").write_text("0\n1\ntx 0 14\n")
    if damaged:
        log_path = log_dir / "tx-0" / "00000000000000000000.log"
        [victim] = [b for b in batches_of(log_dir / "tx-0") if b.last_offset == 9]
        data = bytearray(log_path.read_bytes())
        data[victim.position + victim.size - 1] ^= 0xFF
        log_path.write_bytes(bytes(data))
    outcome = recover_log_dir(log_dir, Settings(), progress=False)
    assert [p.status for p in outcome.partitions] == ["recovered"]
    with Log.open(log_dir / "tx-0", LogConfig(), read_only=True) as log:
        committed = log.read_records(0, isolation_level=IsolationLevel.READ_COMMITTED)
        expected = [o for o in COMMITTED_OFFSETS if not damaged or o not in (8, 9)]
        assert committed.column("offset").to_pylist() == expected


def test_a_damaged_transaction_index_counts_as_rebuilt_in_the_dry_run_and_the_recovery(
    template: Path, tmp_path: Path
) -> None:
    """A ``.txnindex`` failing Kafka's check: the dry run counted its segment in ``indexes rebuilt``
    (1), the recovery that emptied it did not (0)."""
    log_dir = tmp_path / "logs"
    shutil.copytree(template, log_dir)
    log_path = sorted((log_dir / "t-0").glob("*.log"))[1]
    log_path.with_suffix(".txnindex").write_bytes(b"\x07" * 34)  # an unknown record version
    settings = settings_for(small_config())
    counts = []
    for dry_run in (True, False):
        outcome = recover_log_dir(log_dir, settings, dry_run=dry_run, progress=False)
        counts.append(next(p.indexes_rebuilt for p in outcome.partitions if p.partition == "t-0"))
    assert counts == [1, 1]
    assert log_path.with_suffix(".txnindex").stat().st_size == 0
