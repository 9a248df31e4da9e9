"""Kafka's numeric limits, defined once for every layer, and the one check of an integer argument."""

from __future__ import annotations

import operator

from indexer.errors import InvalidArgumentError

INT32_MAX = 2**31 - 1
"""Java's ``Integer.MAX_VALUE``: the largest file position, relative offset, batch size or partition."""

INT64_MAX = 2**63 - 1
"""Java's ``Long.MAX_VALUE``: "no limit" for offsets and timestamps."""

INT64_MIN = -(2**63)
"""Java's ``Long.MIN_VALUE``."""

MAX_NEW_PARTITIONS = 10_000
"""The most partitions one topic creation or growth makes: Kafka's KRaft controller refuses a larger
CreateTopics request ("Excessively large number of partitions per request",
``ReplicationControlManager.MAX_PARTITIONS_PER_BATCH``) and a CreatePartitions one of more metadata
records (``QuorumController.MAX_RECORDS_PER_USER_OP``). A topic grows past it in several steps."""


def integer_argument(name: str, value: object, *, low: int = INT64_MIN, high: int = INT64_MAX) -> int:
    """``value`` as a Python ``int`` if it is an integer in ``low..high`` (Kafka's ``long`` by default).

    The check every public engine entry point makes of an offset, count, partition or time, since Java's
    types make it for Kafka: a float would be read as its floor or stored as an offset, a bool counts as
    0 or 1, and a number past int64 fails deep in numpy. Integers of any kind (``numpy.int64`` too) pass.

    Raises:
        InvalidArgumentError: anything else, naming ``name``.
    """
    if not isinstance(value, bool):
        try:
            number = operator.index(value)  # type: ignore[arg-type]
        except TypeError:
            pass
        else:
            if low <= number <= high:
                return number
    raise InvalidArgumentError(
        f"{name} must be an integer in {low}..{high}, got {value!r} ({type(value).__name__})",
        argument=name,
        value=value,
    )
