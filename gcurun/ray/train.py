"""A Ray Train backend for gcurun: ``hvd.init()`` inside a Ray Train loop just works.

    from ray.train import ScalingConfig
    from gcurun.ray.train import DataParallelTrainer, GcurunConfig

    def train_loop(config):
        import gcurun.runtime.torch as hvd
        hvd.init()                  # this worker's rank, size, local and cross ranks
        ...

    DataParallelTrainer(train_loop, backend_config=GcurunConfig(),
                        scaling_config=ScalingConfig(num_workers=4)).fit()

Ray Train's extension point is a ``BackendConfig`` whose ``backend_cls`` prepares the
worker group before the loop starts. :class:`GcurunBackend` asks every worker where it
runs, numbers ranks as Ray Train does (its world rank; local ranks per node), gives each
worker the variables any gcurun launcher gives a rank, and serves the job's
authenticated rendezvous from the process that runs the backend (Ray Train V2's
controller actor, or the driver under V1) until the run ends. It uses only the worker
group calls both Ray Train versions have (``execute``, ``execute_single_async``).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

from ray.train.backend import Backend, BackendConfig

from gcurun.ray._layout import WorkerSite, worker_environments
from gcurun.ray._rendezvous import JobRendezvous, rendezvous_host

log = logging.getLogger("gcurun.ray")

TIMEOUT_VARIABLE = "GCURUN_TIMEOUT_SECONDS"


@dataclass
class GcurunConfig(BackendConfig):
    """The backend config of a Ray Train run whose loop uses ``gcurun.runtime``
    (``hvd.init()``). ``timeout_s`` bounds the ranks' rendezvous and any collective that
    makes no progress (GCURUN_TIMEOUT_SECONDS on every worker)."""

    timeout_s: float = 300

    @property
    def backend_cls(self) -> type[GcurunBackend]:
        return GcurunBackend


# Ray's removed Horovod trainer called it this.
HorovodConfig = GcurunConfig


def _trainer_class() -> type:
    from ray.train.v2._internal.constants import is_v2_enabled

    if is_v2_enabled():
        from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer as v2
        return v2
    from ray.train.data_parallel_trainer import DataParallelTrainer as v1
    return v1


# Ray Train's DataParallelTrainer of the version this Ray runs: V2 by default in Ray
# 2.50 and later, V1 with RAY_TRAIN_V2_ENABLED=0. GcurunConfig works with both.
DataParallelTrainer = _trainer_class()


def _site() -> tuple[str, str, list[str], int]:
    import ray

    return (str(ray.get_runtime_context().get_node_id()), ray.util.get_node_ip_address(),
            [], os.getpid())


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


def _set_env(env: dict[str, str]) -> None:
    os.environ.update(env)


def _leave() -> None:
    from gcurun.ray.worker import leave_runtime

    leave_runtime(None)


class GcurunBackend(Backend):
    """Prepares Ray Train's workers as ranks of one gcurun job (see the module's doc)."""

    share_cuda_visible_devices: bool = True

    def __init__(self) -> None:
        # Ray Train pickles the backend before a run (to its controller): nothing here
        # may hold a lock or a socket until on_start.
        self._rendezvous: dict[int, JobRendezvous] = {}

    def on_start(self, worker_group: Any, backend_config: BackendConfig) -> None:
        import ray

        found = worker_group.execute(_site)
        sites = [WorkerSite(node, address) for node, address, _, _ in found]
        port = worker_group.execute_single(0, _free_port)
        envs = worker_environments(sites, master_port=port, device_var=None)
        timeout = float(getattr(backend_config, "timeout_s", GcurunConfig.timeout_s))
        shared = {TIMEOUT_VARIABLE: f"{timeout:g}"}
        if len(sites) > 1:
            here = str(ray.get_runtime_context().get_node_id())
            host = rendezvous_host(here, ray.util.get_node_ip_address(),
                                   [s.node_id for s in sites])
            rendezvous = JobRendezvous(host, len(sites))
            self._rendezvous[id(worker_group)] = rendezvous
            shared.update(rendezvous.environment())
        ray.get([worker_group.execute_single_async(rank, _set_env, {**env, **shared})
                 for rank, env in enumerate(envs)])
        log.info("gcurun backend: %d ranks on %d nodes", len(sites),
                 len({s.node_id for s in sites}))

    def on_shutdown(self, worker_group: Any, backend_config: BackendConfig) -> None:
        try:
            worker_group.execute(_leave)
        except Exception as exc:  # noqa: BLE001 - workers may be gone; the rendezvous closes
            log.debug("gcurun backend: workers could not leave the runtime: %s", exc)
        finally:
            rendezvous = self._rendezvous.pop(id(worker_group), None)
            if rendezvous is not None:
                rendezvous.close()
