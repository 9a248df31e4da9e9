"""The ``seglog`` source's options (Spark's Kafka source names) and its offset arithmetic, without Spark."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from indexer.errors import ConfigError
from indexer.records.isolation import IsolationLevel
from streaming.offset_ranges import OffsetRange, rate_limit, split_ranges
from streaming.source_options import SpecKind, parse_source_options


def parse(**options: str) -> object:
    return parse_source_options({"path": "/logs", **options})


def test_kafka_names_and_defaults() -> None:
    o = parse_source_options(
        {
            "path": "/logs",
            "subscribe": "a, b",
            "STARTINGOFFSETS": '{"a": {"0": 5, "1": -2}}',
            "maxOffsetsPerTrigger": "100",
            "minOffsetsPerTrigger": "10",
            "maxTriggerDelay": "30s",
            "kafka.isolation.level": "read_committed",
            "kafka.bootstrap.servers": "ignored:9092",
            "groupIdPrefix": "x",
            "includeHeaders": "true",
            "failOnDataLoss": "false",
        }
    )
    assert o.subscription.topics == ("a", "b")
    assert o.starting is not None and o.starting.kind is SpecKind.OFFSETS
    assert o.starting.per_partition == {("a", 0): 5, ("a", 1): -2}
    assert (o.max_offsets_per_trigger, o.min_offsets_per_trigger, o.max_trigger_delay_ms) == (100, 10, 30_000)
    assert o.isolation_level is IsolationLevel.READ_COMMITTED and o.include_headers and not o.fail_on_data_loss
    d = parse_source_options({"path": "/logs", "assign": '{"a": [1, 0]}'})
    assert d.subscription.assigned == (("a", 0), ("a", 1))
    assert d.starting is None and d.ending is None and d.fail_on_data_loss and not d.include_headers
    assert d.max_trigger_delay_ms == 15 * 60_000 and d.isolation_level is IsolationLevel.READ_UNCOMMITTED


def test_timestamp_options_take_precedence_as_in_kafka() -> None:
    o = parse_source_options(
        {
            "path": "/l",
            "subscribePattern": "ev.*",
            "startingOffsets": "earliest",
            "startingOffsetsByTimestamp": '{"ev": {"0": 5}}',
            "startingTimestamp": "77",
            "endingOffsetsByTimestamp": '{"ev": {"0": 9}}',
            "endingOffsets": "latest",
        }
    )
    assert o.starting is not None and (o.starting.kind, o.starting.timestamp) == (SpecKind.TIMESTAMP, 77)
    assert o.ending is not None and o.ending.kind is SpecKind.TIMESTAMPS
    assert o.subscription.wants("events", 0) and not o.subscription.wants("xev", 0)  # whole-name match


def test_patterns_skip_internal_topics_as_kafkas_listing_does() -> None:
    every = parse(subscribePattern=".*").subscription
    assert every.wants("events", 0) and every.wants("_schemas", 0) and every.wants("__own", 0)
    for internal in ("__consumer_offsets", "__transaction_state", "__share_group_state", "__cluster_metadata"):
        assert not every.wants(internal, 0) and not parse(subscribePattern="__.*").subscription.wants(internal, 0)
        assert parse(subscribe=internal).subscription.wants(internal, 0)  # by name: read


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "exactly one of the options subscribe, subscribePattern, assign .got none"),
        ({"subscribe": "a", "assign": '{"a": [0]}'}, "got subscribe, assign"),
        (
            {"subscribe": "a", "startingOffset": "earliest"},
            "unknown option 'startingoffset'.*did you mean startingOffsets",
        ),
        (  # the Kafka sink's option, set on the source to name what to read
            {"topic": "a"},
            "unknown option 'topic' of the seglog source .topic is the Kafka sink's option; read a topic with "
            "subscribe, subscribePattern or assign.",
        ),
        ({"subscribe": "a", "startingOffsets": "soon"}, "startingOffsets is not valid JSON"),
        ({"subscribe": "a", "startingOffsets": "earliestt"}, "'earliestt'; it must be earliest, latest or JSON like"),
        ({"subscribe": "a", "startingOffsets": '{"a": [1]}'}, "startingOffsets must be earliest, latest or JSON"),
        ({"assign": "{bad"}, "assign is not valid JSON"),
        ({"assign": '{"a": "01"}'}, "assign must be JSON like"),  # not partitions 0 and 1
        ({"assign": '{"a": [0.5]}'}, "assign must be JSON like"),
        # a partition past Kafka's (an int, >= 0) was "a--1 not found"; int("1_0") read partition 10
        ({"assign": '{"a": ["0"]}'}, "assign must be JSON like"),  # JSON integers, as for offsets
        ({"assign": '{"a": [-1]}'}, r"option assign: partition -1 of a must be an integer in 0\.\.2147483647"),
        ({"assign": '{"a": [2147483648]}'}, r"option assign: partition 2147483648 of a must be"),
        (
            {"subscribe": "a", "startingOffsets": '{"a": {"1_0": 5}}'},
            r"option startingOffsets: partition '1_0' of a must be an integer in 0\.\.2147483647",
        ),
        ({"subscribe": "a", "endingOffsets": '{"a": {"-1": 5}}'}, r"option endingOffsets: partition '-1' of a must"),
        ({"subscribe": "a", "startingOffsetsByTimestamp": '{"a": {" 0": 5}}'}, r"partition ' 0' of a must be"),
        ({"subscribe": "a", "startingOffsets": '{"a": {"0": 1.7}}'}, "startingOffsets must be earliest, latest or"),
        ({"subscribe": "a", "startingOffsets": '{"a": {"0": true}}'}, "startingOffsets must be earliest, latest or"),
        ({"subscribe": "a", "endingOffsets": '{"a": {"0": "12"}}'}, "endingOffsets must be earliest, latest or"),
        ({"subscribe": "a", "startingOffsetsByTimestamp": '{"a": {"0": 1.5e12}}'}, "ByTimestamp must be JSON like"),
        ({"subscribe": "bad topic!"}, "option subscribe: .*"),
        ({"subscribePattern": "(unclosed"}, "subscribePattern is not a valid pattern"),
        ({"subscribe": "a", "endingOffsets": "earliest"}, "endingOffsets cannot be earliest"),
        (
            {"subscribe": "a", "maxOffsetsPerTrigger": "0"},
            r"maxOffsetsPerTrigger must be an integer in 1\.\..*, got '0'",
        ),
        ({"subscribe": "a", "minPartitions": "1_000"}, "minPartitions must be an integer in"),
        ({"subscribe": "a", "maxOffsetsPerTrigger": "5", "minOffsetsPerTrigger": "9"}, "is above maxOffsetsPerTrigger"),
        ({"subscribe": "a", "maxTriggerDelay": "5m"}, "maxTriggerDelay needs minOffsetsPerTrigger"),
        (
            {"subscribe": "a", "minOffsetsPerTrigger": "5", "maxTriggerDelay": "soon"},
            "maxTriggerDelay must be a duration",
        ),
        ({"subscribe": "a", "failOnDataLoss": "maybe"}, "failOnDataLoss must be true or false"),
        ({"subscribe": "a", "kafka.isolation.level": "serializable"}, "read_uncommitted or read_committed"),
        ({"subscribe": "a", "kafka.auto.offset.reset": "earliest"}, "set the source option 'startingOffsets'"),
        ({"subscribe": "a", "startingOffsetsByTimestampStrategy": "closest"}, "must be error or latest"),
        # Negative timestamps would be ListOffsets sentinels (-1 latest, -2 earliest) in Spark 4's Kafka
        # source, undocumented: refused (docs/reader.md); past Java's long, Spark's toLong/toInt refuse it
        (
            {"subscribe": "a", "startingTimestamp": "-5"},
            r"startingTimestamp must be an integer in 0\.\.9223372036854775807, got '-5'",
        ),
        ({"subscribe": "a", "endingTimestamp": "-1"}, r"endingTimestamp must be an integer in 0\.\."),
        (
            {"subscribe": "a", "startingTimestamp": "9223372036854775808"},
            r"startingTimestamp must be an integer in 0\.\.",
        ),
        (
            {"subscribe": "a", "startingOffsetsByTimestamp": '{"a": {"0": 5, "1": -2}}'},
            r"startingOffsetsByTimestamp: the timestamp of a-1 must be an integer in 0\.\.9223372036854775807, got -2",
        ),
        (
            {"subscribe": "a", "endingOffsetsByTimestamp": '{"a": {"0": -1}}'},
            "endingOffsetsByTimestamp: the timestamp of a-0",
        ),
        (
            {"subscribe": "a", "maxOffsetsPerTrigger": "9223372036854775808"},
            r"maxOffsetsPerTrigger must be an integer in 1\.\.",
        ),
        ({"subscribe": "a", "minPartitions": "2147483648"}, r"minPartitions must be an integer in 1\.\.2147483647"),
    ],
)
def test_bad_options_are_one_clear_line(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        parse(**options)
    assert "\n" not in str(info.value)


def test_several_load_paths_are_one_clear_line() -> None:
    """``load([a, b])`` hands the source a ``paths`` option (Spark's JSON list), which was refused as an
    unknown option the user never set ("unknown option 'paths' ... (did you mean path?)")."""
    with pytest.raises(ConfigError) as info:
        parse_source_options({"subscribe": "a", "paths": '["/x","/y"]'})
    assert str(info.value) == 'the seglog source reads one log directory, load() got several: ["/x","/y"]'


def test_missing_path() -> None:
    with pytest.raises(ConfigError, match=r'\.load\("<log dir>"\)'):
        parse_source_options({"subscribe": "a"})


backlogs = st.dictionaries(
    st.tuples(st.sampled_from("ab"), st.integers(0, 5)),
    st.tuples(st.integers(0, 1000), st.integers(0, 5000)),
    min_size=1,
    max_size=8,
)


@given(backlogs, st.integers(1, 3000))
def test_rate_limit_never_exceeds_the_limit_and_always_advances(
    parts: dict[tuple[str, int], tuple[int, int]], limit: int
) -> None:
    start = {tp: s for tp, (s, _) in parts.items()}
    latest = {tp: s + n for tp, (s, n) in parts.items()}
    ends = rate_limit(start, latest, limit)
    read = sum(ends[tp] - start[tp] for tp in parts)
    backlog = sum(n for _, n in parts.values())
    assert all(start[tp] <= ends[tp] <= latest[tp] for tp in parts)
    assert read == min(limit, backlog)  # exactly the limit when there is more, everything otherwise
    for tp, (_, n) in parts.items():  # proportional: within one offset of the exact share
        assert abs((ends[tp] - start[tp]) - min(n, limit * n / backlog if backlog else 0)) < 1 + 1e-9


def test_rate_limit_never_starves_a_partition_with_a_small_share() -> None:
    """Kafka's rateLimit rounds a share below one offset up ("don't completely starve small
    topicpartitions"). The offsets left over after the floors went to the largest fractions only, so a
    quiet partition beside a large backlog got nothing at every trigger until that backlog drained."""
    busy, quiet = ("t", 0), ("t", 1)
    start = {busy: 0, quiet: 0}
    assert rate_limit(start, {busy: 1_000_000, quiet: 1}, 10) == {busy: 9, quiet: 1}  # as Kafka's
    many = {("t", p): 0 for p in range(4)}
    latest = {("t", 0): 1_000_000, ("t", 1): 1_000_000, ("t", 2): 3, ("t", 3): 0}
    assert rate_limit(many, latest, 3) == {("t", 0): 1, ("t", 1): 1, ("t", 2): 1, ("t", 3): 0}


@given(
    st.lists(st.integers(0, 10_000), min_size=1, max_size=6),
    st.none() | st.integers(1, 20),
    st.none() | st.integers(1, 3000),
)
def test_split_ranges_cover_each_range_contiguously(
    sizes: list[int], min_partitions: int | None, max_records: int | None
) -> None:
    ranges = [OffsetRange("t", p, 100 * p, 100 * p + size) for p, size in enumerate(sizes)]
    pieces = split_ranges(ranges, min_partitions=min_partitions, max_records_per_partition=max_records)
    for r in ranges:
        mine = [p for p in pieces if p.partition == r.partition]
        if r.size == 0:
            assert not mine
            continue
        assert mine[0].start == r.start and mine[-1].end == r.end
        assert all(a.end == b.start for a, b in zip(mine, mine[1:], strict=False)) and all(p.size > 0 for p in mine)
        if max_records is not None:
            assert all(p.size <= max_records for p in mine)
    nonempty = len([s for s in sizes if s])
    if (
        min_partitions is not None
        and max_records is None
        and sum(sizes) >= min_partitions
        and nonempty < min_partitions
    ):
        assert len(pieces) >= min(min_partitions, sum(sizes)) - len(sizes)  # roughly minPartitions, as Kafka's


@pytest.mark.parametrize(
    ("sizes", "min_partitions", "max_records", "expected"),
    [
        # A small partition is left whole, and its task is taken out of what the large ones share
        # (4 + 20 records, minPartitions 3: 1 + 2 tasks; KafkaOffsetRangeCalculatorSuite's case).
        ([4, 20], 3, None, [[4], [10, 10]]),
        ([1, 1, 100], 4, None, [[1], [1], [50, 50]]),
        ([5, 5, 5, 5, 5, 5, 5, 5, 25], 10, None, [[5]] * 8 + [[12, 13]]),
        ([3, 3, 3], 4, None, [[3], [3], [3]]),  # each share rounds to one task: fewer than 4
        # maxRecordsPerPartition first, then minPartitions over the pieces (10 records by 2: 5 tasks,
        # each a share of 1.4 of 7: none is split again).
        ([10], 7, 2, [[2, 2, 2, 2, 2]]),
        ([10], 3, 4, [[3, 3, 4]]),
        # A share of exactly 2.5 tasks rounds up, as Scala's math.round (Python's round gives 2).
        ([5, 5], 5, None, [[1, 2, 2], [1, 2, 2]]),
    ],
)
def test_split_ranges_as_kafkas_calculator(
    sizes: list[int], min_partitions: int, max_records: int | None, expected: list[list[int]]
) -> None:
    ranges = [OffsetRange("t", p, 0, size) for p, size in enumerate(sizes)]
    pieces = split_ranges(ranges, min_partitions=min_partitions, max_records_per_partition=max_records)
    assert [[q.size for q in pieces if q.partition == p] for p in range(len(sizes))] == expected
