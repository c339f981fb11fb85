"""Supervision of a running job: one loop drains the event queue of every executor.

:class:`JobState` decides (pure, driven by events); :func:`supervise` performs: it writes
output, stops every group on the first failure or on a signal, and waits for the ranks
with a deadline. Nothing in the loop waits for the console (see
:mod:`gcurun.launch.supervision.console`), so a signal is acted on at once whatever the
console does, and the queue holds a bounded amount of output (:class:`EventQueue`).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from gcurun.errors import JobInterrupted, RankFailure, RanksFailedError
from gcurun.launch.api import (
    Event,
    ExecutorErrorEvent,
    ExitEvent,
    LauncherNoticeEvent,
    OutputEvent,
    RankGroup,
)
from gcurun.launch.supervision.output import (
    CONSOLE_PATIENCE,
    CONSOLE_PATIENCE_INTERRUPTED,
    OutputSink,
)
from gcurun.launch.supervision.waited import ranks_waited_for

log = logging.getLogger("gcurun.launch.supervision")

# After the groups were told to stop, ranks get their grace period plus this long to
# report their exit before they are declared lost.
EXIT_REPORT_SLACK = 10.0
# Rank output waiting in the event queue beyond this makes the executors' readers wait
# for the loop to catch up (the loop never waits for the console, so it always does).
OUTPUT_QUEUE_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class InterruptEvent:
    """gcurun itself received SIGINT, SIGTERM or SIGHUP."""

    signum: int
    name: str


class EventQueue(queue.Queue):  # type: ignore[type-arg]
    """The job's one event queue, holding at most ``output_limit`` bytes of rank output.

    A reader putting output beyond that waits until the loop has taken some (so the
    ranks' pipes fill and the ranks wait, as on a slow terminal, only while the launcher
    itself is behind); any other event never waits, and neither does an output event
    put into an empty queue. After :meth:`unbound`, nothing waits.
    """

    def __init__(self, output_limit: int = OUTPUT_QUEUE_BYTES) -> None:
        super().__init__()
        self._limit = output_limit
        self._output = 0
        self._unbounded = False
        self._room = threading.Condition(self.mutex)

    def put(self, item: object, block: bool = True, timeout: float | None = None) -> None:
        size = len(item.data) if isinstance(item, OutputEvent) else 0
        if size:
            with self._room:
                while self._output and self._output + size > self._limit and \
                        not self._unbounded:
                    self._room.wait()
                self._output += size
        super().put(item, block, timeout)

    def _get(self) -> object:
        item = super()._get()
        if isinstance(item, OutputEvent) and item.data:
            self._output -= len(item.data)
            self._room.notify_all()
        return item

    def unbound(self) -> None:
        """No put waits from now on (the loop will not take output any more)."""
        with self._room:
            self._unbounded = True
            self._room.notify_all()


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
            signal=event.signal, stderr_tail=tail, error_text=event.error_text,
            waited_for=self._absent(event.rank, (*tail, event.error_text or "")))
        if self.stopping:
            self.later_failures.append(failure)
            return False
        self.failure = failure
        return True

    def _absent(self, rank: int, last_words: tuple[str, ...]) -> tuple[tuple[int, str], ...]:
        """The ranks ``rank`` gave up waiting for that are still running: they did not
        arrive (one that ended already is a failure of its own, or none)."""
        return tuple((r, self.rank_hosts[r]) for r in ranks_waited_for(last_words)
                     if r != rank and r in self.running)

    def _followed(self, failure: RankFailure) -> RankFailure:
        """``failure`` with the rank it waited for replaced by the ones that rank was
        waiting for in turn, when that rank failed later saying so (a chain of waits
        ends at the rank that did not arrive). Followed one named rank at a time."""
        through: list[tuple[int, str]] = []
        named = failure.waited_for
        seen = {failure.rank}
        while len(named) == 1:         # (never a rank seen: each step leaves those out)
            rank = named[0][0]
            seen.add(rank)
            further = next((f.waited_for for f in self.later_failures
                            if f.rank == rank and f.waited_for), ())
            further = tuple(r for r in further if r[0] not in seen)
            if not further:
                break
            through.append(named[0])
            named = further
        if not through:
            return failure
        return replace(failure, waited_for=named, waited_through=tuple(through))

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
            raise RanksFailedError(self._followed(self.failure), tuple(self.later_failures))
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
    if isinstance(events, EventQueue):
        events.unbound()
    log.debug("closing every rank group")
    stoppers += stop_groups(groups, grace_seconds)
    for t in stoppers:
        t.join(grace_seconds + EXIT_REPORT_SLACK)
    finish_output(sink, events, interrupted=state.interrupt is not None)
    state.outcome()


def finish_output(sink: OutputSink, events: queue.Queue[Event | InterruptEvent], *,
                  interrupted: bool) -> None:
    """Give the console what is left, for a while: not long after a signal, and no
    longer once one arrives (a signal stops gcurun at once whatever the console does)."""
    def signalled() -> bool:
        while True:
            try:
                if isinstance(events.get_nowait(), InterruptEvent):
                    return True
            except queue.Empty:
                return False

    if interrupted:
        sink.finish_all(CONSOLE_PATIENCE_INTERRUPTED, signalled,
                        at_most=CONSOLE_PATIENCE_INTERRUPTED)
    else:
        sink.finish_all(CONSOLE_PATIENCE, signalled)


def _apply(state: JobState, event: Event | InterruptEvent, sink: OutputSink) -> bool:
    if isinstance(event, OutputEvent):
        sink.write(event)
        return False
    if isinstance(event, LauncherNoticeEvent):
        sink.notice(event)
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
        elif isinstance(event, LauncherNoticeEvent):
            sink.notice(event)
