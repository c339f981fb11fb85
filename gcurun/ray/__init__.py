"""Horovod-style jobs on a Ray cluster: ``RayExecutor`` runs one rank per Ray actor,
placed by a placement group, joined through gcurun's rendezvous (the tcp runtime).

    import ray
    from gcurun.ray import RayExecutor

    ray.init()
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=60), num_workers=4)
    executor.start()
    ranks = executor.run(train)     # train() calls hvd.init() (gcurun.runtime.torch)
    executor.shutdown()

``RayExecutor(settings, min_workers=1, max_workers=4)`` runs an elastic job instead
(:mod:`gcurun.ray.elastic_v2`). Horovod's module names are here (``gcurun.ray.runner``,
``.strategy``, ``.worker``, ``.elastic``, ``.elastic_v2``, ``.ray_logger``), so
code written for ``horovod.ray`` runs with its import changed. Ray itself is imported
only when a job starts. See docs/ray.md.
"""

from __future__ import annotations

from gcurun.ray import ray_logger
from gcurun.ray.api import (
    ExecutorStateError,
    RayElasticJobFailed,
    RayStartTimeout,
    RayUsageError,
)
from gcurun.ray.discovery import HostDiscovery
from gcurun.ray.elastic import ElasticRayExecutor
from gcurun.ray.elastic_v2 import RayHostDiscovery
from gcurun.ray.runner import Coordinator, MiniSettings, RayExecutor
from gcurun.ray.worker import BaseHorovodWorker

__all__ = ["BaseHorovodWorker", "Coordinator", "ElasticRayExecutor", "ExecutorStateError",
           "HostDiscovery", "MiniSettings", "RayElasticJobFailed", "RayExecutor",
           "RayHostDiscovery", "RayStartTimeout", "RayUsageError", "ray_logger"]
