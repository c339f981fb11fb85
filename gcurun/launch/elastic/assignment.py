"""Which worker gets which rank: the elastic driver's pure helpers for laying out a
generation (Horovod's ``get_host_assignments``)."""

from __future__ import annotations

from gcurun.launch.elastic.records import Assignment, HostRecord


def assign_slots(hosts: list[tuple[str, int]], max_np: int | None) -> list[tuple[str, int]]:
    """(host, slot) per rank: host by host in order, each up to its slots, at most
    ``max_np`` in all (Horovod's ``get_host_assignments``)."""
    slots: list[tuple[str, int]] = []
    for name, count in hosts:
        for slot in range(count):
            if max_np is not None and len(slots) >= max_np:
                return slots
            slots.append((name, slot))
    return slots


def target_slots(eligible: list[HostRecord], holders: set[str],
                 max_np: int | None) -> list[tuple[str, int]]:
    """The (host, slot) of every rank over the ``eligible`` hosts: the hosts in
    ``holders`` (those that hold the training state, so rank 0 is one of theirs) first,
    then the others, each in the order given."""
    ordered = [h for h in eligible if h.name in holders] + \
              [h for h in eligible if h.name not in holders]
    return assign_slots([(h.name, h.slots) for h in ordered], max_np)


def layout(slots: list[tuple[str, int]], workers: list[int]) -> tuple[Assignment, ...]:
    """The assignments of ``workers`` to ``slots`` (rank = index): local ranks per host,
    cross ranks per local rank over hosts."""
    per_host: dict[str, int] = {}
    for host, _ in slots:
        per_host[host] = per_host.get(host, 0) + 1
    host_order = list(per_host)
    out = []
    for rank, ((host, slot), worker) in enumerate(zip(slots, workers, strict=True)):
        local_rank = sum(1 for h, _ in slots[:rank] if h == host)
        having = [h for h in host_order if per_host[h] > local_rank]
        out.append(Assignment(worker, host, slot, rank, len(slots), local_rank,
                              per_host[host], having.index(host), len(having)))
    return tuple(out)


def by_host(assignments: list[Assignment]) -> dict[str, list[Assignment]]:
    """``assignments`` grouped by host, hosts and assignments in the order given."""
    out: dict[str, list[Assignment]] = {}
    for a in assignments:
        out.setdefault(a.host, []).append(a)
    return out


def hosts_text(members: tuple[Assignment, ...]) -> str:
    """``host:count`` of a generation's members per host, comma-separated, in rank order."""
    counts: dict[str, int] = {}
    for a in members:
        counts[a.host] = counts.get(a.host, 0) + 1
    return ",".join(f"{h}:{n}" for h, n in counts.items())
