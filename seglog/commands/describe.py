"""Describe a log directory: its partitions, their offsets and their segments.

For each ``<topic>-<partition>`` directory: log start offset, log end offset, high watermark
(from ``replication-offset-checkpoint``), recovery point (from
``recovery-point-offset-checkpoint``), size, and per segment its base offset, last offset, size,
batch and record counts, the timestamps of its first record and its largest one, and how many
entries its index files hold; the quarantine files holding bytes recovery removed (``seglog
quarantine``), the committed data losses accepted with ``seglog recover --accept-data-loss``, and
offsets that no segment holds and nothing accounts for (a segment missing in the middle), checkpoint
files that cannot be read (named, exit 1; high watermarks then shown as unknown), and new
index files never renamed into place (``<base>.index.tmp``: an index being rebuilt, or left by a
process killed while rebuilding it; never read as an index, deleted by the next writable open), and
the files an interrupted roll, clean, salvage, split or deletion left (``.deleted``, ``.cleaned``,
``.swap``) in a partition no process holds, each with what the next writable open will do with it
(the loader's own decisions, :meth:`~indexer.log_loader.LogLoader.check_leftovers`).
Counts come from one vectorised walk over the batch headers of each ``.log`` (no record is
decoded; ``records`` counts the offsets the batches cover, which is the number of records unless
compaction removed some). A partition that cannot be opened is listed
with its error instead of stopping the command.
``--verify`` also checks every batch's CRC-32C (one compiled pass over each segment) and reports
the first damaged batch of each segment and, under ``recovery.strategy=salvage`` (the default), what
``seglog recover`` would do with it: the intact batches it keeps after the damage, the byte ranges it
quarantines and the offsets they held (the engine's own salvage plan; nothing is written), and every
index file the engine's index check rejects (``.index``, ``.timeindex``, ``.txnindex``: what
``seglog recover`` would rebuild; the last segment's only when no writer holds the partition). The
exit status is then 1 when damage, offsets in no segment or leftover ``.cleaned``/``.swap`` files
were found (``.deleted`` files, which any run ending before ``file.delete.delay.ms`` leaves, are
named only).

Everything is opened read-only (no lock, nothing written): this works while a writer runs and on
read-only copies of broker directories.

examples:
  seglog describe --log-dir data/logs
  seglog describe --log-dir data/logs --verify
  seglog describe --log-dir ../shared/vectors/kafka/multi-segment-3x --json
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np

from indexer.checkpoint import read_checkpoint
from indexer.data_loss import checkpointed_end, offsets_in_no_segment, read_accepted_losses
from indexer.errors import SeglogError, StorageError, storage_errors
from indexer.file_names import (
    LOG_START_OFFSET_CHECKPOINT_FILE,
    PARTITION_LOCK_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
    is_index_temp_file,
    misnamed_partition_dirs,
    partition_dir_name,
)
from indexer.index_check import segment_index_problems
from indexer.lock import is_held
from indexer.log import Log
from indexer.log_loader import LogLoader, StepKind
from indexer.log_manager import LogManager
from indexer.offset_index import OffsetIndex
from indexer.quarantine import list_quarantine
from indexer.records.batch_header import NO_TIMESTAMP
from indexer.salvage import first_misplaced_batch, plan_salvage
from indexer.time_index import TimeIndex
from seglog.cli import add_log_config_arguments, log_dir_from_args, settings_from_args
from seglog.output import Output, format_table, offset_range_text

logger = logging.getLogger(__name__)

CHECKPOINT_FILES = (
    RECOVERY_POINT_CHECKPOINT_FILE,
    LOG_START_OFFSET_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
)


LEFTOVER_ACTIONS = {  # what loading does with a leftover file, as describe says it
    StepKind.DELETE_STRAY_DELETED.value: "deletes it",
    StepKind.DELETE_CLEANED.value: "deletes it: the segment it was written for stays as it is",
    StepKind.DELETE_INVALID_SWAP.value: "deletes it: the segment it was written for stays as it is",
    StepKind.QUARANTINE_DAMAGED_SWAP.value: "moves it to quarantine: the segment it was written for stays",
    StepKind.DELETE_SWAPPED_OUT.value: "deletes it: a swap file replaces it",
    StepKind.COMPLETE_SWAP.value: "completes the swap: renames it over the segment file",
    StepKind.DELETE_EMPTY_SEGMENT_INSIDE.value: "deletes it: it holds nothing, the segment before it holds its offsets",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``seglog describe``."""
    parser.add_argument("--log-dir", required=True, metavar="DIR", help="the log directory to describe")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument(
        "--verify", action="store_true", help="check every batch's CRC too; exit 1 if a segment has damage"
    )
    add_log_config_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Print the description; 1 if some partition could not be read (or, with --verify, is damaged or
    misses committed records)."""
    log_dir = log_dir_from_args(args)
    description = describe_log_dir(log_dir, settings_from_args(args), verify=args.verify)
    Output(json_mode=args.json).emit(description, render_text)
    damaged = args.verify and any(
        "missing_committed" in p
        or p.get("offsets_in_no_segment")
        or any(f["finding"] for f in p.get("leftover_files", ()))
        or any(
            "invalid_bytes" in s or "misplaced_batch_position" in s or s.get("index_problems")
            for s in p.get("segments", ())
        )
        for p in description["partitions"]
    )
    unreadable = (
        any("error" in p for p in description["partitions"])
        or description["misnamed_directories"]
        or description["unreadable_checkpoints"]
    )
    return 1 if unreadable or damaged else 0


def describe_log_dir(log_dir: Path, settings: Any, *, verify: bool = False) -> dict[str, Any]:
    """Plain data describing every partition of ``log_dir`` (opened read-only); ``verify`` checks CRCs."""
    manager = LogManager(log_dir, settings, read_only=True)
    checkpoints: dict[str, dict[tuple[str, int], int]] = {}
    unreadable: list[dict[str, str]] = []
    for name in CHECKPOINT_FILES:
        try:
            checkpoints[name] = read_checkpoint(log_dir, name)
        except StorageError as e:  # named, and each partition's high watermark shown as unknown
            logger.warning("%s", e)
            checkpoints[name] = {}
            unreadable.append({"file": str((log_dir / name).absolute()), "error": str(e)})
    recovery_points = checkpoints[RECOVERY_POINT_CHECKPOINT_FILE]
    high_watermarks = checkpoints[REPLICATION_OFFSET_CHECKPOINT_FILE]
    hw_unknown = any(Path(u["file"]).name == REPLICATION_OFFSET_CHECKPOINT_FILE for u in unreadable)
    accepted = read_accepted_losses(log_dir)
    partitions: list[dict[str, Any]] = []
    try:
        for topic, partition in sorted(manager.partitions()):
            try:
                tp = (topic, partition)
                log = Log.open(  # what a read-only LogManager opens, but also when a checkpoint is unreadable
                    log_dir / partition_dir_name(topic, partition),
                    settings.log_config(topic),
                    read_only=True,
                    log_start_offset=checkpoints[LOG_START_OFFSET_CHECKPOINT_FILE].get(tp, 0),
                    high_watermark=high_watermarks.get(tp),
                )
                try:
                    one = describe_partition(topic, partition, log, verify=verify)
                finally:
                    log.close()
                one["recovery_point"] = recovery_points.get(tp, one["recovery_point"])
                if hw_unknown:
                    one["high_watermark"] = None
                must_reach = checkpointed_end(high_watermarks.get(tp), recovery_points.get(tp))
                if must_reach is not None and must_reach.offset > one["log_end_offset"]:  # indexer.data_loss
                    one["missing_committed"] = {
                        "first": one["log_end_offset"],
                        "last": must_reach.offset - 1,
                        "checkpoint": must_reach.checkpoint,
                    }
                one["accepted_data_loss"] = [
                    a for a in accepted if (a.get("topic"), a.get("partition")) == (topic, partition)
                ]
                partitions.append(one)
            except SeglogError as e:
                logger.warning("cannot describe %s-%d: %s", topic, partition, e)
                partitions.append({"topic": topic, "partition": partition, "error": f"{type(e).__name__}: {e}"})
    finally:
        manager.close()
    described = [p for p in partitions if "error" not in p]
    return {
        "log_dir": str(log_dir.absolute()),
        "num_partitions": len(partitions),
        "num_segments": sum(p["num_segments"] for p in described),
        "size_bytes": sum(p["size_bytes"] for p in described),
        "partitions": partitions,
        "unreadable_checkpoints": unreadable,
        "misnamed_directories": [
            {"directory": path.name, "error": f"{type(e).__name__}: {e}"}
            for path, e in misnamed_partition_dirs(log_dir)
        ],
    }


def describe_partition(topic: str, partition: int, log: Any, *, verify: bool = False) -> dict[str, Any]:
    """Offsets and segments of one open (read-only) :class:`~indexer.log.Log`. With ``verify``, the
    indexes of every segment are checked too, but those of the last one only when no writer holds the
    partition (a live writer's active segment has a pre-allocated, zero-filled index)."""
    salvage = log.config.recovery_strategy == "salvage"
    bases = [segment.base_offset for segment in log.segments.values()]
    held = is_held(Path(log.directory) / PARTITION_LOCK_FILE)
    live = verify and held
    segments = [
        describe_segment(
            segment,
            verify=verify,
            salvage=salvage,
            next_base=bases[i + 1] if i + 1 < len(bases) else None,
            check_indexes=verify and (i + 1 < len(bases) or not live),
        )
        for i, segment in enumerate(log.segments.values())
    ]
    gaps = [  # a damaged segment's own losses are its salvage plan's
        (s["base_offset"], s["base_offset"] if s["last_offset"] is None else s["last_offset"] + 1, following)
        for s, following in zip(segments, bases[1:], strict=False)
        if "invalid_bytes" not in s and "misplaced_batch_position" not in s
    ]
    return {
        "topic": topic,
        "partition": partition,
        "directory": str(Path(log.directory).absolute()),
        "log_start_offset": log.log_start_offset,
        "log_end_offset": log.log_end_offset,
        "high_watermark": log.high_watermark,
        "recovery_point": log.recovery_point,
        "size_bytes": sum(s["size_bytes"] for s in segments),
        "num_segments": len(segments),
        "segments": segments,
        "quarantine": [q.to_dict() for q in list_quarantine(Path(log.directory))],
        "offsets_in_no_segment": [r.to_dict() for r in offsets_in_no_segment(Path(log.directory), gaps)],
        "unfinished_index_files": _unfinished_index_files(Path(log.directory)),
        "leftover_files": [] if held else _leftover_files(Path(log.directory), log.config),
    }


def _leftover_files(directory: Path, config: Any) -> list[dict[str, Any]]:
    """The files an interrupted roll, clean, salvage, split or deletion left in ``directory`` (no
    process holds it) with what loading would do with each: the loader's own decisions
    (:meth:`~indexer.log_loader.LogLoader.check_leftovers`), those on unfinished index files aside
    (listed on their own). ``finding``: loading would change the segments (a ``.cleaned`` or ``.swap``
    file, only left by a process killed mid-operation); ``.deleted`` files are also left by any run
    that ends before ``file.delete.delay.ms`` (``seglog maintain --once``), so they are named only."""
    try:
        steps = LogLoader(directory, config).check_leftovers()
    except StorageError:
        if is_held(directory / PARTITION_LOCK_FILE):  # a writer took it meanwhile: its open handles them
            return []
        raise
    return [
        {
            "file": Path(step.path).name,
            "action": step.kind.value,
            "detail": step.detail,
            "finding": step.kind is not StepKind.DELETE_STRAY_DELETED,
        }
        for step in steps
        if step.kind is not StepKind.DELETE_INDEX_TEMP
    ]


def _unfinished_index_files(directory: Path) -> list[str]:
    """The new index files of ``directory`` not renamed into place (:func:`is_index_temp_file`), sorted."""
    with storage_errors(directory, "list the partition directory"):
        return sorted(e.name for e in os.scandir(directory) if is_index_temp_file(e.name))


def describe_segment(
    segment: Any,
    *,
    verify: bool = False,
    salvage: bool = False,
    next_base: int | None = None,
    check_indexes: bool = False,
) -> dict[str, Any]:
    """One segment from its batch headers (a vectorised scan, with every CRC checked when
    ``verify``) and its index file sizes. Damage: ``invalid_bytes`` from the first bad batch on,
    and ``error`` saying what is wrong there; with ``verify`` and ``salvage`` also ``salvage``, what
    recovery would keep and remove (:func:`~indexer.salvage.plan_salvage`, given ``next_base``, the
    next segment's base offset). ``check_indexes``: ``index_problems``, each index file the
    engine's check rejects (:func:`~indexer.index_check.segment_index_problems`, what the loader and
    ``seglog recover --dry-run`` ask; a missing file is no damage: the next load rebuilds it)."""
    records = segment.log
    scan = segment.scan(verify_crc=verify)  # read with pread: a writer may cut the file meanwhile
    count = len(scan)
    first_timestamp = NO_TIMESTAMP
    if count:
        first = next(iter(records.batches()))
        header = first.header
        first_timestamp = header.base_timestamp if header is not None else first.max_timestamp
    described: dict[str, Any] = {
        "base_offset": segment.base_offset,
        "first_offset": int(scan.base_offsets[0]) if count else None,
        "last_offset": int(scan.last_offsets[-1]) if count else None,
        "size_bytes": segment.size,
        "batches": count,
        "records": int(np.sum(scan.last_offsets - scan.base_offsets + 1)) if count else 0,
        "first_timestamp": first_timestamp,
        "max_timestamp": int(scan.max_timestamps.max()) if count else NO_TIMESTAMP,
        "index_entries": _entries(segment.offset_index_path, OffsetIndex.ENTRY_SIZE),
        "time_index_entries": _entries(segment.time_index_path, TimeIndex.ENTRY_SIZE),
    }
    misplaced = first_misplaced_batch(scan, segment.base_offset, next_base) if verify else None
    if scan.error is not None or scan.valid_bytes != segment.size:
        described["invalid_bytes"] = segment.size - scan.valid_bytes
        described["error"] = None if scan.error is None else str(scan.error)
    elif misplaced is not None:
        described["misplaced_batch_position"] = int(scan.positions[misplaced])
    if check_indexes:
        problems = segment_index_problems(
            Path(records.path).parent, segment.base_offset, next_base_offset=next_base, against_log=True
        )
        described["index_problems"] = [{"file": str(p.path), "error": p.message} for p in problems if not p.missing]
    if verify and salvage and ("invalid_bytes" in described or misplaced is not None):
        damage_at = scan.valid_bytes if misplaced is None else described["misplaced_batch_position"]
        described["salvage"] = _salvage(records, segment.base_offset, next_base, scan, damage_at)
    return described


def _salvage(records: Any, base_offset: int, next_base: int | None, scan: Any, damage_at: int) -> dict[str, Any]:
    """What ``seglog recover`` would do with a damaged segment (damage from position ``damage_at``):
    its intact batches after the damage (kept), the byte ranges it quarantines, the offsets those held."""
    plan = plan_salvage(records, base_offset, next_base, scan)
    after = plan.kept.positions >= damage_at
    return {
        "kept_batches_after_damage": int(np.count_nonzero(after)),
        "kept_offsets_after_damage": (
            {"first": int(plan.kept.base_offsets[after][0]), "last": int(plan.kept.last_offsets[after][-1])}
            if after.any()
            else None
        ),
        "removed": [{"position": position, "bytes": length} for position, length in plan.removed],
        "lost": [lost.to_dict() for lost in plan.lost],
    }


def _entries(path: Path, entry_size: int) -> int | None:
    """Complete slots in an index file (what Kafka counts as entries on open), None if absent."""
    try:
        return path.stat().st_size // entry_size
    except FileNotFoundError:
        return None


def _time(ms: int | None) -> str:
    if ms is None or ms < 0:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _salvage_text(plan: dict[str, Any]) -> str:
    """One line for a segment's salvage plan."""
    removed = ", ".join(f"{r['bytes']} bytes at {r['position']}" for r in plan["removed"])
    lost = ", ".join(offset_range_text(r) for r in plan["lost"])
    kept = plan["kept_offsets_after_damage"]
    after = (
        f"keep {plan['kept_batches_after_damage']} intact batch{'' if plan['kept_batches_after_damage'] == 1 else 'es'}"
        f" after the damage (offsets {offset_range_text(kept)})"
        if kept
        else "keep no batch after the damage"
    )
    return f"{after}, quarantine {removed or 'nothing'}; offsets lost: {lost or 'none'}"


def _value(v: Any) -> str:
    return "-" if v is None else str(v)


def render_text(description: dict[str, Any]) -> list[str]:
    """The human-readable form: a line per partition, a table of its segments."""
    lines = [
        f"log dir {description['log_dir']}: {description['num_partitions']} partitions, "
        f"{description['num_segments']} segments, {description['size_bytes']} bytes"
    ]
    for c in description["unreadable_checkpoints"]:
        lines += ["", f"checkpoint {c['file']}: cannot read: {c['error']}"]
    for d in description["misnamed_directories"]:
        lines += ["", f"{d['directory']}: cannot read: {d['error']}"]
    for p in description["partitions"]:
        name = f"{p['topic']}-{p['partition']}"
        if "error" in p:
            lines += ["", f"{name}: cannot read: {p['error']}"]
            continue
        lines += [
            "",
            f"{name}: log start offset {p['log_start_offset']}, log end offset {p['log_end_offset']}, "
            f"high watermark {_value(p['high_watermark'])}, recovery point {p['recovery_point']}, "
            f"{p['num_segments']} segments, {p['size_bytes']} bytes",
        ]
        rows = [
            (
                s["base_offset"],
                _value(s["last_offset"]),
                s["size_bytes"],
                s["batches"],
                s["records"],
                _time(s["first_timestamp"]),
                _time(s["max_timestamp"]),
                _value(s["index_entries"]),
                _value(s["time_index_entries"]),
                _value(s.get("invalid_bytes")) if "invalid_bytes" in s else "",
            )
            for s in p["segments"]
        ]
        headers = (
            "base offset",
            "last offset",
            "bytes",
            "batches",
            "records",
            "first timestamp",
            "max timestamp",
            "index",
            "timeindex",
            "invalid bytes",
        )
        lines += format_table(headers, rows, indent="  ")
        for s in p["segments"]:
            if "invalid_bytes" in s:
                where = s["size_bytes"] - s["invalid_bytes"]
                why = s.get("error") or "bytes that are not a whole batch (cut or damaged)"
                lines.append(f"  segment {s['base_offset']}: invalid from position {where}: {why}")
            if "misplaced_batch_position" in s:
                lines.append(
                    f"  segment {s['base_offset']}: batch offsets go backwards at position "
                    f"{s['misplaced_batch_position']} (a batch written twice or out of place, or past its segment)"
                )
            if "salvage" in s:
                lines.append(f"    seglog recover would {_salvage_text(s['salvage'])}")
            for problem in s.get("index_problems", ()):
                name = Path(problem["file"]).name
                lines.append(
                    f"  segment {s['base_offset']}: index file {name} cannot be trusted: {problem['error']}; "
                    f"seglog recover would rebuild its indexes from the .log"
                )
        if p["quarantine"]:
            size = sum(q["size"] for q in p["quarantine"])
            lines.append(
                f"  quarantine: {len(p['quarantine'])} files, {size} bytes removed by recovery "
                f"({', '.join(Path(q['path']).name for q in p['quarantine'])}; see `seglog quarantine list`)"
            )
        if p["unfinished_index_files"]:
            lines.append(
                f"  unfinished index files: {', '.join(p['unfinished_index_files'])} (an index rebuild in "
                "progress, or left by a process killed during one: not indexes; the next writable open deletes them)"
            )
        if p["leftover_files"]:
            lines.append(
                "  files an interrupted roll, clean, salvage or deletion left; the next writable open "
                "(or seglog recover):"
            )
        for f in p["leftover_files"]:
            lines.append(f"    {f['file']}: {LEFTOVER_ACTIONS[f['action']]} ({f['detail']})")
        for r in p["offsets_in_no_segment"]:
            lines.append(
                f"  offsets {offset_range_text(r)} are in no segment file (a segment is missing or was cut short): "
                "`seglog recover` reports them lost until the loss is accepted"
            )
        if "missing_committed" in p:
            missing = p["missing_committed"]
            lines.append(
                f"  committed records missing: offsets {offset_range_text(missing)} (the checkpointed "
                f"{missing['checkpoint']} is {missing['last'] + 1}); `seglog recover` names them lost"
                + (
                    "; writers refuse the partition until the loss is accepted: `seglog recover --accept-data-loss`"
                    if missing["checkpoint"] == "high watermark"
                    else "; if they cannot be restored, `seglog recover --accept-data-loss` records the loss"
                )
            )
        for a in p["accepted_data_loss"]:
            lost = ", ".join(offset_range_text(r) for r in a.get("lost", []))
            when = _time(a.get("accepted_at_ms"))
            lines.append(f"  accepted data loss: offsets {lost} at {when} ({a.get('command')})")
    return lines
