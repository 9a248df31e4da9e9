"""Collect a DataFrame to the driver as Arrow record batches, handing each over as it arrives.

``DataFrame.toArrow`` returns only once the last batch is in, so whatever the caller does with the
data waits for the whole collect. Underneath (``pyspark/sql/pandas/conversion.py``,
``_collect_as_arrow``) the JVM (``Dataset.collectAsArrowToPython``) streams the record batches over a
local socket as each Spark task finishes, so out of partition order, and sends last the list that
puts them in order. :func:`collect_arrow` yields them the same way, so the sink can validate and
encode each batch while Spark is still producing the others.

Spark hands ``foreachBatch`` the micro-batch as a ``LogicalRDD`` of its rows, and scanning that
copies every row once more before the Arrow conversion copies it again. :func:`micro_batch_plan`
finds the plan the rows come from (the query's ``lastExecution``), so the sink collects from it.

This uses PySpark internals (a py4j method of the Dataset, the socket helper and the serializer
behind ``toArrow``, the streaming query's ``lastExecution`` and checkpoint), all in this one module; written
against pyspark 4.2. If a pyspark release moves the collect's internals, the sink fails with a
:class:`~indexer.errors.ConfigError` saying so; if it moves ``lastExecution``, the sink collects
the ``LogicalRDD`` as handed over (and logs why at debug level).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import pyarrow as pa

from indexer.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

logger = logging.getLogger(__name__)

SPARK_QUERY_ID_PROPERTY = "sql.streaming.queryId"  # StreamExecution.QUERY_ID_KEY: a local property of the batch
TEMPORARY_CHECKPOINT = re.compile(r"temporary-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
"""The name of the checkpoint directory Spark makes up for a query without one (see :func:`temporary_checkpoint`)."""


def empty_arrow_table(df: DataFrame) -> pa.Table | None:
    """No rows, with the Arrow schema ``df`` would be collected with (PySpark's ``to_arrow_schema``, UTC
    timestamps); None for a schema PySpark cannot convert (the collect then finds out)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    try:
        schema = to_arrow_schema(df.schema, timezone="UTC")
    except Exception as e:  # noqa: BLE001 - PySpark raises several kinds for types it cannot convert
        logger.debug("no Arrow schema for %s: %s", df.schema.simpleString(), e)
        return None
    return schema.empty_table()


def micro_batch_plan(batch_df: DataFrame) -> DataFrame | None:
    """``batch_df``, as Spark handed it to ``foreachBatch``, over the micro-batch's own physical plan;
    None when that is not possible (then collect ``batch_df`` itself).

    ``ForeachBatchSink`` turns the micro-batch into a ``LogicalRDD`` over the rows of the batch's
    ``IncrementalExecution``, the query's ``lastExecution``; the scan of a ``LogicalRDD`` projects each
    row into a new ``UnsafeRow``. A DataFrame over ``lastExecution`` itself skips that copy (in
    ``seglog bench sink``'s micro-batches ~8% less JVM CPU per collect). It is used only when
    ``batch_df`` is provably that micro-batch unchanged: a ``LogicalRDD`` over the very RDD of
    ``lastExecution`` (same RDD id), of the query :func:`_running_query` finds.
    """
    from py4j.protocol import Py4JError
    from pyspark.sql import DataFrame

    try:
        jdf = batch_df._jdf
        logical = jdf.queryExecution().logical()
        if logical.getClass().getSimpleName() != "LogicalRDD":
            return None
        query = _running_query(batch_df)
        execution = query.lastExecution() if query is not None else None
        if execution is None or logical.rdd().id() != execution.toRdd().id():
            return None
        jvm = batch_df.sparkSession._jvm
        assert jvm is not None
        return DataFrame(jvm.org.apache.spark.sql.classic.Dataset(execution, jdf.encoder()), batch_df.sparkSession)
    except (Py4JError, AttributeError) as e:
        logger.debug("collecting the micro-batch as foreachBatch handed it over: %s", e)
        return None


def temporary_checkpoint(batch_df: DataFrame) -> str | None:
    """The checkpoint of the streaming query running ``batch_df`` when Spark made it up because the query has
    no ``checkpointLocation`` (``StreamingQueryManager.createQuery``: ``Utils.createTempDir(namePrefix =
    "temporary")``, a ``temporary-<uuid>`` directory of the JVM's ``java.io.tmpdir``, deleted when the query
    stops); None for any other checkpoint, or when the query cannot be found (then nothing is refused)."""
    from py4j.protocol import Py4JError

    try:
        query = _running_query(batch_df)
        if query is None:
            return None
        root = str(query.resolvedCheckpointRoot())
        jvm = batch_df.sparkSession._jvm
        assert jvm is not None
        tmp = Path(str(jvm.java.lang.System.getProperty("java.io.tmpdir"))).resolve()
    except (Py4JError, AttributeError) as e:
        logger.debug("cannot tell the checkpoint of the micro-batch's query: %s", e)
        return None
    path = Path(urlparse(root).path)
    return root if path.parent == tmp and TEMPORARY_CHECKPOINT.fullmatch(path.name) else None


def _running_query(batch_df: DataFrame) -> Any:
    """The JVM ``StreamExecution`` running the micro-batch ``batch_df``, or None (not in a streaming query).
    The query is found through the default session, the one that started it (``foreachBatch`` gets a clone
    of that session, whose query manager does not know it).

    Raises:
        Py4JError, AttributeError: the installed pyspark lacks what this relies on.
    """
    query_id = batch_df.sparkSession.sparkContext.getLocalProperty(SPARK_QUERY_ID_PROPERTY)
    if not query_id:
        return None
    jvm = batch_df.sparkSession._jvm
    assert jvm is not None
    default = jvm.org.apache.spark.sql.SparkSession.getDefaultSession()
    query = default.get().streams().get(query_id) if default.isDefined() else None
    return query.streamingQuery() if query is not None else None


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
