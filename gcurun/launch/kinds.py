"""Launcher kinds: each way of starting ranks is one object, chosen once by name; and the
record of a prepared job, which :mod:`gcurun.launch.prepare` makes and the kinds run.

A kind answers everything that differs between launchers: what it checks before anything
starts (:meth:`LauncherKind.preflight`), how it binds the plan, what ``--dry-run``
previews, whether its ranks need the launcher's rendezvous, and it makes the job's rank
groups. :mod:`gcurun.launch.prepare`, :mod:`gcurun.launch.execute` and the CLI ask the
kind; the registry below is the one place that knows the names. A new launcher (Ray
actors, Spark tasks) is a subclass in its own module and one line of :data:`KINDS`.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from gcurun.errors import LaunchError, PlanError
from gcurun.launch.api import LaunchPlan, RankGroup

if TYPE_CHECKING:
    from gcurun.config.api import Settings

Bound = tuple[LaunchPlan, tuple[str, ...]]


class Connections(Protocol):
    """What a kind's preflight left open for the run (the SSH kind: one session per
    remote host, its bootstrap waiting). ``close`` lets it go; idempotent."""

    def close(self) -> None: ...


@dataclass
class PreparedJob:
    """A plan ready to run: bound, its remote hosts checked and their bootstraps waiting.

    ``connections`` is what the launcher kind's preflight opened (None when it opens
    nothing); ``connected`` tells whether remote hosts were checked; ``warnings`` are for
    the user (allowed oversubscription). :meth:`close` lets the waiting bootstraps go;
    running the job hands the connections to its rank groups, closed at the end.
    """

    plan: LaunchPlan
    settings: Settings
    connections: Connections | None = None
    warnings: tuple[str, ...] = ()
    connected: bool = False

    @property
    def kind(self) -> LauncherKind:
        """The launcher kind that runs this job."""
        return launcher_kind(self.plan.launcher)

    @property
    def remote_unbound(self) -> bool:
        """Whether remote ranks (every rank of a --slurm job) wait for a preflight to be
        bound."""
        if self.settings.bind_to == "none" or self.connected:
            return False
        return self.kind.binds_remote_ranks_on_preflight(self.plan)

    def close(self) -> None:
        """Close what the preflight opened (a checked host's bootstrap exits, having run
        nothing). Idempotent."""
        connections, self.connections = self.connections, None
        if connections is not None:
            connections.close()

    def __enter__(self) -> PreparedJob:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


@dataclass(frozen=True)
class Preview:
    """What ``--dry-run`` shows beside the plan: the mpirun argv and hostfile text, or
    the srun argv, that a run would use."""

    mpirun: tuple[tuple[str, ...], str | None] | None = None
    srun: tuple[str, ...] | None = None


class LauncherKind:
    """One way of starting the ranks of a plan. Subclasses set the flags and fill
    :meth:`rank_groups`; the other methods have the common answer."""

    name: str = ""
    # The ranks' tcp runtime finds its peers through the launcher's rendezvous.
    needs_rendezvous = True
    # gcurun's own processes run the ranks (local and SSH bootstraps): the tcp runtime,
    # elastic jobs and --gloo go only with these.
    own_launcher = True
    # Every rank runs on this host.
    this_host_only = False
    # The preflight opens connections to the remote hosts that the run reuses.
    connects_hosts = False
    # Ranks on other hosts start from a login environment (what is forwarded differs).
    login_forwarding = False
    # --preflight means something for this kind (mpirun reaches its hosts itself).
    accepts_preflight_option = True
    # Why the plan got this kind when the user named none (for the launcher's log).
    chosen_because = "from the allocation"

    def check_hosts(self, plan: LaunchPlan) -> None:
        """Refuse a plan whose hosts this kind cannot reach. Raises PlanError."""
        if not self.this_host_only:
            return
        remote = next((r.host for r in plan.ranks if not r.is_local), None)
        if remote is not None:
            raise PlanError(f"the {self.name} launcher starts ranks on this host only, but "
                            f"host '{remote}' is not this host; drop --launcher {self.name} "
                            "(remote hosts are reached over SSH) or give only this host's "
                            "names")

    def preflight(self, plan: LaunchPlan, settings: Settings) -> Connections | None:
        """Check what must be checked before anything starts; return what stays open for
        the run (None: nothing). Raises the kind's errors (SSHConnectError, ...)."""
        return None

    def bind(self, job: PreparedJob, environ: Mapping[str, str]) -> Bound:
        """The job's plan with the CPU and memory binding of the ranks this host can
        bind, and the warnings. Raises PlanError for a binding that cannot be."""
        if job.settings.bind_to == "none":
            return job.plan, ()
        return bind_here(job.plan, job.settings, environ)

    def binds_remote_ranks_on_preflight(self, plan: LaunchPlan) -> bool:
        """Whether some ranks are bound only by the preflight (so an offline prepare
        leaves them unbound)."""
        return False

    def unbound_text(self, job: PreparedJob) -> str:
        """How --report-bindings names a rank without a binding."""
        return "after the ssh preflight" if job.remote_unbound else "not bound"

    def preview(self, job: PreparedJob) -> Preview:
        """What ``--dry-run`` shows of how the ranks would be started."""
        return Preview()

    def rank_facing_addresses(self, job: PreparedJob) -> list[str]:
        """Addresses of this host, beyond loopback, that the ranks are told to reach
        the launcher at (the rendezvous listens only there)."""
        return []

    def service_address(self, port: int) -> str:
        """Where ranks on other hosts reach a service of the launcher on ``port``: ``*``
        stands for the address a rank's starter fills in."""
        from gcurun.launch.remote.rank_env import ANY_ADDRESS

        return f"{ANY_ADDRESS}:{port}"

    def rank_groups(self, job: PreparedJob, secrets: Mapping[str, str]) -> Sequence[RankGroup]:
        """The rank groups that run ``job``, not yet started; ``secrets`` reach every
        rank off its command line. Raises LaunchError when they cannot be made."""
        raise NotImplementedError


