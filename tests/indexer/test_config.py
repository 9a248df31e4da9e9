from __future__ import annotations

from pathlib import Path

import pytest

from indexer.config import LogConfig, load_settings, parse_overrides, topic_config_keys
from indexer.errors import ConfigError, InputFileError
from indexer.limits import INT64_MAX


def test_defaults_are_kafkas() -> None:
    c = LogConfig()
    assert c.segment_bytes == 1073741824
    assert c.segment_index_bytes == 10485760
    assert c.index_interval_bytes == 4096
    assert c.max_message_bytes == 1048588
    assert c.retention_ms == 604800000 and c.retention_bytes == -1
    assert c.flush_messages == INT64_MAX and c.flush_ms == INT64_MAX
    assert c.file_delete_delay_ms == 60000
    assert c.message_timestamp_type == "CreateTime"


def test_repo_default_file_matches_builtin_defaults() -> None:
    settings = load_settings(Path(__file__).resolve().parents[2] / "conf" / "seglog.toml")
    assert settings.log_config() == LogConfig()
    assert settings.section("maintenance")["log.retention.check.interval.ms"] == 300000


def test_layering_file_topic_then_overrides(tmp_path: Path) -> None:
    conf = tmp_path / "s.toml"
    conf.write_text(
        '[topic]\n"segment.bytes" = 2048\n"retention.ms" = 10\n'
        '[topics."orders"]\n"retention.ms" = 20\n'
        '[streaming]\n"topic" = "x"\n'
    )
    s = load_settings(conf, overrides=parse_overrides(["retention.bytes=99"]))
    assert s.log_config().segment_bytes == 2048
    assert s.log_config().retention_ms == 10
    assert s.log_config("orders").retention_ms == 20
    assert s.log_config("orders").retention_bytes == 99
    assert s.section("streaming")["topic"] == "x"  # the file's key replaces the packaged one
    assert s.section("streaming")["num.partitions"] == 4  # the packaged file's keys stay
    assert s.section("absent") == {}


@pytest.mark.parametrize(
    "values, fragment",
    [
        ({"segment.byte": 1}, "unknown topic config key 'segment.byte'"),
        ({"segment.bytes": 13}, "segment.bytes must be >= 14"),
        ({"segment.bytes": "abc"}, "segment.bytes must be an integer"),
        ({"retention.ms": -2}, "retention.ms must be >= -1"),
        # Kafka's int and long configs: --config retention.ms=99999999999999999999999 was accepted.
        ({"segment.bytes": 2**31}, "segment.bytes must be <= 2147483647 \\(an int in Kafka\\)"),
        ({"max.message.bytes": 2**31}, "max.message.bytes must be <= 2147483647"),
        ({"retention.ms": 2**63}, "retention.ms must be <= 9223372036854775807 \\(a long in Kafka\\)"),
        ({"message.timestamp.type": "Now"}, "message.timestamp.type must be one of"),
        ({"preallocate": "maybe"}, "preallocate must be true or false"),
        ({"compression.type": "brotli"}, "compression.type must be one of"),
    ],
)
def test_invalid_values_name_the_key(values: dict[str, object], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        LogConfig.from_mapping(values)


def test_string_values_from_the_cli_are_coerced() -> None:
    c = LogConfig.from_mapping({"segment.bytes": "1_024", "preallocate": "TRUE", "retention.ms": "-1"})
    assert (c.segment_bytes, c.preallocate, c.retention_ms) == (1024, True, -1)
    assert c.to_dict()["segment.bytes"] == 1024


def test_parse_overrides_rejects_missing_equals() -> None:
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_overrides(["segment.bytes"])


def test_missing_explicit_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(InputFileError, match=r"^configuration file .*nope.toml \(--conf\) does not exist$"):
        load_settings(tmp_path / "nope.toml")
    with pytest.raises(InputFileError, match=rf"^configuration file {tmp_path} \(--conf\) is a directory, not a file$"):
        load_settings(tmp_path)


def test_bad_toml_names_the_file(tmp_path: Path) -> None:
    conf = tmp_path / "bad.toml"
    conf.write_text("[topic\n")
    with pytest.raises(ConfigError, match="bad.toml"):
        load_settings(conf)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('"retention.ms" = 1000\n', "unknown key 'retention.ms' outside any table"),
        ('[maintenace]\n"seglog.misfire.grace.ms" = 5\n', r"unknown table \[maintenace\]"),
        ("topic = 5\n", r"topic .* must be a table \[topic\], got 5"),
        ("topics = 5\n", r"topics .* must be a table"),
        ("[topics]\nevents = 5\n", r'topics.events .* must be a table \[topics."events"\]'),
        # TOML reads an unquoted dotted key as nested tables: the error said "unknown ... 'retention'".
        (
            "[topic]\nretention.ms = 1000\n",
            r'\[topic\]: retention.ms = 1000 is read by TOML as nested tables.*"retention.ms" = 1000',
        ),
        (
            "[maintenance]\nseglog.misfire.grace.ms = 5\n",
            r"\[maintenance\]: seglog.misfire.grace.ms = 5 is read by TOML",
        ),
        ('[topics.my.topic]\n"retention.ms" = 5\n', r'\[topics."my"\]: topic."retention.ms" = 5 is read by TOML'),
        ("retention.ms = 1000\n", r"retention.ms = 1000 is read by TOML as nested tables.*under \[topic\]"),
    ],
)
def test_a_file_holds_only_the_tables_seglog_reads(tmp_path: Path, text: str, fragment: str) -> None:
    """A key outside any table or a misspelt table would be ignored without a word: an error instead."""
    conf = tmp_path / "mine.toml"
    conf.write_text(text)
    with pytest.raises(ConfigError, match=fragment) as info:
        load_settings(conf)
    assert "mine.toml" in str(info.value)


