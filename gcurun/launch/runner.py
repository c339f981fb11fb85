"""Running a plan: make the executors' rank groups, start them, supervise to the end."""

from __future__ import annotations

import contextlib
import queue
import signal
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence

from gcurun.config.api import Settings
from gcurun.errors import LaunchError
from gcurun.launch.api import Event, LaunchPlan, RankGroup
from gcurun.launch.remote.rank_env import RENDEZVOUS_VARIABLE, SECRET_VARIABLE
from gcurun.launch.supervision.output import OutputSink
from gcurun.launch.supervision.supervise import InterruptEvent, supervise

# Launcher name -> function making the rank groups of a plan. Executors register here;
# their modules are imported only when a plan uses them.
GroupFactory = Callable[[LaunchPlan, Settings, Mapping[str, str]], Sequence[RankGroup]]


def local_groups(plan: LaunchPlan, settings: Settings,
                 secrets: Mapping[str, str]) -> Sequence[RankGroup]:
    from gcurun.launch.local_group import LocalRankGroup
    from gcurun.launch.planning.binding import local_binder

    ranks = [r for r in plan.ranks if r.is_local]
    return [LocalRankGroup(ranks, workdir=plan.workdir, extra_env=secrets,
                           argv_for=local_binder())] if ranks else []


def ssh_groups(plan: LaunchPlan, settings: Settings,
               secrets: Mapping[str, str]) -> Sequence[RankGroup]:
    """Remote ranks over SSH (after a preflight of every remote host), local ones here."""
    from gcurun.launch.ssh.rank_group import ssh_groups as remote_groups

    remote = remote_groups(plan, settings, secrets)
    return [*local_groups(plan, settings, secrets), *remote]


def mpi_groups(plan: LaunchPlan, settings: Settings,
               secrets: Mapping[str, str]) -> Sequence[RankGroup]:
    from gcurun.launch.mpi.rank_group import mpi_groups as make

    return make(plan, settings, secrets)


EXECUTORS: dict[str, GroupFactory] = {"local": local_groups, "ssh": ssh_groups,
                                      "mpi": mpi_groups}


def make_groups(plan: LaunchPlan, settings: Settings,
                secrets: Mapping[str, str]) -> Sequence[RankGroup]:
    try:
        factory = EXECUTORS[plan.launcher]
    except KeyError:
        raise LaunchError(f"launcher '{plan.launcher}' is not available in this build; "
                          f"use one of: {', '.join(sorted(EXECUTORS))}") from None
    return factory(plan, settings, secrets)


@contextlib.contextmanager
def signals_to(events: queue.Queue[Event | InterruptEvent]) -> Iterator[None]:
    """While inside, SIGINT and SIGTERM become events on ``events`` (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}

    def handler(signum: int, _frame: object) -> None:
        events.put(InterruptEvent(signum, signal.Signals(signum).name))

    for signum in (signal.SIGINT, signal.SIGTERM):
        previous[signum] = signal.signal(signum, handler)
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


# In GCURUN_RENDEZVOUS, this host stands for "the launcher's address on the connection to
# the rank's host"; the SSH executor fills it in per host.
ANY_LAUNCHER_ADDRESS = "*"


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
        server, host = _any_address_server(secret, plan.size), ANY_LAUNCHER_ADDRESS
    try:
        yield {RENDEZVOUS_VARIABLE: f"{host}:{server.address[1]}", SECRET_VARIABLE: secret.hex()}
    finally:
        server.close()


def _any_address_server(secret: bytes, size: int):  # -> RendezvousServer
    """A rendezvous on every address of this host: dual-stack IPv6 where it exists."""
    from gcurun.rendezvous.server import RendezvousServer

    try:
        server = RendezvousServer("::", 0, secret=secret, size=size)
        server.start()
    except LaunchError:
        server = RendezvousServer("0.0.0.0", 0, secret=secret, size=size)
        server.start()
    return server


def run_job(plan: LaunchPlan, settings: Settings, sink: OutputSink,
            secrets: Mapping[str, str] | None = None) -> None:
    """Start every rank of ``plan`` and supervise them until the job ends.

    Returns when every rank exited 0; raises RanksFailedError, JobInterrupted or
    LaunchError otherwise, in every case after stopping all ranks.
    """
    with job_rendezvous(plan) as rendezvous:
        _run_groups(plan, settings, sink, {**rendezvous, **(secrets or {})})


def _run_groups(plan: LaunchPlan, settings: Settings, sink: OutputSink,
                secrets: Mapping[str, str]) -> None:
    events: queue.Queue[Event | InterruptEvent] = queue.Queue()
    groups = make_groups(plan, settings, secrets)
    with signals_to(events):
        started: list[RankGroup] = []
        try:
            for group in groups:
                group.start(events)  # type: ignore[arg-type]
                started.append(group)
        except BaseException:
            for group in started:
                group.terminate(settings.grace_seconds)
            raise
        supervise(groups, events, {r.rank: r.host for r in plan.ranks}, sink,
                  grace_seconds=settings.grace_seconds)
