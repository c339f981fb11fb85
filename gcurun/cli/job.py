"""From the run command's inputs to a plan, then to a dry-run listing or a running job."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from gcurun.config.api import DEVICE_VARIABLES, Settings
from gcurun.errors import UsageError
from gcurun.hosts.api import HostSpec
from gcurun.launch.api import LaunchPlan


def launch(command: Sequence[str], cli: Mapping[str, Any], params: Mapping[str, Any],
           environ: Mapping[str, str], *, stdout: TextIO, stderr: TextIO) -> int:
    """Resolve settings, build the plan, then print it (--dry-run) or run it."""
    from gcurun.config.resolve import profile_path_from, resolve_settings

    path = profile_path_from(params.get("profile"), environ)
    profile = None
    if path:
        from gcurun.config.profile import read_profile

        profile = read_profile(path)
    settings = resolve_settings(cli, profile, environ)
    plan = make_plan(command, settings, params, environ)
    if params.get("as_json") and not params.get("dry_run"):
        raise UsageError("--json only goes with --dry-run; add --dry-run")
    plan = bind(plan, settings, environ, stderr)
    # Remote ranks of an SSH launch are bound (and reported) after the preflight.
    remote_later = plan.launcher == "ssh" and settings.bind_to != "none" and \
        any(not r.is_local for r in plan.ranks)
    if settings.report_bindings and not params.get("as_json") and \
            (params.get("dry_run") or not remote_later):
        from gcurun.launch.planning.binding import format_binding_table

        unbound = "by mpirun" if plan.launcher == "mpi" else \
            "after the ssh preflight" if remote_later else "not bound"
        stderr.write(format_binding_table(plan, unbound=unbound) + "\n")
    if params.get("dry_run"):
        from gcurun.cli.render import print_plan

        mpirun = mpirun_preview(plan, settings) if plan.launcher == "mpi" else None
        print_plan(plan, settings, as_json=bool(params.get("as_json")), out=stdout,
                   mpirun=mpirun)
        return 0
    from gcurun.cli.sshlog import ssh_reports
    from gcurun.launch.runner import run_job
    from gcurun.launch.supervision.output import OutputSink

    sink = OutputSink(stdout, stderr, color=use_color(params.get("color", "auto"), stdout,
                                                      environ),
                      show_ranks=settings.show_ranks, output_dir=settings.output_dir)
    with ssh_reports(stderr):
        run_job(plan, settings, sink)
    return 0


def make_plan(command: Sequence[str], settings: Settings, params: Mapping[str, Any],
              environ: Mapping[str, str]) -> LaunchPlan:
    from gcurun.config.resolve import runtime_environment
    from gcurun.hosts.locality import probe_local_names
    from gcurun.launch.planning.plan import build_plan

    hosts = settings.hosts or (HostSpec("localhost", slots=settings.np or 1),)
    job_env = {name: environ[name] for name in settings.forward_env if name in environ}
    job_env.update(settings.env)
    job_env.update(runtime_environment(settings.runtime))
    master_port = params.get("master_port") or free_port()
    return build_plan(
        hosts, command, np=settings.np, oversubscribe=settings.oversubscribe,
        accelerator=settings.accelerator, device_var=DEVICE_VARIABLES[settings.accelerator],
        devices=settings.devices, launcher=settings.launcher,
        local_names=probe_local_names(), job_env=job_env,
        forwarded_env=settings.forward_env, master_addr=params.get("master_addr"),
        this_host=socket.getfqdn(),
        master_port=master_port, workdir=settings.workdir or os.getcwd(),
        sources=settings.sources)


def bind(plan: LaunchPlan, settings: Settings, environ: Mapping[str, str],
         stderr: TextIO) -> LaunchPlan:
    """Fill in the CPU and memory binding of this host's ranks. Under mpirun, mpirun
    binds; the ranks it places on this host are still checked against its cores, so too
    many ranks fail with the same arithmetic. Warnings (allowed oversubscription) go to
    ``stderr``."""
    if settings.bind_to == "none":
        return plan
    from gcurun.hosts.topology import probe_topology
    from gcurun.launch.planning.binding import LocalRank, bind_plan, plan_bindings

    here = probe_topology()
    if plan.launcher == "mpi":
        warnings: tuple[str, ...] = ()
        for host in dict.fromkeys(r.host for r in plan.ranks if r.is_local):
            ranks = [LocalRank(r.rank, r.local_rank) for r in plan.ranks_on(host)]
            warnings += plan_bindings(here, ranks, settings.bind_to, settings.map_by,
                                      oversubscribe=settings.oversubscribe,
                                      host=host).warnings
    else:
        # Remote hosts are bound by the SSH executor once its preflight has read them.
        topologies = {r.host: here for r in plan.ranks if r.is_local}
        plan, warnings = bind_plan(plan, topologies, settings.bind_to, settings.map_by,
                                   oversubscribe=settings.oversubscribe,
                                   user_env={**environ, **settings.env},
                                   hosts=tuple(topologies))
    for warning in warnings:
        stderr.write(f"gcurun: warning: {warning}\n")
    return plan


def mpirun_preview(plan: LaunchPlan, settings: Settings) -> tuple[tuple[str, ...], str | None]:
    """The exact mpirun argv a run would use (its hostfile path is a temporary one chosen
    at start) and the hostfile text."""
    from gcurun.launch.mpi.rank_group import mpi_command

    command, _ = mpi_command(plan, settings, secrets={},
                             hostfile_path="$TMPDIR/gcurun-mpi-XXXXXX/hostfile")
    return command.argv, command.hostfile


def free_port() -> int:
    """A TCP port that is free on this host right now (for MASTER_PORT)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def use_color(mode: str, stream: TextIO, environ: Mapping[str, str]) -> bool:
    if mode != "auto":
        return mode == "always"
    try:
        return stream.isatty() and "NO_COLOR" not in environ
    except (AttributeError, ValueError):
        return False