def bind_here(plan: LaunchPlan, settings: Settings, environ: Mapping[str, str]) -> Bound:
    """The plan with this host's ranks bound from this host's topology."""
    from gcurun.hosts.topology import probe_topology
    from gcurun.launch.planning.binding import bind_plan

    here = probe_topology()
    topologies = {r.host: here for r in plan.ranks if r.is_local}
    return bind_plan(plan, topologies, settings.bind_to, settings.map_by,
                     oversubscribe=settings.oversubscribe,
                     user_env={**environ, **settings.env}, hosts=tuple(topologies))


# Name -> "module:class"; a kind's module is imported only when a job uses it.
KINDS: dict[str, str] = {
    "local": "gcurun.launch.local_group:LocalKind",
    "ssh": "gcurun.launch.ssh.kind:SSHKind",
    "mpi": "gcurun.launch.mpi.kind:MPIKind",
    "slurm": "gcurun.launch.slurm.kind:SlurmKind",
}
_made: dict[str, LauncherKind] = {}


def launcher_kind(name: str) -> LauncherKind:
    """The kind named ``name``. Raises LaunchError for a name not in :data:`KINDS`."""
    if name not in _made:
        try:
            module, _, attribute = KINDS[name].partition(":")
        except KeyError:
            raise LaunchError(f"launcher '{name}' is not available in this build; "
                              f"use one of: {', '.join(sorted(KINDS))}") from None
        _made[name] = getattr(importlib.import_module(module), attribute)()
    return _made[name]


def own_launcher(name: str | None) -> bool:
    """Whether the launcher named ``name`` (None: chosen from the hosts, local or ssh) is
    gcurun's own."""
    return name is None or launcher_kind(name).own_launcher
