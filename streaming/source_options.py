"""The options of the ``seglog`` Spark source, with the names and meanings of Spark's Kafka source.

:func:`parse_source_options` turns the option map Spark hands the data source into a frozen
:class:`SourceOptions`, raising :class:`~indexer.errors.ConfigError` with one line naming the option
for anything wrong (bad JSON, conflicting options, unknown names). Nothing here touches the log
directory; :mod:`streaming.reader` checks the options against it. See docs/reader.md for the table.
"""

from __future__ import annotations

import difflib
import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from indexer.errors import ConfigError, SeglogError
from indexer.file_names import TopicPartition, is_listed_to_patterns, validate_topic
from indexer.limits import INT32_MAX, INT64_MAX
from indexer.records.isolation import IsolationLevel

logger = logging.getLogger(__name__)

EARLIEST = -2  # Kafka's ListOffsets sentinels, also in the JSON offsets of the options
LATEST = -1

_TIME_UNITS_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}
_DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60_000

# Options Spark's Kafka source takes that mean nothing without a broker: accepted, logged, ignored.
_IGNORED = ("groupidprefix", "kafkaconsumer.polltimeoutms", "fetchoffset.numretries", "fetchoffset.retryintervalms")
# Consumer settings Spark's Kafka source rejects, with its reason.
_REJECTED_KAFKA = {
    "auto.offset.reset": "set the source option 'startingOffsets' instead",
    "key.deserializer": "keys are always read as bytes; deserialize with DataFrame operations",
    "value.deserializer": "values are always read as bytes; deserialize with DataFrame operations",
    "enable.auto.commit": "offsets are tracked in Spark's checkpoint, not committed to Kafka",
    "interceptor.classes": "consumer interceptors are not supported",
}
# Options of Spark's Kafka sink that a reader may set by mistake, with what to use instead.
_SINK_OPTIONS = {
    "topic": " (topic is the Kafka sink's option; read a topic with subscribe, subscribePattern or assign)",
}
_KNOWN = (
    "path",
    "subscribe",
    "subscribePattern",
    "assign",
    "startingOffsets",
    "startingOffsetsByTimestamp",
    "startingTimestamp",
    "startingOffsetsByTimestampStrategy",
    "endingOffsets",
    "endingOffsetsByTimestamp",
    "endingTimestamp",
    "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "failOnDataLoss",
    "minPartitions",
    "maxRecordsPerPartition",
    "includeHeaders",
)


class SpecKind(Enum):
    """How an offsets option picks each partition's offset."""

    EARLIEST = "earliest"
    LATEST = "latest"
    OFFSETS = "offsets"  # per-partition offsets (-2 earliest, -1 latest)
    TIMESTAMPS = "timestamps"  # per-partition timestamps
    TIMESTAMP = "timestamp"  # one timestamp for every partition


@dataclass(frozen=True)
class OffsetSpec:
    """A resolved ``startingOffsets*``/``endingOffsets*`` option; ``option`` names it in errors."""

    kind: SpecKind
    option: str
    per_partition: Mapping[TopicPartition, int] = field(default_factory=dict)
    timestamp: int = 0


@dataclass(frozen=True)
class Subscription:
    """Which partitions to read: exactly one of ``subscribe``, ``subscribePattern``, ``assign``."""

    option: str
    topics: tuple[str, ...] = ()
    pattern: str = ""
    assigned: tuple[TopicPartition, ...] = ()

    def wants(self, topic: str, partition: int) -> bool:
        """Whether partition ``topic-partition`` of the log directory belongs to the subscription."""
        if self.option == "subscribe":
            return topic in self.topics
        if self.option == "subscribePattern":  # Java's Matcher.matches(), never on internal topics
            return is_listed_to_patterns(topic) and re.fullmatch(self.pattern, topic) is not None
        return (topic, partition) in self.assigned

    def describe(self) -> str:
        value = ",".join(self.topics) if self.topics else self.pattern or json.dumps(_assign_json(self.assigned))
        return f"{self.option}={value}"


@dataclass(frozen=True)
class SourceOptions:
    """Every option of one ``seglog`` read, validated (see docs/reader.md)."""

    log_dir: str
    subscription: Subscription
    starting: OffsetSpec | None  # None: Kafka's default (latest when streaming, earliest in batch)
    ending: OffsetSpec | None  # None: latest
    timestamp_strategy_latest: bool  # startingOffsetsByTimestampStrategy=latest (else error)
    max_offsets_per_trigger: int | None
    min_offsets_per_trigger: int | None
    max_trigger_delay_ms: int
    fail_on_data_loss: bool
    min_partitions: int | None
    max_records_per_partition: int | None
    include_headers: bool
    isolation_level: IsolationLevel


