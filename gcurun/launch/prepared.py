"""The record of a prepared job, which :mod:`gcurun.launch.prepare` makes and every
launcher kind and :mod:`gcurun.launch.execute` consume (it sits below all of them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from gcurun.config.api import Settings
from gcurun.launch.api import LaunchPlan

if TYPE_CHECKING:
    from gcurun.launch.kinds import LauncherKind


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
        from gcurun.launch.kinds import launcher_kind

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
