"""The negotiation of a quick cycle: a synchronous allreduce of a cached name, this
rank's only op, with the same block on the wire as the usual cycle's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from gcurun.runtime.api import ReduceOp
from gcurun.runtime.dtypes import DTYPE_CODES, NO_DTYPE, combine
from gcurun.runtime.engine._results import finish_reduction
from gcurun.runtime.engine.blocks import HEAD_WORDS, INLINE_BYTES
from gcurun.runtime.engine.coordination import Coordination
from gcurun.runtime.engine.requests import Agreed, Op, OpKind, match_key

QUICK_NONE, QUICK_PENDING, QUICK_DONE = -1, 0, 1    # what a quick exchange came to


class QuickPlan:
    """A synchronous allreduce of one signature (name, dtype, shape, reduce op and
    postscale), worked out once for the quick cycle. A tensor small enough rides in the
    block (``views``); a larger one is reduced once the exchange found it ready
    everywhere."""

    __slots__ = ("name", "key", "dtype", "shape", "op", "rop", "ufunc", "postscale", "finish",
                 "finisher", "views", "mine", "plain", "agreed", "slot", "run")

    def __init__(self, name: str, key: tuple, tensor: np.ndarray, op: Any, rop: ReduceOp,
                 postscale: float, views: list[np.ndarray] | None, rank: int, size: int):
        self.name = name
        self.key = key                  # what the cached agreement must match
        # The signature as the caller gives it, compared by identity on every call.
        self.dtype, self.shape, self.op = tensor.dtype, tensor.shape, op
        self.rop = rop
        self.ufunc = combine(rop, tensor.dtype)
        self.postscale = postscale
        self.finish = rop == ReduceOp.AVERAGE or postscale != 1.0
        self.finisher = None            # the finish as a function of the output
        if self.finish:
            self.finisher = lambda out: finish_reduction(out, rop, size, postscale)
        self.views = views              # every rank's inline data, shaped like the tensor
        self.mine = None if views is None else views[rank]
        # Two ranks and a result of at least one dimension: one ufunc call makes it.
        self.plain = views is not None and len(views) == 2 and views[rank].ndim > 0
        self.agreed: Agreed | None = None   # the cached agreement last found to match
        self.slot = -1                      # its cache slot in the last quick exchange
        self.run: Callable[..., np.ndarray] | None = None   # the engine's quick allreduce


class QuickNegotiation(Coordination):
    """The quick cycle's side of the negotiation."""

    def plan_quick(self, name: str, tensor: np.ndarray, op: Any, rop: ReduceOp,
                   postscale: float) -> QuickPlan:
        """How :meth:`quick_exchange` negotiates allreduces like
        ``tensor`` (contiguous, valid arguments): inline when it fits the block."""
        code = DTYPE_CODES.get(tensor.dtype, NO_DTYPE)
        key = match_key(OpKind.ALLREDUCE, code, tuple(tensor.shape), int(rop), -1, 1.0,
                        float(postscale), -1)
        views = None
        if tensor.nbytes <= INLINE_BYTES:
            views = [block.reshape(tensor.shape)
                     for block in self.inline_blocks(tensor.dtype, tensor.size)]
        return QuickPlan(name, key, tensor, op, rop, float(postscale), views, self.rank,
                         self.size)

    def quick_exchange(self, plan: QuickPlan, tensor: np.ndarray) -> int:
        """A cycle in which this rank's only op is ``plan``'s (its data inline when it
        fits): what :meth:`cycle` does, for that case, when the name is cached and this
        rank has no news to give. Returns QUICK_NONE (nothing was exchanged: take the
        usual path), QUICK_DONE (the op is ready everywhere and nothing else is; an inline
        one's result is the reduction of ``plan.views``) or QUICK_PENDING (the blocks
        call for the usual processing: the caller adopts the op at ``plan.slot``, then
        runs :meth:`complete`)."""
        if self.quick_left is not None:
            self.clean_quick()
        cache = self.cache
        entry = cache.by_name.get(plan.name)
        if entry is None or self._news or self._unresolved or not self._use_cache or \
                self._inline_op is not None:
            return QUICK_NONE
        epoch = cache.epoch
        if self._epoch_seen != epoch:
            # What _resolve does for a new epoch, with no op pending.
            self._epoch_seen = epoch
            self._bits[:] = 0
        slot, agreed = entry
        if agreed is not plan.agreed:
            if agreed.key_for(self.rank) != plan.key:
                return QUICK_NONE      # a conflict: the usual cycle reports it
            plan.agreed = agreed
        if self.stall is not None and time.monotonic() >= self.next_check:
            return QUICK_NONE
        plan.slot = slot
        head, bits = self._head, self._bit_bytes
        mine = plan.mine
        if mine is not None:
            mine[...] = tensor
            carried = slot + 1
        else:
            carried = 0         # nothing inline: what the others carry does not matter
        head[0] = 0
        head[1] = epoch
        head[2] = carried
        byte, bit = slot >> 3, 1 << (slot & 7)
        bits[byte] |= bit
        self._exchange()
        heads, rows = self._heads, self._bit_rows
        for r in self._others:
            theirs = heads[r]
            if theirs[0] or theirs[1] != epoch or not rows[r][byte] & bit or \
                    carried and theirs[2] != carried:
                return QUICK_PENDING
        bits[byte] ^= bit
        head[2] = 0
        self.quick_cycles += 1
        cache.touch(plan.name)
        if self._joined_at:
            self._joined_at.clear()
        return QUICK_DONE

    def quick_block(self, plan: QuickPlan) -> tuple[memoryview, list[tuple[memoryview,
                                                                          memoryview]],
                                                      Callable[[], None]]:
        """What a flat quick cycle of ``plan`` exchanges and compares, once
        :meth:`quick_claim` wrote the plan's head and ready bit into the block: the words
        of this rank's head that every other rank's must equal for the op to be done
        everywhere (flags, epoch and, with the data inline, the slot carried), each
        other rank's same words and ready bits, and the exchange of the blocks."""
        words = HEAD_WORDS if plan.mine is not None else HEAD_WORDS - 1
        return (self._head[:words],
                [(self._heads[r][:words], self._bit_rows[r]) for r in self._others],
                self._exchange)

    def quick_claim(self, plan: QuickPlan, left: tuple[int, int]) -> None:
        """Write the head and ready bit of a quick cycle of ``plan`` into the block
        (``left``: the byte and bit of its slot, which :attr:`quick_left` then holds),
        after clearing what another plan's left there. They stay for the plan's next
        quick cycles; any other cycle clears them first (:meth:`clean_quick`). A quick
        cycle runs with no other op pending, so this rank's other bits are clear."""
        self.clean_quick()
        head = self._head
        head[0] = 0
        head[1] = self.cache.epoch
        head[2] = plan.slot + 1 if plan.mine is not None else 0
        self._bit_bytes[left[0]] = left[1]
        self.quick_left = left

    def clean_quick(self) -> None:
        """Clear the head and ready bit a finished flat quick cycle left in the block."""
        left = self.quick_left
        if left is not None:
            self._bit_bytes[left[0]] = 0
            self._head[2] = 0
            self.quick_left = None

    def adopt(self, op: Op, slot: int, inline: bool) -> None:
        """``op`` is the one a quick exchange that came to QUICK_PENDING negotiated: its
        ready bit is the op's now."""
        self.quick_left = None
        op.position = slot
        if inline:
            self._inline_op = op
