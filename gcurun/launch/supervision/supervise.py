"""Supervision of a running job: one loop drains the event queue of every executor.

:class:`JobState` decides (pure, driven by events); :func:`supervise` performs: it writes
output, stops every group on the first failure or on a signal, and waits for the ranks
with a deadline.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from gcurun.errors import JobInterrupted, RankFailure, RanksFailedError
from gcurun.launch.api import Event, ExecutorErrorEvent, ExitEvent, OutputEvent, RankGroup
from gcurun.launch.supervision.output import OutputSink

log = logging.getLogger("gcurun.launch.supervision")

# After the groups were told to stop, ranks get their grace period plus this long to
# report their exit before they are declared lost.
EXIT_REPORT_SLACK = 10.0


@dataclass(frozen=True)
class InterruptEvent:
    """gcurun itself received SIGINT or SIGTERM."""

    signum: int
    name: str


class JobState:
    """What the job knows: ranks still running, the root-cause failure, an interrupt."""

    def __init__(self, rank_hosts: Mapping[int, str]) -> None:
        self.rank_hosts = dict(rank_hosts)
        self.running = set(rank_hosts)
        self.failure: RankFailure | None = None
        self.later_failures: list[RankFailure] = []
        self.interrupt: InterruptEvent | None = None

    @property
    def stopping(self) -> bool:
        return self.failure is not None or self.interrupt is not None

    def on_exit(self, event: ExitEvent, tail: tuple[str, ...]) -> bool:
        """Record an exit; True when it is the first failure and the job must stop."""
        self.running.discard(event.rank)
        if event.exit_code == 0 and event.signal is None:
            return False
        failure = RankFailure(
            rank=event.rank, host=self.rank_hosts[event.rank], exit_code=event.exit_code,
            signal=event.signal, stderr_tail=tail, error_text=event.error_text)
        if self.stopping:
            self.later_failures.append(failure)
            return False
        self.failure = failure
        return True

    def on_lost(self, event: ExecutorErrorEvent) -> bool:
        """Ranks an executor lost contact with count as failed (exit code 255)."""
        lost = [r for r in event.ranks if r in self.running]
        stop = False
        for rank in lost:
            stop |= self.on_exit(ExitEvent(rank, exit_code=255, error_text=event.message), ())
        return stop

    def on_interrupt(self, event: InterruptEvent) -> bool:
        if self.stopping:
            return False
        self.interrupt = event
        return True

    def outcome(self) -> None:
        """Raise what ended the job, or return when every rank succeeded."""
        if self.failure is not None:
            raise RanksFailedError(self.failure, tuple(self.later_failures))
        if self.interrupt is not None:
            raise JobInterrupted(self.interrupt.signum, self.interrupt.name)


def stop_groups(groups: Sequence[RankGroup], grace_seconds: float) -> list[threading.Thread]:
    """Tell every group to stop, in parallel, without blocking the caller; a group whose
    thread cannot start (the host is out of threads or processes) is stopped in this one."""
    threads = []
    for g in groups:
        t = threading.Thread(target=g.terminate, args=(grace_seconds,), daemon=True,
                             name="stop-group")
        try:
            t.start()
        except RuntimeError:
            g.terminate(grace_seconds)
            continue
        threads.append(t)
    return threads


def supervise(
    groups: Sequence[RankGroup],
    events: queue.Queue[Event | InterruptEvent],
    rank_hosts: Mapping[int, str],
    sink: OutputSink,
    *,
    grace_seconds: float,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Drain ``events`` until every rank has ended.

    Returns when all ranks exited with 0. Raises RanksFailedError naming the first failure
    (the root cause) after every rank was stopped, or JobInterrupted after a signal.
    Every group is stopped at the end whatever happened, so nothing the job started
    outlives it.
    """
    state = JobState(rank_hosts)
    deadline: float | None = None
    stoppers: list[threading.Thread] = []
    while state.running:
        timeout = 0.5 if deadline is None else max(0.0, min(0.5, deadline - clock()))
        try:
            event = events.get(timeout=timeout)
        except queue.Empty:
            if deadline is not None and clock() >= deadline:
                lost = tuple(sorted(state.running))
                state.on_lost(ExecutorErrorEvent(lost, "did not report its exit in time"))
                break
            continue
        if isinstance(event, InterruptEvent) and state.stopping:
            # A second Ctrl-C while stopping: no more grace, SIGKILL what is left.
            stoppers += stop_groups(groups, 0)
            deadline = min(deadline or clock(), clock() + EXIT_REPORT_SLACK)
            continue
        if isinstance(event, ExitEvent):
            log.info("rank %d exited: %s", event.rank,
                     f"signal {event.signal}" if event.signal is not None
                     else f"code {event.exit_code}")
        must_stop = _apply(state, event, sink)
        if must_stop and deadline is None:
            log.info("stopping every rank (%s): SIGTERM, SIGKILL after %gs",
                     "interrupted" if state.interrupt else f"rank {state.failure.rank} "
                     "failed" if state.failure else "lost", grace_seconds)
            stoppers = stop_groups(groups, grace_seconds)
            deadline = clock() + grace_seconds + EXIT_REPORT_SLACK
    _drain_output(events, sink)
    log.debug("closing every rank group")
    stoppers += stop_groups(groups, grace_seconds)
    for t in stoppers:
        t.join(grace_seconds + EXIT_REPORT_SLACK)
    sink.finish_all()
    state.outcome()


def _apply(state: JobState, event: Event | InterruptEvent, sink: OutputSink) -> bool:
    if isinstance(event, OutputEvent):
        sink.write(event)
        return False
    if isinstance(event, ExitEvent):
        return state.on_exit(event, sink.tail(event.rank))
    if isinstance(event, ExecutorErrorEvent):
        return state.on_lost(event)
    return state.on_interrupt(event)


def _drain_output(events: queue.Queue[Event | InterruptEvent], sink: OutputSink) -> None:
    """Write output that arrived after the last exit (a grandchild's last words)."""
    while True:
        try:
            event = events.get_nowait()
        except queue.Empty:
            return
        if isinstance(event, OutputEvent):
            sink.write(event)
