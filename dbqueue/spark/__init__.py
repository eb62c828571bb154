"""dbqueue's data pipeline on Spark: the ``dbqueue`` PySpark data source (needs the ``spark``
extra: ``pip install dbqueue[spark]``).

>>> from dbqueue.spark import register
>>> register(spark)
>>> df.write.format("dbqueue").option("url", URL).option("queue", "shop_order").save()
>>> spark.readStream.format("dbqueue").option("url", URL).option("queue", "shop_order").load()
>>> spark.read.format("dbqueue").option("url", URL).option("queue", "shop_order") \\
...     .option("state", "failed").load()

See :mod:`dbqueue.spark.source` for the options, :mod:`dbqueue.spark.writer`,
:mod:`dbqueue.spark.stream` and :mod:`dbqueue.spark.reader` for what each mode guarantees.
"""

from __future__ import annotations

from typing import Any

from dbqueue.spark.source import DBQueueDataSource

__all__ = ["DBQueueDataSource", "register"]


def register(spark: Any) -> None:
    """Register the ``dbqueue`` format with a SparkSession (once per session)."""
    spark.dataSource.register(DBQueueDataSource)
