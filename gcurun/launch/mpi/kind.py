"""The mpirun launcher kind: every rank started by one mpirun (Open MPI, MPICH, Intel MPI),
which reaches the hosts itself and binds the ranks itself; the ranks use the mpi backend."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from gcurun.launch.api import RankGroup
from gcurun.launch.kinds import Bound, LauncherKind, Preview

if TYPE_CHECKING:
    from gcurun.launch.kinds import PreparedJob

# What --dry-run shows for the fresh temporary directory of a run (its hostfile, and
# mpirun's session directory under Open MPI).
PREVIEW_FOLDER = "$TMPDIR/gcurun-mpi-XXXXXX"


class MPIKind(LauncherKind):
    """Ranks started by mpirun."""

    name = "mpi"
    needs_rendezvous = False
    own_launcher = False
    accepts_preflight_option = False

    def bind(self, job: PreparedJob, environ: Mapping[str, str]) -> Bound:
        """mpirun binds; the ranks it places on this host are still checked against
        this host's cores, so too many fail as they would under gcurun's own launcher."""
        settings = job.settings
        if settings.bind_to == "none":
            return job.plan, ()
        from gcurun.hosts.topology import probe_topology
        from gcurun.launch.planning.binding import LocalRank, plan_bindings

        here = probe_topology()
        warnings: tuple[str, ...] = ()
        for host in dict.fromkeys(r.host for r in job.plan.ranks if r.is_local):
            ranks = [LocalRank(r.rank, r.local_rank) for r in job.plan.ranks_on(host)]
            warnings += plan_bindings(here, ranks, settings.bind_to, settings.map_by,
                                      oversubscribe=settings.oversubscribe,
                                      host=host).warnings
        return job.plan, warnings

    def unbound_text(self, job: PreparedJob) -> str:
        return "by mpirun"

    def preview(self, job: PreparedJob) -> Preview:
        """The exact mpirun argv a run would use (its hostfile path is a temporary one
        chosen at start) and the hostfile text."""
        from gcurun.launch.mpi.rank_group import mpi_command

        command, _ = mpi_command(job.plan, job.settings, secrets={}, folder=PREVIEW_FOLDER)
        return Preview(mpirun=(tuple(command.argv), command.hostfile))

    def service_address(self, port: int) -> str:
        """Every address of this host (loopback and link-local last), which each rank
        tries in turn: mpirun fills in no address of its own."""
        import socket

        import psutil

        from gcurun.rendezvous.wire import show_address

        found = [a.address.split("%")[0] for addrs in psutil.net_if_addrs().values()
                 for a in addrs if a.family in (socket.AF_INET, socket.AF_INET6)]
        found.sort(key=lambda a: (a.startswith(("127.", "::1", "fe80")), ":" in a))
        return ",".join(show_address((a, port)) for a in found)

    def rank_groups(self, job: PreparedJob, secrets: Mapping[str, str]) -> list[RankGroup]:
        from gcurun.launch.mpi.rank_group import mpi_groups

        return list(mpi_groups(job, secrets))
