"""Process sets: collectives among a subset of the job's ranks (Horovod's API).

Every set gets its own communicator, independent of the job's: a sub-communicator under
MPI, its own rendezvous and peer links under the tcp backend (the set's lowest rank
serves the rendezvous). Adding and removing sets are collective over the whole job: every
rank calls them, in the same order, with the same ranks. Ops on a set run when called.
"""

from __future__ import annotations

import itertools
import socket
import threading
from collections.abc import Callable, Sequence
from typing import Any

from gcurun.runtime import basics
from gcurun.runtime.async_ops import EngineCommunicator
from gcurun.runtime.engine import start_engine
from gcurun.runtime.local import SelfTransport
from gcurun.runtime.torch.targets import JobTarget, SetTarget


class ProcessSet:
    """Ranks that run collectives among themselves: ``ProcessSet([0, 2])``, registered
    with :func:`add_process_set` (or ``init(process_sets=[...])``) before use."""

    def __init__(self, ranks_or_comm: Sequence[int] | Any):
        self.process_set_id: int | None = None
        self.mpi_comm: Any = None
        self.ranks: list[int] | None
        if hasattr(ranks_or_comm, "Get_group"):      # an mpi4py communicator
            self.mpi_comm = ranks_or_comm
            self.ranks = None
        else:
            self.ranks = sorted(int(r) for r in ranks_or_comm)
        self._target: JobTarget | SetTarget | None = None
        self._close_links: Callable[[], None] | None = None
        self._close_rendezvous: Callable[[], None] | None = None

    def size(self) -> int | None:
        """How many ranks the set has (None until registered)."""
        return None if self.ranks is None or self.process_set_id is None else len(self.ranks)

    def rank(self) -> int | None:
        """This process's rank within the set (None when not a member or unregistered)."""
        if not self.included():
            return None
        assert self.ranks is not None
        return self.ranks.index(basics.rank())

    def included(self) -> bool | None:
        """Whether this process is a member (None until registered)."""
        if self.ranks is None or self.process_set_id is None:
            return None
        return basics.rank() in self.ranks

    def __repr__(self) -> str:
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks})"

    __str__ = __repr__


class _GlobalProcessSet(ProcessSet):
    """Every rank of the job (id 0), whoever initialized the runtime."""

    def __init__(self) -> None:
        super().__init__([])
        self.process_set_id = 0
        self._target = JOB

    @property  # type: ignore[override]
    def ranks(self) -> list[int] | None:
        return list(range(basics.size())) if basics.is_initialized() else None

    @ranks.setter
    def ranks(self, value: Any) -> None:
        pass


JOB = JobTarget()
global_process_set = _GlobalProcessSet()

_sets: dict[int, ProcessSet] = {}
_ids = itertools.count(1)
_lock = threading.Lock()


def setup() -> None:
    """Start numbering the sets of a job just joined (``init`` calls this)."""
    global _ids
    _ids = itertools.count(1)


def teardown() -> None:
    """Close every set's communicator (``shutdown`` calls this; no collective)."""
    with _lock:
        sets = list(_sets.values())
        _sets.clear()
    for process_set in sets:
        _close(process_set)


def target(process_set: ProcessSet | None) -> JobTarget | SetTarget:
    """Where the ops of ``process_set`` run; raises ValueError for a set this rank may
    not use."""
    if process_set is None:
        return JOB
    found = process_set._target
    if found is not None:
        return found
    if process_set.process_set_id is None:
        raise ValueError(f"{process_set} is not registered; call add_process_set(...) on "
                         "every rank first")
    raise ValueError(f"rank {basics.rank()} is not a member of {process_set}; only its "
                     "ranks call its collectives")


def add_process_set(process_set: ProcessSet | Sequence[int]) -> ProcessSet:
    """Register a set of ranks; collective over the whole job (every rank calls it with
    the same ranks, sets in the same order). Returns the registered ProcessSet.

    Raises ValueError for bad or disagreeing ranks, or a set that is already registered.
    """
    state = basics.state("add_process_set()")
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if process_set.process_set_id is not None:
        raise ValueError(f"{process_set} is registered already")
    if process_set.mpi_comm is not None:
        process_set.ranks = _ranks_of_comm(process_set.mpi_comm)
    ranks = process_set.ranks or []
    _check_ranks(ranks, state.topology.size)
    with _lock:
        existing = [s for s in _sets.values() if s.ranks == ranks]
    if existing:
        raise ValueError(f"ranks {ranks} form {existing[0]} already; use that set or remove "
                         "it first")
    process_set.process_set_id = next(_ids)
    if state.topology.rank in ranks:
        _open(process_set, state)
    else:
        _open_elsewhere(process_set, state)
    with _lock:
        _sets[process_set.process_set_id] = process_set
    return process_set


