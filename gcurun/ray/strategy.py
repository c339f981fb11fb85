"""How a job's actors are placed on the Ray cluster (Horovod's ``horovod.ray.strategy``).

A strategy reserves the job's resources in a placement group and creates one actor per
rank in it; the executor then learns where each actor landed and numbers the ranks.

- :class:`PGStrategy` (``num_workers``): one bundle per worker, ``PACK`` by default (as
  few nodes as possible), ``SPREAD`` on request; or the placement group the caller runs
  in, when there is one.
- :class:`ColocatedStrategy` (``num_hosts`` x ``num_workers_per_host``): one bundle per
  host, ``STRICT_SPREAD``, so every host runs the same number of workers.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Literal

from gcurun.ray.api import RayStartTimeout
from gcurun.ray.worker import BaseHorovodWorker

log = logging.getLogger("gcurun.ray")

PlacementStrategy = Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"]
PLACEMENT_STRATEGIES: tuple[PlacementStrategy, ...] = (
    "PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


def create_placement_group(resources_per_bundle: Mapping[str, float], num_bundles: int,
                           pg_timeout: float, pg_strategy: str) -> tuple[Any, list[dict]]:
    """A placement group of ``num_bundles`` copies of ``resources_per_bundle``, ready
    within ``pg_timeout`` seconds; returns it and its bundles.

    Raises RayStartTimeout (a TimeoutError) when the cluster cannot place it in time,
    naming what was asked and what is free; the group is removed then, so it does not
    take the resources later."""
    import ray

    bundle = {name: amount for name, amount in resources_per_bundle.items() if amount}
    bundles = [dict(bundle) for _ in range(num_bundles)]
    pg = ray.util.placement_group(bundles, strategy=pg_strategy)
    ready, _ = ray.wait([pg.ready()], timeout=pg_timeout)
    if not ready:
        ray.util.remove_placement_group(pg)
        raise RayStartTimeout(
            f"the placement group of {num_bundles} x {bundle} ({pg_strategy}) was not "
            f"placed within placement_group_timeout_s={pg_timeout:g} s; the cluster has "
            f"{ray.available_resources()} free: ask for fewer workers or resources, add "
            "nodes (or use an autoscaling cluster), or raise placement_group_timeout_s")
    return pg, bundles


class BaseStrategy:
    """Reserves resources and creates the actors; :meth:`shutdown` gives back what it
    reserved."""

    placement_group: Any = None
    workers: list[Any]
    _created_placement_group = False

    def __init__(self, *, settings: Any, use_gpu: bool, cpus_per_worker: float,
                 gpus_per_worker: float | None) -> None:
        self.settings = settings
        self.use_gpu = use_gpu
        self.cpus_per_worker = cpus_per_worker
        self.gpus_per_worker = gpus_per_worker or 1
        self.workers = []

    @property
    def num_workers(self) -> int:
        raise NotImplementedError

    def resources_per_worker(self) -> dict[str, float]:
        return {"CPU": self.cpus_per_worker,
                "GPU": self.gpus_per_worker * int(self.use_gpu)}

    def create_workers(self) -> tuple[list[Any], list[Any]]:
        """Create the actors (not waiting for them to start); returns them, in the
        order of their first rank guess, and one actor per bundle (Horovod's
        ``node_workers``)."""
        raise NotImplementedError

    def _actor(self, bundle_index: int, world_rank: int) -> Any:
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        remote_cls = ray.remote(BaseHorovodWorker)
        return remote_cls.options(
            num_cpus=self.cpus_per_worker,
            num_gpus=self.gpus_per_worker * int(self.use_gpu),
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                placement_group=self.placement_group,
                placement_group_bundle_index=bundle_index,
                placement_group_capture_child_tasks=False),
        ).remote(world_rank=world_rank, world_size=self.num_workers)

    def shutdown(self) -> None:
        """Remove the placement group this strategy created (not one it inherited).
        Idempotent; the actors are the executor's to kill."""
        if self._created_placement_group and self.placement_group is not None:
            import ray

            ray.util.remove_placement_group(self.placement_group)
        self.placement_group = None
        self._created_placement_group = False
        self.workers = []


class ColocatedStrategy(BaseStrategy):
    """``num_workers_per_host`` workers on each of ``num_hosts`` distinct nodes."""

    def __init__(self, *, settings: Any, num_hosts: int, num_workers_per_host: int,
                 use_gpu: bool, cpus_per_worker: float,
                 gpus_per_worker: float | None) -> None:
        super().__init__(settings=settings, use_gpu=use_gpu, cpus_per_worker=cpus_per_worker,
                         gpus_per_worker=gpus_per_worker)
        self.num_hosts = num_hosts
        self.num_workers_per_host = num_workers_per_host

    @property
    def num_workers(self) -> int:
        return int(self.num_hosts * self.num_workers_per_host)

    def create_workers(self) -> tuple[list[Any], list[Any]]:
        per_host = {name: amount * self.num_workers_per_host
                    for name, amount in self.resources_per_worker().items()}
        self.placement_group, bundles = create_placement_group(
            per_host, self.num_hosts, self.settings.placement_group_timeout_s,
            "STRICT_SPREAD")
        self._created_placement_group = True
        self.workers = [self._actor(host, host * self.num_workers_per_host + i)
                        for host in range(len(bundles))
                        for i in range(self.num_workers_per_host)]
        return self.workers, self.workers[::self.num_workers_per_host]


class PGStrategy(BaseStrategy):
    """``num_workers`` workers, one bundle each, packed onto few nodes (``PACK``) or
    spread (``SPREAD``); in the caller's placement group when it runs in one."""

    def __init__(self, *, settings: Any, num_workers: int, use_gpu: bool,
                 cpus_per_worker: float, gpus_per_worker: float | None,
                 placement_group: Any = None, force_create_placement_group: bool = False,
                 placement_strategy: PlacementStrategy = "PACK") -> None:
        super().__init__(settings=settings, use_gpu=use_gpu, cpus_per_worker=cpus_per_worker,
                         gpus_per_worker=gpus_per_worker)
        self._num_workers = num_workers
        self.placement_strategy = placement_strategy
        if not force_create_placement_group:
            from ray.util.placement_group import get_current_placement_group

            self.placement_group = placement_group or get_current_placement_group()
        self._created_placement_group = False

    @property
    def num_workers(self) -> int:
        return int(self._num_workers)

    def create_workers(self) -> tuple[list[Any], list[Any]]:
        if self.placement_group is None:
            self.placement_group, _ = create_placement_group(
                self.resources_per_worker(), self.num_workers,
                self.settings.placement_group_timeout_s, self.placement_strategy)
            self._created_placement_group = True
        else:
            log.info("running the workers in the caller's placement group "
                     "(use_current_placement_group=False makes one of the job's own)")
        self.workers = [self._actor(index if self._created_placement_group else -1, index)
                        for index in range(self.num_workers)]
        return self.workers, list(self.workers)
