"""init/shutdown and who-am-I: the process-wide state of the runtime.

The backend is chosen once per ``init()``: GCURUN_BACKEND when set; else ``mpi`` when a
communicator is given or an MPI launcher started the process; ``tcp`` when gcurun's
launcher gave a rendezvous; else the process runs alone. mpi4py is imported only by the
``mpi`` backend (importing it initializes MPI).
"""

from __future__ import annotations

import atexit
import importlib.util
import socket
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from gcurun.errors import UsageError
from gcurun.runtime.api import NotInitializedError, Transport
from gcurun.runtime.collectives import Communicator
from gcurun.runtime.env import BackendName, RuntimeEnv, read_runtime_env
from gcurun.runtime.local import SelfTransport
from gcurun.runtime.topology import Topology, derive_topology


@dataclass
class _State:
    backend: BackendName
    transport: Transport
    communicator: Communicator
    topology: Topology
    env: RuntimeEnv
    mpi_threads: bool = False
    engine: Any = None          # the background engine (gcurun.runtime.engine.Engine)


_state: _State | None = None
_lock = threading.Lock()
_generation = 0
_atexit_registered = False


def choose_backend(env: RuntimeEnv, comm_given: bool) -> BackendName:
    """The backend ``init`` uses (pure; see the module docstring for the rule)."""
    if env.backend is not None:
        if comm_given and env.backend != "mpi":
            raise UsageError(f"init(comm=...) needs the mpi backend but GCURUN_BACKEND="
                             f"{env.backend}; unset GCURUN_BACKEND or drop comm")
        return env.backend
    if comm_given:
        return "mpi"
    if env.rendezvous is not None:
        return "tcp"
    if env.under_mpi_launcher:
        return "mpi"
    return "local"


def init(comm: Any = None) -> None:
    """Join the job. ``comm`` (an mpi4py communicator, or a list of ranks of
    COMM_WORLD) runs the job on that communicator. A second call without shutdown does
    nothing; after ``shutdown()`` it joins again."""
    global _state, _atexit_registered
    with _lock:
        if _state is not None:
            return
        env = read_runtime_env()
        backend = choose_backend(env, comm is not None)
        if backend == "mpi":
            state_ = _init_mpi(env, comm)
        elif backend == "tcp":
            state_ = _init_tcp(env)
        else:
            state_ = _init_local(env)
        _state = _start_engine(state_)
        if not _atexit_registered:
            atexit.register(shutdown)
            _atexit_registered = True


def shutdown() -> None:
    """Leave the job and release connections. Safe to call twice or before init."""
    global _state
    with _lock:
        state, _state = _state, None
    if state is not None:
        if state.engine is not None:
            state.engine.stop()
        state.transport.close()


def is_initialized() -> bool:
    return _state is not None


def state(what: str) -> _State:
    current = _state
    if current is None:
        raise NotInitializedError(what)
    return current


def communicator(what: str) -> Communicator:
    current = _state
    if current is None:
        raise NotInitializedError(what)
    return current.communicator


def rank() -> int:
    return state("rank()").topology.rank


def size() -> int:
    return state("size()").topology.size


def local_rank() -> int:
    return state("local_rank()").topology.local_rank


def local_size() -> int:
    return state("local_size()").topology.local_size


def cross_rank() -> int:
    return state("cross_rank()").topology.cross_rank


def cross_size() -> int:
    return state("cross_size()").topology.cross_size


def is_homogeneous() -> bool:
    """Whether every host runs the same number of ranks."""
    return state("is_homogeneous()").topology.homogeneous


def backend() -> BackendName:
    """The running backend: ``mpi``, ``tcp`` or ``local``."""
    return state("backend()").backend


def mpi_threads_supported() -> bool:
    """Whether MPI runs with MPI_THREAD_MULTIPLE (False on the tcp and local backends)."""
    return state("mpi_threads_supported()").mpi_threads


def mpi_built() -> bool:
    """Whether the mpi backend can be used here (mpi4py is installed)."""
    return importlib.util.find_spec("mpi4py") is not None


def mpi_enabled() -> bool:
    """Whether the running job uses the mpi backend."""
    return _state is not None and _state.backend == "mpi"


def gloo_built() -> bool:
    return False


def gloo_enabled() -> bool:
    return False


def nccl_built() -> bool:
    return False


