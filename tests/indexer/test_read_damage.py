"""Reads stop at damage as a Kafka consumer does, never skipping offsets quietly (``Log.read_records``,
``Log.read``).

A committed multi-segment log gets one damaged batch below the high watermark: a CRC-covered byte
flipped, its size field pointing past the segment's end or below the smallest batch, or the segment
cut inside it. Reading from every offset, batch after batch as a consumer polls, returns exactly the
model's records up to the damaged batch and then raises ``CorruptRecordError`` naming the first
offset that cannot be read, the file and the position. A live writer's torn tail above the high
watermark is not damage.

A batch whose base offset (not CRC-covered) was damaged in place is not served under its wrong
offsets: reads stop where recovery's salvage removes it.

Not covered: a ``lastOffsetDelta`` (bytes 23-26, CRC-covered) damaged to a smaller non-negative value
can still make the offset walk, which reads headers without their CRCs as Kafka's does, step over the
rest of its batch when a read starts inside it; reads from before it name it (a negative one, a last
offset below the base offset, stops the read: see the test of it below).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from indexer.config import LogConfig
from indexer.errors import CorruptRecordError, OffsetsInNoSegmentError
from indexer.log import Log
from indexer.records.file_records import FileRecords
from indexer.records.framing import entry_last_offset

CONFIG = LogConfig(segment_bytes=2500, index_interval_bytes=300, batch_size=300, file_delete_delay_ms=0)
RECORDS = 240
KINDS = ("none", "crc", "size past the end", "size too small", "cut")
SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@dataclass(frozen=True)
class Batch:
    path: Path
    position: int
    size: int
    base_offset: int
    last_offset: int
    sealed: bool  # not in the last (active) segment


def _value(offset: int) -> bytes:
    return f"value-{offset:05d}".encode() * (1 + offset % 3)


def _write_log(directory: Path) -> list[Batch]:
    """A committed log of RECORDS records in several appends and segments; its batches in file order."""
    with Log.open(directory, CONFIG) as log:
        for first in range(0, RECORDS, 40):
            offsets = range(first, first + 40)
            log.append({"key": [f"k{o}".encode() for o in offsets], "value": [_value(o) for o in offsets]})
        log.update_high_watermark(log.log_end_offset)
    paths = sorted(directory.glob("*.log"))
    assert len(paths) > 2
    batches = []
    for path in paths:
        with FileRecords.open(path, mutable=False) as records:
            batches += [
                Batch(path, b.position, b.size_in_bytes, b.base_offset, b.last_offset, path != paths[-1])
                for b in records.batches()
            ]
    return batches


def _flip_in(f: BinaryIO, position: int, mask: int) -> None:
    """XOR the byte at ``position`` of the open file ``f`` with ``mask``."""
    f.seek(position)
    byte = f.read(1)[0]
    f.seek(-1, os.SEEK_CUR)
    f.write(bytes([byte ^ mask]))


def _flip(batch: Batch, at: int, mask: int) -> None:
    """XOR the byte ``at`` bytes into ``batch`` (in its file) with ``mask``."""
    with open(batch.path, "r+b") as f:
        _flip_in(f, batch.position + at, mask)


def _damage(batch: Batch, kind: str, where: int) -> None:
    """Damage ``batch`` in its file; ``where`` picks the byte (a flip) or the cut."""
    with open(batch.path, "r+b") as f:
        if kind == "crc":  # a byte the CRC covers (bytes 21 on), but lastOffsetDelta (see the module doc)
            k = where % (batch.size - 25)
            _flip_in(f, batch.position + 21 + (k if k < 2 else k + 4), 0xFF)
        elif kind == "size past the end":
            f.seek(batch.position + 8)
            f.write((0x7FFF0000).to_bytes(4, "big"))
        elif kind == "size too small":
            f.seek(batch.position + 8)
            f.write((where % 61).to_bytes(4, "big"))
        elif kind == "cut":  # inside the batch: the segment now ends in a partial batch
            f.truncate(batch.position + 1 + where % (batch.size - 1))


def _poll(log: Log, start: int, max_records: int) -> tuple[list[int], CorruptRecordError | None]:
    """Read from ``start`` as a consumer polls, until the high watermark or an error."""
    offsets: list[int] = []
    while start < log.high_watermark:
        try:
            table = log.read_records(start, max_records)
        except CorruptRecordError as e:
            return offsets, e
        if table.num_rows == 0:
            break
        got = table.column("offset").to_pylist()
        assert table.column("value").to_pylist() == [_value(o) for o in got]
        offsets += got
        start = got[-1] + 1
    return offsets, None


@SETTINGS
@given(
    kind=st.sampled_from(KINDS),
    pick=st.integers(0, 10**6),
    where=st.integers(0, 10**6),
    max_records=st.integers(20, 80),
)
def test_reads_return_the_records_before_the_damage_then_name_it(
    tmp_path_factory: pytest.TempPathFactory, kind: str, pick: int, where: int, max_records: int
) -> None:
    directory = tmp_path_factory.mktemp("log") / "events-0"
    batches = _write_log(directory)
    # A cut or a size field damaged in the active segment moves its log end offset (the reader finds
    # the end from the last whole batch); a CRC may be damaged anywhere.
    candidates = [b for b in batches if b.sealed or kind in ("crc", "none")]
    victim = candidates[pick % len(candidates)]
    _damage(victim, kind, where)
    with Log.open(directory, CONFIG, read_only=True, high_watermark=RECORDS) as log:
        assert log.high_watermark == RECORDS
        first, last = victim.base_offset, victim.last_offset
        structural = kind not in ("none", "crc")
        for start in range(RECORDS):
            offsets, error = _poll(log, start, max_records)
            intact_after = kind == "crc" or not victim.sealed or start >= _next_base(batches, victim)
            if kind == "none" or start > last and intact_after:
                assert (offsets, error) == (list(range(start, RECORDS)), None), start
                continue
            if start > last:  # after structural damage in its segment: found through the index, or named
                assert (offsets, error is None) == (list(range(start, RECORDS)), True) or (
                    offsets == [] and error is not None and error.offset == start
                ), (start, offsets, error)
                continue
            assert offsets == list(range(start, first)), (start, offsets)  # never a silent skip
            assert error is not None, start
            assert error.offset == max(start, first)
            assert error.path == str(victim.path) and error.position == victim.position, str(error)
            assert f"cannot read offset {error.offset} of events-0" in str(error)
            if structural and (kind != "size too small" or where % 61 < 14):
                # Log.read (a consumer fetch) names the same damage; CRCs and a batch's own fields
                # are the consumer's to check, as with a broker's fetch.
                with pytest.raises(CorruptRecordError) as fetch_error:
                    log.read(max(start, first), 1 << 20)
                assert fetch_error.value.offset == max(start, first)
                assert fetch_error.value.position == victim.position


def _next_base(batches: list[Batch], victim: Batch) -> int:
    """The first offset of the segment after ``victim``'s."""
    return next(b.base_offset for b in batches if b.path > victim.path)


