"""The rank-side shim of MPI launches: ``python -m gcurun.launch.remote.mpi_shim -- CMD ARGS...``.

mpirun starts every rank with one environment. This shim runs first on each rank, reads
who the rank is from the MPI launcher's variables, sets gcurun's rank environment
(GCURUN_*, HOROVOD_*, torch's variables, the device variable and GCURUN_DEVICE; the same
names and values the local and SSH launchers set) and execs the command, so ``bash run.sh``
and ``python train.py`` both work. Before the exec it starts the rank's guard
(:mod:`.rank_guard`), which stops the rank's process group if the MPI daemon dies.
Standard library only; it imports nothing heavy.

Identity sources, first match wins:

* Open MPI: OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK / _LOCAL_SIZE
* MPICH and Intel MPI (Hydra): PMI_RANK / PMI_SIZE / MPI_LOCALRANKID / MPI_LOCALNRANKS
* Slurm (srun): SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID / SLURM_NODEID, the local
  size from SLURM_STEP_TASKS_PER_NODE or SLURM_TASKS_PER_NODE

Rank, size, local rank and local size are exact in all three. The host index (GROUP_RANK)
and Horovod's cross rank and size (the rank among ranks with the same local rank, and how
many there are) are exact when gcurun's launcher passed its layout (GCURUN_MPI_SLOTS, ranks
per host in rank order) and the launcher's placement agrees with it, which the shim checks
rank by rank; under Slurm SLURM_NODEID is used. Otherwise they assume every host runs
LOCAL_SIZE ranks in blocks (rank // local size), which is what mpirun's default by-slot
mapping gives on equal hosts.

Under ``gcurun --slurm`` (srun starts the shim), three more things happen here:

* the launcher's address in the rendezvous variables (``*:PORT``) becomes the address
  srun ran from (SLURM_LAUNCH_NODE_IPADDR), which the node is known to reach;
* devices Slurm gave the step (GRES: srun set the accelerator's variable, which the
  launcher left out of the ranks' environment; ``GCURUN_GRES_DEVICES=1``) win over the
  plan's: with ``--gpus-per-task`` a rank keeps what it was given, otherwise it takes
  its local rank's entry of the shared list and sees that list (its device alone under
  ``--device-isolation``);
* the rank's CPU and memory binding, decided by the plan (``GCURUN_BINDINGS``, one entry
  per rank: :func:`encode_bindings`), is applied with numactl (or sched_setaffinity where
  numactl is missing) before the command runs; srun itself binds nothing
  (``--cpu-bind=none``).
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gcurun.errors import HostSpecError
from gcurun.hosts.slurm import parse_tasks_per_node
from gcurun.launch.remote.bind_exec import exec_command, exec_with_binding
from gcurun.launch.remote.horovod_alias import alias_environment
from gcurun.launch.remote.hydra_rank import run_hydra_rank
from gcurun.launch.remote.rank_env import (
    ANY_ADDRESS,
    GCURUN_PREFIX,
    PADDLE_ENDPOINTS_VARIABLE,
    Endpoints,
    rank_environment,
)
from gcurun.launch.remote.rank_guard import start_rank_guard
from gcurun.rendezvous.wire import show_address

EXIT_USAGE = 2
# srun's --job-name names gcurun's step, and its tasks see that as SLURM_JOB_NAME; the
# launcher passes the allocation's own name here and the shim puts it back.
JOB_NAME_VARIABLE = "GCURUN_SLURM_JOB_NAME"
# "1" when the launcher is Hydra's (MPICH, Intel MPI): the rank runs under
# :func:`~gcurun.launch.remote.hydra_rank.run_hydra_rank`.
HYDRA_VARIABLE = "GCURUN_MPI_HYDRA"
# "1" when the launcher asked for one-device-per-rank isolation (--device-isolation).
ISOLATION_VARIABLE = "GCURUN_DEVICE_ISOLATION"
_SOURCES = (
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
)


class ShimError(Exception):
    """The rank cannot be identified or given a device; the message says why."""


@dataclass(frozen=True)
class Identity:
    rank: int
    size: int
    local_rank: int
    local_size: int
    node_rank: int | None = None     # known exactly (Slurm) or None


def _int(env: Mapping[str, str], name: str) -> int:
    try:
        return int(env[name])
    except (KeyError, ValueError):
        raise ShimError(f"{name}={env.get(name)!r} is not a number") from None


def slurm_tasks_on_node(spec: str, node: int) -> int:
    """Tasks on node ``node`` from Slurm's compressed list ``2(x3),1``."""
    try:
        counts = parse_tasks_per_node(spec)
    except HostSpecError as exc:
        raise ShimError(str(exc)) from None
    if node >= len(counts):
        raise ShimError(f"SLURM_NODEID={node} is past the tasks-per-node list {spec!r}")
    return counts[node]


