"""init/shutdown and who-am-I: the process-wide state of the runtime (the job's
transport, engine and synchronous collectives, and the process sets registered).

The backend is chosen once per ``init()``: GCURUN_BACKEND when set; else ``mpi`` when a
communicator is given or an MPI launcher started the process; ``tcp`` when gcurun's
launcher gave a rendezvous; else the process runs alone. mpi4py is imported only by the
``mpi`` backend (importing it initializes MPI).
"""

from __future__ import annotations

import atexit
import importlib.util
import logging
import os
import socket
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

from gcurun.errors import UsageError
from gcurun.runtime.api import NotInitializedError, Transport
from gcurun.runtime.engine.background import start_engine
from gcurun.runtime.frontend import handles
from gcurun.runtime.frontend.collectives import Collectives
from gcurun.runtime.frontend.layout import RankLayout, derive_rank_layout
from gcurun.runtime.settings import BackendName, RuntimeEnv, read_runtime_env
from gcurun.runtime.transport.opening import Opened, open_transport


@dataclass
class RuntimeState:
    backend: BackendName
    transport: Transport
    topology: RankLayout
    env: RuntimeEnv
    opened: Opened
    mpi_threads: bool = False
    engine: Any = None          # the job's background engine
    communicator: Any = None    # the synchronous collectives on it (Collectives)
    comm: Any = None            # mpi: the job's mpi4py communicator
    # Registered process sets by id (each closes its engine and transport on shutdown).
    sets: dict[int, Any] = field(default_factory=dict)
    hosts: list[str] | None = None  # every rank's host, in rank order (two-level allreduce)


_state: RuntimeState | None = None
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
        handles.reset()
        env = read_runtime_env()
        apply_log_level(env.log_level)
        backend = choose_backend(env, comm is not None)
        if backend == "mpi":
            state_ = _init_mpi(env, comm)
        elif backend == "tcp":
            state_ = _init_tcp(env)
        else:
            state_ = _init_local(env)
        _state = _start_engine(state_)
        layout = state_.topology
        logging.getLogger("gcurun.runtime").info(
            "rank %d of %d joined (local rank %d of %d), backend %s", layout.rank,
            layout.size, layout.local_rank, layout.local_size, backend)
        if not _atexit_registered:
            atexit.register(shutdown)
            _atexit_registered = True


# The runtime's messages on stderr under GCURUN_LOG_LEVEL, installed once per process.
_LOG_HANDLER: logging.Handler | None = None


class _LowerLevelFormatter(logging.Formatter):
    """``gcurun: warning: ...``, as the launcher's own messages read."""

    def format(self, record: logging.LogRecord) -> str:
        return f"gcurun: {record.levelname.lower()}: {record.getMessage()}"


def apply_log_level(level: str | None) -> None:
    """Show the runtime's messages (the ``gcurun`` loggers) of ``level`` and above on
    stderr, ``gcurun: <level>: ...`` (horovodrun's TRACE is DEBUG, FATAL is CRITICAL).
    None leaves logging as the script set it up."""
    global _LOG_HANDLER
    if level is None:
        return
    number = {"TRACE": logging.DEBUG, "FATAL": logging.CRITICAL}.get(
        level, logging.getLevelName(level))
    logger = logging.getLogger("gcurun")
    logger.setLevel(number)
    if _LOG_HANDLER is None and not logger.handlers:
        _LOG_HANDLER = logging.StreamHandler()
        _LOG_HANDLER.setFormatter(_LowerLevelFormatter())
        logger.addHandler(_LOG_HANDLER)
        logger.propagate = False   # a script's root handler would print each line twice


def shutdown() -> None:
    """Leave the job and release connections. Safe to call twice or before init."""
    global _state
    with _lock:
        state, _state = _state, None
    handles.reset()
    if state is not None:
        for process_set in list(state.sets.values()):
            process_set.close()
        state.sets.clear()
        if state.engine is not None:
            state.engine.stop()
        state.opened.close()


