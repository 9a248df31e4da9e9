"""Collect a DataFrame to the driver as Arrow record batches, handing each over as it arrives.

``DataFrame.toArrow`` returns only once the last batch is in, so whatever the caller does with the
data waits for the whole collect. Underneath (``pyspark/sql/pandas/conversion.py``,
``_collect_as_arrow``) the JVM (``Dataset.collectAsArrowToPython``) streams the record batches over a
local socket as each Spark task finishes, so out of partition order, and sends last the list that
puts them in order. :func:`collect_arrow` yields them the same way, so the sink can validate and
encode each batch while Spark is still producing the others.

This uses PySpark internals (a py4j method of the Dataset, the socket helper and the serializer
behind ``toArrow``), all in this one module; written against pyspark 4.2. If a pyspark release
moves them, the sink fails with a :class:`~indexer.errors.ConfigError` saying so.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from indexer.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def collect_arrow(df: DataFrame) -> Iterator[pa.RecordBatch | list[int]]:
    """Run ``df`` and yield its Arrow record batches as the driver receives them, then their order.

    The last item is a list ``order``: ``[batches[i] for i in order]``, with ``batches`` in the order
    they were yielded, is the DataFrame's row order (what ``toArrow`` returns). A DataFrame without
    rows yields one empty batch of its schema and ``[0]``, as ``toArrow`` gives an empty table.
    Batches keep the types the JVM sent (timestamps in the session time zone, where ``toArrow`` casts
    them to UTC: the same instants). Read the iterator to the end: the query's own error, if any,
    is raised once the stream is drained.

    Raises:
        ConfigError: the installed pyspark lacks the internals this relies on.
        Exception: what the Spark job raised (as PySpark raises it from ``toArrow``).
    """
    load_from_socket, serializer, unwrap_spark_exception, (port, secret, server) = _start_collect(df)
    arrived = 0
    try:
        with load_from_socket((port, secret), serializer) as stream:
            for item in stream:
                if isinstance(item, pa.RecordBatch):
                    arrived += 1
                    yield item
                elif arrived:
                    yield list(item)
                else:  # no rows: the JVM sent no batch
                    yield _empty_batch(df)
                    yield [0]
    finally:
        with unwrap_spark_exception():
            server.getResult()  # joins the JVM's serving thread, raising the job's error


def _start_collect(df: DataFrame) -> tuple[Any, Any, Any, tuple[Any, str, Any]]:
    """Start the JVM's collect; returns (``_load_from_socket``, an ``ArrowCollectSerializer``,
    ``unwrap_spark_exception``, the JVM's ``(port, secret, server)``).

    Raises:
        ConfigError: the installed pyspark no longer has one of them.
    """
    import pyspark
    from py4j.protocol import Py4JError, Py4JJavaError

    try:
        from pyspark.errors.exceptions.captured import unwrap_spark_exception
        from pyspark.sql.pandas.serializers import ArrowCollectSerializer
        from pyspark.util import _load_from_socket

        started = df._jdf.collectAsArrowToPython()
    except Py4JJavaError:
        raise
    except (ImportError, AttributeError, Py4JError) as e:
        raise ConfigError(
            f"pyspark {pyspark.__version__} lacks the Arrow collect internals seglog's sink uses (written for "
            f"pyspark 4.2: Dataset.collectAsArrowToPython, pyspark.util._load_from_socket, ArrowCollectSerializer): {e}"
        ) from e
    serializer = ArrowCollectSerializer()  # type: ignore[no-untyped-call]
    return _load_from_socket, serializer, unwrap_spark_exception, tuple(started)


def _empty_batch(df: DataFrame) -> pa.RecordBatch:
    """An empty batch of ``df``'s schema, typed as ``toArrow`` types an empty result."""
    from pyspark.sql.pandas.types import to_arrow_schema

    (large,) = df.sparkSession._jconf.getConfs(["spark.sql.execution.arrow.useLargeVarTypes"])
    schema = to_arrow_schema(df.schema, timezone="UTC", prefers_large_types=large == "true")
    return pa.RecordBatch.from_pylist([], schema=schema)
