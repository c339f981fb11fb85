"""Process sets: collectives among a subset of the job's ranks, on an engine of their own
(Horovod's API, on numpy arrays and buffers).

Adding and removing a set are collective over the whole job: every rank calls them, in
the same order, with the same ranks. An op on a set is called by the set's members
only; it is negotiated, fused and timed by the set's engine, which runs over a transport
among the members (:func:`gcurun.runtime.transport.opening.open_transport`). Roots are
ranks of the job. Errors (a mismatch, a bad root) are raised on every member.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import threading
from collections.abc import Sequence
from typing import Any

from gcurun.runtime.engine.background import Engine, start_engine
from gcurun.runtime.frontend import state as job
from gcurun.runtime.frontend.collectives import Collectives
from gcurun.runtime.transport.opening import Opened, open_transport


class ProcessSet:
    """Ranks that run collectives among themselves: ``ProcessSet([0, 2])`` (or an mpi4py
    communicator), registered with :func:`add_process_set` before use."""

    def __init__(self, ranks_or_comm: Sequence[int] | Any):
        self.process_set_id: int | None = None
        self.mpi_comm: Any = None
        self.ranks: list[int] | None
        if hasattr(ranks_or_comm, "Get_group"):      # an mpi4py communicator
            self.mpi_comm = ranks_or_comm
            self.ranks = None
        else:
            self.ranks = sorted(int(r) for r in ranks_or_comm)
        self.collectives: Collectives | None = None     # members only, once registered
        self.opened: Opened | None = None

    def size(self) -> int | None:
        """How many ranks the set has (None until registered)."""
        return None if self.ranks is None or self.process_set_id is None else len(self.ranks)

    def rank(self) -> int | None:
        """This process's rank within the set (None when not a member or unregistered)."""
        if not self.included():
            return None
        assert self.ranks is not None
        return self.ranks.index(job.rank())

    def included(self) -> bool | None:
        """Whether this process is a member (None until registered)."""
        if self.ranks is None or self.process_set_id is None:
            return None
        return job.rank() in self.ranks

    @property
    def engine(self) -> Engine | None:
        return None if self.collectives is None else self.collectives.engine

    def close(self) -> None:
        """Stop this member's engine and close its transport (no job-wide step)."""
        collectives, self.collectives = self.collectives, None
        if collectives is not None:
            collectives.engine.stop()
        opened, self.opened = self.opened, None
        if opened is not None:
            opened.close()
        self.process_set_id = None

    def __repr__(self) -> str:
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks})"

    __str__ = __repr__


class GlobalProcessSet(ProcessSet):
    """Every rank of the job (id 0): the job's own engine."""

    def __init__(self) -> None:
        super().__init__([])
        self.process_set_id = 0

    @property  # type: ignore[override]
    def ranks(self) -> list[int] | None:
        return list(range(job.size())) if job.is_initialized() else None

    @ranks.setter
    def ranks(self, value: Any) -> None:
        pass

    @property  # type: ignore[override]
    def collectives(self) -> Collectives | None:
        current = job.current_state()
        return None if current is None else current.communicator

    @collectives.setter
    def collectives(self, value: Any) -> None:
        pass


global_process_set = GlobalProcessSet()
_ids = itertools.count(1)
_lock = threading.Lock()


def collectives_of(process_set: ProcessSet | None, what: str) -> Collectives:
    """The synchronous collectives of ``process_set`` (None: the job's).

    Raises NotInitializedError before init(), ValueError for a set that is not
    registered or of which this rank is not a member."""
    if process_set is None or process_set is global_process_set:
        return job.communicator(what)
    found = process_set.collectives
    if found is not None:
        return found
    job.state(what)
    if process_set.process_set_id is None:
        raise ValueError(f"{what}: {process_set} is not registered; call "
                         "add_process_set(...) on every rank first")
    raise ValueError(f"{what}: rank {job.rank()} is not a member of {process_set}; only its "
                     "ranks call its collectives")


