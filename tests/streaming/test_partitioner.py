"""murmur2 and the default partitioner against kafka-python's reference implementation."""

from __future__ import annotations

import warnings

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from indexer.errors import SchemaError
from streaming.partitioner import murmur2, partition_for_keys

with warnings.catch_warnings():  # kafka-python 3 imports its protocol JSON with a deprecated API
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.partitioner.default import murmur2 as kp_murmur2


def _reference_partition(key: bytes, n: int) -> int:
    return (kp_murmur2(key) & 0x7FFFFFFF) % n


def test_murmur2_matches_kafka_python_on_random_keys() -> None:
    rng = np.random.default_rng(7)
    keys = [rng.bytes(int(n)) for n in rng.integers(0, 40, size=2000)]
    ours = murmur2(pa.array(keys, type=pa.binary()))
    ref = np.array([kp_murmur2(k) for k in keys], dtype=np.uint32)
    # kafka-python returns the hash as an unsigned 32-bit value; ours is Java's int with the same bits.
    np.testing.assert_array_equal(ours.view(np.uint32), ref)


def test_known_java_values() -> None:
    # Values printed by Java's Utils.murmur2 (also asserted in Kafka's UtilsTest.testMurmur2).
    keys = [
        b"21",
        b"foobar",
        b"a-little-bit-long-string",
        b"a-little-bit-longer-string",
        b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
    ]
    expected = [-973932308, -790332482, -985981536, -1486304829, -58897971]
    assert murmur2(pa.array(keys)).tolist() == expected


@settings(deadline=None)
@given(
    st.lists(st.one_of(st.none(), st.binary(max_size=64)), min_size=1, max_size=50),
    st.integers(1, 64),
    st.integers(0, 1000),
)
def test_partition_for_keys_property(keys: list[bytes | None], n: int, start: int) -> None:
    parts = partition_for_keys(pa.array(keys, type=pa.binary()), n, null_key_start=start)
    assert parts.dtype == np.int32
    null_seen = 0
    for key, part in zip(keys, parts.tolist(), strict=True):
        if key is None:
            assert part == (start + null_seen) % n
            null_seen += 1
        else:
            assert part == _reference_partition(key, n)


def test_string_large_binary_and_sliced_keys() -> None:
    words = [f"user-{i}" for i in range(100)]
    expected = [_reference_partition(w.encode(), 7) for w in words]
    assert partition_for_keys(pa.array(words), 7).tolist() == expected
    assert partition_for_keys(pa.array(words, type=pa.large_string()), 7).tolist() == expected
    chunked = pa.chunked_array([pa.array(words[:30]), pa.array(words[30:])])
    assert partition_for_keys(chunked, 7).tolist() == expected
    assert partition_for_keys(pa.array(words).slice(10, 50), 7).tolist() == expected[10:60]


def test_null_keys_spread_evenly() -> None:
    parts = partition_for_keys(pa.nulls(4000, type=pa.binary()), 4, null_key_start=3)
    assert parts[0] == 3
    assert np.bincount(parts, minlength=4).tolist() == [1000] * 4


def test_rejects_non_binary_keys_and_bad_partition_count() -> None:
    with pytest.raises(SchemaError, match="key column must be binary or string"):
        partition_for_keys(pa.array([1, 2]), 3)
    with pytest.raises(ValueError, match="num_partitions"):
        partition_for_keys(pa.array([b"a"]), 0)
