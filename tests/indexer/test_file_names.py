from __future__ import annotations

from pathlib import Path

import pytest

from indexer import file_names as fn
from indexer.errors import InvalidTopicError


def test_names_are_twenty_digits() -> None:
    assert fn.log_file(Path("d"), 0).name == "00000000000000000000.log"
    assert fn.offset_index_file(Path("d"), 1700000000000).name == "00000001700000000000.index"
    assert fn.time_index_file(Path("d"), 5, ".deleted").name == "00000000000000000005.timeindex.deleted"
    assert fn.offset_from_file_name("00000000000000368769.log.swap") == 368769


@pytest.mark.parametrize("bad", ["", ".", "..", "a/b", "../etc", "a b", "x" * 250, "caf\u00e9", "a\x00"])
def test_illegal_topics_are_rejected(bad: str) -> None:
    with pytest.raises(InvalidTopicError):
        fn.validate_topic(bad)


@pytest.mark.parametrize("good", ["events", "__consumer_offsets", "a.b-c_d", "x" * 249])
def test_legal_topics(good: str) -> None:
    assert fn.validate_topic(good) == good


def test_partition_dir_round_trip() -> None:
    assert fn.partition_dir_name("my-topic", 3) == "my-topic-3"
    assert fn.parse_topic_partition_name("my-topic-3") == ("my-topic", 3)
    assert fn.parse_topic_partition_name("t-0.0123456789abcdef0123456789abcdef-delete") == ("t", 0)
    for bad in ["nodash", "-1", "t-", "t-x"]:
        with pytest.raises(ValueError):
            fn.parse_topic_partition_name(bad)
    with pytest.raises(ValueError):
        fn.partition_dir_name("t", -1)
    # Kafka's partition is an int32 (checkpoint files, the protocol): a larger one is no partition
    assert fn.partition_dir_name("t", 2**31 - 1) == "t-2147483647"
    with pytest.raises(ValueError, match="partition must be an integer in 0..2147483647"):
        fn.partition_dir_name("t", 2**31)
    with pytest.raises(ValueError, match="partition"):
        fn.parse_topic_partition_name("t-2147483648")