def parse_source_options(options: Mapping[str, str]) -> SourceOptions:
    """Validate Spark's option map (keys in any case) into :class:`SourceOptions`.

    Raises:
        ConfigError: a missing, unknown, malformed or conflicting option (one line naming it).
    """
    lower = {k.lower(): str(v) for k, v in options.items()}
    if "paths" in lower:  # how Spark's load() hands over several paths (one is option path)
        raise ConfigError(f"the seglog source reads one log directory, load() got several: {lower['paths']}")
    isolation = _check_names(lower)
    path = lower.get("path", "")
    if not path:
        raise ConfigError('the seglog source needs the log directory: .load("<log dir>") or .option("path", ...)')
    subscription = _subscription(lower)
    starting = _first_spec(lower, ("startingTimestamp", "startingOffsetsByTimestamp", "startingOffsets"))
    ending = _first_spec(lower, ("endingTimestamp", "endingOffsetsByTimestamp", "endingOffsets"))
    if ending is not None and ending.kind is SpecKind.EARLIEST:
        raise ConfigError("option endingOffsets cannot be earliest")
    if ending is not None and EARLIEST in ending.per_partition.values() and ending.kind is SpecKind.OFFSETS:
        raise ConfigError("option endingOffsets cannot hold -2 (earliest) for a partition")
    strategy = lower.get("startingoffsetsbytimestampstrategy", "error").lower()
    if strategy not in ("error", "latest"):
        raise ConfigError(f"option startingOffsetsByTimestampStrategy must be error or latest, got {strategy!r}")
    max_per_trigger = _positive(lower, "maxOffsetsPerTrigger")
    min_per_trigger = _positive(lower, "minOffsetsPerTrigger")
    if "maxtriggerdelay" in lower and min_per_trigger is None:
        raise ConfigError("option maxTriggerDelay needs minOffsetsPerTrigger")
    if max_per_trigger is not None and min_per_trigger is not None and min_per_trigger > max_per_trigger:
        raise ConfigError(
            f"option minOffsetsPerTrigger ({min_per_trigger}) is above maxOffsetsPerTrigger ({max_per_trigger})"
        )
    return SourceOptions(
        log_dir=path,
        subscription=subscription,
        starting=starting,
        ending=ending,
        timestamp_strategy_latest=strategy == "latest",
        max_offsets_per_trigger=max_per_trigger,
        min_offsets_per_trigger=min_per_trigger,
        max_trigger_delay_ms=_duration_ms(lower.get("maxtriggerdelay")),
        fail_on_data_loss=_boolean(lower, "failOnDataLoss", True),
        min_partitions=_positive(lower, "minPartitions", INT32_MAX),  # Spark reads it with toInt
        max_records_per_partition=_positive(lower, "maxRecordsPerPartition"),
        include_headers=_boolean(lower, "includeHeaders", False),
        isolation_level=isolation,
    )


def _check_names(lower: Mapping[str, str]) -> IsolationLevel:
    """Reject unknown and Kafka-rejected names, note the ignored ones; return the isolation level."""
    known = {name.lower(): name for name in _KNOWN}
    isolation = IsolationLevel.READ_UNCOMMITTED
    for key in sorted(lower):
        if key == "kafka.isolation.level":
            try:
                isolation = IsolationLevel(lower[key].lower())
            except ValueError:
                raise ConfigError(
                    f"option kafka.isolation.level must be read_uncommitted or read_committed, got {lower[key]!r}"
                ) from None
        elif key.startswith("kafka."):
            if key[len("kafka.") :] in _REJECTED_KAFKA:
                raise ConfigError(f"option {key} is not supported: {_REJECTED_KAFKA[key[len('kafka.') :]]}")
            logger.info("seglog source: option %s has no meaning without a broker; ignored", key)
        elif key in _IGNORED:
            logger.info("seglog source: option %s has no meaning without a broker; ignored", key)
        elif key not in known:
            close = difflib.get_close_matches(key, list(known), n=1)
            hint = f" (did you mean {known[close[0]]}?)" if close else ""
            hint = _SINK_OPTIONS.get(key, hint)
            raise ConfigError(f"unknown option {key!r} of the seglog source{hint}")
    return isolation


