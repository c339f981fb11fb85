"""Interfaces of the launch layer: the plan records, the events executors emit, and the
rank-group protocol every executor implements.

A plan is pure data built by :func:`gcurun.launch.planning.plan.build_plan`; executors
only consume it. Executors report everything that happens (output bytes, exits) as events
on one queue that the supervisor drains in one loop.
"""

from __future__ import annotations

import queue
import signal
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol, Union

from gcurun.hosts.api import HostSpec

LauncherName = Literal["local", "ssh", "mpi", "slurm"]
Stream = Literal["stdout", "stderr"]


@dataclass(frozen=True)
class Binding:
    """Where a rank may run: its CPUs and the NUMA node its memory comes from."""

    cpus: tuple[int, ...]
    numa_node: int | None = None
    mem_bind: bool = False


@dataclass(frozen=True)
class RankSpec:
    """Everything about one rank that the executors need."""

    rank: int
    local_rank: int
    local_size: int
    cross_rank: int
    cross_size: int
    node_rank: int
    host: str
    is_local: bool
    device: str | None
    argv: tuple[str, ...]
    env: Mapping[str, str]
    binding: Binding | None = None
    # What the device variable lists, ``device`` at index local_rank (its host's devices)
    # or alone (one-device-per-rank isolation); None without a device.
    visible_devices: tuple[str, ...] | None = None


@dataclass(frozen=True)
class LaunchPlan:
    """A whole job: every rank, the hosts they run on and job-wide facts."""

    ranks: tuple[RankSpec, ...]
    hosts: tuple[HostSpec, ...]
    launcher: LauncherName
    accelerator: str
    device_var: str | None
    master_addr: str
    master_port: int
    workdir: str
    forwarded_env: tuple[str, ...] = ()
    sources: Mapping[str, str] = field(default_factory=dict)
    # The launcher's environment as ranks on other hosts get it, under every rank's own
    # variables (gcurun.launch.planning.forwarding): ``env_forward`` names the mode,
    # ``env_left_out`` what stays here. This host's ranks inherit the environment whole.
    launcher_env: Mapping[str, str] = field(default_factory=dict)
    env_left_out: tuple[str, ...] = ()
    env_forward: str = "all"
    device_isolation: bool = False     # each rank's device variable lists its device alone

    @property
    def size(self) -> int:
        return len(self.ranks)

    def ranks_on(self, host: str) -> tuple[RankSpec, ...]:
        return tuple(r for r in self.ranks if r.host == host)


def shared_environment(envs: Iterable[Mapping[str, str]]) -> dict[str, str]:
    """The variables (name and value) that every one of ``envs`` holds."""
    found = iter(envs)
    shared = dict(next(found, {}))
    for env in found:
        for name in [n for n, v in shared.items() if env.get(n) != v]:
            del shared[name]
        if not shared:
            break
    return shared


@dataclass(frozen=True)
class OutputEvent:
    """Bytes a rank wrote; ``data`` is empty when the stream reached its end."""

    rank: int
    stream: Stream
    data: bytes


@dataclass(frozen=True)
class ExitEvent:
    """A rank ended. Exactly one of ``exit_code`` and ``signal`` is set.

    Executors emit it only after every byte of the rank's output was emitted.
    """

    rank: int
    exit_code: int | None
    signal: int | None = None
    error_text: str | None = None


@dataclass(frozen=True)
class ExecutorErrorEvent:
    """An executor lost contact with ranks (a dropped SSH connection, say)."""

    ranks: tuple[int, ...]
    message: str


@dataclass(frozen=True)
class LauncherNoticeEvent:
    """A line a launcher program (mpirun, srun) wrote of its own, for the user: the
    supervisor hands it to the output sink, which shows it as ``[mpirun] text``."""

    source: str
    text: str


Event = Union[OutputEvent, ExitEvent, ExecutorErrorEvent, LauncherNoticeEvent]

# Signals that make gcurun stop every rank and exit 128+N (a closed terminal's SIGHUP too).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class RankGroup(Protocol):
    """The ranks one executor runs (all local ranks, the ranks on one SSH host, ...)."""

    def start(self, events: queue.Queue[Event]) -> None:
        """Start every rank; from now on put their output and exits on ``events``."""

    def terminate(self, grace_seconds: float) -> None:
        """Stop every rank that still runs, with its whole process group: SIGTERM,
        wait up to ``grace_seconds`` on a monotonic clock, SIGKILL the survivors, reap.
        Idempotent; safe to call before start."""

    def pids(self) -> dict[int, int]:
        """Rank -> pid of the rank's process (on its own host)."""
