"""Executing a prepared job: serve its rendezvous, make the launcher kind's rank groups,
start them and supervise them to the end."""

from __future__ import annotations

import contextlib
import logging
import queue
import signal
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Protocol, TypeVar

from gcurun.config.api import Settings
from gcurun.errors import LaunchError
from gcurun.launch.api import STOP_SIGNALS, Event, LaunchPlan, RankGroup
from gcurun.launch.kinds import PreparedJob, launcher_kind
from gcurun.launch.prepare import prepare_plan
from gcurun.launch.remote.rank_env import ANY_ADDRESS, RENDEZVOUS_VARIABLE, SECRET_VARIABLE
from gcurun.launch.supervision.output import OutputSink
from gcurun.launch.supervision.supervise import (
    EventQueue,
    InterruptEvent,
    stop_groups,
    supervise,
)

log = logging.getLogger(__name__)


class _Startable(Protocol):
    def start(self) -> None: ...


Server = TypeVar("Server", bound=_Startable)

GroupFactory = Callable[[PreparedJob, Mapping[str, str]], Sequence[RankGroup]]


def log_pids(pids: Mapping[int, int]) -> None:
    """Say which processes run the ranks, where the group knows them at start."""
    if len(set(pids.values())) == 1 and len(pids) > 1:
        log.info("started: pid %d runs ranks %s", next(iter(pids.values())),
                 ",".join(map(str, sorted(pids))))
    elif pids:
        log.info("started: %s", ", ".join(f"rank {r} pid {p}" for r, p in sorted(pids.items())))


def describe_group(group: RankGroup) -> str:
    """``host a (SSHRankGroup)``: where a group's ranks run, for the launcher's log."""
    host = getattr(group, "host", None)
    where = f"host {host}" if host else "every host"
    return f"{where} ({type(group).__name__})"


def group_factory(launcher: str) -> GroupFactory:
    """What makes ``launcher``'s rank groups (its kind's :meth:`rank_groups`). Raises
    LaunchError for an unknown launcher."""
    return launcher_kind(launcher).rank_groups


@contextlib.contextmanager
def signals_to(events: queue.Queue[Event | InterruptEvent]) -> Iterator[None]:
    """While inside, SIGINT, SIGTERM and SIGHUP become events on ``events`` (main thread only).

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
                for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)
        arrived.put(None)
        mover.join()


@contextlib.contextmanager
def job_rendezvous(job: PreparedJob) -> Iterator[dict[str, str]]:
    """Serve the tcp runtime's rendezvous for the job's life, when the job may use it.

    It listens only on the addresses the ranks are given: loopback for this host's ranks,
    and for each SSH host this host's address on that host's connection (every address,
    as before, when a connection goes through a proxy and has none of its own).
    Yields the variables every rank gets off its command line: GCURUN_RENDEZVOUS and the
    per-job GCURUN_SECRET. Kinds whose ranks use the mpi backend (mpirun) and one-rank
    jobs need none.
    """
    plan = job.plan
    if not job.kind.needs_rendezvous or plan.size < 2:
        yield {}
        return
    from gcurun.rendezvous.server import RendezvousServer, new_secret

    secret = new_secret()
    addresses = rank_facing_addresses(job)
    if addresses is None:
        server = start_on_any_address(
            lambda host: RendezvousServer(host, 0, secret=secret, size=plan.size))
    else:
        server = RendezvousServer(addresses, 0, secret=secret, size=plan.size)
        server.start()
    host = "127.0.0.1" if all(r.is_local for r in plan.ranks) else ANY_ADDRESS
    log.info("rendezvous of the tcp runtime listening on port %d (%s)", server.address[1],
             ", ".join(addresses) if addresses else "every address")
    try:
        yield {RENDEZVOUS_VARIABLE: f"{host}:{server.address[1]}", SECRET_VARIABLE: secret.hex()}
    finally:
        server.close()


def rank_facing_addresses(job: PreparedJob) -> list[str] | None:
    """The addresses of this host that the job's ranks are told to reach it at (see
    :func:`job_rendezvous`), or None when some are not known as addresses."""
    import ipaddress

    found = ["127.0.0.1"] if any(r.is_local for r in job.plan.ranks) else []
    found += job.kind.rank_facing_addresses(job)
    try:
        for address in found:
            ipaddress.ip_address(address)
    except ValueError:
        return None
    return list(dict.fromkeys(found)) or None


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
    LaunchError otherwise, in every case after stopping all ranks. What the job's
    preflight opened (SSH sessions) is closed at the end whatever happened.
    """
    try:
        with job_rendezvous(job) as rendezvous:
            _run_groups(job, sink, {**rendezvous, **(secrets or {})})
    finally:
        job.close()


def run_job(plan: LaunchPlan, settings: Settings, sink: OutputSink,
            secrets: Mapping[str, str] | None = None) -> None:
    """Prepare a placed ``plan`` (preflight, binding) and execute it; see :func:`execute`."""
    execute(prepare_plan(plan, settings), sink, secrets)


def _run_groups(job: PreparedJob, sink: OutputSink, secrets: Mapping[str, str]) -> None:
    events: queue.Queue[Event | InterruptEvent] = EventQueue()
    groups = group_factory(job.plan.launcher)(job, secrets)
    grace = job.settings.grace_seconds
    with signals_to(events):
        try:
            for group in groups:
                log.info("starting the ranks of %s", describe_group(group))
                group.start(events)  # type: ignore[arg-type]
                log_pids(group.pids())
        except BaseException:
            # Whatever went wrong (a missing program, no thread or process left), every
            # group is stopped, the one being started too: terminate is safe at any point.
            for t in stop_groups(groups, grace):
                t.join()
            raise
        supervise(groups, events, {r.rank: r.host for r in job.plan.ranks}, sink,
                  grace_seconds=grace)