def _subscription(lower: Mapping[str, str]) -> Subscription:
    given = [name for name in ("subscribe", "subscribePattern", "assign") if name.lower() in lower]
    if len(given) != 1:
        found = f"got {', '.join(given)}" if given else "got none"
        raise ConfigError(f"give exactly one of the options subscribe, subscribePattern, assign ({found})")
    option = given[0]
    value = lower[option.lower()].strip()
    if option == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise ConfigError("option subscribe needs a comma-separated list of topics")
        for topic in topics:
            _valid_topic(option, topic)
        return Subscription(option, topics=topics)
    if option == "subscribePattern":
        try:
            re.compile(value)
        except re.error as e:
            raise ConfigError(f"option subscribePattern is not a valid pattern: {e}") from None
        if not value:
            raise ConfigError("option subscribePattern is empty")
        return Subscription(option, pattern=value)
    doc = _json(option, value, '{"events": [0, 1]}')
    try:
        assigned = sorted(
            {
                (topic, _partition(option, topic, _json_int(p)))
                for t, parts in doc.items()
                for topic in [_valid_topic(option, t)]
                for p in _list(parts)
            }
        )
    except ConfigError:
        raise
    except (AttributeError, TypeError, ValueError):
        raise ConfigError(f'option assign must be JSON like {{"events": [0, 1]}}, got {value!r}') from None
    if not assigned:
        raise ConfigError("option assign names no partition")
    return Subscription(option, assigned=tuple(assigned))


def _first_spec(lower: Mapping[str, str], names: tuple[str, str, str]) -> OffsetSpec | None:
    """The spec of the first option given, in Kafka's precedence (global timestamp, per partition
    timestamps, offsets); the others are logged as overridden."""
    given = [name for name in names if name.lower() in lower]
    if not given:
        return None
    if len(given) > 1:
        logger.info("seglog source: option %s takes precedence over %s", given[0], ", ".join(given[1:]))
    name = given[0]
    value = lower[name.lower()].strip()
    if name.endswith("ByTimestamp"):
        example = '{"events": {"0": 1700000000000}}'
        timestamps = _timestamps(name, _per_partition(name, value, example))
        return OffsetSpec(SpecKind.TIMESTAMPS, name, per_partition=timestamps)
    if name.endswith("Timestamp"):
        return OffsetSpec(SpecKind.TIMESTAMP, name, timestamp=_integer(name, value, 0))
    if value.lower() in ("earliest", "latest"):
        return OffsetSpec(SpecKind(value.lower()), name)
    spec = _per_partition(name, value, '{"events": {"0": 23, "1": -2}}', "earliest, latest or ")
    bad = {tp: o for tp, o in spec.items() if o < EARLIEST}
    if bad:
        raise ConfigError(f"option {name} holds offsets below -2: {_partition_json(bad)}")
    return OffsetSpec(SpecKind.OFFSETS, name, per_partition=spec)


def _per_partition(name: str, value: str, example: str, keywords: str = "") -> dict[TopicPartition, int]:
    """``{"<topic>": {"<partition>": <integer>}}``; ``keywords`` names the other values ``name`` takes."""
    doc = _json(name, value, example, keywords)
    try:
        spec = {
            (topic, _partition(name, topic, p)): _json_int(o)
            for t, parts in doc.items()
            for topic in [_valid_topic(name, t)]
            for p, o in parts.items()
        }
    except ConfigError:
        raise
    except (AttributeError, TypeError, ValueError):
        raise ConfigError(f"option {name} must be {keywords}JSON like {example}, got {value!r}") from None
    if not spec:
        raise ConfigError(f"option {name} names no partition")
    return spec


def _json(name: str, value: str, example: str, keywords: str = "") -> dict[str, Any]:
    """The JSON object ``value`` of option ``name``; ``keywords`` names the other values it takes."""
    try:
        doc = json.loads(value)
    except json.JSONDecodeError as e:
        raise ConfigError(
            f"option {name} is not valid JSON ({e.msg} at char {e.pos}): {value!r}; it must be {keywords}JSON"
            f" like {example}"
        ) from None
    if not isinstance(doc, dict):
        raise ConfigError(f"option {name} must be a JSON object like {example}, got {value!r}")
    return doc