def launcher_identity(env: Mapping[str, str]) -> Identity:
    """Rank, size, local rank and local size from the MPI launcher's variables.
    Raises ShimError when no launcher set them."""
    for rank, size, local_rank, local_size in _SOURCES:
        if rank in env:
            return Identity(_int(env, rank), _int(env, size), _int(env, local_rank),
                            _int(env, local_size))
    if "SLURM_PROCID" in env:
        node = _int(env, "SLURM_NODEID")
        per_node = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE")
        if per_node is None:
            raise ShimError("SLURM_PROCID is set but SLURM_TASKS_PER_NODE is not")
        size_name = "SLURM_STEP_NUM_TASKS" if "SLURM_STEP_NUM_TASKS" in env else "SLURM_NTASKS"
        return Identity(_int(env, "SLURM_PROCID"), _int(env, size_name),
                        _int(env, "SLURM_LOCALID"), slurm_tasks_on_node(per_node, node), node)
    raise ShimError("no MPI launcher variables (OMPI_COMM_WORLD_RANK, PMI_RANK or "
                    "SLURM_PROCID) are set; start this under mpirun or srun")


def _layout(env: Mapping[str, str]) -> list[int]:
    text = env.get("GCURUN_MPI_SLOTS", "")
    try:
        return [int(n) for n in text.split(",")] if text else []
    except ValueError:
        raise ShimError(f"GCURUN_MPI_SLOTS={text!r} is not a list of numbers") from None


def _place(ident: Identity, slots: list[int]) -> int | None:
    """The host index of the rank when the layout agrees with the launcher, else None."""
    if sum(slots) != ident.size:
        return None
    start = 0
    for node, count in enumerate(slots):
        if ident.rank < start + count:
            exact = ident.local_rank == ident.rank - start and ident.local_size == count
            return node if exact else None
        start += count
    return None


def _device(env: Mapping[str, str], node: int | None,
            ident: Identity) -> tuple[str | None, tuple[str, ...] | None]:
    """The rank's device and what its device variable lists (None: the device alone),
    as the plan has them: its local rank's entry of its host's devices, the whole list
    shown unless the launcher asked for isolation (GCURUN_DEVICE_ISOLATION=1)."""
    if not env.get("GCURUN_DEVICE_VAR"):
        return None, None
    local_rank = ident.local_rank
    given = gres_device(env, local_rank)
    if given is not None:
        return given
    isolated = env.get(ISOLATION_VARIABLE) == "1"
    text = env.get("GCURUN_DEVICES")
    if text is None:
        listed = tuple(str(i) for i in range(max(ident.local_size, local_rank + 1)))
        return str(local_rank), None if isolated else listed
    per_host = [[d for d in part.split(",") if d] for part in text.split(";")]
    if node is not None and node < len(per_host):
        devices = per_host[node]
    elif all(p == per_host[0] for p in per_host):
        devices = per_host[0]
    else:
        raise ShimError(f"this rank's host is unknown and hosts list different devices "
                        f"(GCURUN_DEVICES={text!r}); keep mpirun's default by-slot mapping")
    if local_rank >= len(devices):
        raise ShimError(f"local rank {local_rank} has no device: its host lists "
                        f"{len(devices)} ({','.join(devices) or 'none'}); give each host "
                        "at least as many devices as ranks")
    return devices[local_rank], None if isolated else tuple(devices)


