"""The local SparkSession seglog's job, benchmarks and tests run on.

pyspark is imported inside the functions: ``import streaming`` must stay light (style checklist 6).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from indexer.errors import ConfigError, StorageError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)

DEFAULT_SPARK_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    # Micro-batches reach the sink as Arrow (DataFrame.toArrow); keep Arrow on for every conversion,
    # in record batches large enough that per-batch overhead does not dominate the collect (10,000 by
    # default; 100,000 measured 2x faster for 200-byte records on 2 cores).
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.execution.arrow.maxRecordsPerBatch": "100000",
    # The collect sends record batches zstd-compressed (level 1): the JVM copies the batch several times
    # between its tasks and the socket, and for the benchmark's JSON events compressing is cheaper than
    # copying (collect ~30% faster, JVM CPU -30%). Spark's lz4 codec is unusable here (~20 s per 100k rows).
    "spark.sql.execution.arrow.compression.codec": "zstd",
    "spark.sql.execution.arrow.compression.zstd.level": "1",
    # Task results up to 128 MiB (Spark's RPC message limit) go straight to the driver instead of
    # through the block manager (default 1 MiB): the Arrow collect of a micro-batch is ~30% faster.
    "spark.task.maxDirectResultSize": "128m",
    # query.stop() waits this long (ms) for the running micro-batch before interrupting it.
    "spark.sql.streaming.stopTimeout": "60000",
}


# Where every Spark process runs on this machine, the driver listens on the loopback address only. Not
# on a master that spans machines: executors there connect back to spark.driver.host.
LOOPBACK_CONF: dict[str, str] = {"spark.driver.bindAddress": "127.0.0.1", "spark.driver.host": "127.0.0.1"}
# The same for the JVMs' own choice of a local address (block managers, executors), made before any
# configuration is read: without it Spark warns at start that the hostname resolves to a loopback
# address and picks another interface's.
LOOPBACK_ENV: dict[str, str] = {"SPARK_LOCAL_IP": "127.0.0.1"}
# Spark's logging in the JVMs a new session starts (the driver's, local-cluster's executors): its errors
# only. Without it Spark printed its start-up lines (its log4j profile and log level, NativeCodeLoader's
# warning) and every warning between seglog's own output. A user's $LOG4J_CONFIGURATION_FILE is kept.
LOG4J_CONF: Path = Path(__file__).with_name("log4j2.properties")


def runs_on_one_machine(master: str | None) -> bool:
    """Whether every process of Spark master ``master`` runs on this machine: ``local``, ``local[...]``
    or ``local-cluster[...]`` (not standalone ``spark://``, YARN, Kubernetes); None is Spark's
    default, ``local``."""
    return master is None or master == "local" or master.startswith(("local[", "local-cluster["))


def session_conf(master: str, conf: Mapping[str, str] | None = None) -> dict[str, str]:
    """The configuration :func:`build_spark_session` gives a session on ``master``: seglog's defaults
    (the loopback driver address only where :func:`runs_on_one_machine`), ``conf`` overriding them."""
    loopback = LOOPBACK_CONF if runs_on_one_machine(master) else {}
    return {**DEFAULT_SPARK_CONF, **loopback, **(conf or {})}


def build_spark_session(
    master: str = "local[2]", app_name: str = "seglog", conf: Mapping[str, str] | None = None
) -> SparkSession:
    """Get or create a SparkSession with seglog's defaults, ``conf`` overriding them.

    No ``spark.jars.packages`` is set: the Kafka and Delta sources need their packages installed
    by the user (see docs/streaming.md).
    """
    from pyspark.sql import SparkSession

    # Python workers (the seglog data source's planner and readers) must run this interpreter, which has
    # seglog and pyarrow; Spark's own fallback is whatever "python3" is on the PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("LOG4J_CONFIGURATION_FILE", LOG4J_CONF.as_uri())
    if runs_on_one_machine(master):
        for name, value in LOOPBACK_ENV.items():
            os.environ.setdefault(name, value)
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in session_conf(master, conf).items():
        builder = builder.config(key, value)
    handler = signal.getsignal(signal.SIGINT)
    spark = builder.getOrCreate()
    if handler is not None and handler not in (signal.default_int_handler, signal.getsignal(signal.SIGINT)):
        # A new SparkContext takes over Ctrl-C (it cancels every job and raises KeyboardInterrupt): give
        # it back to the caller that set its own, e.g. `seglog run`, which stops after the running batch.
        signal.signal(signal.SIGINT, handler)
    logger.info("Spark %s session %r on %s", spark.version, app_name, master)
    return spark


def local_path(location: str) -> Path:
    """A local path from a plain path or a ``file:`` URI; other schemes raise ``ValueError``."""
    parsed = urlparse(location)
    if parsed.scheme in ("", "file"):
        return Path(parsed.path if parsed.scheme else location)
    raise ValueError(f"{location!r} is not a local path (scheme {parsed.scheme!r})")


def local_log_dir(location: str | os.PathLike[str]) -> Path:
    """The log directory ``location`` names: a plain path or a ``file:`` URI, as Spark takes paths
    (``load("file:///data/logs")``); the sink, the source and ``seglog run`` read it here alike.

    Raises:
        ConfigError: a URI of another scheme (``hdfs://...``): seglog reads and writes a filesystem
            mounted where it runs, never through Hadoop's.
    """
    try:
        return local_path(os.fspath(location))
    except ValueError as e:
        raise ConfigError(
            f"log directory {e}: seglog needs a mounted filesystem (for executors, one mounted on each)"
        ) from None


def read_checkpoint_query_id(checkpoint_location: str) -> str | None:
    """The persistent query ``id`` Spark stores in ``<checkpointLocation>/metadata``, None if absent.

    The id is created with the checkpoint and survives restarts; a new checkpoint gets a new id.

    Raises:
        StorageError: the metadata file exists but cannot be read or has no ``id``.
    """
    path = local_path(checkpoint_location) / "metadata"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as e:
        raise StorageError(
            f"cannot read Spark checkpoint metadata {path}: {e.strerror}", path=path, errno=e.errno
        ) from e
    try:
        query_id = json.loads(text.splitlines()[0])["id"]
    except (IndexError, KeyError, TypeError, json.JSONDecodeError) as e:
        raise StorageError(f"Spark checkpoint metadata {path} has no query id: {e!r}", path=path) from e
    return str(query_id)
