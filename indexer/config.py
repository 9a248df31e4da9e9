"""Topic configuration with Kafka's key names and defaults (Kafka's ``LogConfig``).

Layering, lowest first: the built-in defaults below (Kafka's); the settings files, merged table by
table and key by key in this order: the packaged ``conf/seglog.toml``, the file named by
``$SEGLOG_CONF``, the file named by ``--conf``; the merged ``[topics."<name>"]`` table for the
topic; then ``--config KEY=VALUE`` overrides. Unknown keys and out-of-range values raise
:class:`~indexer.errors.ConfigError` naming the key and the file it came from.

The packaged file is the repository's ``conf/seglog.toml``: found beside the packages in a source
checkout or an editable install, and under ``<prefix>/share/seglog/`` in a wheel install
(``[tool.setuptools.data-files]`` in ``pyproject.toml``). It is the one home of the defaults.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import random
import sys
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from indexer.errors import ConfigError, check_input_file
from indexer.limits import INT32_MAX, INT64_MAX

logger = logging.getLogger(__name__)

# key -> (attribute, type, default, minimum, doc)
_TOPIC_KEYS: dict[str, tuple[str, type, Any, int | None, str]] = {
    "segment.bytes": ("segment_bytes", int, 1073741824, 14, "roll a segment before it grows past this many bytes"),
    "segment.ms": ("segment_ms", int, 604800000, 1, "roll a segment this long after its first record (ms)"),
    "segment.jitter.ms": ("segment_jitter_ms", int, 0, 0, "random jitter subtracted from segment.ms (ms)"),
    "segment.index.bytes": ("segment_index_bytes", int, 10485760, 4, "preallocated size of each index file (bytes)"),
    "index.interval.bytes": ("index_interval_bytes", int, 4096, 0, "log bytes between offset-index entries"),
    "max.message.bytes": ("max_message_bytes", int, 1048588, 0, "largest record batch (bytes)"),
    "batch.size": ("batch_size", int, 65536, 0, "target size of the record batches seglog writes (bytes)"),
    "message.timestamp.type": ("message_timestamp_type", str, "CreateTime", None, "CreateTime or LogAppendTime"),
    "retention.ms": ("retention_ms", int, 604800000, -1, "delete segments older than this (ms); -1 = never"),
    "retention.bytes": ("retention_bytes", int, -1, None, "delete oldest segments above this size; -1 = no limit"),
    "file.delete.delay.ms": ("file_delete_delay_ms", int, 60000, 0, "delay before .deleted files are removed (ms)"),
    "flush.messages": ("flush_messages", int, INT64_MAX, 1, "fsync after this many unflushed records"),
    "flush.ms": ("flush_ms", int, INT64_MAX, 0, "fsync when the last flush is older than this (ms)"),
    "preallocate": ("preallocate", bool, False, None, "size new .log files to segment.bytes up front"),
    "compression.type": ("compression_type", str, "producer", None, "producer|none|uncompressed|gzip|snappy|lz4|zstd"),
    "recovery.strategy": (
        "recovery_strategy",
        str,
        "salvage",
        None,
        "salvage (keep every intact batch after damage) or truncate (Kafka: cut at the first damage)",
    ),
    "quarantine.retention.ms": (
        "quarantine_retention_ms",
        int,
        -1,
        -1,
        "delete quarantined bytes (removed by recovery) this long after quarantine (ms); -1 = never",
    ),
}
# Kafka declares these as int (the others as long): an index entry holds a segment position in 4 bytes.
_INT32_KEYS = frozenset(
    {"segment.bytes", "segment.index.bytes", "index.interval.bytes", "max.message.bytes", "batch.size"}
)
# The broker config each topic config falls back to, by Kafka's names (its ServerTopicConfigSynonyms,
# the first synonym: log.roll.ms before log.roll.hours); seglog's own keys have none.
_BROKER_CONFIG_NAMES = {
    "segment.bytes": "log.segment.bytes",
    "segment.ms": "log.roll.ms",
    "segment.jitter.ms": "log.roll.jitter.ms",
    "segment.index.bytes": "log.index.size.max.bytes",
    "index.interval.bytes": "log.index.interval.bytes",
    "max.message.bytes": "message.max.bytes",
    "message.timestamp.type": "log.message.timestamp.type",
    "retention.ms": "log.retention.ms",
    "retention.bytes": "log.retention.bytes",
    "file.delete.delay.ms": "log.segment.delete.delay.ms",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "preallocate": "log.preallocate",
    "compression.type": "compression.type",
}
_TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
_CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
_COMPRESSION_TYPES = ("producer", "uncompressed", *_CODECS)
RECOVERY_STRATEGIES = ("salvage", "truncate")
# The settings file's tables besides [topic] and [topics."<name>"], read by the maintenance and
# streaming layers (seglog.cli.CONFIG_SECTIONS maps each to the keys it takes).
SECTIONS = ("maintenance", "streaming")

CONF_ENV = "SEGLOG_CONF"
# Where the packaged conf/seglog.toml is, first match wins: a source checkout or an editable install,
# then a wheel install (pyproject's data-files put it under <prefix>/share/seglog/).
PACKAGED_CONF_PATHS = (
    Path(__file__).resolve().parent.parent / "conf" / "seglog.toml",
    Path(sys.prefix) / "share" / "seglog" / "seglog.toml",
)


def packaged_conf_path() -> Path | None:
    """The packaged ``conf/seglog.toml`` (see :data:`PACKAGED_CONF_PATHS`), None if not installed."""
    return next((p for p in PACKAGED_CONF_PATHS if p.is_file()), None)


def coerce_int(key: str, value: Any, source: str) -> int:
    """``value`` of setting ``key`` as an int: an int (not a bool) or a string of digits (``_``
    allowed), else :class:`ConfigError` naming the key and where the value came from."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip().replace("_", ""))
        except ValueError:
            pass
    raise ConfigError(f"{key} must be an integer, got {value!r} ({source})")


