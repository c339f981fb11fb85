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
    if params.get("dry_run"):
        from gcurun.cli.render import print_plan

        print_plan(plan, settings, as_json=bool(params.get("as_json")), out=stdout)
        return 0
    from gcurun.cli.sshlog import ssh_reports
    from gcurun.launch.output import OutputSink
    from gcurun.launch.runner import run_job

    sink = OutputSink(stdout, stderr, color=use_color(params.get("color", "auto"), stdout,
                                                      environ),
                      show_ranks=settings.show_ranks, output_dir=settings.output_dir)
    with ssh_reports(stderr):
        run_job(plan, settings, sink)
    return 0


def make_plan(command: Sequence[str], settings: Settings, params: Mapping[str, Any],
              environ: Mapping[str, str]) -> LaunchPlan:
    from gcurun.config.resolve import runtime_environment
    from gcurun.hosts.local import probe_local_names
    from gcurun.launch.plan import build_plan

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
        master_port=master_port, workdir=settings.workdir or os.getcwd(),
        sources=settings.sources)


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