def remove_process_set(process_set: ProcessSet) -> bool:
    """Unregister ``process_set`` and close its communicator; collective over the whole
    job. Returns False when it was not registered (or is the global set)."""
    basics.state("remove_process_set()")
    if process_set is global_process_set or process_set.process_set_id is None:
        return False
    with _lock:
        found = _sets.pop(process_set.process_set_id, None)
    if found is None:
        return False
    # Every member closes its links before the set's rendezvous goes away.
    _close(process_set, rendezvous=False)
    JOB.barrier()
    _close(process_set)
    return True


# -- communicators of a set ------------------------------------------------------------


def _check_ranks(ranks: list[int], size: int) -> None:
    bad = [r for r in ranks if not 0 <= r < size]
    if not ranks or bad or len(set(ranks)) != len(ranks):
        raise ValueError(f"process set ranks {ranks}: give distinct ranks of this job "
                         f"(0..{size - 1}), at least one")
    seen = JOB.allgather_object(ranks, "gcurun.process_set.ranks")
    if any(other != ranks for other in seen):
        raise ValueError(f"add_process_set: the ranks disagree on the set's members "
                         f"({', '.join(f'rank {r}: {s}' for r, s in enumerate(seen))}); "
                         "every rank must pass the same ranks")


def _ranks_of_comm(comm: Any) -> list[int]:
    from mpi4py import MPI

    group = comm.Get_group()
    world = MPI.COMM_WORLD.Get_group()
    ranks = MPI.Group.Translate_ranks(group, list(range(group.Get_size())), world)
    group.Free()
    world.Free()
    return sorted(int(r) for r in ranks)


def _open(process_set: ProcessSet, state: Any) -> None:
    """Build this member's communicator of ``process_set``."""
    assert process_set.ranks is not None
    if state.backend == "mpi":
        transport = _mpi_transport(process_set.ranks, state)
    elif state.backend == "tcp":
        transport = _tcp_transport(process_set, state)
    else:
        transport = SelfTransport()
    try:
        engine = start_engine(transport, state.env, state.env.chunk_bytes)
    except BaseException:
        transport.close()
        raise

    def close() -> None:
        engine.stop()
        transport.close()

    process_set._close_links = close
    process_set._target = SetTarget(EngineCommunicator(engine))


def _open_elsewhere(process_set: ProcessSet, state: Any) -> None:
    """A non-member's part in building the set: the job-wide steps of ``_open``."""
    if state.backend == "mpi":
        _mpi_transport(process_set.ranks or [], state)
    elif state.backend == "tcp":
        _rendezvous_of(process_set, state)


def _mpi_transport(ranks: list[int], state: Any) -> Any:
    from gcurun.runtime.mpi_transport import MPITransport

    world = state.transport.comm
    group = world.Get_group().Incl(ranks)
    sub = world.Create(group)                 # collective over the whole job
    group.Free()
    if state.topology.rank not in ranks:
        return None
    transport = MPITransport(sub, state.env.timeout_seconds)
    sub.Free()                                # the transport keeps its own duplicate
    return transport


def _rendezvous_of(process_set: ProcessSet, state: Any) -> tuple[tuple[str, int], bytes]:
    """The set's lowest rank serves a rendezvous for it; every rank of the job learns
    where (a collective over the job)."""
    from gcurun.rendezvous.server import RendezvousServer, new_secret

    assert process_set.ranks is not None
    hosts = JOB.allgather_object(_hostname(state), "gcurun.process_set.hosts")
    owner = process_set.ranks[0]
    offer = None
    if state.topology.rank == owner:
        members = {hosts[r] for r in process_set.ranks}
        host = "127.0.0.1" if len(members) == 1 else socket.gethostname()
        secret = new_secret()
        server = RendezvousServer(host, 0, secret=secret, size=len(process_set.ranks))
        server.start()
        process_set._close_rendezvous = server.close
        offer = (server.address, secret)
    return JOB.broadcast_object(offer, owner, "gcurun.process_set.rendezvous")


def _tcp_transport(process_set: ProcessSet, state: Any) -> Any:
    from gcurun.runtime.tcp_transport import TCPTransport

    address, secret = _rendezvous_of(process_set, state)
    assert process_set.ranks is not None
    env = state.env
    transport = TCPTransport(rank=process_set.ranks.index(state.topology.rank),
                             size=len(process_set.ranks), generation=1,
                             hostname=_hostname(state),
                             rendezvous=(str(address[0]), int(address[1])),
                             secret=secret, timeout=env.timeout_seconds, cma=env.cma,
                             rings=env.rings)
    try:
        transport.start()
    except BaseException:
        transport.close()
        raise
    return transport


def _hostname(state: Any) -> str:
    facts = state.env.facts
    return facts.hostname if facts is not None and facts.hostname else socket.gethostname()


def _close(process_set: ProcessSet, rendezvous: bool = True) -> None:
    process_set._target = None
    closers = [process_set._close_links]
    process_set._close_links = None
    if rendezvous:
        closers.append(process_set._close_rendezvous)
        process_set._close_rendezvous = None
        process_set.process_set_id = None
    for close in closers:
        if close is not None:
            close()
