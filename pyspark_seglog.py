"""The ``seglog`` Spark data source, registered by Spark itself in every SparkSession.

Spark 4 imports, at the first data source call of a session, every top-level module on the Python
path whose name starts with ``pyspark_`` and registers its ``DefaultSource``
(``pyspark/sql/worker/lookup_data_sources.py``). Installing seglog installs this module, so
``spark.readStream.format("seglog")`` works without any set-up call. See docs/reader.md.
"""

from streaming.reader import SeglogDataSource as DefaultSource

__all__ = ["DefaultSource"]
