"""Executing a prepared job: serve its rendezvous, make the executor's rank groups, start
them and supervise them to the end."""

from __future__ import annotations

import contextlib
import importlib
import queue
import signal
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Protocol, TypeVar

from gcurun.config.api import Settings
from gcurun.errors import LaunchError
from gcurun.launch.api import Event, LaunchPlan, RankGroup
from gcurun.launch.prepare import PreparedJob, prepare_plan
from gcurun.launch.remote.rank_env import ANY_ADDRESS, RENDEZVOUS_VARIABLE, SECRET_VARIABLE
from gcurun.launch.supervision.output import OutputSink
from gcurun.launch.supervision.supervise import InterruptEvent, stop_groups, supervise


class _Startable(Protocol):
    def start(self) -> None: ...


Server = TypeVar("Server", bound=_Startable)

# Launcher name -> "module:function" making the rank groups of a prepared job; a module is
# imported only when a job uses its executor.
GroupFactory = Callable[[PreparedJob, Mapping[str, str]], Sequence[RankGroup]]
EXECUTORS: dict[str, str] = {
    "local": "gcurun.launch.local_group:local_groups",
    "ssh": "gcurun.launch.ssh.rank_group:ssh_groups",
    "mpi": "gcurun.launch.mpi.rank_group:mpi_groups",
}


def group_factory(launcher: str) -> GroupFactory:
    """The factory of ``launcher``'s rank groups. Raises LaunchError for an unknown one."""
    try:
        module, _, name = EXECUTORS[launcher].partition(":")
    except KeyError:
        raise LaunchError(f"launcher '{launcher}' is not available in this build; "
                          f"use one of: {', '.join(sorted(EXECUTORS))}") from None
    factory: GroupFactory = getattr(importlib.import_module(module), name)
    return factory


@contextlib.contextmanager
def signals_to(events: queue.Queue[Event | InterruptEvent]) -> Iterator[None]:
    """While inside, SIGINT and SIGTERM become events on ``events`` (main thread only).

    A handler runs in the main thread between two bytecodes, possibly while that thread
    holds ``events``' lock inside ``events.get()``: putting on ``events`` there would wait
    for itself forever. The handler only puts on a SimpleQueue, whose put is reentrant,
    and a thread moves the event on."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: queue.SimpleQueue[InterruptEvent | None] = queue.SimpleQueue()

    def relay() -> None:
        while (event := arrived.get()) is not None:
            events.put(event)

    def handler(signum: int, _frame: object) -> None:
        arrived.put(InterruptEvent(signum, signal.Signals(signum).name))

    mover = threading.Thread(target=relay, daemon=True, name="signals")
    mover.start()
    previous = {signum: signal.signal(signum, handler)
                for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)
        arrived.put(None)
        mover.join()


@contextlib.contextmanager
def job_rendezvous(plan: LaunchPlan) -> Iterator[dict[str, str]]:
    """Serve the tcp runtime's rendezvous for the job's life, when the job may use it.

    Yields the variables every rank gets off its command line: GCURUN_RENDEZVOUS and the
    per-job GCURUN_SECRET. mpirun jobs use the mpi backend and one-rank jobs need none.
    """
    if plan.launcher == "mpi" or plan.size < 2:
        yield {}
        return
    from gcurun.rendezvous.server import RendezvousServer, new_secret

    secret = new_secret()
    if all(r.is_local for r in plan.ranks):
        server, host = RendezvousServer("127.0.0.1", 0, secret=secret, size=plan.size), \
            "127.0.0.1"
        server.start()
    else:
        server = start_on_any_address(
            lambda host: RendezvousServer(host, 0, secret=secret, size=plan.size))
        host = ANY_ADDRESS
    try:
        yield {RENDEZVOUS_VARIABLE: f"{host}:{server.address[1]}", SECRET_VARIABLE: secret.hex()}
    finally:
        server.close()


def start_on_any_address(make: Callable[[str], Server]) -> Server:
    """``make(host)`` started on every address of this host: dual-stack IPv6 where this
    host has IPv6, else IPv4. Raises LaunchError when neither can bind."""
    try:
        server = make("::")
        server.start()
    except LaunchError:
        server = make("0.0.0.0")
        server.start()
    return server


def execute(job: PreparedJob, sink: OutputSink,
            secrets: Mapping[str, str] | None = None) -> None:
    """Start every rank of a prepared ``job`` and supervise them until the job ends;
    ``secrets`` are extra variables every rank gets off its command line.

    Returns when every rank exited 0; raises RanksFailedError, JobInterrupted or
    LaunchError otherwise, in every case after stopping all ranks. The job's host
    sessions are closed at the end whatever happened.
    """
    try:
        with job_rendezvous(job.plan) as rendezvous:
            _run_groups(job, sink, {**rendezvous, **(secrets or {})})
    finally:
        job.close()


def run_job(plan: LaunchPlan, settings: Settings, sink: OutputSink,
            secrets: Mapping[str, str] | None = None) -> None:
    """Prepare a placed ``plan`` (preflight, binding) and execute it; see :func:`execute`."""
    execute(prepare_plan(plan, settings), sink, secrets)


def _run_groups(job: PreparedJob, sink: OutputSink, secrets: Mapping[str, str]) -> None:
    events: queue.Queue[Event | InterruptEvent] = queue.Queue()
    groups = group_factory(job.plan.launcher)(job, secrets)
    grace = job.settings.grace_seconds
    with signals_to(events):
        try:
            for group in groups:
                group.start(events)  # type: ignore[arg-type]
        except BaseException:
            # Whatever went wrong (a missing program, no thread or process left), every
            # group is stopped, the one being started too: terminate is safe at any point.
            for t in stop_groups(groups, grace):
                t.join()
            raise
        supervise(groups, events, {r.rank: r.host for r in job.plan.ranks}, sink,
                  grace_seconds=grace)
