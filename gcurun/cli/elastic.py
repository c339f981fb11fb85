"""``gcurun --min-np N [--host-discovery-script PATH] ...``: an elastic job.

Its options are settings like any other (``Settings.elastic``: command line, profile
``elastic:`` section, ``GCURUN_ELASTIC_*``, defaults); the job is elastic when
``elastic.min_np`` or ``elastic.host_discovery_script`` is set."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TextIO

from gcurun.cli.console import job_logs, use_color
from gcurun.config.api import Settings
from gcurun.errors import UsageError

if TYPE_CHECKING:
    from gcurun.launch.elastic.config import ElasticConfig
    from gcurun.launch.elastic.runner import Discover


def launch_elastic(command: Sequence[str], settings: Settings, params: Mapping[str, Any],
                   environ: Mapping[str, str], *, stdout: TextIO, stderr: TextIO) -> int:
    """Print the first generation's plan (``--dry-run``) or run the elastic job."""
    from gcurun.launch.elastic.config import elastic_config
    from gcurun.launch.elastic.runner import (
        ElasticRunner,
        elastic_discovery,
        event_log_path,
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
    config = elastic_config(settings)
    discover = elastic_discovery(settings, config)
    if params.get("dry_run"):
        print_first_plan(command, settings, config, discover,
                         as_json=bool(params.get("as_json")), out=stdout)
        return 0
    if settings.output_dir is not None:
        settings = dataclasses.replace(settings, output_dir=job_logs(settings.output_dir,
                                                                      stderr))
    sink = OutputSink(stdout, stderr, color=use_color(params.get("color", "auto"), stdout,
                                                      environ),
                      show_ranks=settings.show_ranks, output_dir=settings.output_dir)
    runner = ElasticRunner(command, settings, config, discover, sink, stderr=stderr,
                           liveness=settings.liveness_timeout,
                           event_log=event_log_path(settings))
    runner.run()
    return 0


def print_first_plan(command: Sequence[str], settings: Settings, config: ElasticConfig,
                     discover: Discover, *, as_json: bool, out: TextIO) -> None:
    """The hosts discovery gives now and the rank plan of the first generation on them,
    as a static job's plan is shown, with the elastic settings and their sources."""
    from gcurun.cli.render import print_plan, write_plan_json
    from gcurun.launch.elastic.discovery import DiscoveryError
    from gcurun.launch.elastic.plan import first_plan

    try:
        found = discover()
    except DiscoveryError as exc:
        raise UsageError(str(exc)) from None
    plan = first_plan(command, settings, config, found, liveness=settings.liveness_timeout)
    hosts = [f"{h.display}:{h.slots}" for h in found]
    facts = {"hosts": hosts, "min_np": config.min_np,
             "max_np": config.max_np, "start_np": config.first_np,
             "elastic_timeout": config.elastic_timeout, "reset_limit": config.reset_limit,
             "cooldown": list(config.cooldown) if config.cooldown else None,
             "liveness_timeout": settings.liveness_timeout}
    if as_json:
        write_plan_json(plan, out, {"elastic": facts})
        return
    waits = (f"; it starts once {config.first_np} slots are there"
             if plan.size < config.first_np else "")
    out.write("elastic job: " + ", ".join(hosts) + "\n"
              f"first generation: {plan.size} ranks (min_np {config.min_np}, max_np "
              f"{config.max_np if config.max_np is not None else 'unbounded'}, start_np "
              f"{config.first_np}){waits}\n")
    print_plan(plan, settings, as_json=False, out=out)
