"""Small allreduces through the engine: their data rides in the negotiation block (one
exchange per call, in the caller's quick cycle or the engine's usual one), unnamed calls
take recurring names that hit the response cache, and every fallback stays correct."""

from __future__ import annotations

import json
import queue
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gcurun.runtime.api import MismatchError, PeerFailureError, ReduceOp
from gcurun.runtime.engine import cycles as engine_cycles
from gcurun.runtime.engine.auto_names import AUTO_NAMES
from gcurun.runtime.engine.background import Engine, start_engine
from gcurun.runtime.frontend import async_ops as ops
from gcurun.runtime.frontend.collectives import Collectives
from gcurun.runtime.settings import RuntimeEnv
from tests.runtime.engines import run_engines
from tests.runtime.threads import QueueTransport, in_threads


def data_messages(engine: Engine, since: int) -> list[int]:
    """Sizes of the messages this rank sent after ``since`` that were not blocks."""
    width = engine.controller.width
    return [n for _, n in engine.t.sent[since:] if n != width]  # type: ignore[attr-defined]


def expected(rank_values: list[np.ndarray], rop: ReduceOp, postscale: float) -> np.ndarray:
    out = rank_values[0].copy()
    ufunc = {ReduceOp.SUM: np.add, ReduceOp.AVERAGE: np.add, ReduceOp.MAX: np.maximum,
             ReduceOp.MIN: np.minimum, ReduceOp.PRODUCT: np.multiply}[rop]
    for value in rank_values[1:]:
        out = ufunc(out, value)
    if rop == ReduceOp.AVERAGE:
        if out.dtype.kind in "iu":
            return (out // len(rank_values) * postscale).astype(out.dtype)
        return (out * (postscale / len(rank_values))).astype(out.dtype)
    return (out * postscale).astype(out.dtype)


CASES = [
    ((2,), np.float32, ReduceOp.SUM, 1.0),
    ((), np.float64, ReduceOp.SUM, 1.0),
    ((3, 2), np.int32, ReduceOp.AVERAGE, 1.0),
    ((4,), np.float64, ReduceOp.AVERAGE, 0.5),
    ((5,), np.int64, ReduceOp.MAX, 1.0),
    ((16,), np.float64, ReduceOp.PRODUCT, 2.0),       # 128 bytes: the whole inline area
    ((0,), np.float32, ReduceOp.SUM, 1.0),
]


@pytest.mark.parametrize("size", [2, 3])
def test_small_synchronous_allreduces_send_nothing_but_blocks(size: int) -> None:
    def body(engine: Engine) -> list[str]:
        comm = Collectives(engine)
        r = engine.rank
        problems = []
        for warm in (True, False):
            since = len(engine.t.sent)  # type: ignore[attr-defined]
            for i, (shape, dtype, rop, post) in enumerate(CASES):
                def mine(rank: int, step: int, shape: tuple = shape,
                         dtype: type = dtype) -> np.ndarray:
                    n = int(np.prod(shape))
                    return ((np.arange(n) + rank * 3 + step) % 5 + 1).astype(dtype) \
                        .reshape(shape)

                for step in range(3):
                    for inplace in (False, True):
                        x = mine(r, step)
                        got = comm.allreduce(x, rop, 1.0, post, f"q.{i}", inplace=inplace)
                        want = expected([mine(k, step) for k in range(size)], rop, post)
                        if got.shape != shape or got.dtype != dtype or \
                                not np.array_equal(got, want) or (inplace and got is not x):
                            problems.append(f"q.{i} {shape} {rop.name}: {got!r} != {want!r}")
            if not warm and data_messages(engine, since):
                problems.append(f"data messages: {data_messages(engine, since)}")
        if not engine.controller.quick_cycles:
            problems.append("no call took a quick cycle")
        return problems

    results, _ = run_engines(size, body)
    assert results == [[]] * size


def test_tiny_async_ops_complete_in_the_negotiation() -> None:
    def body(engine: Engine) -> tuple[list[int], list[list[float]]]:
        r = engine.rank
        got = []
        since = 0
        for step in range(4):
            if step == 1:
                since = len(engine.t.sent)  # type: ignore[attr-defined]
            handle = engine.submit([ops.allreduce_op(engine, np.full(3, r + 1.0),
                                                     op=ReduceOp.SUM, prescale=2.0,
                                                     postscale=0.25, name="a")])
            got.append(engine.synchronize(handle).tolist())
        return data_messages(engine, since), got

    results, _ = run_engines(2, body)
    for messages, got in results:
        assert messages == []
        assert got == [[1.5] * 3] * 4        # (1 + 2) * 2 * 0.25


def test_a_quick_cycle_falls_back_when_the_peer_has_other_work() -> None:
    """Rank 1 holds an op rank 0 submits late; meanwhile both run synchronous small
    allreduces, which rank 0 tries in quick cycles and rank 1 in its usual ones."""
    def body(engine: Engine) -> list[float]:
        comm = Collectives(engine)
        r = engine.rank
        engine.synchronize(engine.submit([ops.allreduce_op(
            engine, np.ones(2), op=ReduceOp.SUM, name="other")]))   # cached now
        held = None
        if r == 1:
            held = engine.submit([ops.allreduce_op(engine, np.full(2, 5.0), op=ReduceOp.SUM,
                                                   name="other")])
        sums = [float(comm.allreduce(np.full(1, float(step + r)), ReduceOp.SUM,
                                     name="s")[0]) for step in range(20)]
        if r == 0:
            held = engine.submit([ops.allreduce_op(engine, np.full(2, 7.0), op=ReduceOp.SUM,
                                                   name="other")])
        assert held is not None
        assert engine.synchronize(held).tolist() == [12.0, 12.0]
        return sums

    results, _ = run_engines(2, body)
    assert results[0] == results[1] == [2.0 * step + 1 for step in range(20)]


def test_quick_allreduces_of_names_taking_turns() -> None:
    """Synchronous allreduces of three names in turn (two tiny, one large), in and out of
    place, with an async op between rounds: each call's quick cycle first takes the
    block over from the name before it, and every result is right."""
    def body(engine: Engine) -> tuple[list[str], int]:
        comm = Collectives(engine)
        r, problems = engine.rank, []
        for step in range(30):
            for name, shape, dtype in (("a", (2,), np.float32), ("b", (3, 2), np.int64),
                                       ("c", (1000,), np.float64)):
                x = np.full(shape, r + step, dtype)
                got = comm.allreduce(x, ReduceOp.SUM, name=name, inplace=step % 2 == 0)
                if not np.array_equal(got, np.full(shape, 2 * step + 1, dtype)):
                    problems.append(f"{name} step {step}: {got!r}")
            if step % 10 == 5:
                handle = engine.submit([ops.allreduce_op(engine, np.ones(2), op=ReduceOp.SUM,
                                                         name="between")])
                if engine.synchronize(handle).tolist() != [2.0, 2.0]:
                    problems.append(f"between at step {step}")
        return problems, engine.controller.quick_cycles

    results, _ = run_engines(2, body)
    for problems, quick in results:
        assert problems == []
        assert quick > 60       # most of the 90 calls (the first of each name negotiates)


def test_the_stall_inspector_looks_during_a_stream_of_quick_cycles() -> None:
    """Rank 1 waits for a cached op that rank 0 has not submitted, while both run a
    stream of synchronous allreduces that rank 0 finishes in quick cycles: rank 0's
    stall inspector still gets its look, and rank 1 hears who is missing."""
    def body(engine: Engine) -> tuple[tuple[int, ...] | None, int]:
        comm = Collectives(engine)
        r = engine.rank
        late = np.ones(1000)        # too large to ride in the block
        comm.allreduce(late, ReduceOp.SUM, name="late")     # cached now
        held = engine.submit([ops.allreduce_op(engine, late, op=ReduceOp.SUM,
                                               name="late")]) if r == 1 else None
        quick, flags = engine.controller.quick_cycles, np.zeros(2)
        deadline = time.monotonic() + 20
        while not flags.any():      # both ranks stop after the same call
            flags[0] = r == 1 and "late" in engine.controller.missing
            flags[1] = time.monotonic() > deadline
            comm.allreduce(flags, ReduceOp.MAX, name="flags", inplace=True)
        missing = engine.controller.missing.get("late")
        if r == 0:
            held = engine.submit([ops.allreduce_op(engine, late, op=ReduceOp.SUM,
                                                   name="late")])
        assert held is not None
        assert engine.synchronize(held).tolist() == [2.0] * 1000
        return missing, engine.controller.quick_cycles - quick

    results, _ = run_engines(2, body, stall_check_warning_seconds=0.2)
    assert results[1][0] == (0,)
    assert results[0][1] > 0        # rank 0 took quick cycles meanwhile


def test_a_mismatch_on_the_quick_path_fails_everywhere_and_the_engine_goes_on() -> None:
    def body(engine: Engine) -> str:
        comm = Collectives(engine)
        r = engine.rank
        for _ in range(3):
            comm.allreduce(np.ones(2), ReduceOp.SUM, name="m")
        with pytest.raises(MismatchError) as info:
            comm.allreduce(np.ones(2 if r == 0 else 3), ReduceOp.SUM, name="m")
        assert comm.allreduce(np.ones(2), ReduceOp.SUM, name="m").tolist() == [2, 2]
        return str(info.value)

    messages, _ = run_engines(2, body)
    assert messages[0] == messages[1]
    assert "allreduce 'm': ranks disagree on the shape" in messages[0]


def test_unnamed_calls_reuse_their_names_and_still_catch_mismatches() -> None:
    shapes = [(1,), (3,), (2, 2)]        # a loop of three calls of different shapes

    def body(engine: Engine) -> tuple[int, str]:
        comm = Collectives(engine)
        r = engine.rank
        for call in range(3 * AUTO_NAMES):
            shape = shapes[call % 3]
            got = comm.allreduce(np.full(shape, r + call, np.int64), ReduceOp.SUM)
            assert got.tolist() == np.full(shape, 2 * call + 1).tolist()
        described = engine.controller.described
        with pytest.raises(MismatchError) as info:
            comm.allreduce(np.ones(2 if r == 0 else 5), ReduceOp.SUM)
        return described, str(info.value)

    results, _ = run_engines(2, body)
    for described, message in results:
        assert described == AUTO_NAMES        # each name described once, then cached
        assert "allreduce 'allreduce.unnamed.0': ranks disagree on the shape" in message


def test_unnamed_async_ops_beyond_the_names_wait_their_turn() -> None:
    count = AUTO_NAMES + 7

    def body(engine: Engine) -> list[list[float]]:
        r = engine.rank
        handles = [engine.submit([ops.allreduce_op(engine, np.full(2, float(i + r)),
                                                   op=ReduceOp.SUM)])
                   for i in range(count)]
        return [engine.synchronize(h).tolist() for h in handles]

    results, _ = run_engines(2, body)
    want = [[2.0 * i + 1] * 2 for i in range(count)]
    assert results[0] == results[1] == want


def test_a_shutdown_seen_in_a_quick_cycle_fails_the_op() -> None:
    def body(engine: Engine) -> str | None:
        comm = Collectives(engine)
        comm.allreduce(np.ones(2), ReduceOp.SUM, name="w")
        if engine.rank == 0:
            return None         # stops at once (run_engines calls stop)
        with pytest.raises(PeerFailureError) as info:
            comm.allreduce(np.ones(2), ReduceOp.SUM, name="w")
        with pytest.raises(PeerFailureError, match="the job failed earlier"):
            comm.allreduce(np.ones(2), ReduceOp.SUM, name="w")
        return str(info.value)

    results, _ = run_engines(2, body)
    assert results[1] == ("allreduce 'w': rank 0 called shutdown() before every rank "
                          "submitted this op")


class Breaking(QueueTransport):
    """A transport whose exchanges fail like a lost peer's once ``broken`` is set; it
    records the job aborts it is asked to send."""

    broken = False

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.aborts: list[str] = []

    def sendrecv(self, sendbuf: Any, dest: int, recvbuf: Any, source: int) -> None:
        if self.broken:
            raise PeerFailureError(f"rank {dest} (host test) lost its connection")
        super().sendrecv(sendbuf, dest, recvbuf, source)

    def abort(self, reason: str) -> None:
        self.aborts.append(reason)


def test_a_transport_failure_in_a_quick_cycle_fails_the_op_and_the_engine(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # No idle cycles: every cycle is a caller's, so the failure meets the quick cycle.
    monkeypatch.setattr(engine_cycles, "IDLE_TICK", 60.0)
    queues = {(a, b): queue.Queue() for a in range(2) for b in range(2)}
    transports = [Breaking(r, 2, queues) for r in range(2)]
    settings = RuntimeEnv(timeout_seconds=10.0, cycle_time_ms=1.0)
    engines: list[Engine | None] = [None, None]

    def warm(rank: int) -> None:
        engine = engines[rank] = start_engine(transports[rank], settings, 1 << 16)
        got = Collectives(engine).allreduce(np.ones(2), ReduceOp.SUM, name="w")
        assert got.tolist() == [2, 2]

    in_threads(2, warm, 10)
    assert engines[0] is not None and engines[1] is not None
    engine, comm = engines[0], Collectives(engines[0])
    try:
        transports[0].broken = True
        quick = engine.controller.quick_cycles
        with pytest.raises(PeerFailureError,
                           match="allreduce 'w': rank 1 \\(host test\\) lost its connection"):
            comm.allreduce(np.ones(2), ReduceOp.SUM, name="w")
        assert engine.controller.quick_cycles == quick      # it failed in its exchange
        with pytest.raises(PeerFailureError, match="the job failed earlier"):
            comm.allreduce(np.ones(2), ReduceOp.SUM, name="w")
        # The job's abort names the rank at fault first, then the one that saw it.
        assert transports[0].aborts == ["rank 1 (host test) lost its connection (seen by "
                                        "rank 0)"]
    finally:
        transports[1].broken = True
        for each in engines:
            if each is not None:
                each.stop()


def test_the_timeline_shows_an_inline_reduction(tmp_path: Path) -> None:
    """With a timeline every call takes the usual cycle (which records each step); a tiny
    cached op is still done in the negotiation, and the trace says so."""
    def body(engine: Engine) -> list[float]:
        comm = Collectives(engine)
        return [float(comm.allreduce(np.ones(1), ReduceOp.SUM, name="tiny")[0])
                for _ in range(3)]

    results, _ = run_engines(2, body, timeline=str(tmp_path / "trace-{rank}.json"))
    assert results == [[2.0] * 3] * 2
    for rank in range(2):
        events = json.loads((tmp_path / f"trace-{rank}.json").read_text())
        names = [e["name"] for e in events if e.get("ph") in "BEX"]
        # The first call negotiates the name; the others ride in the blocks.
        assert names.count("GATHER_REDUCE") == 1, names
        assert names.count("INLINE_REDUCE") == 2, names
        assert names.count("NEGOTIATE_ALLREDUCE") == 3, names
