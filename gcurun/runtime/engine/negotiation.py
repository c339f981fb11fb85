"""One negotiation per engine cycle: which named ops are ready on every rank.

Each cycle every rank contributes one fixed-size block, gathered by every rank in one
small collective (a single exchange for two ranks, Bruck's allgather for more):

    bytes 0-7     flags: uncached requests follow, shutdown, joined, coordinator news
    bytes 8-15    the response cache's epoch (equal on every rank, or the protocol broke)
    bytes 16-23   1 + the slot whose data rides inline below (0: none)
    bytes 24-151  inline data: one tiny cached allreduce's input (prescaled)
    bytes 152-    one bit per response-cache slot: "my op for this cached name is ready"

The response cache (Horovod's idea) holds the agreed op of names negotiated before, in the
same slots on every rank because every rank applies the same updates in the same order.
In steady-state training every tensor is cached, so the ANDed bits say what is ready
everywhere and nothing else is exchanged: one small collective per cycle.

Names not in the cache take the slow path in the cycles where some rank has them: the
ranks that do send their descriptions to rank 0, which keeps a table of who described
what, judges each name once every rank has (:func:`requests.agree`), and broadcasts the
response: agreed ops (which every rank then caches), errors, evictions, stall reports. A
rank whose op does not match its cached agreement sends it uncached with a conflict
mark; rank 0 evicts that name, so every rank renegotiates it and the mismatch becomes an
error on every rank.

A tiny cached allreduce rides in the block itself: when its slot is ready everywhere and
every rank's block carries that slot's data inline, every rank reduces the gathered
blocks in rank order and the op is done, without a second exchange. Every rank sees the
same blocks, so every rank takes the same decision; otherwise the op runs as usual.

The parts, one module each: :mod:`.blocks` (the block and the ready bits),
:mod:`.coordination` (the slow path, joins, rank 0's stall inspection and timeline
marks), :mod:`.quick_negotiation` (the quick cycle's exchange); :class:`Controller` puts
them together and runs a cycle.
"""

from __future__ import annotations

import time

from gcurun.runtime.engine.blocks import JOINED, NEWS, SHUTDOWN, UNCACHED
from gcurun.runtime.engine.decision import CycleDecision, ProtocolError
from gcurun.runtime.engine.quick_negotiation import QuickNegotiation
from gcurun.runtime.engine.requests import Op


class Controller(QuickNegotiation):
    """The negotiation state of one rank; driven by the engine thread only."""

    # -- the cycle ------------------------------------------------------------------------

    def cycle(self, pending: dict[str, Op], *, shutdown: bool, joined: bool,
              now_ns: int) -> CycleDecision:
        """Negotiate once. ``pending`` maps names to this rank's waiting ops."""
        to_send = self.begin(pending, shutdown=shutdown, joined=joined)
        self._exchange()
        return self.complete(to_send, pending, now_ns)

    def begin(self, pending: dict[str, Op], *, shutdown: bool,
              joined: bool) -> list[tuple[Op, bool]]:
        """Write my block for this cycle; return the ops to describe to the coordinator."""
        if self.quick_left is not None:
            self.clean_quick()
        to_send = self._resolve(pending)
        flags = (UNCACHED if to_send else 0) | (SHUTDOWN if shutdown else 0) | \
            (JOINED if joined else 0) | (NEWS if self._news else 0)
        self._head[0], self._head[1] = flags, self.cache.epoch
        return to_send

    def exchange(self) -> None:
        """Gather every rank's block (the cycle's one collective)."""
        self._exchange()

    def complete(self, to_send: list[tuple[Op, bool]], pending: dict[str, Op],
                 now_ns: int) -> CycleDecision:
        """What the gathered blocks (and the slow path, when some rank needs it) decide."""
        self.cycles_negotiated += 1
        self.generation += 1
        epoch = self.cache.epoch
        heads = [head.tolist() for head in self._heads]
        union, carried = 0, heads[0][2]
        for flags, their_epoch, their_carried in heads:
            if their_epoch != epoch:
                raise ProtocolError(f"the engines' response caches differ (epochs "
                                    f"{[head[1] for head in heads]}); ranks run different "
                                    "gcurun versions or settings")
            union |= flags
            if their_carried != carried:
                carried = 0
        all_flags = [head[0] for head in heads]
        outcome = CycleDecision()
        if union & JOINED:
            outcome.joined = frozenset(r for r, f in enumerate(all_flags) if f & JOINED)
        # A rank that joined since the last cycle may complete names that the others
        # described before (rank 0's table holds them, waiting for it alone): every rank
        # knows who joined, so every rank takes the slow path where rank 0 judges them.
        rejudge = not outcome.joined <= self._joined_at.keys()
        ready = self._ready_slots()
        if ready:
            outcome.ready = [entry for entry in (self.cache.by_slot[s] for s in ready)
                             if entry is not None]
            if carried and carried - 1 in ready:
                outcome.inline = self.cache.by_slot[carried - 1]
        if union & (UNCACHED | NEWS) or rejudge:
            self._slow_path(to_send, all_flags, outcome)
        if self.timeline is not None or (self.stall is not None
                                         and time.monotonic() >= self.next_check):
            self._inspect(self.gathered.reshape(self.size, self.width), pending, outcome, now_ns)
        if outcome.joined or self._joined_at:
            self._update_joins(outcome)
        if union & SHUTDOWN:
            first = next(r for r, f in enumerate(all_flags) if f & SHUTDOWN)
            outcome.shutdown = f"rank {first}"
        for entry in outcome.ready:
            self.cache.touch(entry.name)
        self._use_cache = not outcome.joined
        return outcome
