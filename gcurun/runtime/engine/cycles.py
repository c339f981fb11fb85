"""The engine's state and its cycles: the engine thread's loop, pacing, admission of
new ops, and what a cycle's outcome does (run the ready ops, fail the refused ones).

A cycle runs holding ``_cycling``: on the engine thread, or on a caller's thread that
drives the cycles itself while the engine thread is idle (see :mod:`.calls`).

Pacing: while ops wait, a cycle starts every ``cycle_time_ms`` (so that ops submitted
close together are fused); an engine with nothing to do starts its next cycle a cycle
time after an op is submitted to it, or an idle tick after its last cycle ended, to keep
the other ranks' cycles going (every cycle is a collective: a rank waiting for an op
others have not submitted yet exchanges blocks with them until they do, and rank 0's
stall inspector looks in these cycles). The cycle time after the first op lets the ops
that follow it closely share its cycle: a backward pass hands a layer's gradients over a
fraction of a millisecond apart, and starting at once gave each its own negotiation
(ResNet-18 at half width on 2 hosts: 46 cycles a step for its 62 gradients, 28 with the
wait). A caller that waits for an op (``synchronize``) runs the cycle itself at once.
No op waits for an idle tick: a rank that submits one starts its cycle within a cycle
time, and a rank whose op waits is already in its cycle's exchange when the others
come. The ticks are for ops that never come (the stall inspector's report, a
shutdown's news, a peer's death), so they are 100 ms apart at first: each is a
negotiation on every rank, and at 10 ms apart they made ResNet-18 at half width on 4
ranks of one host run 114-118 cycles a step for its 62 gradients, at 100 ms 46-48
(``docs/benchmarks.md``). Counting from the end matters after a long cycle (one that ran a
large batch): counting from its start would make the next idle cycle due at once, and
that cycle, begun before the next step's ops arrive, would hold this rank one exchange
behind when they do.

Cycles that move nothing cost CPU and nothing else, so the pace slows the longer no
cycle has made progress (no op admitted or finished anywhere): by a tenth of that time,
from ``IDLE_TICK`` up to ``IDLE_TICK_MAX`` between idle cycles, and up to
``STUCK_TICK_MAX`` between the cycles of a rank whose ops wait for others. An idle job
and a rank waiting for a slow one thus sleep nearly all the time, and a rank that has
waited a while takes at most a tenth longer (and at most ``STUCK_TICK_MAX``) to see the
others come. Progress happens in the same cycle on every rank, so every rank slows
alike and their idle cycles stay in step.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from gcurun.errors import CollectiveError
from gcurun.runtime import algorithms as alg
from gcurun.runtime.api import CollectiveTimeout, PeerFailureError, ReduceOp, Transport
from gcurun.runtime.dtypes import combine
from gcurun.runtime.engine._results import deliver, finish_reduction
from gcurun.runtime.engine.auto_names import AutoNames
from gcurun.runtime.engine.decision import CycleDecision, ProtocolError
from gcurun.runtime.engine.executor import Executor
from gcurun.runtime.engine.handles import Handle, HandleError
from gcurun.runtime.engine.negotiation import Controller
from gcurun.runtime.engine.requests import AGREED, DONE, Agreed, Op, OpKind
from gcurun.runtime.engine.stall import SilenceWatch, StallInspector
from gcurun.runtime.engine.timeline import Timeline, timeline_path
from gcurun.runtime.settings import RuntimeEnv

if TYPE_CHECKING:
    from gcurun.runtime.autotune import Tuner

log = logging.getLogger("gcurun.runtime.engine")

TUNED_KINDS = (OpKind.ALLREDUCE, OpKind.ALLGATHER)    # the bytes autotune scores
IDLE_TICK = 0.1
IDLE_TICK_MAX = 1.0
STUCK_TICK_MAX = 0.01
MIB = 1 << 20


class Cycles:
    """An engine's state, and the cycles that move it on (the engine thread's side)."""

    def __init__(self, transport: Transport, env: RuntimeEnv, *, capacity: int,
                 threshold_bytes: int, chunk_bytes: int, idle_cycles: bool = True,
                 layout: alg.HostLayout | None = None, two_levels: alg.TwoLevelMode = "auto",
                 autotuned: bool = False, tuner: Tuner | None = None):
        self.t = transport
        self.rank, self.size = transport.rank, transport.size
        self.timeout = env.timeout_seconds
        self.cycle_seconds = env.cycle_time_ms / 1000
        self.threshold_bytes = threshold_bytes
        # Without idle cycles the engine thread runs only for submitted ops: every rank's
        # callers must then call every op synchronously (they drive the cycles).
        self.idle_tick = IDLE_TICK if idle_cycles else float("inf")
        self._timeline_max_bytes = int(env.timeline_max_mb * MIB)
        self.timeline = self._open_timeline(env.timeline, env.timeline_mark_cycles)
        # Every rank learns who is missing well before its synchronize() gives up.
        report = min(self.timeout / 4, env.stall_check_warning_seconds or self.timeout)
        stall = StallInspector(self.size, env.stall_check_warning_seconds,
                               env.stall_check_shutdown_seconds, report)
        self.controller = Controller(transport, capacity, chunk_bytes, self.timeline, stall)
        self.executor = Executor(transport, chunk_bytes, threshold_bytes, self.timeline,
                                 huge_pages=env.huge_pages, layout=layout,
                                 two_levels=two_levels)
        if env.stream_bytes:
            self.executor.reducer.stream_bytes = env.stream_bytes
        # Autotune (on every rank, when rank 0 tunes): rank 0's tuner, and every rank's
        # record of the knobs it took: (negotiated cycle, decision number, knobs).
        self.autotuned = autotuned
        self.tuner = tuner
        self.knob_history: list[tuple[int, int, dict[str, Any]]] = []
        self._decisions = 0
        self._requested: dict[str, Any] | None = None     # rank 0: knobs set by hand
        self._lock = threading.Condition()
        self._incoming: list[Op] = []
        self._incoming_at = 0.0                     # when the first of them came
        self._incoming_names: set[str] = set()     # the names callers gave them
        # Names callers gave ops whose handle is not synchronized yet: name -> handle.
        self._outstanding: dict[str, int] = {}
        self._handles: dict[int, Handle] = {}
        self._next_handle = 1
        self.auto_names = AutoNames()
        # The first (Python) thread to call unnamed ops, and whether another one has.
        self._auto_thread: threading.Thread | None = None
        self.auto_shared = False
        self._pending: dict[str, Op] = {}           # the engine thread's own
        self._parked: dict[str, list[Op]] = {}      # auto-named ops waiting for their name
        self._joining: Op | None = None
        self._stop_requested = False
        self._failure: str | None = None            # set once the engine cannot go on
        self._ended = False                         # no more cycles, ever
        # Held while a cycle runs: by the engine thread, or by a caller waiting in
        # synchronize() while the engine thread is idle (saving two thread switches).
        self._cycling = threading.Lock()
        self._last_start = 0.0
        self._last_end = 0.0                        # when the last cycle ended
        self._cycles = 0                            # cycles but finished quick ones
        self._progress_at = time.monotonic()        # the last cycle that moved anything
        self._quick_seen = 0                        # quick cycles the engine thread saw
        self._thread = threading.Thread(target=self._run, name="gcurun-engine", daemon=True)
        self._thread.start()
        self._watch_done = threading.Event()
        watch = SilenceWatch(self.rank, env.stall_check_warning_seconds,
                             env.stall_check_shutdown_seconds)
        if self.size > 1 and watch.interval and hasattr(transport, "blocked"):
            threading.Thread(target=self._watch, args=(watch,), name="gcurun-stall-watch",
                             daemon=True).start()

    def _open_timeline(self, template: str | None, mark_cycles: bool) -> Timeline | None:
        """This rank's timeline for ``template`` (None where this rank writes none)."""
        path = timeline_path(template, self.rank) if template else None
        return None if path is None else Timeline(
            path, max_bytes=self._timeline_max_bytes, mark_cycles=mark_cycles,
            rank=self.rank, size=self.size)

    @property
    def cycles(self) -> int:
        """The cycles this engine ran (quick ones included)."""
        return self._cycles + self.controller.quick_cycles

    def _drive(self, op: Op, deadline: float | None = None) -> float:
        """Run cycles on the calling thread (holding ``_cycling``) until ``op`` is done,
        the engine ends or ``deadline`` (default: the timeout from now) passes; return
        the deadline. The first cycle starts at once; after one that moved nothing, the
        next waits as the engine thread's would (see the module docstring)."""
        if deadline is None:
            deadline = time.monotonic() + self.timeout
        first = True
        while op.state != DONE and not self._ended:
            now = time.monotonic()
            if now >= deadline:
                break
            if not first and self._progress_at < self._last_start:     # it was stuck
                resume = self._last_end + self._pause(now, STUCK_TICK_MAX)
                if resume > now:
                    time.sleep(min(resume, deadline) - now)
                    continue
            first = False
            self._one_cycle()
        return deadline

    def _pause(self, now: float, longest: float) -> float:
        """How long cycles that move nothing wait: a tenth of the time since the last
        one that did, at most ``longest``."""
        return min(longest, (now - self._progress_at) / 10)

    # -- the engine thread ----------------------------------------------------------------

    def _run(self) -> None:
        try:
            while self._wait_for_work():
                with self._cycling:
                    # A caller may have run the cycles while this thread waited.
                    self._note_quick_cycles()
                    if self._due() <= time.monotonic():
                        self._one_cycle()
        finally:
            self._watch_done.set()
            with self._cycling:         # (no caller runs a cycle any more)
                self.executor.reducer.release()
            if self.timeline is not None:
                self.timeline.close()

    def _watch(self, watch: SilenceWatch) -> None:
        """Now and then, look whether this rank's transport waits for ranks that do not
        answer (see :mod:`.stall`): warn, and at the shutdown time end this rank's part
        (and, where the transport can, the job) with the reason."""
        while not self._watch_done.wait(watch.interval):
            warn, shutdown = watch.observe(getattr(self.t, "blocked", None),
                                           time.monotonic())
            if warn is not None:
                log.warning(warn)
            if shutdown is not None:
                for name in ("abort", "job_aborted"):
                    call = getattr(self.t, name, None)
                    if call is not None:
                        try:
                            call(f"{shutdown} (seen by rank {self.rank})")
                        except Exception:  # best effort: the job is failing anyway
                            pass
                return

    def _one_cycle(self, body: Callable[[], bool] | None = None) -> None:
        """Run a cycle (holding ``_cycling``), or the rest of one (``body``); on the way
        out of the engine's life, mark it ended so that every thread stops running
        cycles."""
        if self._ended:
            return
        try:
            if (self._cycle if body is None else body)():
                self._last_end = time.monotonic()
                return
        except (PeerFailureError, CollectiveTimeout) as exc:
            self._fail(exc, abort=True)
        except BaseException as exc:  # a bug: every rank must hear of it, not hang
            log.exception("rank %d: the gcurun engine failed", self.rank)
            self._fail(ProtocolError(f"the engine of rank {self.rank} failed: "
                                     f"{type(exc).__name__}: {exc}"), abort=True)
        with self._lock:
            self._ended = True
            self._lock.notify_all()

    def _wait_for_work(self) -> bool:
        with self._lock:
            while True:
                now = time.monotonic()
                if self._ended:
                    return False
                self._note_quick_cycles()
                due = self._due()
                if now >= due:
                    return True
                self._lock.wait(due - now if due < float("inf") else None)

    def _due(self) -> float:
        """When the next cycle should start: now when asked to stop; a cycle time after
        the last one while ops wait, or after the first op to arrive at an idle engine;
        else an idle tick after the end of the last one (slower while nothing moves)."""
        if self._stop_requested or self._ended:
            return 0.0
        now = time.monotonic()
        if self._pending or self._parked or self._joining is not None:
            return self._last_start + max(self.cycle_seconds,
                                          self._pause(now, STUCK_TICK_MAX))
        if self._incoming:
            return self._incoming_at + self.cycle_seconds
        return max(self._last_start, self._last_end) + max(
            self.idle_tick, self._pause(now, IDLE_TICK_MAX))

    def _note_quick_cycles(self) -> None:
        """Quick cycles that callers ran since the last look count as a cycle that ended
        now (a quick cycle does not read the clock: that would add to the latency of a
        tiny allreduce), so idle cycles keep their distance from a stream of them; and
        on rank 0, when the stall inspector's turn has come, the next call takes the
        usual cycle, where it looks."""
        controller = self.controller
        quick = controller.quick_cycles
        if quick != self._quick_seen:
            self._quick_seen = quick
            self._last_end = self._progress_at = now = time.monotonic()
            if controller.stall is not None and now >= controller.next_check:
                controller.generation += 1

    def _cycle(self) -> bool:
        self._last_start = time.monotonic()
        self._cycles += 1
        with self._lock:
            incoming, self._incoming = self._incoming, []
            self._incoming_names.clear()
            stop = self._stop_requested
            if self._parked:
                self._unpark()
            # Under the lock, so that a caller checking for a pending name finds each op
            # either incoming or pending (see Calls.submit).
            for op in incoming:
                self._admit(op)
            if incoming:
                self._progress_at = self._last_start
            requested, self._requested = self._requested, None
        if requested is not None:
            self._announce(requested)
        now_ns = time.monotonic_ns()
        if self.timeline is not None:
            self.timeline.cycle(now_ns)
        to_send = self.controller.begin(self._pending, shutdown=stop,
                                        joined=self._joining is not None)
        self.controller.exchange()
        return self._complete(to_send, now_ns)

    def _complete(self, to_send: list[tuple[Op, bool]], now_ns: int) -> bool:
        """The rest of a cycle once the blocks are gathered; False: the engine ends."""
        outcome = self.controller.complete(to_send, self._pending, now_ns)
        if outcome.ready or outcome.errors or outcome.join_done is not None:
            self._progress_at = time.monotonic()
        self._run_outcome(outcome)
        if self.timeline is not None:
            self.timeline.maybe_flush()
        if outcome.stalled is not None:
            reason = outcome.stalled
            self._fail_all(lambda op: CollectiveTimeout(f"{op.title}: {reason}"), reason)
            return False
        if outcome.shutdown is not None:
            who = outcome.shutdown
            self._fail_all(lambda op: PeerFailureError(
                f"{op.title}: {who} called shutdown() before every rank submitted this op"),
                f"{who} called shutdown(), so no collective can run any more")
            return False
        return True

    def _admit(self, op: Op) -> None:
        if op.name == "gcurun.join" and op.kind == OpKind.BARRIER:
            if self._joining is not None:
                op.finish(exception=HandleError("join(): this rank has already joined"))
            else:
                self._joining = op
            return
        if op.name in self._pending:
            if op.auto:
                # An automatic name comes round again while its last op still waits:
                # this one waits its turn (the same on every rank: names follow the
                # order of calls, completions are agreed).
                self._parked.setdefault(op.name, []).append(op)
                return
            op.finish(exception=HandleError(
                f"{op.title}: an op of this name is still pending on this rank; synchronize "
                "it before submitting the name again, or give each op its own name"))
            return
        self._pending[op.name] = op
        self.controller.admit(op)

    def _unpark(self) -> None:
        """Admit each parked op whose name is free again (oldest first)."""
        for name in [name for name in self._parked if name not in self._pending]:
            waiting = self._parked[name]
            self._admit(waiting.pop(0))
            if not waiting:
                del self._parked[name]

    def _run_outcome(self, outcome: CycleDecision) -> None:
        if outcome.knobs is not None:
            self._take_knobs(outcome.knobs)
        ready_ns = time.monotonic_ns()
        items = []
        pending, controller, timeline = self._pending, self.controller, self.timeline
        for agreed in outcome.ready:
            op = pending.pop(agreed.name, None)
            if op is not None:
                controller.forget(op)
                op.state = AGREED
            elif self.rank not in outcome.joined:
                raise ProtocolError(f"{OpKind(agreed.kind).label} {agreed.name!r} is ready "
                                    f"everywhere but rank {self.rank} never submitted it")
            else:
                self.auto_names.follow(agreed.name)
            if timeline is not None:        # (negotiation spans exist only with one)
                controller.negotiated(agreed.name, ready_ns)
                timeline.op_start(agreed.name, OpKind(agreed.kind).name, ready_ns)
            if agreed is outcome.inline:
                if op is not None:
                    self._finish(op, self._reduce_inline(agreed, op, ready_ns))
            else:
                items.append((agreed, op))
        for name, error in outcome.errors:
            op = self._pending.pop(name, None)
            self.controller.negotiated(name, ready_ns)
            if op is not None:
                self.controller.forget(op)
                self._finish(op, exception=error)
            elif self.rank in outcome.joined:
                self.auto_names.follow(name)
        if items:
            self.executor.run(items, ready_ns, self._finish)
        if outcome.join_done is not None and self._joining is not None:
            self._joining.finish(outcome.join_done)
            self._joining = None
        if self.tuner is not None and outcome.ready:
            self._feed_tuner(outcome.ready)

    # -- autotune -------------------------------------------------------------------------

    def _take_knobs(self, data: dict[str, Any]) -> None:
        """Rank 0's decision, taken by every rank in the same cycle before its ops run."""
        from gcurun.runtime.autotune.knobs import Knobs

        knobs = Knobs.from_json(data["knobs"])
        self.cycle_seconds = knobs.cycle_time_ms / 1000
        self.threshold_bytes = int(knobs.fusion_threshold_mb * MIB)
        hier = knobs.hierarchical_allreduce
        two_levels: alg.TwoLevelMode = "auto" if hier is None else "on" if hier else "off"
        self.executor.retune(self.threshold_bytes, knobs.chunk_bytes, knobs.stream_bytes,
                             two_levels)
        self.controller.cache.enable(knobs.cache_enabled)
        self.knob_history.append((self.controller.cycles_negotiated, int(data["number"]),
                                  knobs.to_json()))

    def _feed_tuner(self, ready: list[Agreed]) -> None:
        """Rank 0: tell the tuner what this cycle reduced and gathered; announce its
        decision, if any. A failing tuner stops tuning, never the job."""
        assert self.tuner is not None
        items = [(a.name, _nbytes(a)) for a in ready if a.kind in TUNED_KINDS]
        if not items:
            return
        try:
            knobs = self.tuner.observe(items, time.monotonic())
        except Exception as exc:
            log.warning("autotune stopped: %s: %s", type(exc).__name__, exc)
            self.tuner = None
            return
        if knobs is not None:
            self._announce(knobs.to_json())

    def _announce(self, knobs: dict[str, Any]) -> None:
        self._decisions += 1
        self.controller.announce_knobs({"knobs": knobs, "number": self._decisions})

    def request_knobs(self, knobs: dict[str, Any]) -> None:
        """Rank 0: every rank takes ``knobs`` (:class:`~gcurun.runtime.autotune.Knobs`
        as JSON) in one of the next cycles, as it takes autotune's decisions: a way to
        time several settings in one job (benchmarks/autotune.py does). Raises ValueError
        on another rank."""
        if self.rank != 0:
            raise ValueError("request_knobs: only rank 0 decides the knobs")
        with self._lock:
            self._requested = dict(knobs)
            self._lock.notify()

    def _reduce_inline(self, agreed: Agreed, op: Op, start_ns: int) -> np.ndarray:
        """The result of an op whose data every rank's block carried: the blocks reduced
        in rank order (the same bits on every rank, as the executor's gather-reduce)."""
        rop = ReduceOp(agreed.rop)
        out = op.src if op.inplace else np.empty(agreed.elements, agreed.dtype)
        alg.reduce_blocks(combine(rop, agreed.dtype),
                          self.controller.inline_blocks(agreed.dtype, agreed.elements), out)
        finish_reduction(out, rop, self.size, agreed.postscale)
        if self.timeline is not None:
            self.timeline.activity(agreed.name, "INLINE_REDUCE", start_ns,
                                   time.monotonic_ns())
        return deliver(op.arr, out, op.inplace)

    def _finish(self, op: Op, result: Any = None,
                exception: BaseException | None = None) -> None:
        op.finish(result, exception)
        self.controller.missing.pop(op.name, None)
        if self.timeline is not None:
            self.timeline.op_end(op.name, time.monotonic_ns(),
                                 None if exception is None else type(exception).__name__)

    def _fail(self, exc: CollectiveError, abort: bool) -> None:
        """Fail every op with ``exc``; with ``abort``, tell every rank of the job why,
        in words that name the rank at fault first (``exc`` names it: a peer that died
        or left, one that never came) and this rank as the one that saw it."""
        if abort:
            aborter = getattr(self.t, "abort", None)
            if aborter is not None:
                try:
                    aborter(f"{exc} (seen by rank {self.rank})")
                except Exception:  # best effort: the job is failing anyway
                    pass
        self._fail_all(lambda op: type(exc)(f"{op.title}: {exc}"), str(exc))

    def _fail_all(self, make: Callable[[Op], BaseException], reason: str) -> None:
        with self._lock:
            self._failure = self._failure or reason
            incoming, self._incoming = self._incoming, []
            self._incoming_names.clear()
        ops = list(self._pending.values()) + incoming
        for waiting in self._parked.values():
            ops.extend(waiting)
        self._parked.clear()
        if self._joining is not None:
            ops.append(self._joining)
        self._pending.clear()
        self._joining = None
        for op in ops:
            if op.state != DONE:
                op.finish(exception=make(op))


def _nbytes(agreed: Agreed) -> int:
    """The bytes an allreduce reduces (an allgather gathers) on each rank."""
    if agreed.kind == OpKind.ALLGATHER and agreed.rows is not None:
        return sum(agreed.rows) * math.prod(agreed.shape) * agreed.dtype.itemsize
    return agreed.elements * agreed.dtype.itemsize
