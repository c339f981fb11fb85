"""The caller's side of the engine: submitting ops, handles, waiting for results
(running the cycles on the calling thread while the engine thread is idle), stopping.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

from gcurun.runtime.api import CollectiveTimeout, PeerFailureError
from gcurun.runtime.engine.cycles import Cycles
from gcurun.runtime.engine.handles import Handle, HandleError
from gcurun.runtime.engine.requests import DONE, PENDING, Op, OpKind, thread_tag
from gcurun.runtime.engine.stall import format_ranks
from gcurun.runtime.engine.timeline import timeline_path


class Calls(Cycles):
    """What callers do with an engine (any thread)."""

    def auto_name(self, label: str) -> str:
        """The next name for an unnamed op of kind ``label`` (``allreduce.unnamed.3``):
        unnamed calls must come in the same order on every rank (see
        :mod:`.auto_names`). Once a second thread names ops so, :attr:`auto_shared`
        is set, for good."""
        if not self.auto_shared:
            thread = threading.current_thread()
            if thread is not self._auto_thread and thread_tag() is not None:
                if self._auto_thread is None:
                    self._auto_thread = thread
                else:
                    self.auto_shared = True
        return self.auto_names.next(label)

    def _check_threads(self, ops: Sequence[Op]) -> None:
        """Once unnamed ops come from several threads, the coordinator sees each one
        (none is taken as ready from the response cache), so that it can refuse, on
        every rank, one that came from different threads (:func:`requests.agree`)."""
        for op in ops:
            if op.auto:
                op.checked = True

    def submit(self, ops: Sequence[Op], grouped: bool = False) -> int:
        """Queue ``ops`` for the engine (all in one cycle); return their handle. Never
        blocks; an engine that stopped fails the ops at once.

        Raises HandleError (a ValueError) at once for a name given to an earlier op of
        this rank whose handle is not synchronized yet (see
        :meth:`_refuse_pending_names`): the call is refused on this rank alone, and the
        earlier op goes on."""
        with self._lock:
            self._refuse_pending_names(ops)
            if self.auto_shared:
                self._check_threads(ops)
            handle = self._next_handle
            self._next_handle += 1
            self._handles[handle] = Handle(list(ops), grouped)
            for op in ops:
                if not op.auto:
                    self._outstanding[op.name] = handle
            self._enqueue(ops, notify=True)
        return handle

    def _refuse_pending_names(self, ops: Sequence[Op]) -> None:
        """Raise HandleError for an op named by its caller when an earlier op of this
        rank under that name is not done with: its handle is not synchronized yet, or
        (a synchronous call of another thread) it is incoming or pending. Holding
        ``_lock``, under which the engine moves ops from incoming to pending.

        Horovod refuses a name while its op is in progress, so whether a second call
        is refused there depends on how fast the first one completes; tying the name
        to the handle gives a script the same answer on every run."""
        for op in ops:
            if not op.auto and (op.name in self._outstanding or op.name in self._pending
                                or op.name in self._incoming_names):
                raise HandleError(
                    f"{op.title}: an earlier op of this name is still pending on this "
                    "rank (its handle is not synchronized yet); synchronize it before "
                    "submitting the name again, or give each op its own name")

    def _enqueue(self, ops: Sequence[Op], notify: bool) -> None:
        """Queue ``ops`` (holding ``_lock``), or fail them if the engine cannot go on."""
        if self._failure is not None:
            for op in ops:
                op.finish(exception=PeerFailureError(
                    f"{op.title}: the job failed earlier ({self._failure}); call "
                    "shutdown() and init() to start again"))
        else:
            first = not self._incoming
            if first:
                self._incoming_at = time.monotonic()
            self._incoming.extend(ops)
            self._incoming_names.update(op.name for op in ops if not op.auto)
            # Only the first of a cycle's ops moves the engine thread's next cycle (a
            # cycle time after it; see Cycles._due): waking the thread for the others
            # took the core from the backward pass that hands them over, once per
            # gradient.
            if notify and first:
                self._lock.notify()

    def run_now(self, op: Op) -> Any:
        """Submit ``op`` and wait for its result: the synchronous calls.

        While the engine thread is idle the caller runs the cycles itself and the engine
        thread is not woken at all (no handle, no thread switch). Otherwise this is
        :meth:`submit` and :meth:`synchronize`.
        """
        if not self._cycling.acquire(blocking=False):
            return self.synchronize(self.submit([op]))
        try:
            with self._lock:
                self._refuse_pending_names((op,))
                if self.auto_shared:
                    self._check_threads((op,))
                self._enqueue((op,), notify=False)
            deadline = self._drive(op)
        finally:
            self._cycling.release()
        return self._result(op, deadline)

    def _result(self, op: Op, deadline: float) -> Any:
        """``op``'s result once done (the engine thread takes over the cycles when the
        caller stopped running them), or its error."""
        if op.state != DONE:
            with self._lock:
                self._lock.notify()
            self._wait(op, deadline)
        if op.exception is not None:
            raise op.exception
        return op.result

    def poll(self, handle: int) -> bool:
        """Whether ``handle``'s ops are done (never blocks)."""
        with self._lock:
            found = self._handles.get(handle)
        if found is None:
            raise _unknown(handle)
        return all(op.state == DONE for op in found.ops)

    def synchronize(self, handle: int) -> Any:
        """Wait for ``handle``'s ops; return the result (a list for grouped ops) or raise
        the first op's error. A handle can be synchronized once."""
        with self._lock:
            found = self._handles.pop(handle, None)
            if found is not None:
                for op in found.ops:
                    if not op.auto and self._outstanding.get(op.name) == handle:
                        del self._outstanding[op.name]
        if found is None:
            raise _unknown(handle)
        if not found.grouped and len(found.ops) == 1:     # the usual handle, often done
            op = found.ops[0]
            if op.state != DONE:
                self._wait(op)
            if op.exception is not None:
                raise op.exception
            return op.result
        for op in found.ops:
            self._wait(op)
        for op in found.ops:
            if op.exception is not None:
                raise op.exception
        return [op.result for op in found.ops]

    def _wait(self, op: Op, deadline: float | None = None) -> None:
        if deadline is None:
            deadline = time.monotonic() + self.timeout
        if op.state != DONE and self._cycling.acquire(blocking=False):
            try:
                self._drive(op, deadline)
            finally:
                self._cycling.release()
        grace = True
        while not op.wait(max(0.0, deadline - time.monotonic())):
            if op.state != PENDING:
                # Running: the transport's own timeout bounds it.
                deadline = time.monotonic() + self.timeout
                continue
            missing = self.controller.missing.get(op.name)
            if missing is None and grace:
                # Rank 0 reports who is missing; give its report a moment to arrive.
                grace = False
                deadline = time.monotonic() + min(1.0, self.timeout / 4)
                continue
            who = (format_ranks(missing) + " (not submitted there)" if missing
                   else self._silent() or "the other ranks to submit it")
            raise CollectiveTimeout(
                f"{op.title}: no progress for {self.timeout:g} s waiting for {who}; they "
                "may be stuck, or submitting other tensors (set GCURUN_TIMEOUT_SECONDS to "
                "wait longer)")

    def _silent(self) -> str | None:
        """The ranks this rank's engine waits for in the transport, if it does, as the
        timeout names them (a rank that stopped answering holds every cycle up)."""
        blocked = getattr(self.t, "blocked", None)
        if blocked is None or not blocked.peers:
            return None
        return (f"{format_ranks(blocked.peers)}, which sent nothing to rank {self.rank} for "
                f"{time.monotonic() - blocked.since:.1f} s (stopped, hung or unreachable, "
                "or waiting in turn for a rank that is)")

    def set_timeline(self, template: str | None, mark_cycles: bool = False) -> None:
        """Write the timeline to ``template`` from the next cycle on (rank 0 alone unless
        it contains ``{rank}``), or stop writing it (None): Horovod's start_timeline and
        stop_timeline. The file being written is closed, complete, unless it is the one
        asked for again, which goes on (with ``mark_cycles`` as given now).

        Raises UsageError for a path that cannot be written, CollectiveTimeout when the
        cycle in progress does not end within the timeout.
        """
        if not self._cycling.acquire(timeout=self.timeout):
            raise CollectiveTimeout(f"set_timeline({template!r}): the engine stayed busy in "
                                    f"one cycle for {self.timeout:g} s")
        try:
            old = self.timeline
            path = timeline_path(template, self.rank) if template else None
            if old is not None and path == old.path:
                old.mark_cycles = mark_cycles
                return
            new = None if self._ended else self._open_timeline(template, mark_cycles)
            self.timeline = self.controller.timeline = self.executor.timeline = new
            self.controller.restart_marks()
        finally:
            self._cycling.release()
        if old is not None:
            old.close()

    def join_op(self) -> Op:
        return Op(OpKind.BARRIER, "gcurun.join")

    def stop(self) -> None:
        """Shut down: the next cycle tells every rank, every engine stops after it."""
        with self._lock:
            self._stop_requested = True
            self._lock.notify()
        self._thread.join(self.timeout + 10)
        tuner, self.tuner = self.tuner, None
        if tuner is not None:
            tuned = logging.getLogger("gcurun.autotune")
            for line in tuner.close():
                tuned.info(line)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()


def _unknown(handle: Any) -> HandleError:
    return HandleError(f"handle {handle!r} is unknown or was synchronized already; "
                       "synchronize each handle exactly once")
