"""Where a Ray job's ranks are: the Ray nodes its actors landed on, turned into ranks and
each rank's environment. Pure functions over plain data; no Ray here.

Ranks are numbered node by node, in the order the nodes first appear among the actors
(as gcurun's own plan places ranks host by host), so the ranks of one node are
consecutive and LOCAL_RANK counts them in order; CROSS_RANK counts the ranks before it
with the same local rank, the runtime's rule (Horovod's, and ``gcurun -H``'s).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gcurun.launch.remote.rank_env import DeviceList, rank_environment


@dataclass(frozen=True)
class WorkerSite:
    """Where one actor runs: its Ray node, that node's address, and the accelerator ids
    Ray assigned to it (empty without accelerators)."""

    node_id: str
    address: str
    devices: tuple[str, ...] = ()


@dataclass(frozen=True)
class RankPlace:
    """One rank's place among the job's nodes."""

    rank: int
    size: int
    local_rank: int
    local_size: int
    cross_rank: int
    cross_size: int
    node_rank: int


def rank_order(node_ids: Sequence[str]) -> list[int]:
    """The actors' indices in rank order: grouped by node, nodes in order of first
    appearance, actors of a node in their given order."""
    groups: dict[str, list[int]] = {}
    for index, node in enumerate(node_ids):
        groups.setdefault(node, []).append(index)
    return [index for members in groups.values() for index in members]


def rank_places(node_of_rank: Sequence[str]) -> list[RankPlace]:
    """Each rank's local and cross place, for ranks 0..n-1 on ``node_of_rank[r]``, by
    the runtime's own rule (:func:`derive_rank_layout`: local ranks count a node's ranks
    in rank order, cross ranks the ranks of the same local rank in rank order), so what
    the executor tells a rank is what the rank derives. Ranks need not be consecutive
    per node (Horovod's coordinator takes any order). ``node_rank`` numbers the nodes in
    order of first appearance."""
    from gcurun.runtime.frontend.layout import derive_rank_layout

    node_index: dict[str, int] = {}
    for node in node_of_rank:
        node_index.setdefault(node, len(node_index))
    places = []
    for rank, node in enumerate(node_of_rank):
        derived = derive_rank_layout(node_of_rank, rank)
        places.append(RankPlace(rank=rank, size=derived.size, local_rank=derived.local_rank,
                                local_size=derived.local_size, cross_rank=derived.cross_rank,
                                cross_size=derived.cross_size, node_rank=node_index[node]))
    return places


def host_names(sites: Sequence[WorkerSite]) -> list[str]:
    """The name each rank's host goes by (GCURUN_HOSTNAME): its node's address, unless
    several Ray nodes share that address (nodes on one machine), then the node id."""
    ids_at: dict[str, set[str]] = {}
    for site in sites:
        ids_at.setdefault(site.address, set()).add(site.node_id)
    return [site.address if len(ids_at[site.address]) == 1 else site.node_id
            for site in sites]


def worker_environments(sites: Sequence[WorkerSite], *, master_port: int,
                        device_var: str | None) -> list[dict[str, str]]:
    """Every rank's identity variables (:func:`rank_environment`), ``sites`` in rank order.

    The device variable of a rank lists the devices of every rank of its node, in local
    rank order (so index LOCAL_RANK is its own when each rank has one, as in Horovod's
    Ray executor); GCURUN_DEVICE is its first own device. MASTER_ADDR is rank 0's node.
    """
    places = rank_places([s.node_id for s in sites])
    names = host_names(sites)
    node_devices: dict[str, list[str]] = {}
    for site in sites:
        node_devices.setdefault(site.node_id, []).extend(site.devices)
    shared = {node: DeviceList(ids) for node, ids in node_devices.items()}
    envs = []
    for site, place, name in zip(sites, places, names, strict=True):
        device = site.devices[0] if device_var and site.devices else None
        envs.append(rank_environment(
            rank=place.rank, size=place.size, local_rank=place.local_rank,
            local_size=place.local_size, cross_rank=place.cross_rank,
            cross_size=place.cross_size, node_rank=place.node_rank, hostname=name,
            master_addr=sites[0].address, master_port=master_port,
            device_var=device_var if device is not None else None, device=device,
            visible_devices=shared[site.node_id] if device is not None else None,
            node_count=len(node_devices)))
    return envs


def horovod_facts(place: RankPlace) -> Mapping[str, int]:
    """Horovod's coordinator's view of a rank's place (numbers, as Horovod gives them)."""
    return {"HOROVOD_CROSS_RANK": place.cross_rank, "HOROVOD_CROSS_SIZE": place.cross_size,
            "HOROVOD_LOCAL_RANK": place.local_rank, "HOROVOD_LOCAL_SIZE": place.local_size}