def current_state() -> RuntimeState | None:
    """The running job's state, or None before init() (never raises)."""
    return _state


def is_initialized() -> bool:
    return _state is not None


def state(what: str) -> RuntimeState:
    current = _state
    if current is None:
        raise NotInitializedError(what)
    return current


def communicator(what: str) -> Collectives:
    """The job's synchronous collectives; raises NotInitializedError before init()."""
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
    """True: the tcp backend, gcurun's counterpart of Horovod's Gloo (jobs without MPI,
    started by gcurun's own launchers, ``gcurun.run(use_gloo=True)`` or ``gcurun.ray``),
    is always built in."""
    return True


def gloo_enabled() -> bool:
    """Whether the running job uses the tcp backend (Horovod's Gloo mode)."""
    return _state is not None and _state.backend == "tcp"


def nccl_built() -> bool:
    return False


def hostname(env: RuntimeEnv) -> str:
    """This rank's host name, as the launcher named it."""
    facts = env.facts
    return facts.hostname if facts is not None and facts.hostname else socket.gethostname()


def _start_engine(state_: RuntimeState) -> RuntimeState:
    """Start the job's background engine; the public collectives go through it."""
    try:
        if state_.backend == "mpi":
            _check_mpi_threads()
            _exit_at_once_on_an_unhandled_error()
        state_.engine = start_engine(state_.transport, state_.env, state_.env.chunk_bytes,
                                     hosts=state_.hosts, tuner=_tuner(state_))
    except BaseException:
        state_.opened.close()
        raise
    state_.communicator = Collectives(state_.engine)
    return state_


def _tuner(state_: RuntimeState) -> Any:
    """Rank 0's autotune tuner when the job autotunes (GCURUN_AUTOTUNE), else None.
    Raises UsageError when optuna is missing."""
    env, layout = state_.env, state_.topology
    if env.autotune is None or layout.rank != 0:
        return None
    from gcurun.runtime import algorithms as alg
    from gcurun.runtime.autotune import Shape, make_tuner, show_messages

    two_levels = state_.hosts is not None and \
        alg.HostLayout.from_names(state_.hosts).two_level
    show_messages()
    return make_tuner(env, Shape(layout.cross_size, layout.local_size, state_.backend),
                      two_levels)


_exit_hook_installed = False


def _exit_at_once_on_an_unhandled_error() -> None:
    """Under MPI a script's unhandled exception must end its process: mpi4py calls
    MPI_Finalize at exit, and Open MPI's waits for every rank, so a rank whose peer is
    stopped (SIGSTOP, a debugger) or hung would never exit, and mpirun, waiting for it,
    would never stop the job. After the usual traceback the process leaves at once with
    Python's code for an unhandled exception, 1; mpirun then stops the others. Ctrl-C
    (KeyboardInterrupt) ends the process as Python does."""
    global _exit_hook_installed
    if _exit_hook_installed:
        return
    _exit_hook_installed = True
    previous = sys.excepthook

    def leave(kind: type[BaseException], value: BaseException, tb: Any) -> None:
        previous(kind, value, tb)
        if issubclass(kind, KeyboardInterrupt):
            return
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError, AttributeError):
                pass
        os._exit(1)

    sys.excepthook = leave


def _check_mpi_threads() -> None:
    from mpi4py import MPI

    if MPI.Query_thread() < MPI.THREAD_SERIALIZED:
        raise UsageError("the MPI library was initialized without thread support "
                         "(MPI_THREAD_SERIALIZED or better); gcurun's engine thread makes "
                         "the MPI calls: leave mpi4py.rc.thread_level at 'multiple'")


# -- backends ---------------------------------------------------------------------------


