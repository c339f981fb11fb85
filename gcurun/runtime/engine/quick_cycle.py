"""The quick cycle: a synchronous allreduce of a cached name, when this rank has
nothing else going on, runs the engine's cycle for that one case written out flat.

A small tensor rides in the negotiation block, done after the one exchange when every
rank carried it (see :mod:`gcurun.runtime.engine.negotiation`); a larger one is then
reduced at once by the executor's reduction routine. Any other outcome makes the op an
ordinary pending op of that cycle.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from gcurun.runtime.engine.calls import Calls
from gcurun.runtime.engine.quick_negotiation import QUICK_DONE, QUICK_NONE, QuickPlan
from gcurun.runtime.engine.requests import Op, OpKind


class QuickCycle(Calls):
    """The engine's quick path for synchronous allreduces."""

    def allreduce_now(self, plan: QuickPlan, tensor: np.ndarray,
                      inplace: bool) -> np.ndarray | None:
        """A synchronous allreduce of a contiguous ``tensor`` that fits ``plan``, in a
        quick cycle when this rank has nothing else going on and the name is cached; None
        when the caller must take the usual path (:meth:`run_now`) instead.

        The quick cycle is the usual cycle for this one case, written out flat, with the
        same block on the wire: when every rank has the op ready (and nothing else), it
        is done after the one exchange (inline) or reduced right away; else it becomes an
        ordinary pending op of that cycle.
        """
        cycling = self._cycling
        if not cycling.acquire(blocking=False):
            return None
        try:
            if self._incoming or self._pending or self._parked or self._ended or \
                    self._joining is not None or self._stop_requested or \
                    self.timeline is not None or self._failure is not None:
                return None
            controller = self.controller
            self._last_start = time.monotonic()
            done = QUICK_NONE
            try:
                done = controller.quick_exchange(plan, tensor)
                if done == QUICK_DONE:
                    self.cycles += 1
                    if controller.missing:
                        controller.missing.pop(plan.name, None)
                    if plan.views is not None:
                        return controller.quick_result(plan, tensor, inplace)
                    return self.executor.allreduce_now(tensor, inplace, plan.ufunc,
                                                       plan.finisher)
                if done == QUICK_NONE:
                    return None
            except BaseException as exc:
                self.cycles += 1
                op = self._adopt(plan, tensor, inplace, negotiating=done != QUICK_DONE)
                self._one_cycle(_raising(exc))      # fails the op, ends the engine
                deadline = time.monotonic()
            else:
                self.cycles += 1
                op = self._adopt(plan, tensor, inplace)
                now_ns = time.monotonic_ns()
                self._one_cycle(lambda: self._complete([], now_ns))
                deadline = self._drive(op)
        finally:
            cycling.release()
        return self._result(op, deadline)

    def _adopt(self, plan: QuickPlan, tensor: np.ndarray, inplace: bool,
               negotiating: bool = True) -> Op:
        """The op of a quick cycle that could not finish it: pending as any other."""
        op = Op(OpKind.ALLREDUCE, plan.name, tensor, tensor.reshape(-1), inplace=inplace,
                rop=int(plan.rop), postscale=plan.postscale)
        self._pending[op.name] = op
        if negotiating:
            self.controller.adopt(op, plan.slot, plan.views is not None)
        return op


def _raising(exc: BaseException) -> Callable[[], bool]:
    def body() -> bool:
        raise exc

    return body
