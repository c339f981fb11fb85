"""Horovod-style jobs on a Spark cluster: ``run`` starts one rank per task of a Spark
barrier stage and returns what each rank's function returned, in rank order.

    from pyspark.sql import SparkSession
    import gcurun.spark

    spark = SparkSession.builder.getOrCreate()
    results = gcurun.spark.run(train, num_proc=4)   # train() calls hvd.init()

Horovod's module names are here (``gcurun.spark.run``, ``gcurun.spark.run_elastic``), so
code written for ``horovod.spark`` runs with its import changed. pyspark is imported only
when a job starts. See docs/spark.md.
"""

from __future__ import annotations

from gcurun.spark.api import SparkJobFailed, SparkStartTimeout, SparkUsageError
from gcurun.spark.elastic import run_elastic
from gcurun.spark.runner import run

__all__ = ["SparkJobFailed", "SparkStartTimeout", "SparkUsageError", "run", "run_elastic"]
