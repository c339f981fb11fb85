"""The rank plans of an elastic job, made by the planner of a static job.

A static job is the elastic case min = max: the same :func:`plan_job` places the ranks,
and the elastic layout (:mod:`.assignment`) then gives each rank its worker id, rank,
size and the variables of an elastic worker. The runner plans each batch of workers it
starts this way; ``--dry-run`` plans the first generation from the hosts discovery gives.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from gcurun.config.api import Settings
from gcurun.hosts.api import HostSpec
from gcurun.launch.api import LaunchPlan
from gcurun.launch.elastic.assignment import assign_slots, layout
from gcurun.launch.elastic.config import ElasticConfig
from gcurun.launch.elastic.records import Assignment
from gcurun.launch.remote.rank_env import DeviceList, rank_environment


def worker_settings(settings: Settings, hosts: Sequence[HostSpec]) -> Settings:
    """The job's settings for workers on ``hosts``: every slot of them, started by
    gcurun's own launcher (local or SSH, by host)."""
    return dataclasses.replace(settings, hosts=tuple(hosts), np=sum(h.slots for h in hosts),
                               launcher=None, oversubscribe=True)


def worker_environment(a: Assignment, *, master_addr: str, master_port: int,
                       liveness: float, device_var: str | None = None,
                       device: str | None = None,
                       visible_devices: DeviceList | Sequence[str] | None = None
                       ) -> dict[str, str]:
    """The variables of the elastic worker ``a``: its generation's rank, size and
    layout (:func:`rank_environment`), its worker id and the elastic flags. Every
    launcher of elastic workers (processes, Ray actors) gives them these."""
    env = rank_environment(
        rank=a.rank, size=a.size, local_rank=a.local_rank, local_size=a.local_size,
        cross_rank=a.cross_rank, cross_size=a.cross_size, node_rank=a.cross_rank,
        hostname=a.host, master_addr=master_addr, master_port=master_port,
        device_var=device_var, device=device, visible_devices=visible_devices)
    env.update(GCURUN_ELASTIC_WORKER=str(a.worker), GCURUN_ELASTIC="1",
               HOROVOD_ELASTIC="1", GCURUN_LIVENESS_TIMEOUT_SECONDS=f"{liveness:g}")
    return env


def worker_plan(command: Sequence[str], settings: Settings, hosts: Sequence[HostSpec],
                assignments: Sequence[Assignment], *, liveness: float) -> LaunchPlan:
    """The plan of the workers ``assignments`` on ``hosts`` (each with at least the
    slots its workers use): a rank per assignment, numbered by its worker id, with its
    generation's rank, size and layout in its environment. Raises PlanError as
    :func:`plan_job` does."""
    from gcurun.launch.prepare import plan_job

    plan = plan_job(command, worker_settings(settings, hosts))
    by_slot = {(r.host, r.local_rank): r for r in plan.ranks}
    ranks = []
    for a in assignments:
        r = by_slot[(a.host, a.slot)]
        env = dict(r.env)
        env.update(worker_environment(a, master_addr=plan.master_addr,
                                      master_port=plan.master_port, liveness=liveness,
                                      device_var=plan.device_var, device=r.device,
                                      visible_devices=r.visible_devices))
        ranks.append(dataclasses.replace(r, rank=a.worker, env=env))
    return dataclasses.replace(plan, ranks=tuple(ranks))


def first_assignments(config: ElasticConfig,
                      hosts: Sequence[HostSpec]) -> tuple[Assignment, ...]:
    """The first generation on ``hosts`` (discovery's first answer): every slot, host
    by host, up to ``max_np``; workers 0..N-1 hold ranks 0..N-1."""
    slots = assign_slots([(h.name, h.slots) for h in hosts], config.max_np)
    return layout(slots, list(range(len(slots))))


def first_plan(command: Sequence[str], settings: Settings, config: ElasticConfig,
               hosts: Sequence[HostSpec], *, liveness: float) -> LaunchPlan:
    """The rank plan of the first generation on ``hosts``, as the runner will start it
    once ``config.first_np`` slots are there."""
    assignments = first_assignments(config, hosts)
    used: dict[str, int] = {}
    for a in assignments:
        used[a.host] = used.get(a.host, 0) + 1
    trimmed = [dataclasses.replace(h, slots=used[h.name]) for h in hosts if h.name in used]
    return worker_plan(command, settings, trimmed, assignments, liveness=liveness)