def _init_local(env: RuntimeEnv) -> RuntimeState:
    if env.facts is not None and env.facts.size > 1:
        raise UsageError(f"GCURUN_SIZE={env.facts.size} but this process has no way to reach "
                         "its peers: GCURUN_RENDEZVOUS is unset and no MPI launcher started "
                         "it; start the job with gcurun (or mpirun)")
    opened = open_transport("local", env, [0], 0, hostname=hostname(env))
    assert opened.transport is not None
    layout = RankLayout(0, 1, 0, 1, 0, 1, True)
    return RuntimeState("local", opened.transport, layout, env, opened)


def _abort(reason: str) -> None:
    """Wake every collective blocked on the job's transport (an elastic worker whose
    launcher is gone)."""
    from gcurun.runtime.transport.tcp_connections import Connections

    state = current_state()
    if state is not None and isinstance(state.transport, Connections):
        state.transport.job_aborted(reason)


def _init_tcp(env: RuntimeEnv) -> RuntimeState:
    global _generation
    facts = env.facts
    missing = [name for name, value in (("GCURUN_RANK/GCURUN_SIZE", facts),
                                        ("GCURUN_RENDEZVOUS", env.rendezvous),
                                        ("GCURUN_SECRET", env.secret)) if value is None]
    if missing or facts is None or env.rendezvous is None or env.secret is None:
        raise UsageError(f"the tcp backend needs {', '.join(missing)}, which gcurun's launcher "
                         "sets; start the job with gcurun, or unset GCURUN_BACKEND")
    if env.elastic_worker is not None:
        # An elastic job: the launcher's driver gives this worker its rank and size.
        from gcurun.runtime.elastic.membership import open_elastic

        opened, layout = open_elastic(env, hostname(env), on_lost=_abort)
        assert opened.transport is not None
        return RuntimeState("tcp", opened.transport, layout, env, opened)
    _generation += 1
    opened = open_transport("tcp", env, range(facts.size), facts.rank,
                            hostname=hostname(env), generation=_generation,
                            rendezvous=(env.rendezvous, env.secret))
    assert opened.transport is not None
    hosts = [str(p.get("host")) for p in opened.peers]
    layout = derive_rank_layout(hosts, facts.rank)
    if facts.local_rank is not None and facts.local_size is not None \
            and facts.cross_rank is not None and facts.cross_size is not None:
        # The launcher's plan is the truth (its hosts may share one kernel in tests).
        layout = RankLayout(facts.rank, facts.size, facts.local_rank, facts.local_size,
                            facts.cross_rank, facts.cross_size, layout.homogeneous)
    return RuntimeState("tcp", opened.transport, layout, env, opened, hosts=hosts)


def _init_mpi(env: RuntimeEnv, comm: Any) -> RuntimeState:
    from mpi4py import MPI

    from gcurun.runtime.transport.mpi import mpi_topology
    from gcurun.runtime.world_guard import check_mpi_world

    check_mpi_world(MPI.COMM_WORLD.Get_size())  # no world of 1 where N were launched

    if comm is None:
        comm = MPI.COMM_WORLD
    elif isinstance(comm, (list, tuple)):
        group = MPI.COMM_WORLD.Get_group().Incl(list(comm))
        comm = MPI.COMM_WORLD.Create_group(group)
        group.Free()
    opened = open_transport("mpi", env, range(comm.Get_size()), comm.Get_rank(),
                            hostname=hostname(env), comm=comm)
    transport = opened.transport
    assert transport is not None
    local_rank_, local_size_, cross_rank_, cross_size_ = mpi_topology(comm, env.facts)
    sizes = comm.allgather(local_size_)
    layout = RankLayout(transport.rank, transport.size, local_rank_, local_size_,
                        cross_rank_, cross_size_, len(set(sizes)) == 1)
    threads = MPI.Query_thread() == MPI.THREAD_MULTIPLE
    hosts = [str(h) for h in comm.allgather(hostname(env))]
    return RuntimeState("mpi", transport, layout, env, opened, threads, comm=comm, hosts=hosts)