def test_jitter_is_bounded() -> None:
    c = LogConfig.from_mapping({"segment.jitter.ms": 100, "segment.ms": 50})
    assert all(0 <= c.random_segment_jitter() < 50 for _ in range(200))
    assert LogConfig().random_segment_jitter() == 0


def test_every_key_has_a_description() -> None:
    assert all(topic_config_keys().values())


def test_the_values_of_compression_type_are_all_named_where_a_user_looks() -> None:
    """compression.type takes `uncompressed` (Kafka's name for none), but neither the packaged
    conf/seglog.toml's comment nor the key's description (shown by --help) named it."""
    from indexer.config import _COMPRESSION_TYPES

    conf = (Path(__file__).resolve().parents[2] / "conf" / "seglog.toml").read_text()
    (comment,) = [line.split("#", 1)[1] for line in conf.splitlines() if line.startswith('"compression.type"')]
    for value in _COMPRESSION_TYPES:
        assert f" {value} " in f" {comment} ", (value, comment)
        assert value in topic_config_keys()["compression.type"].split("|"), value


@pytest.mark.parametrize(
    ("compression_type", "asked", "stored"),
    [
        ("producer", None, "none"),
        ("producer", "zstd", "zstd"),
        ("uncompressed", "gzip", "none"),
        ("none", "lz4", "none"),
        ("lz4", None, "lz4"),
        ("lz4", "gzip", "lz4"),
    ],
)
def test_stored_codec_is_the_compression_type_rule(compression_type: str, asked: str | None, stored: str) -> None:
    assert LogConfig(compression_type=compression_type).stored_codec(asked) == stored


def test_stored_codec_refuses_an_unknown_codec() -> None:
    with pytest.raises(ValueError, match="unknown compression 'brotli'"):
        LogConfig().stored_codec("brotli")


def test_batch_size_is_a_topic_key() -> None:
    assert LogConfig().batch_size == 65536
    assert LogConfig.from_mapping({"batch.size": "16384"}).batch_size == 16384
    with pytest.raises(ConfigError, match="batch.size must be >= 0"):
        LogConfig.from_mapping({"batch.size": -1})


@pytest.mark.parametrize("policy", ["compact", "delete", "compact,delete"])
def test_cleanup_policy_is_refused_not_ignored(policy: str) -> None:
    # seglog never compacts (README, Configuration; docs/design.md): a topic asking for it must not
    # be taken silently, whatever the value (even Kafka's default, delete)
    with pytest.raises(ConfigError, match="unknown topic config key 'cleanup.policy'"):
        load_settings(overrides={"cleanup.policy": policy})
