"""``gcurun --min-np N [--host-discovery-script PATH] ...``: an elastic job."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from gcurun.config.api import Settings
from gcurun.errors import UsageError

ELASTIC_ONLY = (("max_np", "--max-np"), ("slots", "--slots"),
                ("reset_limit", "--reset-limit"), ("elastic_timeout", "--elastic-timeout"),
                ("blacklist_cooldown_range", "--blacklist-cooldown-range"))


def is_elastic(params: Mapping[str, Any]) -> bool:
    """Elastic mode is a discovery script or ``--min-np`` (Horovod's rule); the other
    elastic options alone are refused."""
    elastic = params.get("min_np") is not None or bool(params.get("host_discovery_script"))
    if not elastic:
        for name, flag in ELASTIC_ONLY:
            if params.get(name) is not None:
                raise UsageError(f"{flag} applies to elastic jobs; add --min-np or "
                                 "--host-discovery-script")
    return elastic


def launch_elastic(command: Sequence[str], settings: Settings, params: Mapping[str, Any],
                   environ: Mapping[str, str], *, stdout: TextIO, stderr: TextIO) -> int:
    from gcurun.cli.job import job_logs, use_color
    from gcurun.launch.elastic.config import make_config
    from gcurun.launch.elastic.discovery import DiscoveryError, check_fixed_hosts
    from gcurun.launch.elastic.runner import (
        ElasticRunner,
        event_log_path,
        fixed_discovery,
        script_discovery,
    )
    from gcurun.launch.kinds import own_launcher
    from gcurun.launch.supervision.output import OutputSink

    if not command:
        raise UsageError("no command given; put it after the options: gcurun --min-np 2 "
                         "-H a:1,b:1 python train.py")
    if not own_launcher(settings.launcher):
        raise UsageError(f"elastic jobs run on gcurun's own launcher with the tcp backend; "
                         f"drop --{settings.launcher}")
    if environ.get("GCURUN_BACKEND", "tcp") != "tcp":
        raise UsageError(f"GCURUN_BACKEND={environ['GCURUN_BACKEND']}: elastic jobs use the "
                         "tcp backend; unset GCURUN_BACKEND")
    cooldown = params.get("blacklist_cooldown_range")
    config = make_config(np=settings.np, min_np=params.get("min_np"),
                         max_np=params.get("max_np"), slots=params.get("slots"),
                         elastic_timeout=params.get("elastic_timeout"),
                         reset_limit=params.get("reset_limit"),
                         cooldown=tuple(cooldown) if cooldown else None)
    liveness = settings.liveness_timeout
    script = params.get("host_discovery_script")
    if script:
        if settings.hosts is not None:
            raise UsageError("--host-discovery-script finds the hosts; drop -H/--hostfile "
                             "(or drop the script and give --min-np with -H)")
        discover = script_discovery(script, config.default_slots)
    else:
        if settings.hosts is None:
            raise UsageError("--min-np needs hosts: give -H/--hostfile (at least 2 hosts) or "
                             "--host-discovery-script")
        check_fixed_hosts(settings.hosts, params.get("hosts") or settings.hostfile or "")
        discover = fixed_discovery(settings.hosts)
    if params.get("dry_run"):
        try:
            found = discover()
        except DiscoveryError as exc:
            raise UsageError(str(exc)) from None
        stdout.write("elastic job: " + ", ".join(f"{h.display}:{h.slots}" for h in found)
                     + f"\n  min_np={config.min_np} max_np={config.max_np} "
                     f"start_np={config.first_np} elastic_timeout={config.elastic_timeout:g} "
                     f"reset_limit={config.reset_limit} cooldown={config.cooldown} "
                     f"liveness_timeout={liveness:g}\n")
        return 0
    if settings.output_dir is not None:
        settings = dataclasses.replace(settings, output_dir=job_logs(settings.output_dir,
                                                                      stderr))
    sink = OutputSink(stdout, stderr, color=use_color(params.get("color", "auto"), stdout,
                                                      environ),
                      show_ranks=settings.show_ranks, output_dir=settings.output_dir)
    runner = ElasticRunner(command, settings, config, discover, sink, stderr=stderr,
                           liveness=liveness,
                           event_log=event_log_path(settings))
    runner.run()
    return 0
