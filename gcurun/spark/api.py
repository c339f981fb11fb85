"""The errors of gcurun's Spark jobs (each also the built-in type Horovod's raises, so
code written for ``horovod.spark`` catches them as before)."""

from __future__ import annotations

from gcurun.errors import LaunchError, UsageError


class SparkUsageError(UsageError, ValueError):
    """Arguments of ``gcurun.spark.run`` that cannot make a job (Horovod raises
    ValueError)."""


class SparkStartTimeout(LaunchError, TimeoutError):
    """Not every rank started within ``start_timeout`` (Horovod raises TimeoutError);
    the Spark job was cancelled and no rank is left running."""


class SparkJobFailed(LaunchError):
    """The Spark job of the ranks ended before every rank returned: an executor or a
    rank's process was lost, or the job was cancelled from Spark."""
