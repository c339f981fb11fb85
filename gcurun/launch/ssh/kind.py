"""The SSH launcher kind: this host's ranks as the local kind runs them, and each remote
host's ranks under a bootstrap that the preflight started over that host's connection."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from gcurun.launch.api import LaunchPlan, RankGroup
from gcurun.launch.kinds import Bound, LauncherKind, bind_here
from gcurun.launch.ssh.preflight import host_sessions

if TYPE_CHECKING:
    from gcurun.config.api import Settings
    from gcurun.launch.kinds import PreparedJob
    from gcurun.launch.ssh.preflight import HostSessions

log = logging.getLogger("gcurun.launch.prepare")


class SSHKind(LauncherKind):
    """Ranks on remote hosts, reached over SSH (paramiko)."""

    name = "ssh"
    connects_hosts = True
    chosen_because = "a host is remote"

    def preflight(self, plan: LaunchPlan, settings: Settings) -> HostSessions:
        """Connect to and check every remote host; its bootstrap waits there."""
        from gcurun.launch.ssh.preflight import HostSessions, preflight_plan

        remote = sorted({r.host for r in plan.ranks if not r.is_local})
        log.info("checking %d remote host(s) over SSH: %s", len(remote), ", ".join(remote))
        return HostSessions(preflight_plan(plan, settings))

    def bind(self, job: PreparedJob, environ: Mapping[str, str]) -> Bound:
        if job.settings.bind_to == "none":
            return job.plan, ()
        plan, warnings = bind_here(job.plan, job.settings, environ)
        sessions = host_sessions(job)
        if sessions:
            from gcurun.launch.ssh.remote_topology import bind_remote_ranks

            plan, remote = bind_remote_ranks(plan, job.settings, sessions)
            warnings += remote
        return plan, warnings

    def binds_remote_ranks_on_preflight(self, plan: LaunchPlan) -> bool:
        return any(not r.is_local for r in plan.ranks)

    def rank_facing_addresses(self, job: PreparedJob) -> list[str]:
        from gcurun.launch.ssh.rank_group import launcher_address

        return [launcher_address(session) for session in host_sessions(job).values()]

    def rank_groups(self, job: PreparedJob, secrets: Mapping[str, str]) -> list[RankGroup]:
        from gcurun.launch.ssh.rank_group import ssh_groups

        return ssh_groups(job, secrets)

