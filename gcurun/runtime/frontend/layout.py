"""Which ranks share a host: local and cross ranks from a list of host names."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class RankLayout:
    rank: int
    size: int
    local_rank: int
    local_size: int
    cross_rank: int
    cross_size: int
    homogeneous: bool


def derive_rank_layout(hosts: Sequence[str], rank: int) -> RankLayout:
    """Local rank: position among the ranks of the same host (in rank order). Cross rank:
    position among the ranks with the same local rank (Horovod's definition)."""
    local_ranks = []
    seen: dict[str, int] = {}
    for host in hosts:
        local_ranks.append(seen.get(host, 0))
        seen[host] = seen.get(host, 0) + 1
    local_rank = local_ranks[rank]
    same_local = [r for r, lr in enumerate(local_ranks) if lr == local_rank]
    return RankLayout(
        rank=rank,
        size=len(hosts),
        local_rank=local_rank,
        local_size=seen[hosts[rank]],
        cross_rank=same_local.index(rank),
        cross_size=len(same_local),
        homogeneous=len(set(seen.values())) == 1,
    )
