"""The negotiation's slow path and rank 0's other duties.

Names not in the response cache take the slow path in the cycles where some rank has
them: the ranks that do send their descriptions to rank 0, which keeps a table of who
described what, judges each name once every rank has (:func:`requests.agree`), and
broadcasts the response: agreed ops (which every rank then caches), errors, evictions,
stall reports. Joins are tracked here too, and rank 0's timeline marks and stall
inspection.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from gcurun.runtime import algorithms as alg
from gcurun.runtime.api import ArgumentError, CollectiveError, MismatchError, Transport
from gcurun.runtime.engine.blocks import BITS_OFFSET, UNCACHED, Blocks
from gcurun.runtime.engine.decision import CycleDecision
from gcurun.runtime.engine.requests import CACHEABLE, PENDING, Agreed, Op, OpKind, agree, describe
from gcurun.runtime.engine.stall import CHECK_INTERVAL, Stalled, StallInspector, stall_warning
from gcurun.runtime.engine.timeline import Timeline

log = logging.getLogger("gcurun.runtime.engine")

ERRORS: dict[str, type[CollectiveError]] = {"MismatchError": MismatchError,
                                            "ArgumentError": ArgumentError}


@dataclass
class _Waiting:
    """The coordinator's record of a name not (yet) cached."""

    descs: dict[int, dict[str, Any]]
    op: str


class Coordination(Blocks):
    """The slow path, joins, and rank 0's table of uncached names, timeline marks and
    stall inspection."""

    def __init__(self, transport: Transport, capacity: int, chunk_bytes: int,
                 timeline: Timeline | None = None, stall: StallInspector | None = None):
        super().__init__(transport, capacity, chunk_bytes)
        self.timeline = timeline
        self.stall = stall if self.rank == 0 else None
        # Rank 0 only: the table of uncached names, and what it must broadcast next.
        self._table: dict[str, _Waiting] = {}
        self._news: dict[str, Any] = {}
        self.next_check = 0.0       # rank 0: when the stall inspector looks next
        # Missing ranks of waiting tensors, as the coordinator reported them.
        self.missing: dict[str, tuple[int, ...]] = {}
        self._negotiating: dict[str, set[int]] = {}
        self.slow_paths = 0          # cycles that needed more than the one exchange
        self.described = 0           # ops of this rank that were not in the cache

    # -- the slow path --------------------------------------------------------------------

    def _slow_path(self, to_send: list[tuple[Op, bool]], flags: list[int],
                   outcome: CycleDecision) -> None:
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

    def _apply(self, response: dict[str, Any], outcome: CycleDecision) -> None:
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
        if "knobs" in response:
            outcome.knobs = response["knobs"]

    def announce_knobs(self, knobs: dict[str, Any]) -> None:
        """Rank 0: send every rank ``knobs`` in the next cycle, which all take at once."""
        self._news["knobs"] = knobs

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

    def _update_joins(self, outcome: CycleDecision) -> None:
        for rank in outcome.joined:
            self._joined_at.setdefault(rank, self.cycles_negotiated)
        for rank in [r for r in self._joined_at if r not in outcome.joined]:
            del self._joined_at[rank]
        if len(outcome.joined) == self.size:
            outcome.join_done = max(self._joined_at, key=lambda r: (self._joined_at[r], r))
            self._joined_at.clear()

    # -- rank 0: timeline and stall inspection --------------------------------------------

    def _inspect(self, blocks: np.ndarray, pending: dict[str, Op], outcome: CycleDecision,
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
        if self.stall is not None and now >= self.next_check:
            self.next_check = now + CHECK_INTERVAL
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

    def restart_marks(self) -> None:
        """A new timeline (or none): negotiations in progress start their spans anew."""
        self._negotiating.clear()

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
    from gcurun.runtime.engine.stall import format_ranks

    return (f"the stall inspector shut the job down: {stalled.op} {stalled.name!r} waited "
            f"{stalled.waited:.1f} s for {format_ranks(stalled.missing)} "
            f"(GCURUN_STALL_CHECK_SHUTDOWN_SECONDS={seconds:g})")
