"""This rank's negotiation block and every rank's, gathered: the layout, the ready bits
of the response cache's slots, and the data of one tiny allreduce riding inline.

    bytes 0-7     flags: uncached requests follow, shutdown, joined, coordinator news
    bytes 8-15    the response cache's epoch (equal on every rank, or the protocol broke)
    bytes 16-23   1 + the slot whose data rides inline below (0: none)
    bytes 24-151  inline data: one tiny cached allreduce's input (prescaled)
    bytes 152-    one bit per response-cache slot: "my op for this cached name is ready"

The negotiation as a whole is :mod:`gcurun.runtime.engine.negotiation`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from gcurun.runtime import algorithms as alg
from gcurun.runtime.api import Transport
from gcurun.runtime.dtypes import scale_into
from gcurun.runtime.engine.cache import ResponseCache
from gcurun.runtime.engine.requests import PENDING, Op, OpKind
from gcurun.runtime.transport.prepared import prepared_sendrecv

UNCACHED, SHUTDOWN, JOINED, NEWS = 1, 2, 4, 8
HEAD_BYTES = 24
HEAD_WORDS = HEAD_BYTES // 8
INLINE_BYTES = 128
BITS_OFFSET = HEAD_BYTES + INLINE_BYTES


class Blocks:
    """The blocks of one rank's negotiation (the base of its :class:`Controller`)."""

    def __init__(self, transport: Transport, capacity: int, chunk_bytes: int):
        self.t = transport
        self.rank, self.size = transport.rank, transport.size
        self.capacity = capacity
        self.cache = ResponseCache(capacity)
        self.chunk_bytes = chunk_bytes
        # Blocks of whole 8-byte words, so that every rank's head and inline data align.
        width = BITS_OFFSET + (capacity + 63) // 64 * 8
        self.width = width
        self.gathered = np.zeros(self.size * width, np.uint8)
        self.mine = self.gathered[self.rank * width:(self.rank + 1) * width]
        # My ready bits, set and cleared in place in my block; every rank's head and bits.
        # (Memoryviews: their items are cheaper to read and write than numpy's.)
        self._bits = self.mine[BITS_OFFSET:]
        self._bit_bytes = self._bits.data
        self._head = self.mine[:HEAD_BYTES].data.cast("Q")
        self._inline_area = self.mine[HEAD_BYTES:BITS_OFFSET]
        self._inline_op: Op | None = None       # the op whose data is in my block
        self._heads = [self.gathered[r * width:r * width + HEAD_BYTES].data.cast("Q")
                       for r in range(self.size)]
        self._bit_rows = [self.gathered[r * width + BITS_OFFSET:(r + 1) * width].data
                          for r in range(self.size)]
        self._others = [r for r in range(self.size) if r != self.rank]
        self._work = np.zeros_like(self.gathered)
        self._exchange = self._make_exchange()
        self._unresolved: list[Op] = []
        self._epoch_seen = -1
        self._use_cache = True
        self._joined_at: dict[int, int] = {}
        self.cycles_negotiated = 0  # (quick cycles that finish are not)
        # Changes whenever what a quick cycle relies on may have: in every negotiated
        # cycle, and (rank 0) when the stall inspector's turn has come.
        self.generation = 0
        # The byte and bit of the slot whose ready bit (and head) a finished quick cycle
        # left in the block for the next one of its plan, or None (see quick_claim).
        self.quick_left: tuple[int, int] | None = None
        self.quick_cycles = 0        # synchronous allreduces done in one quick cycle

    def _make_exchange(self) -> Callable[[], None]:
        if self.size == 1:
            return lambda: None
        if self.size == 2:
            peer = 1 - self.rank
            theirs = self.gathered[peer * self.width:(peer + 1) * self.width]
            return prepared_sendrecv(self.t, self.mine, peer, theirs, peer)
        return lambda: alg.bruck_allgather(self.t, self.mine, self._work, self.gathered)

    # -- this rank's block ----------------------------------------------------------------

    def admit(self, op: Op) -> None:
        """A new op of this rank, to be negotiated from the next cycle on."""
        self._unresolved.append(op)

    def forget(self, op: Op) -> None:
        """``op`` ran or failed: its bit no longer says ready, its data leaves my block."""
        if op.position >= 0:
            slot = op.position
            self._bit_bytes[slot >> 3] &= 0xFF ^ (1 << (slot & 7))
            op.position = -1
        if op is self._inline_op:
            self._inline_op = None
            self._head[2] = 0

    def _resolve(self, pending: dict[str, Op]) -> list[tuple[Op, bool]]:
        """Set the bits of this rank's ops that match cached agreements; return the ops
        to describe to the coordinator, each with its conflict mark."""
        if self.cache.epoch != self._epoch_seen or not self._use_cache:
            self._epoch_seen = self.cache.epoch
            self._bits[:] = 0
            self._inline_op = None
            self._head[2] = 0
            candidates: Iterable[Op] = pending.values()
            self._unresolved.clear()
            for op in pending.values():
                op.position = -1
        else:
            candidates, self._unresolved = self._unresolved, []
        to_send = []
        # Every pending op, every cycle: locals and memoryview items keep it cheap.
        rank, bits, cached = self.rank, self._bit_bytes, self.cache.by_name
        use_cache = self._use_cache
        for op in candidates:
            if op.sent or op.state != PENDING:
                continue
            entry = cached.get(op.name) if use_cache else None
            if entry is not None and op.cacheable and entry[1].key_for(rank) == op.key:
                slot = op.position = entry[0]
                bits[slot >> 3] |= 1 << (slot & 7)
                if self._inline_op is None and op.kind == OpKind.ALLREDUCE and \
                        op.src.nbytes <= INLINE_BYTES:
                    self._carry(op, slot)
            else:
                to_send.append((op, entry is not None))
        return to_send

    def _carry(self, op: Op, slot: int) -> None:
        """Put ``op``'s (prescaled) input in my block, to ride with its ready bit."""
        area = self._inline_area[:op.src.nbytes].view(op.src.dtype)
        if op.prescale != 1.0:
            scale_into(op.src, op.prescale, area)
        else:
            area[...] = op.src
        self._head[2] = slot + 1
        self._inline_op = op

    def inline_blocks(self, dtype: np.dtype, count: int) -> list[np.ndarray]:
        """Every rank's inline data of this cycle, in rank order."""
        nbytes = count * dtype.itemsize
        return [self.gathered[start:start + nbytes].view(dtype) for start in
                range(HEAD_BYTES, len(self.gathered), self.width)]

    def _ready_slots(self) -> list[int]:
        """The slots every rank's bit marks ready, in ascending order."""
        both = -1
        for row in self._bit_rows:
            both &= int.from_bytes(row, "little")
            if not both:
                return []
        ready = []
        while both:
            low = both & -both
            ready.append(low.bit_length() - 1)
            both ^= low
        return ready
