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
from typing import Any

import numpy as np

from gcurun.runtime.engine._results import finish_reduction, reduce_views
from gcurun.runtime.engine.calls import Calls
from gcurun.runtime.engine.quick_negotiation import (
    QUICK_DONE,
    QUICK_NONE,
    QUICK_PENDING,
    QuickPlan,
)
from gcurun.runtime.engine.requests import Op, OpKind

# (tensor, op, prescale, postscale, name, inplace, auto): an allreduce's arguments.
Allreduce = Callable[..., Any]


class QuickCycle(Calls):
    """The engine's quick path for synchronous allreduces."""

    def quick_allreduce(self, plan: QuickPlan, replan: Allreduce,
                        usual: Allreduce) -> Allreduce:
        """The synchronous allreduce of ``plan``'s signature, as one function of the
        call's arguments ``(tensor, op, prescale, postscale, name, inplace, auto=False,
        planned=False)``: a quick cycle when this rank has nothing else going on and the
        name is cached.

        The quick cycle is the usual cycle for this one case, written out flat, with the
        same block on the wire: when every rank has the op ready (and nothing else), it
        is done after the one exchange (inline) or reduced right away; else it becomes an
        ordinary pending op of that cycle. A call of another signature goes to
        ``replan`` (unless ``planned``: the caller found this plan by its signature), a
        call the quick cycle cannot take to ``usual`` (the engine's usual path, which
        reports bad arguments).

        It is the latency of a tiny allreduce, so everything it reads lives in closure
        cells, and what changes only in a negotiated cycle (the response cache, the
        controller's and this engine's state but for what other threads change) is
        checked by :meth:`Controller.quick_exchange` once after each one (or when rank
        0's stall inspector wants a look: see :attr:`Controller.generation`); the calls
        in between write the tensor into the block, exchange it and compare the others'
        heads and ready bits (:meth:`Controller.quick_block`).
        """
        controller, executor, cache = self.controller, self.executor, self.controller.cache
        words, peers, exchange = controller.quick_block(plan)
        single = len(peers) == 1
        theirs, row = peers[0] if single else (words, words)
        validate = controller.quick_exchange
        acquire, release = self._cycling.acquire, self._cycling.release
        ndarray, missing = np.ndarray, controller.missing
        dtype, shape, op, postscale = plan.dtype, plan.shape, plan.op, plan.postscale
        views, ufunc, finisher, mine = plan.views, plan.ufunc, plan.finisher, plan.mine
        large = views is None           # (else the data rides in the block, any strides)
        finish = plan.finish and not large
        size, rop = self.size, plan.rop
        first, second = views if plan.plain else (None, None)      # type: ignore[misc]
        # numpy deprecates a positional out for minimum and maximum.
        positional = ufunc is not np.minimum and ufunc is not np.maximum
        # A timeline, or autotune (whose history counts every negotiated cycle alike on
        # every rank): never quick.
        seen = -1 if self.timeline is None and not self.autotuned else None
        left = (0, 0)               # the byte and bit of the plan's slot (a token too)
        byte = bit = 0

        def run(tensor: Any, op_: Any, prescale: float, postscale_: float, name: str,
                inplace: bool, auto: bool = False, planned: bool = False) -> Any:
            nonlocal seen, left, byte, bit
            if not planned and (type(tensor) is not ndarray or tensor.dtype is not dtype
                                or tensor.shape != shape or op_ is not op
                                or prescale != 1.0 or postscale_ != postscale):
                return replan(tensor, op_, prescale, postscale_, name, inplace)
            if inplace and not tensor.flags.writeable or \
                    large and not tensor.flags.c_contiguous or not acquire(False):
                return usual(tensor, op_, prescale, postscale_, name, inplace, auto)
            done = QUICK_NONE
            try:
                if self._incoming or self._stop_requested or self._ended:
                    pass            # (what other threads change: checked every time)
                elif controller.generation != seen:
                    if seen is not None and not (
                            self._pending or self._parked or self._joining is not None
                            or self._failure is not None):
                        done = validate(plan, tensor)
                        if done == QUICK_DONE:
                            seen = controller.generation
                            byte, bit = plan.slot >> 3, 1 << (plan.slot & 7)
                            left = (byte, bit)
                else:
                    if controller.quick_left is not left:
                        controller.quick_claim(plan, left)
                    if mine is not None:
                        mine[...] = tensor
                    exchange()
                    if theirs != words or not row[byte] & bit if single else any(
                            their != words or not their_row[byte] & bit
                            for their, their_row in peers):
                        done = QUICK_PENDING
                    else:
                        done = QUICK_DONE
                        controller.quick_cycles += 1
                        if cache.newest is not name:
                            cache.touch(name)
                if done == QUICK_DONE:
                    if missing:
                        missing.pop(name, None)
                    if first is None:
                        out = reduce_views(plan, tensor, inplace) if not large else \
                            executor.allreduce_now(tensor, inplace, ufunc, finisher)
                    elif not inplace:
                        out = ufunc(first, second)
                    elif positional:        # (out as a keyword costs more)
                        out = ufunc(first, second, tensor)
                    else:
                        out = ufunc(first, second, out=tensor)
                elif done == QUICK_PENDING:
                    waiting = self._quick_pending(plan, tensor, inplace)
            except BaseException as exc:
                waiting = self._quick_failed(plan, tensor, inplace, exc, done)
                done = QUICK_PENDING
            finally:
                release()
            if done == QUICK_DONE:
                if finish:
                    finish_reduction(out, rop, size, postscale)
                return out
            if done == QUICK_NONE:
                return usual(tensor, op_, prescale, postscale_, name, inplace, auto)
            return self._result(*waiting)

        return run

    def _quick_pending(self, plan: QuickPlan, tensor: np.ndarray,
                       inplace: bool) -> tuple[Op, float]:
        """A quick exchange whose blocks call for the usual processing: its op becomes
        pending, the cycle completes the usual way, and the caller drives cycles until
        it is done (holding ``_cycling``). Returns the op and its deadline."""
        self._cycles += 1
        op = self._adopt(plan, tensor, inplace)
        now_ns = time.monotonic_ns()
        self._one_cycle(lambda: self._complete([], now_ns))
        return op, self._drive(op)

    def _quick_failed(self, plan: QuickPlan, tensor: np.ndarray, inplace: bool,
                      exc: BaseException, done: int) -> tuple[Op, float]:
        """A quick cycle that raised (its exchange, or its reduction once ``done``): its
        op fails the way any op of a failing cycle does, and the engine ends."""
        self._cycles += 1
        op = self._adopt(plan, tensor, inplace, negotiating=done != QUICK_DONE)
        self._one_cycle(_raising(exc))
        return op, time.monotonic()

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
