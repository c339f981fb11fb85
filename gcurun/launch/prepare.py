"""The one prepare step of every launch: place the ranks, check the remote hosts, bind.

1. Plan (pure): ranks on hosts, each with its identity, device, argv and environment.
2. Preflight, the launcher kind's own (:mod:`gcurun.launch.kinds`): every remote host of
   an SSH launch is connected to and checked, and its bootstrap waits there (skipped
   offline: ``connect=False``, as ``--dry-run`` does).
3. Bind, the kind's too: each rank's CPUs and memory node from its host's topology, this
   host's read here and remote ones over the preflight's connections, a --slurm job's
   checked against its allocation and bound by one srun step (without them, remote
   ranks stay unbound until a run prepares them).

The CLI, :func:`gcurun.run` and tests call it; executors run the :class:`PreparedJob`.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping, Sequence

from gcurun.config.api import DEVICE_VARIABLES, Settings
from gcurun.errors import PlanError
from gcurun.hosts.api import HostSpec
from gcurun.launch.api import LaunchPlan
from gcurun.launch.kinds import PreparedJob, launcher_kind
from gcurun.launch.remote.horovod_alias import ALIAS_VARIABLE

log = logging.getLogger(__name__)

# What carries --network-interface to the ranks' tcp runtime.
NETWORK_INTERFACE_VARIABLE = "GCURUN_NETWORK_INTERFACE"


def plan_job(command: Sequence[str], settings: Settings, *,
             environ: Mapping[str, str] | None = None, master_addr: str | None = None,
             master_port: int | None = None) -> LaunchPlan:
    """The plan of ``command`` under ``settings`` (pure but for reading this host's names
    and a free port). Raises PlanError when the ranks do not fit or the launcher kind
    cannot reach a host."""
    from gcurun.config.resolve import runtime_environment
    from gcurun.hosts.locality import probe_local_names
    from gcurun.launch.planning.forwarding import plan_forwarding
    from gcurun.launch.planning.plan import build_plan, check_job_variables

    device_var = DEVICE_VARIABLES[settings.accelerator]
    check_job_variables(settings.env, settings.forward_env, device_var, settings.sources)
    environ = os.environ if environ is None else environ
    hosts = settings.hosts or (HostSpec("localhost", slots=settings.np or 1),)
    job_env = {name: environ[name] for name in settings.forward_env if name in environ}
    job_env.update(settings.env)
    # Only knobs given on the command line or in a profile: one the environment gives
    # reaches the ranks as that variable itself, beside its Horovod twins
    # (HOROVOD_STALL_CHECK_DISABLE), which the ranks read below gcurun's own names.
    job_env.update(runtime_environment(settings.runtime, settings.sources))
    if settings.horovod_alias != "off" or ALIAS_VARIABLE in environ:
        job_env[ALIAS_VARIABLE] = settings.horovod_alias   # "off" too: the ranks inherit
    if settings.mpi.network_interface:
        from gcurun.launch.mpi.command import parse_network_interface

        # Checked here for every launcher: the tcp runtime offers its ranks' peers only
        # that network's addresses (mpirun gets it as its own options).
        parse_network_interface(settings.mpi.network_interface)
        job_env[NETWORK_INTERFACE_VARIABLE] = settings.mpi.network_interface
    plan = build_plan(
        hosts, command, np=settings.np, oversubscribe=settings.oversubscribe,
        accelerator=settings.accelerator, device_var=device_var,
        devices=settings.devices, device_isolation=settings.device_isolation,
        launcher=settings.launcher,
        local_names=probe_local_names(), job_env=job_env,
        forwarded_env=settings.forward_env, master_addr=master_addr or settings.master_addr,
        this_host=socket.getfqdn(),
        master_port=master_port or settings.master_port or free_port(),
        workdir=settings.workdir or os.getcwd(), sources=settings.sources,
        forwarding=plan_forwarding(environ, settings.env_forward, settings.forward_env,
                                   login=settings.launcher is not None and
                                   launcher_kind(settings.launcher).login_forwarding))
    launcher_kind(plan.launcher).check_hosts(plan)
    return plan


def prepare(command: Sequence[str], settings: Settings, *,
            environ: Mapping[str, str] | None = None, connect: bool = True,
            master_addr: str | None = None, master_port: int | None = None) -> PreparedJob:
    """Plan ``command``, check its remote hosts (unless ``connect`` is False) and bind it.

    Raises PlanError (bad placement or binding), SSHConnectError (every failing host,
    nothing started) or UsageError (a bad ssh config)."""
    plan = plan_job(command, settings, environ=environ, master_addr=master_addr,
                    master_port=master_port)
    log_plan(plan, settings)
    crowded = crowding(plan, usable_cpus())
    if crowded and not settings.oversubscribe:
        raise PlanError(f"{crowded}; lower -np, add hosts, or pass --oversubscribe")
    job = prepare_plan(plan, settings, environ=environ, connect=connect)
    if crowded:
        job.warnings = (f"{crowded} (allowed by --oversubscribe)", *job.warnings)
    return job


def log_plan(plan: LaunchPlan, settings: Settings) -> None:
    """Say what the plan decided: hosts, launcher kind and why, ports, each rank."""
    if not log.isEnabledFor(logging.INFO):
        return
    sources = settings.sources
    hosts = ", ".join(f"{h.name}:{len(plan.ranks_on(h.name))}" for h in plan.hosts
                      if plan.ranks_on(h.name))
    log.info("hosts (from %s): %s", sources.get("hosts", "default"), hosts)
    why = f"from {sources['launcher']}" if settings.launcher is not None else \
        launcher_kind(plan.launcher).chosen_because
    log.info("launcher %s (%s); %d rank(s); accelerator %s (%s)", plan.launcher, why,
             plan.size, plan.accelerator, plan.device_var or "no device variable")
    log.info("MASTER_ADDR %s, MASTER_PORT %d; working directory %s", plan.master_addr,
             plan.master_port, plan.workdir)
    for r in plan.ranks:
        log.debug("rank %d: host %s, local rank %d of %d, device %s, command %s", r.rank,
                  r.host, r.local_rank, r.local_size, r.device, " ".join(r.argv))


# Local ranks per CPU this process may use, beyond which a job needs --oversubscribe.
RANKS_PER_CPU = 4


def usable_cpus() -> int:
    """How many CPUs this process may run on (its affinity, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def crowding(plan: LaunchPlan, cpus: int) -> str | None:
    """The arithmetic of too many ranks on this host, or None when they fit: more than
    RANKS_PER_CPU per CPU only crowds the cores (and starts slowly)."""
    here = sum(1 for r in plan.ranks if r.is_local)
    if here <= RANKS_PER_CPU * cpus:
        return None
    return (f"{here} ranks on this host are more than {RANKS_PER_CPU} x the {cpus} CPUs "
            f"this process may use ({here} > {RANKS_PER_CPU * cpus})")


def prepare_plan(plan: LaunchPlan, settings: Settings, *,
                 environ: Mapping[str, str] | None = None,
                 connect: bool = True) -> PreparedJob:
    """Check the remote hosts of a placed ``plan`` and bind it; see :func:`prepare`."""
    from gcurun.config.paths import check_output_dir, check_timeline, check_workdir

    check_output_dir(settings)
    check_workdir(settings, plan.workdir, any(r.is_local for r in plan.ranks))
    check_timeline(settings, plan.workdir, (r.rank for r in plan.ranks if r.is_local))
    kind = launcher_kind(plan.launcher)
    job = PreparedJob(plan, settings, kind.preflight(plan, settings) if connect else None,
                      connected=connect)
    environ = os.environ if environ is None else environ
    try:
        job.plan, job.warnings = kind.bind(job, environ)
    except BaseException:
        job.close()
        raise
    return job


def free_port() -> int:
    """A TCP port that is free on this host right now (for MASTER_PORT)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])
