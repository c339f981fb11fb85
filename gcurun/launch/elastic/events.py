"""What goes in and out of the elastic driver: events (with the ``now`` of the injected
clock) and the actions it returns, all plain frozen data.

:mod:`.records` holds the data the driver keeps, :mod:`.driver` the decisions,
:mod:`.runner` turns callbacks into events and performs the actions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from gcurun.launch.elastic.records import Assignment, Failure, Generation

# Bits of a host update (Horovod's HostUpdateResult).
REMOVED = 1
ADDED = 2


# -- events -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Discovered:
    """The discovery script's hosts, in the order it printed them."""

    now: float
    hosts: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class DiscoveryFailed:
    now: float
    message: str
    first: bool
    exit_code: int = 1


@dataclass(frozen=True)
class WorkerExited:
    """A worker's process ended (``code`` None: killed by ``signal``, or lost)."""

    now: float
    worker: int
    code: int | None
    signal: int | None = None
    text: str = ""


@dataclass(frozen=True)
class Joined:
    """A worker asked for a place in the generation after ``after`` (0: a new worker)."""

    now: float
    worker: int
    after: int


@dataclass(frozen=True)
class ConnectionLost:
    """A worker's connection to the rendezvous ended without a goodbye."""

    now: float
    worker: int


@dataclass(frozen=True)
class Formed:
    """Every member of ``generation`` registered: its ring exists."""

    now: float
    generation: int


@dataclass(frozen=True)
class Aborted:
    """A member aborted ``generation`` (a broken link, a collective timeout)."""

    now: float
    generation: int
    reason: str


@dataclass(frozen=True)
class Tick:
    now: float


@dataclass(frozen=True)
class Interrupt:
    now: float
    signum: int


Event = Union[Discovered, DiscoveryFailed, WorkerExited, Joined, ConnectionLost, Formed,
              Aborted, Tick, Interrupt]


# -- actions ------------------------------------------------------------------------------

@dataclass(frozen=True)
class StartWorkers:
    """Start one process per assignment on ``host`` (a batch); ``assignments`` carry the
    rank each worker is started for (its environment keeps it, as Horovod's does)."""

    host: str
    assignments: tuple[Assignment, ...]


@dataclass(frozen=True)
class StopHost:
    host: str
    reason: str


@dataclass(frozen=True)
class Publish:
    generation: Generation
    removed: tuple[int, ...] = ()


@dataclass(frozen=True)
class NotifyHostsUpdated:
    generation: int
    seq: int
    bits: int


@dataclass(frozen=True)
class AbortGeneration:
    generation: int
    reason: str


@dataclass(frozen=True)
class Finish:
    """The job is over: stop every worker, exit with ``code`` (``message`` says why when
    it failed)."""

    code: int
    message: str = ""
    failure: Failure | None = None


@dataclass(frozen=True)
class Record:
    """An event for the event log (and the one line per generation on stderr)."""

    kind: str
    data: dict = field(default_factory=dict)


Action = Union[StartWorkers, StopHost, Publish, NotifyHostsUpdated, AbortGeneration, Finish,
               Record]

