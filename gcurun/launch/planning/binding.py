"""Which CPUs and memory node each rank of a host gets, and how that is applied.

:func:`plan_bindings` is pure: a host's :class:`~gcurun.hosts.topology.Topology`, the
ranks placed on it, ``--bind-to`` and ``--map-by`` in, one
:class:`~gcurun.launch.api.Binding` per rank out.

* A rank's home NUMA node is its accelerator's node when sysfs reports it. Ranks whose
  device locality is unknown are spread evenly over the nodes that have CPUs:
  ``--map-by slot`` in contiguous blocks (local ranks 0-3 on node 0, 4-7 on node 1),
  ``numa`` round robin over nodes, ``socket`` round robin over sockets first.
* ``--bind-to numa``: every CPU of the home node, memory bound to it.
  ``socket``: every CPU of the home node's socket, memory left to first touch.
  ``core``: the next free core (all its hardware threads) of the home node, memory
  bound to the node.
* A node (or socket) that gets more ranks than it has cores is an error that shows the
  arithmetic; with oversubscription allowed it is a warning and ranks share cores.

A binding is applied when the rank starts: :func:`bound_argv` prefixes the command with
numactl, or with the stdlib-only :mod:`gcurun.launch.remote.bind_exec` where numactl is missing.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from gcurun.errors import PlanError
from gcurun.hosts.topology import Topology, format_cpulist
from gcurun.launch.api import Binding, LaunchPlan, RankSpec
from gcurun.launch.remote import bind_exec

BIND_TO_VALUES = ("none", "core", "socket", "numa")
MAP_BY_VALUES = ("slot", "numa", "socket")


@dataclass(frozen=True)
class LocalRank:
    """A rank as binding sees it: its global and local rank, and its device id."""

    rank: int
    local_rank: int
    device: str | None = None


@dataclass(frozen=True)
class BindingPlan:
    """One binding per rank (in the order the ranks were given; None = unbound)."""

    bindings: tuple[Binding | None, ...]
    warnings: tuple[str, ...] = ()


def _check_modes(bind_to: str, map_by: str) -> None:
    if bind_to not in BIND_TO_VALUES:
        raise PlanError(f"--bind-to {bind_to!r}: not a binding; use one of "
                        + ", ".join(BIND_TO_VALUES))
    if map_by not in MAP_BY_VALUES:
        raise PlanError(f"--map-by {map_by!r}: not a mapping; use one of "
                        + ", ".join(MAP_BY_VALUES))


def _spread(topology: Topology, count: int, map_by: str) -> list[int]:
    """Home nodes for ``count`` ranks without known device locality."""
    nodes = [n.id for n in topology.numa_nodes if n.cpus]
    if map_by == "slot":
        return [nodes[i * len(nodes) // count] for i in range(count)]
    if map_by == "socket":
        per_socket: dict[int, list[int]] = {}
        for node in nodes:
            per_socket.setdefault(topology.socket_of_node(node) or 0, []).append(node)
        columns = list(per_socket.values())
        nodes = [col[k] for k in range(max(map(len, columns))) for col in columns
                 if k < len(col)]
    return [nodes[i % len(nodes)] for i in range(count)]


def home_nodes(topology: Topology, ranks: Sequence[LocalRank], map_by: str,
               accelerator: str) -> list[int]:
    """Each rank's home NUMA node: its device's node, else an even spread."""
    known = [topology.device_numa_node(accelerator, r.device) for r in ranks]
    unknown = sorted((i for i, node in enumerate(known) if node is None),
                     key=lambda i: ranks[i].local_rank)
    for i, node in zip(unknown, _spread(topology, len(unknown), map_by), strict=True):
        known[i] = node
    return [node for node in known if node is not None]


def _ranks_text(ranks: list[int]) -> str:
    noun = "rank" if len(ranks) == 1 else "ranks"
    return f"{noun} {format_cpulist(ranks).replace(',', ', ')}"


def _overflow(what: str, ranks: list[int], cores: int, cpus: tuple[int, ...], *,
              bind_to: str, host: str, oversubscribe: bool) -> str:
    """The message for ``len(ranks) > cores``; raises unless oversubscription is allowed."""
    core_noun = "core" if cores == 1 else "cores"
    text = (f"--bind-to {bind_to} on {host}: {what} gets {len(ranks)} ranks "
            f"({_ranks_text(ranks)}) but has {cores} {core_noun} (CPUs "
            f"{format_cpulist(cpus)}): {len(ranks)} ranks > {cores} {core_noun}")
    if oversubscribe:
        return text + "; ranks will share cores (oversubscription allowed)"
    rank_noun = "rank" if cores == 1 else "ranks"
    raise PlanError(text + f". Start at most {cores} {rank_noun} there, use --bind-to none, "
                    "or let ranks share cores with --oversubscribe")


def plan_bindings(topology: Topology, ranks: Sequence[LocalRank], bind_to: str,
                  map_by: str = "slot", *, accelerator: str = "gcu",
                  oversubscribe: bool = False, host: str = "localhost") -> BindingPlan:
    """Bind each of a host's ``ranks``; see the module docstring for the rules.

    Raises PlanError for an unknown mode, or (without ``oversubscribe``) when a NUMA
    node or socket would run more ranks than it has cores.
    """
    _check_modes(bind_to, map_by)
    if bind_to == "none" or not ranks:
        return BindingPlan(bindings=(None,) * len(ranks))
    homes = home_nodes(topology, ranks, map_by, accelerator)
    order = sorted(range(len(ranks)), key=lambda i: ranks[i].local_rank)
    bindings: list[Binding | None] = [None] * len(ranks)
    warnings: list[str] = []

    def check(what: str, members: list[int], cores: int, cpus: tuple[int, ...]) -> None:
        if len(members) > cores:
            warnings.append(_overflow(what, [ranks[i].rank for i in members], cores, cpus,
                                      bind_to=bind_to, host=host,
                                      oversubscribe=oversubscribe))

    if bind_to == "socket":
        for socket, cpus in topology.sockets.items():
            members = [i for i in order if topology.socket_of_node(homes[i]) == socket]
            check(f"socket {socket}", members, len(topology.cores_of(cpus)), cpus)
            for i in members:
                bindings[i] = Binding(cpus=cpus, numa_node=homes[i], mem_bind=False)
    else:
        for node in topology.numa_nodes:
            members = [i for i in order if homes[i] == node.id]
            cores = topology.cores_of(node.cpus)
            check(f"NUMA node {node.id}", members, len(cores), node.cpus)
            for k, i in enumerate(members):
                cpus = node.cpus if bind_to == "numa" else tuple(sorted(cores[k % len(cores)]))
                bindings[i] = Binding(cpus=cpus, numa_node=node.id, mem_bind=True)
    return BindingPlan(bindings=tuple(bindings), warnings=tuple(warnings))


def omp_num_threads(binding: Binding | None, user_env: Mapping[str, str]) -> str | None:
    """OMP_NUM_THREADS for a bound rank: its CPU count, unless the user set the variable
    (or the rank is unbound: then None, and nothing is set)."""
    if binding is None or "OMP_NUM_THREADS" in user_env:
        return None
    return str(len(binding.cpus))


def bound_argv(binding: Binding | None, argv: Sequence[str], numactl: str | None, *,
               python: str = sys.executable, numa_known: bool = True) -> list[str]:
    """The command that starts ``argv`` under ``binding``.

    With numactl (and a kernel that reports NUMA nodes): ``numactl --physcpubind=CPUS
    [--membind=NODE] -- argv``. Otherwise the stdlib-only bind_exec program pins the CPUs
    and execs. An unbound rank's argv is returned unchanged.
    """
    if binding is None:
        return list(argv)
    if numactl and numa_known:
        return bind_exec.numactl_argv(
            numactl, format_cpulist(binding.cpus),
            binding.numa_node if binding.mem_bind else None, argv)
    cpus = ",".join(str(c) for c in binding.cpus)
    return [python, os.path.abspath(bind_exec.__file__), "--cpus", cpus, "--", *argv]


def local_binder(python: str = sys.executable, sysfs: str = "/sys"
                 ) -> Callable[[RankSpec], list[str]]:
    """The argv of a local rank under its binding, with numactl when this host has it and
    reports NUMA nodes, else with bind_exec (for LocalRankGroup's ``argv_for``)."""
    numactl = shutil.which("numactl")
    numa_known = os.path.isdir(os.path.join(sysfs, "devices/system/node/node0"))

    def argv_for(spec: RankSpec) -> list[str]:
        return bound_argv(spec.binding, spec.argv, numactl, python=python,
                          numa_known=numa_known)

    return argv_for


def bind_plan(plan: LaunchPlan, topologies: Mapping[str, Topology], bind_to: str,
              map_by: str = "slot", *, oversubscribe: bool = False,
              user_env: Mapping[str, str] | None = None,
              hosts: Sequence[str] | None = None) -> tuple[LaunchPlan, tuple[str, ...]]:
    """The plan with the ranks' bindings (and OMP_NUM_THREADS) filled in, per host.

    ``hosts`` limits this to some hosts (default: every host of the plan); ``topologies``
    maps each of them to its topology (the SSH executor reads remote ones after its
    preflight). ``user_env`` holds the variables the user set (launcher environment and
    -x), which OMP_NUM_THREADS never overrides. Returns the new plan and warnings.
    """
    _check_modes(bind_to, map_by)
    if bind_to == "none":
        return plan, ()
    new_ranks = {r.rank: r for r in plan.ranks}
    warnings: list[str] = []
    chosen = dict.fromkeys(r.host for r in plan.ranks) if hosts is None else hosts
    for host in chosen:
        specs = plan.ranks_on(host)
        if host not in topologies:
            raise PlanError(f"--bind-to {bind_to}: the topology of host {host!r} is unknown; "
                            "it is read during the preflight, so bind only hosts that "
                            "passed it, or use --bind-to none")
        result = plan_bindings(topologies[host], [LocalRank(r.rank, r.local_rank, r.device)
                                                  for r in specs],
                               bind_to, map_by, accelerator=plan.accelerator,
                               oversubscribe=oversubscribe, host=host)
        warnings.extend(result.warnings)
        for spec, binding in zip(specs, result.bindings, strict=True):
            new_ranks[spec.rank] = _with_binding(spec, binding, user_env or {})
    ranks = tuple(new_ranks[r.rank] for r in plan.ranks)
    return dataclasses.replace(plan, ranks=ranks), tuple(warnings)


def _with_binding(spec: RankSpec, binding: Binding | None,
                  user_env: Mapping[str, str]) -> RankSpec:
    env = dict(spec.env)
    threads = omp_num_threads(binding, {**user_env, **spec.env})
    if threads is not None:
        env["OMP_NUM_THREADS"] = threads
    return dataclasses.replace(spec, binding=binding, env=env)


def format_binding_table(plan: LaunchPlan, unbound: str = "not bound") -> str:
    """The ``--report-bindings`` table: rank, host, device, NUMA node, CPUs."""
    rows = [("RANK", "HOST", "DEVICE", "NUMA", "CPUS")]
    for r in plan.ranks:
        b = r.binding
        node = "-" if b is None or b.numa_node is None else str(b.numa_node)
        if b is not None and b.mem_bind:
            node += " (mem)"
        rows.append((str(r.rank), r.host, r.device if r.device is not None else "-", node,
                     unbound if b is None else format_cpulist(b.cpus)))
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
                     for row in rows)