def _json_int(value: object) -> int:
    """A JSON integer; a float, a bool or a string raises :class:`TypeError` (``int()`` would take
    ``1.7`` as 1, ``true`` as 1 and ``"12"`` as 12, silently)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"not a JSON integer: {value!r}")
    return value


def _partition(option: str, topic: str, value: object) -> int:
    """A partition of ``topic`` in option ``option``: a JSON integer (``assign``) or an object key
    (the offsets options) as Java's ``Integer.parseInt`` reads it, in ``0..INT32_MAX`` (``int()`` would
    take ``"1_0"`` as 10, and a negative one was only "not found" later).

    Raises:
        ConfigError: anything else, naming the option, the topic and the value.
    """
    if isinstance(value, str):
        number = int(value) if re.fullmatch(r"[+-]?[0-9]+", value) else -1
    else:
        number = _json_int(value)
    if not 0 <= number <= INT32_MAX:
        raise ConfigError(f"option {option}: partition {value!r} of {topic} must be an integer in 0..{INT32_MAX}")
    return number


def _list(value: object) -> list[object]:
    """A JSON array; anything else (a string would be iterated character by character) raises TypeError."""
    if not isinstance(value, list):
        raise TypeError(f"not a JSON array: {value!r}")
    return value


def _valid_topic(option: str, topic: object) -> str:
    try:
        return validate_topic(str(topic))
    except SeglogError as e:
        raise ConfigError(f"option {option}: {e}") from None


def _integer(name: str, value: str, low: int, high: int = INT64_MAX) -> int:
    """``value`` as an integer in ``low..high`` (Java's long by default, as Spark's ``toLong`` reads it).

    Raises:
        ConfigError: anything else, naming option ``name``.
    """
    if re.fullmatch(r"\s*[+-]?[0-9]+\s*", value) and low <= (number := int(value)) <= high:  # not int()'s "1_0"
        return number
    raise ConfigError(f"option {name} must be an integer in {low}..{high}, got {value!r}")


def _timestamps(name: str, spec: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
    """Per-partition timestamps of option ``name``: each in ``0..INT64_MAX``. Spark 4's Kafka source passes
    a negative one to the broker's ListOffsets, where ``-1`` and ``-2`` happen to be its latest and
    earliest sentinels, undocumented by Spark; here they are that only in the offsets options
    (docs/reader.md).

    Raises:
        ConfigError: a timestamp outside that range, naming its partition.
    """
    for (topic, partition), timestamp in sorted(spec.items()):
        if not 0 <= timestamp <= INT64_MAX:
            raise ConfigError(
                f"option {name}: the timestamp of {topic}-{partition} must be an integer in 0..{INT64_MAX}, "
                f"got {timestamp}"
            )
    return dict(spec)


def _positive(lower: Mapping[str, str], name: str, high: int = INT64_MAX) -> int | None:
    if name.lower() not in lower:
        return None
    return _integer(name, lower[name.lower()].strip(), 1, high)


def _boolean(lower: Mapping[str, str], name: str, default: bool) -> bool:
    value = lower.get(name.lower())
    if value is None:
        return default
    if value.strip().lower() not in ("true", "false"):
        raise ConfigError(f"option {name} must be true or false, got {value!r}")
    return value.strip().lower() == "true"


def _duration_ms(value: str | None) -> int:
    """Spark's time strings (``100ms``, ``30s``, ``5m``, ``1h``; a bare number is milliseconds)."""
    if value is None:
        return _DEFAULT_MAX_TRIGGER_DELAY_MS
    m = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", value.lower())
    if not m or (m.group(2) and m.group(2) not in _TIME_UNITS_MS):
        raise ConfigError(f"option maxTriggerDelay must be a duration like 30s, 5m or 1h, got {value!r}")
    return int(int(m.group(1)) * _TIME_UNITS_MS[m.group(2) or "ms"])


def _assign_json(partitions: tuple[TopicPartition, ...]) -> dict[str, list[int]]:
    doc: dict[str, list[int]] = {}
    for topic, partition in partitions:
        doc.setdefault(topic, []).append(partition)
    return doc


def _partition_json(offsets: Mapping[TopicPartition, int]) -> str:
    """Offsets per partition in the JSON shape of the options and of the source's offsets."""
    doc: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        doc.setdefault(topic, {})[str(partition)] = offset
    return json.dumps(doc)
