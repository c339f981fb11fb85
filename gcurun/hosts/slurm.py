"""Slurm's view of a job, read from the variables Slurm sets: pure parsing.

Inside an allocation (``salloc``, ``sbatch``, or an ``srun`` that made its own), Slurm
names the job's hosts in hostlist form (``SLURM_JOB_NODELIST=node[01-04]``) and counts
tasks and CPUs per host in a compressed form (``SLURM_TASKS_PER_NODE=2(x3),1``: two on
each of the first three hosts, one on the fourth), in the order of the hostlist.
A task that ``srun`` started also sees its step: the step's hosts and tasks per host
(``SLURM_STEP_NODELIST``, ``SLURM_STEP_TASKS_PER_NODE``) and who it is in the step
(``SLURM_PROCID``, ``SLURM_LOCALID``, ``SLURM_NODEID``).

What Slurm 22.05 does, measured (docs/slurm.md has the rest):

* ``srun`` writes the step's values over ``SLURM_NTASKS``, ``SLURM_NPROCS`` and
  ``SLURM_TASKS_PER_NODE`` in its tasks; ``SLURM_JOB_NODELIST`` and
  ``SLURM_JOB_CPUS_PER_NODE`` stay the allocation's. So the allocation's tasks per host
  are known only outside a step.
* An ``sbatch`` script runs with ``SLURM_PROCID=0``, ``SLURM_LOCALID=0`` and
  ``SLURM_NODEID=0`` but no ``SLURM_STEP_ID``: it is not a task of a step, and its
  ``SLURM_NTASKS`` is the allocation's. A step is recognised by ``SLURM_STEP_ID``.
* ``salloc -N 2`` without ``-n`` sets no ``SLURM_NTASKS``; the task count is then the
  sum of the tasks per host.
* Plain ``srun`` (no ``--mpi=pmix``) gives Open MPI no way to join its tasks: each is an
  MPI world of one rank (``gcurun.runtime.world_guard`` stops such a rank).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from gcurun.errors import HostSpecError
from gcurun.hosts.api import HostSpec
from gcurun.hosts.hostlist import expand_hostlist

_COUNT = re.compile(r"([0-9]+)(?:\(x([0-9]+)\))?")
_DIGITS = re.compile(r"[0-9]+")
_FIX = ("Slurm sets this variable; run inside salloc or sbatch, or unset the SLURM_* "
        "variables that did not come from Slurm")
SLURM_SOURCE = "slurm"
"""The source settings taken from a Slurm allocation have (``Settings.sources``)."""


@dataclass(frozen=True)
class SlurmStep:
    """The step a task belongs to, as ``srun`` describes it to each task.

    ``rank``, ``local_rank`` and ``node_index`` are this task's ``SLURM_PROCID``,
    ``SLURM_LOCALID`` and ``SLURM_NODEID``: its place among the step's tasks, among
    the step's tasks on its host, and its host's place in ``hosts``.
    """

    step_id: str
    hosts: tuple[str, ...]
    tasks_per_node: tuple[int, ...]
    num_tasks: int
    rank: int
    local_rank: int
    node_index: int

    @property
    def local_size(self) -> int:
        """How many of the step's tasks run on this task's host."""
        return self.tasks_per_node[self.node_index]


@dataclass(frozen=True)
class SlurmAllocation:
    """The Slurm job this process runs in.

    ``hosts`` are the allocation's hosts in Slurm's order. ``tasks_per_node`` (one count
    per host) and ``num_tasks`` are the allocation's when this process is not a task of a
    step, else None: srun replaced them with the step's, which ``step`` holds.
    ``cpus_per_node`` is always the allocation's.
    """

    job_id: str
    hosts: tuple[str, ...]
    cpus_per_node: tuple[int, ...]
    tasks_per_node: tuple[int, ...] | None
    num_tasks: int | None
    step: SlurmStep | None

    @property
    def in_step(self) -> bool:
        return self.step is not None

    def host_specs(self) -> tuple[HostSpec, ...]:
        """The allocation's hosts with their task counts as slots, hosts given no task
        left out. Raises HostSpecError inside a step, where the allocation's tasks per
        host are not known."""
        if self.tasks_per_node is None:
            raise HostSpecError(
                "inside a Slurm step (SLURM_STEP_ID is set) the allocation's tasks per host "
                "are not known: srun set SLURM_TASKS_PER_NODE to the step's; run gcurun "
                "in the allocation itself (salloc or the sbatch script), not under srun, "
                "or name the hosts with -H")
        return tuple(HostSpec(name=host, slots=count)
                     for host, count in zip(self.hosts, self.tasks_per_node, strict=True)
                     if count > 0)


def parse_tasks_per_node(text: str, name: str = "SLURM_TASKS_PER_NODE") -> tuple[int, ...]:
    """Expand Slurm's compressed per-host counts: ``2(x3),1`` -> ``(2, 2, 2, 1)``.

    ``name`` is the variable the text came from, for messages. Raises HostSpecError for
    anything else than comma-separated counts, each optionally followed by ``(xN)``.
    """
    counts: list[int] = []
    for index, item in enumerate(text.split(","), 1):
        match = _COUNT.fullmatch(item.strip())
        if match is None:
            what = "is empty" if not item.strip() else f"'{item.strip()}' is not a count"
            raise HostSpecError(
                f"{name}='{text}': item {index} {what}; Slurm writes counts per host as "
                f"2(x3),1 (2 on each of 3 hosts, then 1). {_FIX}")
        repeat = int(match.group(2) or 1)
        if repeat < 1:
            raise HostSpecError(f"{name}='{text}': '{item.strip()}' repeats a count 0 "
                                f"times; a repeat is (x1) or more. {_FIX}")
        counts += [int(match.group(1))] * repeat
    return tuple(counts)


def in_allocation(env: Mapping[str, str]) -> bool:
    """Whether these variables are those of a process inside a Slurm allocation."""
    return bool(env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID"))


def parse_slurm_environment(env: Mapping[str, str]) -> SlurmAllocation | None:
    """The Slurm allocation (and step) that ``env`` describes; None outside Slurm.

    Raises HostSpecError, quoting the variable, when a variable is missing, malformed, or
    disagrees with another (a count per host for a different number of hosts, a task
    count other than the sum of the counts per host, a task id past the step).
    """
    if not in_allocation(env):
        return None
    job_id = env.get("SLURM_JOB_ID") or env["SLURM_JOBID"]
    hosts = _hostlist(env, "SLURM_JOB_NODELIST")
    cpus = _per_host(env, "SLURM_JOB_CPUS_PER_NODE", hosts, "SLURM_JOB_NODELIST")
    step = _step(env) if env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID") else None
    if step is not None:
        return SlurmAllocation(job_id, hosts, cpus, None, None, step)
    tasks = _per_host(env, "SLURM_TASKS_PER_NODE", hosts, "SLURM_JOB_NODELIST")
    total = _total(env, "SLURM_NTASKS", tasks, "SLURM_TASKS_PER_NODE")
    return SlurmAllocation(job_id, hosts, cpus, tasks, total, None)


def _step(env: Mapping[str, str]) -> SlurmStep:
    step_id = env.get("SLURM_STEP_ID") or env["SLURM_STEPID"]
    hosts = _hostlist(env, "SLURM_STEP_NODELIST")
    tasks = _per_host(env, "SLURM_STEP_TASKS_PER_NODE", hosts, "SLURM_STEP_NODELIST")
    total = _total(env, "SLURM_STEP_NUM_TASKS", tasks, "SLURM_STEP_TASKS_PER_NODE")
    rank = _index(env, "SLURM_PROCID", total, "SLURM_STEP_NUM_TASKS")
    node = _index(env, "SLURM_NODEID", len(hosts), "SLURM_STEP_NODELIST's hosts")
    local = _index(env, "SLURM_LOCALID", tasks[node], f"the tasks on host {node}")
    return SlurmStep(step_id, hosts, tasks, total, rank, local, node)


def _require(env: Mapping[str, str], name: str) -> str:
    value = env.get(name)
    if value is None or not value.strip():
        because = "SLURM_STEP_ID" if name.startswith("SLURM_STEP_") else "SLURM_JOB_ID"
        raise HostSpecError(f"{name} is {'empty' if value is not None else 'not set'} but "
                            f"{because} is; {_FIX}")
    return value.strip()


def _hostlist(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    text = _require(env, name)
    try:
        return expand_hostlist(text)
    except HostSpecError as exc:
        raise HostSpecError(f"{name}: {exc}") from None


def _per_host(env: Mapping[str, str], name: str, hosts: tuple[str, ...],
              hosts_name: str) -> tuple[int, ...]:
    text = _require(env, name)
    counts = parse_tasks_per_node(text, name)
    if len(counts) != len(hosts):
        raise HostSpecError(
            f"{name}='{text}' counts {_hosts(len(counts))} but {hosts_name}="
            f"'{env[hosts_name].strip()}' names {len(hosts)}; {_FIX}")
    return counts


def _hosts(count: int) -> str:
    return f"{count} host" if count == 1 else f"{count} hosts"


def _total(env: Mapping[str, str], name: str, counts: tuple[int, ...],
           counts_name: str) -> int:
    if name not in env:
        return sum(counts)
    number = _number(env, name)
    if number != sum(counts):
        raise HostSpecError(f"{name}='{env[name]}' but {counts_name}='{env[counts_name]}' "
                            f"adds up to {sum(counts)}; {_FIX}")
    return number


def _index(env: Mapping[str, str], name: str, limit: int, of: str) -> int:
    number = _number(env, _present(env, name))
    if number >= limit:
        raise HostSpecError(f"{name}='{env[name]}' is past {of} ({limit}); {_FIX}")
    return number


def _present(env: Mapping[str, str], name: str) -> str:
    if name not in env:
        raise HostSpecError(f"{name} is not set but SLURM_STEP_ID is; {_FIX}")
    return name


def _number(env: Mapping[str, str], name: str) -> int:
    text = env[name].strip()
    if not _DIGITS.fullmatch(text):
        raise HostSpecError(f"{name}='{env[name]}' is not a whole number 0 or more; {_FIX}")
    return int(text)


