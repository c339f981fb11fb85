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
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gcurun.runtime import algorithms as alg
from gcurun.runtime.api import (
    ArgumentError,
    CollectiveError,
    MismatchError,
    ReduceOp,
    Transport,
)
from gcurun.runtime.cache import ResponseCache
from gcurun.runtime.collectives import _finish_reduction, reduce_views
from gcurun.runtime.dtypes import DTYPE_CODES, NO_DTYPE, UFUNCS, scaling_factor
from gcurun.runtime.negotiate import OpKind, prepared_sendrecv
from gcurun.runtime.requests import (
    CACHEABLE,
    PENDING,
    Agreed,
    Op,
    agree,
    describe,
    match_key,
)
from gcurun.runtime.stall import CHECK_INTERVAL, Stalled, StallInspector, stall_warning
from gcurun.runtime.timeline import Timeline

log = logging.getLogger("gcurun.runtime.engine")

UNCACHED, SHUTDOWN, JOINED, NEWS = 1, 2, 4, 8
HEAD_BYTES = 24
INLINE_BYTES = 128
BITS_OFFSET = HEAD_BYTES + INLINE_BYTES
ERRORS: dict[str, type[CollectiveError]] = {"MismatchError": MismatchError,
                                            "ArgumentError": ArgumentError}


class ProtocolError(CollectiveError):
    """The ranks' engines fell out of step: a bug, or ranks of different gcurun versions."""


@dataclass
class Outcome:
    """What one cycle decided, the same on every rank."""

    ready: list[Agreed] = field(default_factory=list)       # in execution order
    errors: list[tuple[str, CollectiveError]] = field(default_factory=list)
    joined: frozenset[int] = frozenset()
    join_done: int | None = None            # all ranks joined; the last one to join
    shutdown: str | None = None             # 'rank N': the first rank shutting down
    stalled: str | None = None              # the stall inspector shut the job down
    inline: Agreed | None = None            # the ready op whose data rode in the blocks


@dataclass
class _Waiting:
    """The coordinator's record of a name not (yet) cached."""

    descs: dict[int, dict[str, Any]]
    op: str


class InlinePlan:
    """A synchronous allreduce of one signature (name, dtype, shape, reduce op and
    postscale) small enough to ride in the block, worked out once for the quick cycle."""

    __slots__ = ("name", "key", "rop", "ufunc", "postscale", "finish", "views", "mine",
                 "plain", "agreed")

    def __init__(self, name: str, key: tuple, rop: ReduceOp, postscale: float,
                 views: list[np.ndarray], rank: int):
        self.name = name
        self.key = key                  # what the cached agreement must match
        self.rop = rop
        self.ufunc = UFUNCS[rop]
        self.postscale = postscale
        self.finish = rop == ReduceOp.AVERAGE or postscale != 1.0
        self.views = views              # every rank's inline data, shaped like the tensor
        self.mine = views[rank]
        # Two ranks and a result of at least one dimension: one ufunc call makes it.
        self.plain = len(views) == 2 and self.mine.ndim > 0
        self.agreed: Agreed | None = None   # the cached agreement last found to match


