"""Preparing a ``--slurm`` job: the allocation it runs in, ``--mpi=pmix`` for the mpi
backend, and the binding of every rank from its node's topology.

The topology of the nodes is read by one short srun step (the stdlib-only sysfs reader
on each node, as the SSH preflight runs it over SSH); Slurm gives a step every CPU the
job holds on its nodes, so the reader sees what the ranks' step will get. Then the ranks
are bound exactly as local ones (:func:`gcurun.launch.planning.binding.bind_plan`), and
the rank shim applies each binding when the rank starts.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from gcurun.config.api import Settings
from gcurun.errors import LaunchError, UsageError
from gcurun.hosts.slurm import SlurmAllocation, parse_slurm_environment
from gcurun.launch.api import LaunchPlan
from gcurun.launch.slurm.command import parse_labelled_line, rank_hosts

if TYPE_CHECKING:
    from gcurun.hosts.topology import Topology

PROBE_SECONDS = 60.0


def uses_pmix(settings: Settings) -> bool:
    """Whether the ranks' step needs ``--mpi=pmix``: the mpi backend joins its ranks
    through Slurm's PMIx server (plain srun gives each rank a world of its own)."""
    return settings.runtime.backend == "mpi"


def check_allocation(plan: LaunchPlan, environ: Mapping[str, str]) -> SlurmAllocation:
    """The allocation a --slurm ``plan`` runs in. Raises UsageError outside an
    allocation, inside an srun step, or for a host the allocation does not hold."""
    allocation = parse_slurm_environment(environ)
    if allocation is None:
        raise UsageError("--slurm starts the ranks with srun inside a Slurm allocation, but "
                         "SLURM_JOB_ID is not set; run gcurun inside one: salloc -N 2 "
                         "-n 8 gcurun --slurm python train.py, or in an sbatch script")
    if allocation.in_step:
        raise UsageError("--slurm inside an srun step (SLURM_STEP_ID is set): its srun "
                         "would wait for the CPUs this step holds; run gcurun --slurm in "
                         "the allocation itself (salloc or the sbatch script), not under "
                         "srun")
    from gcurun.hosts.hostlist import collapse_hostlist

    outside = [h for h in rank_hosts(plan) if h not in allocation.hosts]
    if outside:
        raise UsageError(f"host '{outside[0]}' is not a node of this Slurm allocation "
                         f"({collapse_hostlist(allocation.hosts)}); leave out -H to use "
                         "the allocation's nodes, or name only those")
    return allocation


def check_pmix(srun: str = "srun") -> None:
    """Raise LaunchError unless ``srun --mpi=list`` offers pmix."""
    try:
        done = subprocess.run([srun, "--mpi=list"], capture_output=True, text=True,
                              timeout=PROBE_SECONDS, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LaunchError(f"'{srun} --mpi=list' failed: {exc}") from exc
    listed = done.stdout + done.stderr
    if "pmix" not in listed:
        offered = ", ".join(line.strip() for line in listed.splitlines()
                            if line.strip() and not line.strip().endswith(":")
                            and "types are" not in line) or "nothing"
        raise LaunchError(
            f"the mpi backend under --slurm needs srun --mpi=pmix, but this Slurm offers "
            f"{offered}; install libpmix (Debian: libpmix-dev) on the nodes before slurmd "
            "starts, or use the tcp backend (unset GCURUN_BACKEND or runtime.backend)")


def prepare_slurm(plan: LaunchPlan, settings: Settings, environ: Mapping[str, str], *,
                  connect: bool) -> tuple[LaunchPlan, tuple[str, ...]]:
    """Check a --slurm ``plan`` against its allocation; with ``connect``, check pmix for
    the mpi backend and bind the ranks from their nodes' topology (read by srun). Without
    ``connect`` (``--dry-run``) the ranks stay unbound until a run prepares them.
    Returns the plan and the binding warnings."""
    check_allocation(plan, environ)
    if not connect:
        return plan, ()
    if uses_pmix(settings):
        check_pmix()
    if settings.bind_to == "none":
        return plan, ()
    from gcurun.launch.planning.binding import bind_plan

    topologies = read_node_topologies(rank_hosts(plan), settings.ssh.python or sys.executable)
    return bind_plan(plan, topologies, settings.bind_to, settings.map_by,
                     oversubscribe=settings.oversubscribe,
                     user_env={**environ, **settings.env})


def probe_argv(hosts: Sequence[str], python: str, source: str) -> list[str]:
    """One task on each of ``hosts`` (in order) running the sysfs reader ``source``."""
    return ["srun", "--job-name=gcurun-topology", f"--ntasks={len(hosts)}",
            f"--nodes={len(hosts)}", "--nodelist=" + ",".join(hosts),
            "--distribution=arbitrary", "--label", "--cpu-bind=none",
            python, "-c", source, "/sys"]


def read_node_topologies(hosts: Sequence[str], python: str) -> dict[str, Topology]:
    """Every host's topology, read by one srun step. Raises LaunchError naming the hosts
    whose topology could not be read, with srun's words."""
    from gcurun.hosts.topology import TopologyError, parse_topology_json, remote_probe_source

    argv = probe_argv(hosts, python, remote_probe_source())
    try:
        done = subprocess.run(argv, capture_output=True, timeout=PROBE_SECONDS,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LaunchError(f"reading the nodes' CPU/NUMA topology with srun failed: {exc}") \
            from exc
    found: dict[str, Topology] = {}
    failures: list[str] = []
    texts: dict[int, bytes] = {}
    for line in done.stdout.splitlines():
        task, text = parse_labelled_line(line)
        if task is not None:
            texts[task] = texts.get(task, b"") + text
    for task, host in enumerate(hosts):
        try:
            found[host] = parse_topology_json(texts.get(task, b"").decode(errors="replace"))
        except TopologyError as exc:
            failures.append(f"{host}: {exc}")
    if failures:
        said = done.stderr.decode(errors="replace").strip()[-1000:]
        raise LaunchError("reading the nodes' CPU/NUMA topology with srun failed for "
                          + "; ".join(failures) + (f" (srun: {said})" if said else "")
                          + "; use --bind-to none to start without binding")
    return found