def _coerce(key: str, kind: type, value: Any, source: str) -> Any:
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise ConfigError(f"{key} must be true or false, got {value!r} ({source})")
    if kind is int:
        return coerce_int(key, value, source)
    if not isinstance(value, str):
        raise ConfigError(f"{key} must be a string, got {value!r} ({source})")
    return value


@dataclass(frozen=True, slots=True)
class LogConfig:
    """The per-topic settings the engine uses; attribute names are Kafka keys in snake_case."""

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10485760
    index_interval_bytes: int = 4096
    max_message_bytes: int = 1048588
    batch_size: int = 65536
    message_timestamp_type: str = "CreateTime"
    retention_ms: int = 604800000
    retention_bytes: int = -1
    file_delete_delay_ms: int = 60000
    flush_messages: int = INT64_MAX
    flush_ms: int = INT64_MAX
    preallocate: bool = False
    compression_type: str = "producer"
    recovery_strategy: str = "salvage"
    quarantine_retention_ms: int = -1

    def __post_init__(self) -> None:
        for key, (attr, kind, _default, minimum, _doc) in _TOPIC_KEYS.items():
            value = getattr(self, attr)
            if minimum is not None and value < minimum:
                raise ConfigError(f"{key} must be >= {minimum}, got {value}")
            if kind is int:
                maximum, kafka_type = (INT32_MAX, "an int") if key in _INT32_KEYS else (INT64_MAX, "a long")
                if value > maximum:
                    raise ConfigError(f"{key} must be <= {maximum} ({kafka_type} in Kafka), got {value}")
        if self.message_timestamp_type not in _TIMESTAMP_TYPES:
            raise ConfigError(
                f"message.timestamp.type must be one of {_TIMESTAMP_TYPES}, got {self.message_timestamp_type!r}"
            )
        if self.compression_type not in _COMPRESSION_TYPES:
            raise ConfigError(f"compression.type must be one of {_COMPRESSION_TYPES}, got {self.compression_type!r}")
        if self.recovery_strategy not in RECOVERY_STRATEGIES:
            raise ConfigError(f"recovery.strategy must be one of {RECOVERY_STRATEGIES}, got {self.recovery_strategy!r}")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], *, source: str = "config") -> LogConfig:
        """Build from Kafka-named keys (``{"segment.bytes": 1024}``); values may be strings."""
        return cls().with_overrides(values, source=source)

    def with_overrides(self, values: Mapping[str, Any], *, source: str = "config") -> LogConfig:
        """A copy with Kafka-named keys replaced; unknown keys raise :class:`ConfigError`."""
        changes: dict[str, Any] = {}
        for key, value in values.items():
            spec = _TOPIC_KEYS.get(key)
            if spec is None:
                raise ConfigError(f"unknown topic config key {key!r} ({source}); known keys: {', '.join(_TOPIC_KEYS)}")
            attr, kind, _default, _minimum, _doc = spec
            changes[attr] = _coerce(key, kind, value, source)
        try:
            return dataclasses.replace(self, **changes)
        except ConfigError as e:  # out of range: one of these keys, so blame their source
            raise ConfigError(f"{e} ({source})") from None

    def to_dict(self) -> dict[str, Any]:
        """Kafka-named keys and values."""
        return {key: getattr(self, spec[0]) for key, spec in _TOPIC_KEYS.items()}

    @property
    def is_log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    def stored_codec(self, producer_codec: str | None = None) -> str:
        """The codec of the batches this topic stores (Kafka's ``compression.type`` rule).

        ``producer`` keeps the writer's codec (``producer_codec``, none if not given); ``uncompressed``
        is ``none``; any other value is the codec itself, whatever the writer asked. Every layer that
        encodes or checks stored batches asks here.

        Raises:
            ValueError: ``producer_codec`` is not a codec name.
        """
        if producer_codec is not None and producer_codec not in _CODECS:
            raise ValueError(f"unknown compression {producer_codec!r}; expected one of {sorted(_CODECS)}")
        if self.compression_type == "producer":
            return producer_codec or "none"
        return "none" if self.compression_type == "uncompressed" else self.compression_type

    @property
    def init_file_size(self) -> int:
        """Size of a new ``.log`` file: ``segment.bytes`` when preallocating, else 0."""
        return self.segment_bytes if self.preallocate else 0

    def random_segment_jitter(self, rng: random.Random | None = None) -> int:
        """Per-segment roll jitter: ``abs(rand) % min(segment.jitter.ms, segment.ms)``, 0 without jitter."""
        if self.segment_jitter_ms == 0:
            return 0
        r = (rng or random).randrange(0, 2**31)
        return r % min(self.segment_jitter_ms, self.segment_ms)


