"""Where a Spark job's ranks are: the barrier stage's tasks, grouped by executor host,
turned into ranks and each rank's environment. Pure functions over plain data; no Spark.

Ranks are numbered host by host, hosts in the order their first task appears among the
stage's partitions, the tasks of a host in partition order: the placement of
``gcurun -H`` and of Horovod's ``get_host_assignments``
(:mod:`gcurun.launch.elastic.assignment`), so LOCAL_RANK counts a host's ranks, whichever
of that host's executors each runs in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gcurun.launch.elastic.assignment import assign_slots, layout
from gcurun.launch.elastic.records import Assignment
from gcurun.launch.remote.rank_env import DeviceList, rank_environment


@dataclass(frozen=True)
class TaskReport:
    """What one barrier task tells the others before its rank starts: the devices Spark
    gave it (empty when Spark schedules none) and a port free on its host (MASTER_PORT,
    when its rank is 0)."""

    devices: tuple[str, ...] = ()
    port: int = 0


def host_of(address: str) -> str:
    """The host of an executor address ``host:port`` (``[v6]:port`` too)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        return address
    return host.strip("[]")


def assign_ranks(hosts: Sequence[str]) -> list[Assignment]:
    """The assignment of each partition (index) given the host of each partition's task:
    its ``worker`` is the partition, ranks grouped host by host (see the module)."""
    partitions: dict[str, list[int]] = {}
    for partition, host in enumerate(hosts):
        partitions.setdefault(host, []).append(partition)
    slots = assign_slots([(host, len(parts)) for host, parts in partitions.items()], None)
    in_rank_order = layout(slots, [partitions[host][slot] for host, slot in slots])
    by_partition = {a.worker: a for a in in_rank_order}
    return [by_partition[p] for p in range(len(hosts))]


def rank_of_partition(hosts: Sequence[str], partition: int) -> Assignment:
    """The assignment of ``partition``'s rank (see :func:`assign_ranks`)."""
    return assign_ranks(hosts)[partition]


def task_environment(hosts: Sequence[str], reports: Sequence[TaskReport], partition: int,
                     device_var: str | None) -> dict[str, str]:
    """The identity variables of ``partition``'s rank (:func:`rank_environment`).

    A rank's device is the first Spark gave its task, else its local rank; the device
    variable lists the devices of every rank of its host in local-rank order, so index
    LOCAL_RANK is its own, as in every Horovod recipe. MASTER_ADDR is rank 0's host,
    MASTER_PORT the port rank 0's task found free there.
    """
    places = assign_ranks(hosts)
    mine = places[partition]
    rank0 = next(a for a in places if a.rank == 0)
    host_devices = [_device(places[p], reports[p]) for p in _host_ranks(places, mine.host)]
    return rank_environment(
        rank=mine.rank, size=mine.size, local_rank=mine.local_rank,
        local_size=mine.local_size, cross_rank=mine.cross_rank, cross_size=mine.cross_size,
        node_rank=_host_index(places, mine.host), hostname=mine.host,
        master_addr=rank0.host, master_port=reports[rank0.worker].port,
        device_var=device_var, device=_device(mine, reports[partition]) if device_var else None,
        visible_devices=DeviceList(host_devices) if device_var else None,
        node_count=len({a.host for a in places}))


def _device(place: Assignment, report: TaskReport) -> str:
    return report.devices[0] if report.devices else str(place.local_rank)


def _host_ranks(places: Sequence[Assignment], host: str) -> list[int]:
    """The partitions of ``host``'s ranks, in local-rank order."""
    return [a.worker for a in sorted(places, key=lambda a: a.rank) if a.host == host]


def _host_index(places: Sequence[Assignment], host: str) -> int:
    order: list[str] = []
    for a in sorted(places, key=lambda a: a.rank):
        if a.host not in order:
            order.append(a.host)
    return order.index(host)


def hosts_text(hosts: Sequence[str]) -> str:
    """``host:count`` per host in rank order (for messages)."""
    counts: dict[str, int] = {}
    for a in sorted(assign_ranks(hosts), key=lambda a: a.rank):
        counts[a.host] = counts.get(a.host, 0) + 1
    return ",".join(f"{h}:{n}" for h, n in counts.items())


def shared_environment(env: Mapping[str, str] | None) -> dict[str, str]:
    """The caller's ``env`` as strings (what every rank gets besides its identity)."""
    return {str(k): str(v) for k, v in dict(env or {}).items()}
