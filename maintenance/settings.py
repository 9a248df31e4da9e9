"""Periods of the scheduled maintenance jobs: the ``[maintenance]`` section of ``conf/seglog.toml``.

Keys are Kafka's broker names where Kafka has a task for the job (``log.retention.check.interval.ms``,
``log.flush.scheduler.interval.ms``, ...) and ``seglog.*`` names for the jobs Kafka does not
schedule separately (a time-based roll check without appends, index care). All values are
milliseconds. A period of ``Long.MAX`` (Kafka's default for ``log.flush.scheduler.interval.ms``)
means "never": the job is not scheduled at all, because no timer can represent 292 million years.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from indexer.config import Settings, coerce_int
from indexer.errors import ConfigError
from indexer.limits import INT64_MAX

# Periods at or above this many ms are treated as "never" (datetime.timedelta tops out near 2.7e9 years,
# but APScheduler adds periods to datetimes, which overflow past year 9999).
NEVER_MS = 100 * 365 * 24 * 3600 * 1000  # 100 years

# key -> (attribute, default ms, minimum ms, doc)
_KEYS: dict[str, tuple[str, int, int, str]] = {
    "log.initial.task.delay.ms": ("initial_task_delay_ms", 30000, 0, "delay before the periodic jobs first run"),
    "log.retention.check.interval.ms": (
        "retention_check_interval_ms",
        300000,
        1,
        "retention pass (time, size, log start offset)",
    ),
    "log.flush.scheduler.interval.ms": (
        "flush_scheduler_interval_ms",
        INT64_MAX,
        1,
        "flush logs whose last flush is older than flush.ms",
    ),
    "log.flush.offset.checkpoint.interval.ms": (
        "flush_offset_checkpoint_interval_ms",
        60000,
        1,
        "write recovery-point-offset-checkpoint",
    ),
    "log.flush.start.offset.checkpoint.interval.ms": (
        "flush_start_offset_checkpoint_interval_ms",
        60000,
        1,
        "write log-start-offset-checkpoint",
    ),
    "replica.high.watermark.checkpoint.interval.ms": (
        "high_watermark_checkpoint_interval_ms",
        5000,
        1,
        "write replication-offset-checkpoint",
    ),
    "seglog.roll.check.interval.ms": (
        "roll_check_interval_ms",
        60000,
        1,
        "roll active segments older than segment.ms without an append",
    ),
    "seglog.index.check.interval.ms": (
        "index_check_interval_ms",
        300000,
        1,
        "trim, sanity-check and rebuild indexes of inactive segments",
    ),
    "seglog.misfire.grace.ms": (
        "misfire_grace_ms",
        60000,
        1,
        "a run later than this is skipped (and coalesced with the next)",
    ),
}


@dataclass(frozen=True, slots=True)
class MaintenanceSettings:
    """The job periods in ms; attribute names are the keys without their prefix, in snake_case."""

    initial_task_delay_ms: int = 30000
    retention_check_interval_ms: int = 300000
    flush_scheduler_interval_ms: int = INT64_MAX
    flush_offset_checkpoint_interval_ms: int = 60000
    flush_start_offset_checkpoint_interval_ms: int = 60000
    high_watermark_checkpoint_interval_ms: int = 5000
    roll_check_interval_ms: int = 60000
    index_check_interval_ms: int = 300000
    misfire_grace_ms: int = 60000

    def __post_init__(self) -> None:
        for key, (attr, _default, minimum, _doc) in _KEYS.items():
            value = getattr(self, attr)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{key} must be an integer number of ms, got {value!r}")
            if value < minimum:
                raise ConfigError(f"{key} must be >= {minimum}, got {value}")

    @classmethod
    def from_mapping(
        cls, values: Mapping[str, Any], *, source: str | Callable[[str], str] = "[maintenance]"
    ) -> MaintenanceSettings:
        """Build from Kafka-named keys; unknown keys and non-integers raise :class:`ConfigError`
        naming ``source`` (or ``source(key)``: where that key was set)."""
        changes: dict[str, int] = {}
        for key, value in values.items():
            where = source(key) if callable(source) else source
            spec = _KEYS.get(key)
            if spec is None:
                raise ConfigError(f"unknown maintenance key {key!r} ({where}); known keys: {', '.join(_KEYS)}")
            changes[spec[0]] = coerce_int(key, value, where)
            if changes[spec[0]] < spec[2]:
                raise ConfigError(f"{key} must be >= {spec[2]}, got {changes[spec[0]]} ({where})")
            if changes[spec[0]] > INT64_MAX:
                raise ConfigError(f"{key} must be <= {INT64_MAX} (a long in Kafka), got {changes[spec[0]]} ({where})")
        return dataclasses.replace(cls(), **changes)

    @classmethod
    def from_settings(cls, settings: Settings) -> MaintenanceSettings:
        """The ``[maintenance]`` section of loaded ``conf/seglog.toml`` settings (and ``--config``)."""
        return cls.from_mapping(
            settings.section("maintenance"), source=lambda key: settings.section_source("maintenance", key)
        )

    def to_dict(self) -> dict[str, int]:
        """Kafka-named keys and their values."""
        return {key: getattr(self, spec[0]) for key, spec in _KEYS.items()}


def is_never(period_ms: int) -> bool:
    """True when ``period_ms`` is so long that the job is not scheduled (Kafka's Long.MAX = never)."""
    return period_ms >= NEVER_MS


def maintenance_keys() -> dict[str, str]:
    """Every ``[maintenance]`` key with its default and one-line description (for docs and help)."""
    return {key: f"{spec[3]} (default {spec[1]})" for key, spec in _KEYS.items()}
