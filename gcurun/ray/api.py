"""The errors of gcurun's Ray executor (each also the built-in type Horovod's raises, so
code written for ``horovod.ray`` catches them as before)."""

from __future__ import annotations

from gcurun.errors import LaunchError, UsageError


class RayUsageError(UsageError, ValueError):
    """Arguments of the executor that cannot make a job (Horovod raises ValueError)."""


class RayStartTimeout(LaunchError, TimeoutError):
    """The job's placement group or actors were not ready in time (Horovod raises
    TimeoutError); nothing of the job is left running."""


class ExecutorStateError(LaunchError, RuntimeError):
    """A call the executor cannot serve in its state: before ``start()`` or after
    ``shutdown()``."""


class RayElasticJobFailed(LaunchError, RuntimeError):
    """An elastic job on Ray ended badly (Horovod raises RuntimeError): every worker
    failed, the reset limit was reached, or too few slots stayed available. The first
    error a worker's function raised, if any, is its ``__cause__``."""