def gres_device(env: Mapping[str, str],
                local_rank: int) -> tuple[str, tuple[str, ...] | None] | None:
    """The device Slurm gave this rank and what its device variable lists (None: the
    device alone), when the launcher asked to take it from Slurm
    (``GCURUN_GRES_DEVICES=1``) and srun set the accelerator's variable; else None.

    With ``--gpus-per-task`` (SLURM_GPUS_PER_TASK) every device the task got stays its
    own, and the only one it sees; otherwise the tasks of a node share one list, each
    takes its local rank's entry and sees the whole list (as the plan's ranks do) unless
    the launcher asked for isolation. Raises ShimError when the shared list is too short.
    """
    name = env.get("GCURUN_DEVICE_VAR")
    if env.get("GCURUN_GRES_DEVICES") != "1" or not name or not env.get(name):
        return None
    text = env[name]
    devices = [d.strip() for d in text.split(",") if d.strip()]
    if env.get("SLURM_GPUS_PER_TASK") or len(devices) == 1:
        return ",".join(devices), None
    if local_rank >= len(devices):
        raise ShimError(f"local rank {local_rank} has no device: Slurm gave this node's "
                        f"tasks {name}={text!r}; ask srun for a device per task "
                        "(--gpus-per-task=1) or start fewer ranks per node")
    isolated = env.get(ISOLATION_VARIABLE) == "1"
    return devices[local_rank], None if isolated else tuple(devices)


def _endpoints(env: Mapping[str, str], size: int) -> Endpoints | None:
    """Paddle's endpoint list as the launcher exported it, when it has one per rank."""
    listed = [e for e in env.get(PADDLE_ENDPOINTS_VARIABLE, "").split(",") if e]
    return Endpoints(listed) if len(listed) == size else None


@dataclass(frozen=True)
class RankBinding:
    """The CPUs (and NUMA node) the plan bound one rank to."""

    cpus: tuple[int, ...]
    numa_node: int | None = None
    mem_bind: bool = False


def encode_bindings(bindings: Sequence[RankBinding | None]) -> str:
    """``GCURUN_BINDINGS``: one entry per rank, ';'-separated: ``CPUS[/NODE[/m]]`` (CPUs
    as ``0-3,8``; ``m``: memory bound to NODE), empty for an unbound rank."""
    entries = []
    for b in bindings:
        if b is None:
            entries.append("")
            continue
        entry = _cpu_ranges(b.cpus)
        if b.numa_node is not None:
            entry += f"/{b.numa_node}" + ("/m" if b.mem_bind else "")
        entries.append(entry)
    return ";".join(entries)


def rank_binding(env: Mapping[str, str], rank: int) -> RankBinding | None:
    """This rank's entry of ``GCURUN_BINDINGS`` (None without one). Raises ShimError for
    an entry that is not ``CPUS[/NODE[/m]]``."""
    text = env.get("GCURUN_BINDINGS")
    if not text:
        return None
    entries = text.split(";")
    if rank >= len(entries):
        raise ShimError(f"GCURUN_BINDINGS has {len(entries)} entries but this is rank {rank}")
    entry = entries[rank]
    if not entry:
        return None
    parts = entry.split("/")
    try:
        cpus = tuple(c for item in parts[0].split(",") for c in _cpu_range(item))
        node = int(parts[1]) if len(parts) > 1 else None
    except ValueError:
        raise ShimError(f"GCURUN_BINDINGS entry {rank} {entry!r} is not CPUS[/NODE[/m]]") \
            from None
    if not cpus or len(parts) > 3 or parts[2:] not in ([], ["m"]):
        raise ShimError(f"GCURUN_BINDINGS entry {rank} {entry!r} is not CPUS[/NODE[/m]]")
    return RankBinding(cpus, node, parts[2:] == ["m"])


def _cpu_ranges(cpus: Sequence[int]) -> str:
    runs: list[list[int]] = []
    for cpu in sorted(cpus):
        if runs and runs[-1][1] == cpu - 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _cpu_range(item: str) -> range:
    low, _, high = item.partition("-")
    return range(int(low), int(high or low) + 1)