def engine_of(process_set: ProcessSet | None, what: str) -> Engine:
    """The engine of ``process_set``'s ops (see :func:`collectives_of`)."""
    return collectives_of(process_set, what).engine


def add_process_set(process_set: ProcessSet | Sequence[int]) -> ProcessSet:
    """Register a set of ranks and start its engine on its members; collective over the
    whole job (every rank calls it with the same ranks, sets in the same order). Returns
    the registered ProcessSet.

    Raises ValueError for bad or disagreeing ranks, or a set already registered;
    NotInitializedError before init()."""
    state = job.state("add_process_set()")
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if process_set.process_set_id is not None:
        raise ValueError(f"{process_set} is registered already")
    if process_set.mpi_comm is not None:
        process_set.ranks = _ranks_of_comm(process_set.mpi_comm)
    ranks = process_set.ranks or []
    _check_ranks(ranks, state.topology.size, state.communicator)
    existing = [s for s in state.sets.values() if s.ranks == ranks]
    if existing:
        raise ValueError(f"ranks {ranks} form {existing[0]} already; use that set or remove "
                         "it first")
    with _lock:
        set_id = next(_ids)
    me = state.topology.rank
    opened = open_transport(
        state.backend, state.env, ranks, me, hostname=job.hostname(state.env),
        comm=state.comm, allgather=lambda value: state.communicator.allgather_object(
            value, f"gcurun.process_set.{set_id}.open"))
    process_set.process_set_id = set_id
    if opened.transport is not None:
        process_set.opened = opened
        try:
            engine = start_engine(opened.transport, _set_env(state.env, set_id),
                                  state.env.chunk_bytes, hosts=None if state.hosts is None
                                  else [state.hosts[r] for r in ranks])
        except BaseException:
            process_set.close()
            raise
        process_set.collectives = Collectives(engine, ranks)
    state.sets[set_id] = process_set
    return process_set


def remove_process_set(process_set: ProcessSet) -> bool:
    """Unregister ``process_set``, stopping its engine; collective over the whole job.
    Returns False when it was not registered (or is the global set).

    Raises NotInitializedError before init()."""
    state = job.state("remove_process_set()")
    if process_set is global_process_set or process_set.process_set_id is None:
        return False
    if state.sets.pop(process_set.process_set_id, None) is None:
        return False
    # Every member stops its engine (a last cycle among the members) before the set's
    # rendezvous goes away.
    opened, process_set.opened = process_set.opened, None
    process_set.close()
    state.communicator.barrier()
    if opened is not None:
        opened.close()
    return True


def process_sets() -> list[ProcessSet]:
    """The registered process sets, the global set first (only it before init())."""
    if not job.is_initialized():
        return [global_process_set]
    state = job.state("process_sets()")
    return [global_process_set, *state.sets.values()]


def _set_env(env: Any, set_id: int) -> Any:
    """The settings of a set's engine: its timeline, if any, in a file of its own; no
    autotune (the job's own engine tunes)."""
    if env.autotune is not None:
        env = dataclasses.replace(env, autotune=None)
    if not env.timeline:
        return env
    return dataclasses.replace(env, timeline=set_timeline_path(env.timeline, set_id))


def set_timeline_path(template: str | None, set_id: int) -> str | None:
    """Where the engine of set ``set_id`` writes the timeline of ``template`` (the job's
    path): ``NAME.set<ID>.json`` beside it."""
    if not template:
        return None
    stem, ext = os.path.splitext(template)
    return f"{stem}.set{set_id}{ext}"


def _check_ranks(ranks: list[int], size: int, collectives: Collectives) -> None:
    bad = [r for r in ranks if not (isinstance(r, int) and 0 <= r < size)]
    if not ranks or bad or len(set(ranks)) != len(ranks):
        raise ValueError(f"process set ranks {ranks}: give distinct ranks of this job "
                         f"(0..{size - 1}), at least one")
    seen = collectives.allgather_object(ranks, "gcurun.process_set.ranks")
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
