"""The [maintenance] section: Kafka's key names, defaults, validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from indexer.config import load_settings
from indexer.errors import ConfigError
from indexer.limits import INT64_MAX
from maintenance.settings import MaintenanceSettings, is_never, maintenance_keys


def test_defaults_are_kafkas() -> None:
    s = MaintenanceSettings()
    assert s.retention_check_interval_ms == 300_000
    assert s.flush_scheduler_interval_ms == INT64_MAX and is_never(s.flush_scheduler_interval_ms)
    assert s.flush_offset_checkpoint_interval_ms == 60_000
    assert s.flush_start_offset_checkpoint_interval_ms == 60_000
    assert s.initial_task_delay_ms == 30_000
    assert s.high_watermark_checkpoint_interval_ms == 5_000
    assert set(s.to_dict()) == set(maintenance_keys())


def test_read_from_the_toml_section(tmp_path: Path) -> None:
    conf = tmp_path / "seglog.toml"
    conf.write_text(
        '[maintenance]\n"log.retention.check.interval.ms" = 1000\n"seglog.roll.check.interval.ms" = "2_000"\n'
    )
    s = MaintenanceSettings.from_settings(load_settings(conf))
    assert s.retention_check_interval_ms == 1000 and s.roll_check_interval_ms == 2000
    assert s.index_check_interval_ms == MaintenanceSettings().index_check_interval_ms


def test_the_shipped_conf_file_loads() -> None:
    repo_conf = Path(__file__).resolve().parents[2] / "conf" / "seglog.toml"
    s = MaintenanceSettings.from_settings(load_settings(repo_conf))
    assert s.retention_check_interval_ms >= 1


@pytest.mark.parametrize(
    ("values", "match"),
    [
        ({"log.retention.check.interval": 5}, "unknown maintenance key 'log.retention.check.interval'"),
        ({"log.retention.check.interval.ms": 0}, "log.retention.check.interval.ms must be >= 1"),
        ({"seglog.index.check.interval.ms": "soon"}, "must be an integer"),
        ({"log.initial.task.delay.ms": True}, "must be an integer"),
    ],
)
def test_bad_values_name_the_key(values: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        MaintenanceSettings.from_mapping(values)


def test_a_bad_value_names_where_it_was_set(tmp_path: Path) -> None:
    """A `--config` value is blamed on --config, not on the settings files it never came from."""
    conf = tmp_path / "mine.toml"
    conf.write_text('[maintenance]\n"seglog.misfire.grace.ms" = "later"\n')
    with pytest.raises(ConfigError, match=r"got 'later' \(.*mine\.toml \[maintenance\]\)"):
        MaintenanceSettings.from_settings(load_settings(conf))
    overridden = load_settings(section_overrides={"maintenance": {"seglog.index.check.interval.ms": "soon"}})
    with pytest.raises(ConfigError, match=r"got 'soon' \(--config\)"):
        MaintenanceSettings.from_settings(overridden)


def test_an_out_of_range_value_names_where_it_was_set(tmp_path: Path) -> None:
    """Out of range is blamed on its file (or --config) as a non-integer is: an operator with several
    settings files must not have to guess which one holds the 0."""
    conf = tmp_path / "mine.toml"
    conf.write_text('[maintenance]\n"log.retention.check.interval.ms" = 0\n')
    with pytest.raises(ConfigError, match=r"must be >= 1, got 0 \(.*mine\.toml \[maintenance\]\)"):
        MaintenanceSettings.from_settings(load_settings(conf))
    conf.write_text('[topics."t"]\n"retention.ms" = -7\n')
    with pytest.raises(ConfigError, match=r'retention.ms must be >= -1, got -7 \(.*mine\.toml \[topics."t"\]\)'):
        load_settings(conf).log_config("t")
    overridden = load_settings(section_overrides={"maintenance": {"seglog.misfire.grace.ms": "-5"}})
    with pytest.raises(ConfigError, match=r"must be >= 1, got -5 \(--config\)"):
        MaintenanceSettings.from_settings(overridden)
