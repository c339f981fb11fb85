"""The engine on thread ranks: negotiation in any order, the response cache, errors that
leave the engine running, handles, shutdown."""

from __future__ import annotations

import numpy as np
import pytest

from gcurun.runtime.api import ArgumentError, MismatchError, PeerFailureError, ReduceOp
from gcurun.runtime.engine.background import Engine
from gcurun.runtime.engine.cache import ResponseCache
from gcurun.runtime.engine.handles import HandleError
from gcurun.runtime.engine.requests import Agreed
from gcurun.runtime.frontend import async_ops as ops
from tests.runtime.engines import run_engines


def allreduce(engine: Engine, x: np.ndarray, name: str | None, inplace: bool = False) -> int:
    return engine.submit([ops.allreduce_op(engine, x, op=ReduceOp.SUM, name=name,
                                           inplace=inplace)])


@pytest.mark.parametrize("size", [2, 3])
def test_named_ops_in_any_order_agree(size: int) -> None:
    def body(engine: Engine) -> int:
        r = engine.rank
        names = [f"x.{i}" for i in range(12)]
        for step in range(3):
            order = np.random.default_rng(step * 10 + r).permutation(len(names))
            handles = {int(i): allreduce(engine, np.full(int(i) + 1, r + step, np.int64),
                                         names[int(i)]) for i in order}
            for i, handle in sorted(handles.items()):
                want = sum(k + step for k in range(size))
                assert engine.synchronize(handle).tolist() == [want] * (i + 1)
        return engine.controller.described

    described, _ = run_engines(size, body)
    assert described == [12] * size       # each name described once, then cached


def test_steady_state_is_one_small_exchange_per_cycle() -> None:
    def body(engine: Engine) -> tuple[int, int]:
        xs = [np.ones(3, np.float32) for _ in range(6)]
        for _ in range(2):     # negotiated, then cached
            for h in [allreduce(engine, x, f"s.{i}") for i, x in enumerate(xs)]:
                engine.synchronize(h)
        sent = len(engine.t.sent)  # type: ignore[attr-defined]
        cycles = engine.cycles
        for _ in range(5):
            for h in [allreduce(engine, x, f"s.{i}") for i, x in enumerate(xs)][::-1]:
                engine.synchronize(h)
        steady = engine.t.sent[sent:]  # type: ignore[attr-defined]
        width = engine.controller.width
        blocks = sum(1 for _, n in steady if n == width)
        # Besides the blocks: only the data (the fused float32 tensors, 12 bytes each).
        others = [n for _, n in steady if n != width and (n % 12 or n > 6 * 12)]
        assert not others, f"control messages besides the block exchange: {others}"
        return blocks, engine.cycles - cycles

    results, _ = run_engines(2, body)
    for blocks, cycles in results:
        assert 0 < blocks <= cycles + 1


def test_a_mismatch_of_a_cached_name_fails_on_every_rank_and_the_engine_goes_on() -> None:
    def body(engine: Engine) -> str:
        r = engine.rank
        for step in range(3):
            shape = 4 if step < 2 or r == 0 else 5
            handle = allreduce(engine, np.ones(shape), "m")
            if step < 2:
                engine.synchronize(handle)
        with pytest.raises(MismatchError) as info:
            engine.synchronize(handle)
        assert engine.synchronize(allreduce(engine, np.ones(2), "m")).tolist() == [2, 2]
        return str(info.value)

    messages, _ = run_engines(2, body)
    assert messages[0] == messages[1]
    assert "allreduce 'm': ranks disagree on the shape" in messages[0]
    assert "rank 1: allreduce 'm' float64 shape (5,)" in messages[0]


def test_handles_are_synchronized_once_and_names_pending_once() -> None:
    def body(engine: Engine) -> None:
        handle = allreduce(engine, np.ones(1), "once")
        engine.synchronize(handle)
        with pytest.raises(HandleError, match="unknown or was synchronized already"):
            engine.synchronize(handle)
        with pytest.raises(HandleError):
            engine.poll(12345)
        mine = f"only.{engine.rank}"
        allreduce(engine, np.ones(1), mine)
        with pytest.raises(HandleError, match="still pending on this rank"):
            allreduce(engine, np.ones(1), mine)         # refused at once, as in Horovod

    run_engines(2, body)


def test_a_name_stays_taken_until_its_handle_is_synchronized() -> None:
    # Done or not, the first op's handle decides: the answer does not depend on timing.
    def body(engine: Engine) -> None:
        first = allreduce(engine, np.ones(2), "taken")
        while not engine.poll(first):
            engine.synchronize(allreduce(engine, np.ones(1), None))   # cycles go on
        with pytest.raises(HandleError, match="its handle is not synchronized yet"):
            allreduce(engine, np.ones(2), "taken")
        engine.synchronize(first)
        assert engine.synchronize(allreduce(engine, np.ones(2), "taken")).tolist() == [2, 2]

    run_engines(2, body)


def test_a_joined_rank_keeps_the_names_of_unnamed_ops_in_step() -> None:
    # The unnamed ops the others ran while a rank had joined count as its own calls: its
    # next unnamed op gets the name the others' next one gets. Each rank joins first once.
    def body(engine: Engine) -> list[list[int]]:
        gathered = []
        for first in range(engine.size):
            if engine.rank != first:
                reduced = engine.synchronize(allreduce(engine, np.ones(2), None))
                assert reduced.tolist() == [engine.size - 1] * 2
                with pytest.raises(ArgumentError, match="called join"):
                    engine.synchronize(engine.submit([ops.allgather_op(
                        engine, np.ones(1), name=None)]))
            engine.synchronize(engine.submit([engine.join_op()]))
            handle = engine.submit([ops.allgather_op(engine, np.full(1, engine.rank), name=None)])
            gathered.append(engine.synchronize(handle).tolist())
        return gathered

    results, _ = run_engines(3, body)
    assert results == [[[0, 1, 2]] * 3] * 3


def test_pending_ops_fail_when_a_rank_shuts_down() -> None:
    def body(engine: Engine) -> str | None:
        if engine.rank == 0:
            return None         # stops at once (run_engines calls stop)
        handle = allreduce(engine, np.ones(1), "never")
        with pytest.raises(PeerFailureError) as info:
            engine.synchronize(handle)
        later = allreduce(engine, np.ones(1), "later")
        with pytest.raises(PeerFailureError, match="the job failed earlier"):
            engine.synchronize(later)
        return str(info.value)

    results, _ = run_engines(2, body)
    assert results[1] == ("allreduce 'never': rank 0 called shutdown() before every rank "
                          "submitted this op")


def test_the_response_cache_evicts_the_least_recently_used() -> None:
    def agreed(name: str) -> Agreed:
        return Agreed(name, 1, 10, (3,), 1, -1, 1.0, 1.0, None, None)

    cache = ResponseCache(2)
    cache.put(agreed("a"))
    cache.put(agreed("b"))
    cache.touch("a")
    cache.put(agreed("c"))          # evicts b, reuses its slot
    assert cache.get("b") is None and cache.get("c")[0] == 1 and cache.get("a")[0] == 0
    epoch = cache.epoch
    cache.put(agreed("a"))          # unchanged: no new epoch
    assert cache.epoch == epoch
    cache.evict("a")
    assert cache.get("a") is None and cache.epoch == epoch + 1
    empty = ResponseCache(0)
    empty.put(agreed("a"))
    assert empty.get("a") is None