def topic_config_keys() -> dict[str, str]:
    """Every topic config key with its one-line description (for CLI help)."""
    return {key: spec[4] for key, spec in _TOPIC_KEYS.items()}


def topic_config_type(key: str) -> str:
    """The type Kafka's ``LogConfig`` declares for topic config ``key`` (``INT``, ``LONG``, ``BOOLEAN``
    or ``STRING``: ``ConfigDef.Type``'s names), which DescribeConfigs answers carry; seglog's own keys
    by their values. ``KeyError`` for an unknown key."""
    kind = _TOPIC_KEYS[key][1]
    if kind is bool:
        return "BOOLEAN"
    if kind is int:
        return "INT" if key in _INT32_KEYS else "LONG"
    return "STRING"


def broker_config_name(key: str) -> str | None:
    """The name of the broker config that topic config ``key`` falls back to in Kafka (``log.roll.ms``
    for ``segment.ms``: what a broker's DescribeConfigs names the value every topic gets unless it
    sets its own), or None for seglog's own keys, which no broker has. Same type as the topic's."""
    return _BROKER_CONFIG_NAMES.get(key)


def parse_overrides(pairs: Iterable[str]) -> dict[str, str]:
    """``["segment.bytes=1024", ...]`` -> ``{"segment.bytes": "1024"}`` (the CLI's ``--config``)."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--config takes KEY=VALUE, got {pair!r}")
        out[key.strip()] = value.strip()
    return out


@dataclass(frozen=True)
class Settings:
    """Everything in ``conf/seglog.toml``: topic defaults, per-topic tables and other sections."""

    topic_defaults: Mapping[str, Any] = field(default_factory=dict)
    topics: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    sections: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    overrides: Mapping[str, Any] = field(default_factory=dict)
    source: str = "built-in defaults"
    files: tuple[str, ...] = ()  # the settings files read, in the order they were merged
    section_overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # from --config

    def log_config(self, topic: str | None = None) -> LogConfig:
        """The effective :class:`LogConfig` for ``topic``: defaults, file, topic table, overrides."""
        config = LogConfig().with_overrides(self.topic_defaults, source=f"{self.source} [topic]")
        if topic is not None and topic in self.topics:
            config = config.with_overrides(self.topics[topic], source=f'{self.source} [topics."{topic}"]')
        return config.with_overrides(self.overrides, source="--config")

    def topic_config_origins(self, topic: str | None) -> dict[str, str]:
        """Where each key of :meth:`log_config` for ``topic`` gets its value (what Kafka's
        DescribeConfigs calls its source): ``"topic"``, the topic's ``[topics."<name>"]`` table;
        ``"default"``, Kafka's default (the packaged file spells the defaults out, so a value equal to
        the built-in one counts as the default); ``"settings"``, a ``[topic]`` table or ``--config``,
        which apply to every topic. ``topic`` None: those of the values every topic falls back to
        (a broker's ``log.*`` configs)."""
        config, defaults = self.log_config(topic).to_dict(), LogConfig().to_dict()
        own = self.topics.get(topic, {}) if topic is not None else {}
        origins = {}
        for key, value in config.items():
            if key in own and key not in self.overrides:
                origins[key] = "topic"
            else:
                origins[key] = "default" if value == defaults[key] else "settings"
        return origins

    def section(self, name: str) -> Mapping[str, Any]:
        """A non-topic section such as ``[maintenance]`` or ``[streaming]`` (empty if absent)."""
        return self.sections.get(name, {})

    def section_source(self, name: str, key: str) -> str:
        """Where ``key`` of section ``name`` was set, for error messages: ``--config`` or the files."""
        return "--config" if key in self.section_overrides.get(name, {}) else f"{self.source} [{name}]"


def _check_tables(data: Mapping[str, Any], conf_path: Path) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The ``[topic]`` and ``[topics."<name>"]`` tables of a settings file, after checking that every
    top-level entry is one of the tables seglog reads (a key outside any table, or a misspelt table
    name, would otherwise be ignored without a word).

    Raises:
        ConfigError: naming the file and the entry.
    """
    known = {"topic": "[topic]", "topics": '[topics."<name>"]', **{name: f"[{name}]" for name in SECTIONS}}
    for name, value in data.items():
        if name not in known:
            dotted, leaf, plain = _dotted_key(name, value)
            if isinstance(value, dict) and plain in _TOPIC_KEYS:
                raise ConfigError(
                    f"configuration file {conf_path}: {dotted} = {leaf!r} is read by TOML as nested tables, outside "
                    f'any table: put it under [topic] as "{plain}" = {leaf!r}'
                )
            what = f"table [{name}]" if isinstance(value, dict) else f"key {name!r} outside any table"
            raise ConfigError(
                f"unknown {what} in configuration file {conf_path}; its tables: {', '.join(known.values())}"
            )
        if not isinstance(value, dict):
            raise ConfigError(f"{name} in configuration file {conf_path} must be a table {known[name]}, got {value!r}")
    topics: dict[str, dict[str, Any]] = data.get("topics", {})
    for name, table in topics.items():
        if not isinstance(table, dict):
            raise ConfigError(
                f'topics.{name} in configuration file {conf_path} must be a table [topics."{name}"], got {table!r}'
            )
    tables = [("[topic]", data.get("topic", {}))] + [(f'[topics."{n}"]', t) for n, t in topics.items()]
    for where, table in tables + [(f"[{n}]", data[n]) for n in SECTIONS if n in data]:
        for key, value in table.items():
            if isinstance(value, dict):
                dotted, leaf, plain = _dotted_key(key, value)
                raise ConfigError(
                    f"configuration file {conf_path} {where}: {dotted} = {leaf!r} is read by TOML as nested tables; "
                    f'quote a dotted name, as in "{plain}" = {leaf!r} or [topics."my.topic"]'
                )
    return data.get("topic", {}), topics


def _dotted_key(key: str, value: Any) -> tuple[str, Any, str]:
    """The unquoted dotted key ``a.b = v`` TOML read as the nested tables ``value`` under ``key``: the
    key as written, its value, and its parts joined (the name meant, e.g. ``retention.ms``)."""
    parts = [key]
    while isinstance(value, dict) and value:
        sub, value = next(iter(value.items()))
        parts.append(sub)
    return ".".join(f'"{p}"' if "." in p else p for p in parts), value, ".".join(parts)


def load_settings(
    path: str | os.PathLike[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    *,
    section_overrides: Mapping[str, Mapping[str, Any]] | None = None,
) -> Settings:
    """The settings files merged in order (packaged ``conf/seglog.toml``, ``$SEGLOG_CONF``, ``path``),
    then ``overrides`` (topic keys, the CLI's ``--config``) and ``section_overrides`` (keys of other
    sections such as ``[maintenance]``, also from ``--config``).

    The file's ``[topic]`` table holds topic defaults, ``[topics."<name>"]`` per-topic
    overrides; the other tables are the sections of :data:`SECTIONS` (``[maintenance]``,
    ``[streaming]``), and anything else in a file is a :class:`ConfigError`. A later file replaces
    single keys of an earlier one. ``$SEGLOG_CONF`` and ``path`` must exist; without any file, Kafka's defaults apply.
    Which files were read is logged at INFO (``seglog -v``) and kept in :attr:`Settings.files`.
    """
    files: list[Path] = []
    packaged = packaged_conf_path()
    if packaged is not None:
        files.append(packaged)
    if path is not None and not os.fspath(path):  # `--conf "$CONF"` with CONF unset: not "no file"
        raise ConfigError("--conf is an empty path (an unset variable?): name a settings file, or leave --conf out")
    for named, what in ((os.environ.get(CONF_ENV), f"${CONF_ENV}"), (path, "--conf")):
        if named is None or named == "":  # an empty $SEGLOG_CONF is unset, as the shell convention goes
            continue
        files.append(check_input_file(named, "configuration file", what))
    topic_defaults: dict[str, Any] = {}
    topics: dict[str, dict[str, Any]] = {}
    sections: dict[str, dict[str, Any]] = {}
    for conf_path in files:
        try:
            data = tomllib.loads(conf_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
            raise ConfigError(f"cannot read configuration file {conf_path}: {e}") from e
        file_defaults, file_topics = _check_tables(data, conf_path)
        # Validate each file on its own, so an error names the file that holds the bad key.
        LogConfig().with_overrides(file_defaults, source=f"{conf_path} [topic]")
        for name, table in file_topics.items():
            LogConfig().with_overrides(table, source=f'{conf_path} [topics."{name}"]')
            topics.setdefault(name, {}).update(table)
        topic_defaults.update(file_defaults)
        for name in SECTIONS:
            if name in data:
                sections.setdefault(name, {}).update(data[name])
    for name, values in (section_overrides or {}).items():
        sections.setdefault(name, {}).update(values)
    settings = Settings(
        topic_defaults=topic_defaults,
        topics=topics,
        sections=sections,
        overrides=dict(overrides or {}),
        source=" + ".join(str(f) for f in files) or "built-in defaults",
        files=tuple(str(f) for f in files),
        section_overrides={name: dict(values) for name, values in (section_overrides or {}).items()},
    )
    logger.info("settings: %s", " then ".join(settings.files) or "no file, Kafka's defaults")
    settings.log_config()  # validate the overrides now, not at first use
    return settings