def _start_engine(state_: _State) -> _State:
    """Start the background engine; from now on the public collectives go through it
    (``state.communicator`` becomes the engine's)."""
    from gcurun.runtime.async_ops import EngineCommunicator
    from gcurun.runtime.engine import start_engine

    try:
        if state_.backend == "mpi":
            _check_mpi_threads()
        state_.engine = start_engine(state_.transport, state_.env,
                                     state_.communicator.chunk_bytes)
    except BaseException:
        state_.transport.close()
        raise
    state_.communicator = EngineCommunicator(state_.engine)  # type: ignore[assignment]
    return state_


def _check_mpi_threads() -> None:
    from mpi4py import MPI

    if MPI.Query_thread() < MPI.THREAD_SERIALIZED:
        raise UsageError("the MPI library was initialized without thread support "
                         "(MPI_THREAD_SERIALIZED or better); gcurun's engine thread makes "
                         "the MPI calls: leave mpi4py.rc.thread_level at 'multiple'")


# -- backends ---------------------------------------------------------------------------


def _init_local(env: RuntimeEnv) -> _State:
    if env.facts is not None and env.facts.size > 1:
        raise UsageError(f"GCURUN_SIZE={env.facts.size} but this process has no way to reach "
                         "its peers: GCURUN_RENDEZVOUS is unset and no MPI launcher started "
                         "it; start the job with gcurun (or mpirun)")
    transport = SelfTransport()
    topology = Topology(0, 1, 0, 1, 0, 1, True)
    return _State("local", transport, Communicator(transport, env.chunk_bytes), topology, env)


def _init_tcp(env: RuntimeEnv) -> _State:
    global _generation
    from gcurun.runtime.tcp_transport import TCPTransport

    facts = env.facts
    missing = [name for name, value in (("GCURUN_RANK/GCURUN_SIZE", facts),
                                        ("GCURUN_RENDEZVOUS", env.rendezvous),
                                        ("GCURUN_SECRET", env.secret)) if value is None]
    if missing or facts is None or env.rendezvous is None or env.secret is None:
        raise UsageError(f"the tcp backend needs {', '.join(missing)}, which gcurun's launcher "
                         "sets; start the job with gcurun, or unset GCURUN_BACKEND")
    hostname = facts.hostname or socket.gethostname()
    _generation += 1
    transport = TCPTransport(rank=facts.rank, size=facts.size, generation=_generation,
                             hostname=hostname, rendezvous=env.rendezvous, secret=env.secret,
                             timeout=env.timeout_seconds, cma=env.cma,
                             rings=env.rings)
    try:
        peers = transport.start()
    except BaseException:
        transport.close()
        raise
    topology = derive_topology([str(p.get("host")) for p in peers], facts.rank)
    if facts.local_rank is not None and facts.local_size is not None \
            and facts.cross_rank is not None and facts.cross_size is not None:
        # The launcher's plan is the truth (its hosts may share one kernel in tests).
        topology = Topology(facts.rank, facts.size, facts.local_rank, facts.local_size,
                            facts.cross_rank, facts.cross_size, topology.homogeneous)
    return _State("tcp", transport, Communicator(transport, env.chunk_bytes), topology, env)


def _init_mpi(env: RuntimeEnv, comm: Any) -> _State:
    from mpi4py import MPI

    from gcurun.hosts.slurm import check_mpi_world
    from gcurun.runtime.mpi_transport import MPITransport, mpi_topology

    check_mpi_world(MPI.COMM_WORLD.Get_size())  # no world of 1 where N were launched

    if comm is None:
        comm = MPI.COMM_WORLD
    elif isinstance(comm, (list, tuple)):
        group = MPI.COMM_WORLD.Get_group().Incl(list(comm))
        comm = MPI.COMM_WORLD.Create_group(group)
        group.Free()
    transport = MPITransport(comm, env.timeout_seconds)
    communicator_ = Communicator(transport, env.chunk_bytes)
    local_rank_, local_size_, cross_rank_, cross_size_ = mpi_topology(comm, env.facts)
    sizes = communicator_.allgather(np.array([local_size_], np.int64), name="gcurun.init")
    topology = Topology(transport.rank, transport.size, local_rank_, local_size_, cross_rank_,
                        cross_size_, len(set(sizes.tolist())) == 1)
    threads = MPI.Query_thread() == MPI.THREAD_MULTIPLE
    return _State("mpi", transport, communicator_, topology, env, threads)
