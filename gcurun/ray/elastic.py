"""Horovod's first elastic API on Ray (``horovod.ray.elastic``, deprecated there since
0.25 in favour of ``RayExecutor(min_workers=...)``): :class:`ElasticRayExecutor` with its
settings, on the same machinery as :mod:`gcurun.ray.elastic_v2`."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gcurun.ray.api import RayUsageError
from gcurun.ray.elastic_v2 import ElasticAdapter, check_elastic
from gcurun.ray.elastic_v2 import RayHostDiscovery as _RayHostDiscovery


class RayHostDiscovery(_RayHostDiscovery):
    """Ray's live nodes as hosts (this module's argument names: ``cpus_per_slot``,
    ``gpus_per_slot``)."""

    def __init__(self, use_gpu: bool = False, cpus_per_slot: float = 1,
                 gpus_per_slot: float | None = 1) -> None:
        super().__init__(use_gpu=use_gpu, cpus_per_worker=cpus_per_slot,
                         gpus_per_worker=gpus_per_slot)


@dataclass
class ElasticSettings:
    """The settings of :class:`ElasticRayExecutor` (Horovod's names)."""

    min_num_proc: int = 1
    max_num_proc: int | None = None
    reset_limit: int | None = None
    elastic_timeout: float = 600
    timeout_s: float = 30
    cooldown_range: tuple[int, int] | None = None
    placement_group_timeout_s: float = 100
    ssh_identity_file: str | None = None
    nics: Any = None
    verbose: int = 1
    discovery: Any = None
    elastic: bool = True


class ElasticRayExecutor:
    """An elastic job over the whole Ray cluster (Horovod's ``ElasticRayExecutor``):
    each ``run(worker_fn)`` runs ``worker_fn()`` on one worker per slot of
    ``cpus_per_slot`` CPUs (and ``gpus_per_slot`` GPUs) the cluster's live nodes offer,
    between ``min_num_proc`` and ``max_num_proc`` of them."""

    @staticmethod
    def create_settings(min_num_proc: int = 1, max_num_proc: int | None = None,
                        reset_limit: int | None = None, elastic_timeout: float = 600,
                        timeout_s: float = 30, ssh_identity_file: str | None = None,
                        nics: Any = None, min_np: int | None = None,
                        max_np: int | None = None, **kwargs: Any) -> ElasticSettings:
        if min_np is not None:
            warnings.warn("min_np is deprecated, use min_num_proc instead", DeprecationWarning,
                          stacklevel=2)
            min_num_proc = min_np
        if max_np is not None:
            warnings.warn("max_np is deprecated, use max_num_proc instead", DeprecationWarning,
                          stacklevel=2)
            max_num_proc = max_np
        known = {k: v for k, v in kwargs.items()
                 if k in ("cooldown_range", "placement_group_timeout_s", "verbose")}
        return ElasticSettings(min_num_proc=min_num_proc, max_num_proc=max_num_proc,
                               reset_limit=reset_limit, elastic_timeout=elastic_timeout,
                               timeout_s=timeout_s, ssh_identity_file=ssh_identity_file,
                               nics=nics, **known)

    def __init__(self, settings: ElasticSettings, use_gpu: bool = False,
                 cpus_per_slot: float = 1, gpus_per_slot: float | None = None,
                 env_vars: Mapping[str, Any] | None = None,
                 override_discovery: bool = True) -> None:
        if gpus_per_slot and not use_gpu:
            raise RayUsageError(f"ElasticRayExecutor(gpus_per_slot={gpus_per_slot!r}, "
                                "use_gpu=False): gpus_per_slot needs use_gpu=True")
        params = check_elastic(None, None, settings.min_num_proc, settings.max_num_proc,
                               settings.reset_limit, settings.cooldown_range,
                               settings.elastic_timeout, override_discovery, cpus_per_slot,
                               use_gpu, gpus_per_slot)
        assert params is not None
        if override_discovery:
            settings.discovery = RayHostDiscovery(use_gpu=use_gpu, cpus_per_slot=cpus_per_slot,
                                                  gpus_per_slot=params.gpus_per_worker)
        self.settings = settings
        self.params = params
        self.env_vars = dict(env_vars or {})
        self.adapter: ElasticAdapter | None = None

    def start(self) -> None:
        """Get ready to run (the workers start with each :meth:`run`)."""
        p = self.params
        self.adapter = ElasticAdapter(
            self.settings, p.min_workers, p.max_workers, p.use_gpu, p.cpus_per_worker,
            p.gpus_per_worker, override_discovery=False, reset_limit=p.reset_limit,
            cooldown_range=p.cooldown_range, elastic_timeout=p.elastic_timeout)
        self.adapter.start(extra_env_vars=self.env_vars)

    def run(self, worker_fn: Callable[[], Any],
            callbacks: Sequence[Callable[[Any], None]] | None = None) -> list[Any]:
        """``worker_fn()`` on every worker, as one elastic job; what the workers that
        finished returned, in the last generation's rank order."""
        if self.adapter is None:
            raise RayUsageError("ElasticRayExecutor.run(): call start() first")
        return self.adapter.run(worker_fn, callbacks=callbacks)