def test_a_live_writers_torn_tail_above_the_high_watermark_is_not_damage(tmp_path: Path) -> None:
    directory = tmp_path / "events-0"
    batches = _write_log(directory)
    active = batches[-1]
    with open(active.path, "rb") as f:
        f.seek(active.position)
        whole = f.read(active.size)
    with open(active.path, "ab") as f:  # a batch the writer is still writing
        f.write(whole[: len(whole) // 2])
    for high_watermark in (None, RECORDS, active.base_offset):
        with Log.open(directory, CONFIG, read_only=True, high_watermark=high_watermark) as log:
            end = log.high_watermark
            assert end == (RECORDS if high_watermark is None else high_watermark)
            for start in range(0, end, 7):
                assert _poll(log, start, 25) == (list(range(start, end)), None)
                assert log.read(start, 1 << 20).records


@pytest.mark.parametrize("delta", [-0x1000000, -2])
def test_a_damaged_last_offset_delta_never_gives_an_end_offset_below_the_batches_before_it(
    tmp_path: Path, delta: int
) -> None:
    """The log end offset of a read-only open comes from the last batch's header, read without its CRC
    (as Kafka's readNextOffset): a damaged lastOffsetDelta made it an offset no batch could have
    (``log end offset -16777214`` in ``seglog describe``). The end is then that of the batches before it."""
    directory = tmp_path / "t-0"
    batches = _write_log(directory)
    last = batches[-1]
    with open(last.path, "r+b") as f:
        f.seek(last.position + 23)  # lastOffsetDelta
        f.write(delta.to_bytes(4, "big", signed=True))
    with Log.open(directory, CONFIG, read_only=True, high_watermark=RECORDS) as log:
        assert log.log_end_offset == last.base_offset


@pytest.mark.parametrize("kind", ["duplicate", "swap", "move back"])
def test_batches_out_of_offset_order_stop_a_read_naming_the_offset(tmp_path: Path, kind: str) -> None:
    """A batch written twice, two batches swapped, or one moved back (a misdirected write, a bad
    copy): every batch is CRC-valid, but the offsets go backwards. Reads returned the duplicate's
    records twice, or records out of offset order (a consumer that skips offsets it has passed loses
    them). A poll now returns the records in order up to the first offset that comes back, then
    names it, the file and the batch's position."""
    directory = tmp_path / "t-0"
    batches = _write_log(directory)
    sealed = [b for b in batches if b.sealed]
    victims = [b for b in sealed if b.path == sealed[0].path][1:4]
    a, b, c = victims
    raw = a.path.read_bytes()
    pieces = {v: raw[v.position : v.position + v.size] for v in victims}
    if kind == "duplicate":  # a, b, c -> a, b, a, c
        moved, order = a, [a, b, a, c]
    elif kind == "swap":  # a, b, c -> a, c, b
        moved, order = b, [a, c, b]
    else:  # a, b, c -> b, c, a
        moved, order = a, [b, c, a]
    new = b"".join(pieces[v] for v in order)
    a.path.write_bytes(raw[: a.position] + new + raw[c.position + c.size :])
    position = a.position + sum(v.size for v in order[: len(order) - 1 - order[::-1].index(moved)])
    with Log.open(directory, CONFIG, read_only=True, high_watermark=RECORDS) as log:
        # Log.read (a consumer's fetch, seglog serve) served them as stored: now it stops the same way;
        # a fetch of one batch at a time sees only the batch after it, so it may hand over the batches
        # up to the one whose offsets go back first, in offset order, then names the same batch
        one_by_one, error = _raw_poll(log, 0, 1)
        assert one_by_one[: moved.base_offset] == list(range(moved.base_offset))
        assert one_by_one == sorted(set(one_by_one)) and error is not None
        for offsets, stop in (_poll(log, 0, 1000), _raw_poll(log, 0), (one_by_one, error)):
            if offsets is not one_by_one:
                assert offsets == list(range(moved.base_offset)), offsets[moved.base_offset - 3 :]
            assert stop is not None and stop.offset == moved.base_offset
            assert stop.path == str(a.path) and stop.position == position, (str(stop), position)


def _raw_poll(log: Log, start: int, max_bytes: int = 1 << 20) -> tuple[list[int], CorruptRecordError | None]:
    """Fetch raw batches from ``start`` as a consumer does (``Log.read``, ``max_bytes`` a fetch), until
    the high watermark or an error: the offsets of the whole batches received."""
    offsets: list[int] = []
    while start < log.high_watermark:
        try:
            fetched = log.read(start, max_bytes)
        except CorruptRecordError as e:
            return offsets, e
        buf = fetched.records
        assert isinstance(buf, bytes)
        got, position = [], 0
        while position + 12 <= len(buf) and position + 12 + (
            size := int.from_bytes(buf[position + 8 : position + 12])
        ) <= len(buf):
            base = int.from_bytes(buf[position : position + 8])
            got += [o for o in range(base, entry_last_offset(buf, position) + 1) if o >= start]
            position += 12 + size
        if not got:
            break
        offsets += got
        start = got[-1] + 1
    return offsets, None


def test_a_missing_middle_segment_stops_reads_naming_the_offsets(tmp_path: Path) -> None:
    """A middle segment's files deleted by hand (before any ``seglog recover``): ``read_records`` and
    ``read`` returned the records before and after the hole as if contiguous. A read now returns the
    records before it, then raises ``OffsetsInNoSegmentError`` naming the partition, the missing
    offsets and ``seglog recover``; reads from after the hole go on."""
    directory = tmp_path / "events-0"
    batches = _write_log(directory)
    paths = sorted({b.path for b in batches})
    gone = paths[1]
    first = min(b.base_offset for b in batches if b.path == gone)
    following = min(b.base_offset for b in batches if b.path == paths[2])
    for suffix in (".log", ".index", ".timeindex"):
        gone.with_suffix(suffix).unlink()
    with Log.open(directory, CONFIG, read_only=True, high_watermark=RECORDS) as log:
        for start in (0, first - 1, first, following - 1):
            for offsets, error in (_poll(log, start, 30), _raw_poll(log, start)):
                assert offsets == list(range(start, first)) or start >= first and offsets == [], (start, offsets)
                assert isinstance(error, OffsetsInNoSegmentError), (start, error)
                assert (error.offset, error.end) == (max(start, first), following)
                message = str(error)
                assert f"cannot read offsets {max(start, first)}..{following - 1} of events-0" in message
                assert f"seglog recover --log-dir {tmp_path}" in message and "\n" not in message
        assert _poll(log, following, 30) == (list(range(following, RECORDS)), None)
        assert _raw_poll(log, following) == (list(range(following, RECORDS)), None)


def _flip_base_offset_low_bit(batch: Batch) -> None:
    """Damage ``batch``'s base offset in place (its lowest bit; the CRC does not cover it): +1 for an even one."""
    _flip(batch, 7, 0x01)


def test_a_batch_whose_base_offset_was_damaged_is_not_served(tmp_path: Path) -> None:
    """The base offset is not covered by the CRC: +1 on a batch's base offset (bit 0 of byte 7) made
    it hold offsets first+1..last+1, overlapping the next batch. Reads served its records under those
    wrong offsets (offset first skipped, each record one offset late) and stopped only at the next
    batch; recovery's salvage removes the batch (offsets first..last lost). Reads now stop where
    salvage removes bytes: the records before it, then an error naming offset first."""
    directory = tmp_path / "events-0"
    batches = _write_log(directory)
    victim = next(
        b
        for i, b in enumerate(batches)
        if b.sealed
        and b.base_offset % 2 == 0
        and 0 < i < len(batches) - 1
        and batches[i + 1].path == b.path
        and batches[i - 1].path == b.path
    )
    _flip_base_offset_low_bit(victim)
    with Log.open(directory, CONFIG, read_only=True, high_watermark=RECORDS) as log:
        for start in (0, victim.base_offset - 1):
            offsets, error = _poll(log, start, 1000)
            assert offsets == list(range(start, victim.base_offset)), (start, offsets)
            assert error is not None and error.offset == victim.base_offset, error
            assert str(victim.path) in str(error) and f"position {victim.position}" in str(error), error


def test_a_damaged_base_offset_of_a_segments_last_batch_is_not_served(tmp_path: Path) -> None:
    """+1 on the base offset of a sealed segment's last batch made it hold first+1..last+1, reaching
    the next segment's base offset; within its segment nothing goes backwards, so ``read_records``
    (seglog read, the Spark source) served its records under those wrong offsets (first skipped, each
    record one offset late) and ``read`` (seglog serve) sent it, although recovery's salvage removes
    it (offsets first..last lost). Both now stop before it, as for any other batch, naming offset
    first (or the offset a read starts from inside it) and its position; reads from the next segment
    on go on."""
    directory = tmp_path / "events-0"
    batches = _write_log(directory)
    victim = next(b for i, b in enumerate(batches) if b.sealed and batches[i + 1].path != b.path)
    following = _next_base(batches, victim)
    assert victim.last_offset + 1 == following
    _flip_base_offset_low_bit(victim)
    with Log.open(directory, CONFIG, read_only=True, high_watermark=RECORDS) as log:
        for start in (0, victim.base_offset - 1, victim.base_offset, victim.base_offset + 2):
            for offsets, error in (_poll(log, start, 1000), _raw_poll(log, start)):
                before = list(range(start, victim.base_offset))
                assert offsets == before, (start, offsets)
                assert error is not None and error.offset == max(start, victim.base_offset), (start, error)
                assert str(victim.path) in str(error) and f"position {victim.position}" in str(error), error
                assert "reaches the next segment's base offset" in str(error), error
                unreadable = log.unreadable_offsets(error)
                assert unreadable is not None and unreadable.lost, unreadable
                assert (unreadable.offsets.first, unreadable.offsets.end) == (victim.base_offset, following)
        assert _poll(log, following, 1000) == (list(range(following, RECORDS)), None)
        assert _raw_poll(log, following) == (list(range(following, RECORDS)), None)


@pytest.mark.parametrize("sealed", [True, False], ids=["sealed segment", "active segment"])
def test_a_base_offset_damaged_past_the_high_watermark_is_not_skipped_quietly(tmp_path: Path, sealed: bool) -> None:
    """A high bit of a middle batch's base offset flipped in place (+2**25; the CRC does not cover it)
    put all its records past the high watermark: the decoder left them out as above the read's bound,
    the records around them were in order, and ``read_records`` (so ``seglog read``) returned the
    batch before it and then the batch after it, skipping its offsets with no error. Reads now stop
    before it and name its first offset, as for a batch damaged any other way."""
    directory = tmp_path / "events-0"
    batches = _write_log(directory)
    victim = next(
        b
        for i, b in enumerate(batches)
        if b.sealed == sealed and 0 < i < len(batches) - 1 and batches[i + 1].path == b.path
    )
    _flip(victim, 4, 0x02)
    with Log.open(directory, CONFIG, read_only=True, high_watermark=RECORDS) as log:
        for start in (0, victim.base_offset - 1, victim.base_offset):
            offsets, error = _poll(log, start, 1000)
            assert offsets == list(range(start, victim.base_offset)), (start, offsets[-3:])
            assert error is not None and error.offset == victim.base_offset, (start, error)
            assert str(victim.path) in str(error), error


def test_a_damaged_last_batch_under_the_last_index_entry_ends_the_log_after_the_batches_before_it(
    tmp_path: Path,
) -> None:
    """A read-only open finds the log end from the batch the last index entry points at. With that
    batch's lastOffsetDelta damaged (an offset below its segment's base), the end became the segment's
    base offset: every intact batch of the newest segment before it was hidden from readers (`seglog
    read` printed the records up to the segment and stopped, exit 0). The end is now that of the
    batches before the damaged one."""
    directory = tmp_path / "events-0"
    config = LogConfig(segment_bytes=2500, index_interval_bytes=1, batch_size=300, file_delete_delay_ms=0)
    with Log.open(directory, config) as log:
        for first in range(0, RECORDS, 40):
            offsets = range(first, first + 40)
            log.append({"key": [f"k{o}".encode() for o in offsets], "value": [_value(o) for o in offsets]})
        log.append({"value": [_value(o) for o in range(RECORDS, RECORDS + 3)]})
    active = sorted(directory.glob("*.log"))[-1]
    with FileRecords.open(active, mutable=False) as records:
        batches = list(records.batches())
    assert len(batches) > 2
    victim = batches[-1]
    with open(active, "r+b") as f:
        f.seek(victim.position + 23)  # lastOffsetDelta
        f.write((-(2**31)).to_bytes(4, "big", signed=True))
    with Log.open(directory, config, read_only=True, high_watermark=RECORDS + 3) as log:
        assert log.log_end_offset == victim.base_offset
        offsets, error = _poll(log, batches[0].base_offset, 1000)
        assert (offsets, error) == (list(range(batches[0].base_offset, victim.base_offset)), None)


def test_a_negative_last_offset_delta_does_not_make_a_read_from_its_batch_step_over_it(tmp_path: Path) -> None:
    """The sign bit of the log's first batch's lastOffsetDelta flipped (CRC-covered, but the offset walk
    reads headers without their CRCs, as Kafka's does) gave that batch a last offset below its base
    offset: a read from its first offset (``seglog read --from-beginning``) stepped over it and returned
    the records after it with no error. A batch whose last offset lies below its base offset is
    damage whatever its CRC says, so the read now names it; reads from after it go on."""
    directory = tmp_path / "events-0"
    batches = _write_log(directory)
    victim, following = batches[0], batches[1]
    _flip(victim, 23, 0x80)  # lastOffsetDelta's sign bit
    with Log.open(directory, CONFIG, read_only=True, high_watermark=RECORDS) as log:
        for start in range(victim.base_offset, victim.last_offset + 1):
            offsets, error = _poll(log, start, 1000)
            assert offsets == [] and error is not None and error.offset == start, (start, offsets[:3], error)
            assert error.position == victim.position, error
        assert _poll(log, following.base_offset, 1000) == (list(range(following.base_offset, RECORDS)), None)