class Controller:
    """The negotiation state of one rank; driven by the engine thread only."""

    def __init__(self, transport: Transport, capacity: int, chunk_bytes: int,
                 timeline: Timeline | None = None, stall: StallInspector | None = None):
        self.t = transport
        self.rank, self.size = transport.rank, transport.size
        self.capacity = capacity
        self.cache = ResponseCache(capacity)
        self.chunk_bytes = chunk_bytes
        self.timeline = timeline
        self.stall = stall if self.rank == 0 else None
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
        self._cycle = 0
        # Rank 0 only: the table of uncached names, and what it must broadcast next.
        self._table: dict[str, _Waiting] = {}
        self._news: dict[str, Any] = {}
        self._next_check = 0.0
        # Missing ranks of waiting tensors, as the coordinator reported them.
        self.missing: dict[str, tuple[int, ...]] = {}
        self._negotiating: dict[str, set[int]] = {}
        self.slow_paths = 0          # cycles that needed more than the one exchange
        self.described = 0           # ops of this rank that were not in the cache
        self.quick_cycles = 0        # synchronous allreduces done in one quick cycle

    def _make_exchange(self) -> Callable[[], None]:
        if self.size == 1:
            return lambda: None
        if self.size == 2:
            peer = 1 - self.rank
            theirs = self.gathered[peer * self.width:(peer + 1) * self.width]
            return prepared_sendrecv(self.t, self.mine, peer, theirs, peer)
        return lambda: alg.bruck_allgather(self.t, self.mine, self._work, self.gathered)

    # -- the cycle ------------------------------------------------------------------------

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

    def cycle(self, pending: dict[str, Op], *, shutdown: bool, joined: bool,
              now_ns: int) -> Outcome:
        """Negotiate once. ``pending`` maps names to this rank's waiting ops."""
        to_send = self.begin(pending, shutdown=shutdown, joined=joined)
        self._exchange()
        return self.complete(to_send, pending, now_ns)

    def begin(self, pending: dict[str, Op], *, shutdown: bool,
              joined: bool) -> list[tuple[Op, bool]]:
        """Write my block for this cycle; return the ops to describe to the coordinator."""
        self._cycle += 1
        to_send = self._resolve(pending)
        flags = (UNCACHED if to_send else 0) | (SHUTDOWN if shutdown else 0) | \
            (JOINED if joined else 0) | (NEWS if self._news else 0)
        self._head[0], self._head[1] = flags, self.cache.epoch
        return to_send

    def exchange(self) -> None:
        """Gather every rank's block (the cycle's one collective)."""
        self._exchange()

    def complete(self, to_send: list[tuple[Op, bool]], pending: dict[str, Op],
                 now_ns: int) -> Outcome:
        """What the gathered blocks (and the slow path, when some rank needs it) decide."""
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
        outcome = Outcome()
        if union & JOINED:
            outcome.joined = frozenset(r for r, f in enumerate(all_flags) if f & JOINED)
        ready = self._ready_slots()
        if ready:
            outcome.ready = [entry for entry in (self.cache.by_slot[s] for s in ready)
                             if entry is not None]
            if carried and carried - 1 in ready:
                outcome.inline = self.cache.by_slot[carried - 1]
        if union & (UNCACHED | NEWS):
            self._slow_path(to_send, all_flags, outcome)
        if self.timeline is not None or (self.stall is not None
                                         and time.monotonic() >= self._next_check):
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
            np.multiply(op.src, scaling_factor(op.src.dtype, op.prescale), out=area,
                        casting="unsafe")
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

    # -- the quick cycle ------------------------------------------------------------------

    def plan_inline(self, name: str, tensor: np.ndarray, rop: ReduceOp,
                    postscale: float) -> InlinePlan | None:
        """How :meth:`quick_slot` and :meth:`quick_exchange` carry allreduces like
        ``tensor`` (contiguous, valid arguments), or None when it does not fit the block."""
        if tensor.nbytes > INLINE_BYTES:
            return None
        code = DTYPE_CODES.get(tensor.dtype, NO_DTYPE)
        key = match_key(OpKind.ALLREDUCE, code, tuple(tensor.shape), int(rop), -1, 1.0,
                        float(postscale), -1)
        views = [block.reshape(tensor.shape)
                 for block in self.inline_blocks(tensor.dtype, tensor.size)]
        return InlinePlan(name, key, rop, float(postscale), views, self.rank)

    def quick_slot(self, plan: InlinePlan) -> int:
        """The cache slot of ``plan``'s name when a quick cycle can carry it, else -1.
        The caller has no op pending; this rank must have no news to give either."""
        entry = self.cache.by_name.get(plan.name)
        if entry is None or self._news or self._unresolved or not self._use_cache or \
                self._inline_op is not None:
            return -1
        if self._epoch_seen != self.cache.epoch:
            # What _resolve does for a new epoch, with no op pending.
            self._epoch_seen = self.cache.epoch
            self._bits[:] = 0
        slot, agreed = entry
        if agreed is not plan.agreed:
            if agreed.key_for(self.rank) != plan.key:
                return -1           # a conflict: the usual cycle reports it
            plan.agreed = agreed
        if self.stall is not None and time.monotonic() >= self._next_check:
            return -1
        return slot

    def quick_exchange(self, plan: InlinePlan, slot: int, tensor: np.ndarray) -> bool:
        """A cycle in which this rank's only op is ``plan``'s, its data inline: what
        :meth:`cycle` does, for that case. True: the op is done everywhere (its result
        is :meth:`quick_result`); False: the blocks call for the usual processing (the
        caller adopts the op, then runs :meth:`complete`)."""
        self._cycle += 1
        plan.mine[...] = tensor
        head, bits = self._head, self._bit_bytes
        carried = slot + 1
        epoch = self.cache.epoch
        head[0], head[1], head[2] = 0, epoch, carried
        byte, bit = slot >> 3, 1 << (slot & 7)
        bits[byte] |= bit
        self._exchange()
        heads, rows = self._heads, self._bit_rows
        for r in self._others:
            flags, their_epoch, their_carried = heads[r].tolist()
            if flags or their_epoch != epoch or their_carried != carried or \
                    not rows[r][byte] & bit:
                return False
        bits[byte] ^= bit
        head[2] = 0
        self.quick_cycles += 1
        self.cache.touch(plan.name)
        if self._joined_at:
            self._joined_at.clear()
        return True

    def quick_result(self, plan: InlinePlan, tensor: np.ndarray, inplace: bool) -> np.ndarray:
        """The reduction of the blocks a successful :meth:`quick_exchange` gathered."""
        out = reduce_views(plan, tensor, inplace)
        if plan.finish:
            _finish_reduction(out, plan.rop, self.size, plan.postscale)
        return out

    def adopt(self, op: Op, slot: int) -> None:
        """``op`` is the one a :meth:`quick_exchange` that returned False carried."""
        op.position = slot
        self._inline_op = op

    # -- the slow path --------------------------------------------------------------------

    def _slow_path(self, to_send: list[tuple[Op, bool]], flags: list[int],
                   outcome: Outcome) -> None:
        self.slow_paths += 1
        mine: list[dict[str, Any]] = []
        if flags[self.rank] & UNCACHED:
            mine = [describe(op, self.rank, conflict) for op, conflict in to_send]
            self.described += len(to_send)
            for op, _ in to_send:
                op.sent = True
        if self.rank == 0:
            evict: list[str] = []
            for rank in range(self.size):
                if flags[rank] & UNCACHED:
                    self._take(mine if rank == 0 else json.loads(self._recv_bytes(rank)),
                               evict)
            response = self._respond(outcome.joined, evict)
            self._bcast_bytes(json.dumps(response).encode())
        else:
            if mine:
                self._send_bytes(json.dumps(mine).encode(), 0)
            response = json.loads(self._bcast_bytes(b""))
        self._apply(response, outcome)

    def _take(self, descs: list[dict[str, Any]], evict: list[str]) -> None:
        for desc in descs:
            name = desc["name"]
            waiting = self._table.get(name)
            if waiting is None:
                waiting = self._table[name] = _Waiting({}, desc["op"])
            waiting.descs[desc["rank"]] = desc
            if desc["conflict"] and name not in evict:
                evict.append(name)

    def _respond(self, joined: frozenset[int], evict: list[str]) -> dict[str, Any]:
        """Rank 0: judge every name that every rank has now described."""
        ops, errors = [], []
        for name in list(self._table):
            waiting = self._table[name]
            if len(waiting.descs.keys() | joined) < self.size:
                continue
            del self._table[name]
            verdict = agree(waiting.descs, self.size, joined - waiting.descs.keys())
            if isinstance(verdict, Agreed):
                ops.append(verdict.to_json())
            else:
                errors.append([name, type(verdict).__name__, str(verdict)])
        response: dict[str, Any] = {"ops": ops, "errors": errors, "evict": evict}
        response.update(self._news)
        self._news = {}
        return response

    def _apply(self, response: dict[str, Any], outcome: Outcome) -> None:
        for name in response["evict"]:
            self.cache.evict(name)
        for item in response["ops"]:
            agreed = Agreed.from_json(item)
            if OpKind(agreed.kind) in CACHEABLE:
                self.cache.put(agreed)
            outcome.ready.append(agreed)
        for name, kind, message in response["errors"]:
            outcome.errors.append((name, ERRORS[kind](message)))
        for name, missing in response.get("report", []):
            self.missing[name] = tuple(missing)
        if response.get("shutdown"):
            outcome.stalled = response["shutdown"]

    def _send_bytes(self, data: bytes, dest: int) -> None:
        self.t.send(np.array([len(data)], np.uint64), dest)
        self.t.send(np.frombuffer(data, np.uint8), dest)

    def _recv_bytes(self, source: int) -> bytes:
        length = np.zeros(1, np.uint64)
        self.t.recv(length, source)
        data = np.empty(int(length[0]), np.uint8)
        self.t.recv(data, source)
        return data.tobytes()

    def _bcast_bytes(self, data: bytes) -> bytes:
        if self.size == 1:
            return data
        length = np.array([len(data)], np.uint64)
        alg.broadcast(self.t, length, 0, 1)
        buf = np.frombuffer(data, np.uint8).copy() if self.rank == 0 else \
            np.empty(int(length[0]), np.uint8)
        alg.broadcast(self.t, buf, 0, self.chunk_bytes)
        return buf.tobytes()

    # -- join -----------------------------------------------------------------------------

    def _update_joins(self, outcome: Outcome) -> None:
        for rank in outcome.joined:
            self._joined_at.setdefault(rank, self._cycle)
        for rank in [r for r in self._joined_at if r not in outcome.joined]:
            del self._joined_at[rank]
        if len(outcome.joined) == self.size:
            outcome.join_done = max(self._joined_at, key=lambda r: (self._joined_at[r], r))
            self._joined_at.clear()

    # -- rank 0: timeline and stall inspection --------------------------------------------

    def _inspect(self, blocks: np.ndarray, pending: dict[str, Op], outcome: Outcome,
                 now_ns: int) -> None:
        """Who is ready for what, for the timeline's negotiation marks and the stall
        inspector. Rank 0 sees every rank's cached bits, the table of uncached names and
        what this cycle found ready everywhere."""
        ready: dict[str, tuple[str, set[int]]] = {}
        bits = np.unpackbits(blocks[:, BITS_OFFSET:], axis=1, bitorder="little")
        for slot in np.flatnonzero(bits.any(axis=0)).tolist():
            entry = self.cache.by_slot[slot]
            if entry is not None:
                ranks = set(np.flatnonzero(bits[:, slot]).tolist()) | outcome.joined
                ready[entry.name] = (OpKind(entry.kind).name, ranks)
        for name, waiting in self._table.items():
            ready[name] = (waiting.op.upper(), set(waiting.descs) | outcome.joined)
        everyone = set(range(self.size))
        for agreed in outcome.ready:
            ready[agreed.name] = (OpKind(agreed.kind).name, everyone)
        for name, op in pending.items():
            if op.state == PENDING and name not in ready:
                ready[name] = (op.kind.name, {0} | outcome.joined)
        if self.timeline is not None:
            self._mark(ready, pending, now_ns)
        now = time.monotonic()
        if self.stall is not None and now >= self._next_check:
            self._next_check = now + CHECK_INTERVAL
            self._stall_check({name: (op.lower(), frozenset(ranks)) for name, (op, ranks)
                               in ready.items() if len(ranks) < self.size}, now)

    def _mark(self, ready: dict[str, tuple[str, set[int]]], pending: dict[str, Op],
              now_ns: int) -> None:
        timeline = self.timeline
        assert timeline is not None
        for name, (op, ranks) in ready.items():
            seen = self._negotiating.get(name)
            own = pending.get(name)
            if seen is None:
                seen = self._negotiating[name] = set()
                start = own.submitted_ns if own is not None else now_ns
                timeline.negotiate_start(name, op, start)
            for rank in sorted(ranks - seen):
                at = own.submitted_ns if rank == self.rank and own is not None else now_ns
                timeline.negotiate_rank(name, rank, at)
            seen |= ranks

    def negotiated(self, name: str, now_ns: int) -> None:
        """Close the negotiation span of ``name`` (it is about to run)."""
        if self.timeline is not None and self._negotiating.pop(name, None) is not None:
            self.timeline.negotiate_end(name, now_ns)

    def _stall_check(self, waiting: dict[str, tuple[str, frozenset[int]]],
                     now: float) -> None:
        assert self.stall is not None
        warn, report, shutdown = self.stall.observe(waiting, now)
        if warn:
            log.warning(stall_warning(warn, self.stall.warning_seconds))
        if report:
            self._news.setdefault("report", []).extend(
                [s.name, list(s.missing)] for s in report)
            for s in report:
                self.missing[s.name] = s.missing
        if shutdown is not None:
            self._news["shutdown"] = _shutdown_reason(shutdown, self.stall.shutdown_seconds)


def _shutdown_reason(stalled: Stalled, seconds: float) -> str:
    from gcurun.runtime.stall import format_ranks

    return (f"the stall inspector shut the job down: {stalled.op} {stalled.name!r} waited "
            f"{stalled.waited:.1f} s for {format_ranks(stalled.missing)} "
            f"(GCURUN_STALL_CHECK_SHUTDOWN_SECONDS={seconds:g})")