def shim_environment(env: Mapping[str, str], hostname: str,
                     cpu_count: int | None = None) -> dict[str, str]:
    """The variables to set for this rank, from the launcher's and gcurun's variables.

    ``cpu_count`` is the number of CPUs mpirun bound the rank to (the plan's binding, when
    there is one, wins); it becomes OMP_NUM_THREADS when gcurun asked for a binding and
    the user did not set it; PYTHONPATH starts with this host's Horovod aliases when the
    job asks for them (``GCURUN_HOROVOD_ALIAS``). Raises ShimError when the rank cannot be
    identified or has no device.
    """
    ident = launcher_identity(env)
    binding = rank_binding(env, ident.rank)
    if binding is not None:
        cpu_count = len(binding.cpus)
    slots = _layout(env)
    placed = _place(ident, slots) if slots else None
    exact = placed if placed is not None else ident.node_rank
    hosts = [h for h in env.get("GCURUN_MPI_HOSTS", "").split(",") if h]
    if placed is not None:
        node = placed
        cross_rank = sum(1 for n in slots[:node] if n > ident.local_rank)
        cross_size = sum(1 for n in slots if n > ident.local_rank)
        name = hosts[node] if node < len(hosts) else hostname
    else:
        node = exact if exact is not None else ident.rank // max(ident.local_size, 1)
        cross_rank, name = node, hostname
        cross_size = -(-ident.size // max(ident.local_size, 1))
    device, visible = _device(env, exact, ident)
    out = rank_environment(
        rank=ident.rank, size=ident.size, local_rank=ident.local_rank,
        local_size=ident.local_size, cross_rank=cross_rank, cross_size=cross_size,
        node_rank=node, hostname=name, master_addr=env.get("MASTER_ADDR", "127.0.0.1"),
        master_port=int(env.get("MASTER_PORT", "29500")),
        device_var=env.get("GCURUN_DEVICE_VAR") or None,
        device=device, visible_devices=visible,
        node_count=len(slots) if placed is not None else None,
        endpoints=_endpoints(env, ident.size))
    if env.get("GCURUN_BIND_TO", "none") != "none" and "OMP_NUM_THREADS" not in env \
            and cpu_count:
        out["OMP_NUM_THREADS"] = str(cpu_count)
    if JOB_NAME_VARIABLE in env:
        out["SLURM_JOB_NAME"] = env[JOB_NAME_VARIABLE]
    out.update(launcher_addresses(env))
    out.update(alias_environment({**env, **out}))
    return out


def launcher_addresses(env: Mapping[str, str]) -> dict[str, str]:
    """gcurun's variables that name the launcher as ``*:PORT`` (the rendezvous, gcurun.run's
    service), with ``*`` replaced by the address srun ran from, as Slurm gives it to every
    task (SLURM_LAUNCH_NODE_IPADDR): the launcher runs where srun does, and this node
    reached srun there. Raises ShimError when one needs it and it is not set."""
    out = {}
    for name, value in env.items():
        if not (name.startswith(GCURUN_PREFIX) and value.startswith(ANY_ADDRESS + ":")):
            continue
        address = env.get("SLURM_LAUNCH_NODE_IPADDR", "").strip()
        if not address:
            raise ShimError(f"{name}={value!r} asks for the launcher's address, which srun "
                            "gives as SLURM_LAUNCH_NODE_IPADDR, but that is not set; start "
                            "the ranks with gcurun --slurm")
        out[name] = show_address((address, int(value[len(ANY_ADDRESS) + 1:])))
    return out


def main(argv: list[str]) -> None:
    """Set the rank environment and exec ``argv`` (after ``--``); exits on errors."""
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        sys.stderr.write("usage: python -m gcurun.launch.remote.mpi_shim -- COMMAND [ARG...]\n")
        sys.exit(EXIT_USAGE)
    try:
        os.environ.update(shim_environment(os.environ, socket.gethostname(),
                                           len(os.sched_getaffinity(0))))
        binding = rank_binding(os.environ, int(os.environ["GCURUN_RANK"]))
    except ShimError as exc:
        sys.stderr.write(f"gcurun mpi shim: {exc}\n")
        sys.exit(EXIT_USAGE)

    def start() -> None:
        if binding is not None:
            exec_with_binding(binding.cpus, binding.numa_node if binding.mem_bind else None,
                              argv, "gcurun mpi shim")
        exec_command(argv, "gcurun mpi shim")

    if os.environ.get(HYDRA_VARIABLE) == "1":
        run_hydra_rank(int(os.environ["GCURUN_RANK"]), start)
    start_rank_guard()   # the rank's group is stopped even if the MPI daemon is killed
    start()


if __name__ == "__main__":
    main(sys.argv[1:])
