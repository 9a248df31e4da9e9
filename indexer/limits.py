"""Kafka's numeric limits, defined once for every layer."""

INT32_MAX = 2**31 - 1
"""Java's ``Integer.MAX_VALUE``: the largest file position, relative offset, batch size or partition."""

INT64_MAX = 2**63 - 1
"""Java's ``Long.MAX_VALUE``: "no limit" for offsets and timestamps."""
