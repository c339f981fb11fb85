"""The engine's pace while nothing moves: an idle job, a rank waiting for a slow one and
ranks waiting for each other run few cycles (each is a collective that costs CPU), and
the wait still ends as soon as the others come."""

from __future__ import annotations

import time

import numpy as np
import pytest

from gcurun.runtime.api import CollectiveTimeout, PeerFailureError, ReduceOp
from gcurun.runtime.engine.background import Engine
from gcurun.runtime.frontend import async_ops as ops
from gcurun.runtime.frontend.collectives import Collectives
from tests.runtime.engines import run_engines

WAIT = 2.0
# At the old pace (an idle cycle every 10 ms, a waiting rank's cycles back to back)
# these waits ran about 160-180 cycles (idle, waiting for a slow rank) and thousands
# (waiting for each other); the slowing pace runs about 40 and 200.
FEW = 100


def test_an_idle_job_slows_its_cycles() -> None:
    def body(engine: Engine) -> int:
        comm = Collectives(engine)
        comm.allreduce(np.ones(2), ReduceOp.SUM, name="warm")
        before = engine.cycles
        time.sleep(WAIT)
        cycles = engine.cycles - before
        comm.barrier()
        return cycles

    cycles, _ = run_engines(2, body)
    assert max(cycles) < FEW, cycles
    assert min(cycles) > 0, cycles        # idle cycles go on, slower


def test_a_rank_waiting_for_a_slow_one_slows_its_cycles() -> None:
    def body(engine: Engine) -> int:
        comm = Collectives(engine)
        comm.allreduce(np.ones(2), ReduceOp.SUM, name="warm")
        if engine.rank == 0:
            time.sleep(WAIT)
        before = engine.cycles
        comm.barrier()
        return engine.cycles - before

    cycles, _ = run_engines(2, body)
    assert cycles[1] < FEW, cycles


def test_ranks_waiting_for_each_other_slow_their_cycles() -> None:
    """Each rank waits in an op the other never submits (a deadlocked job) until the
    first one's timeout (the other's op then fails as that one shuts down): they keep
    exchanging blocks meanwhile, slower and slower."""
    def body(engine: Engine) -> tuple[int, str]:
        comm = Collectives(engine)
        comm.allreduce(np.ones(2), ReduceOp.SUM, name="warm")
        before = engine.cycles
        with pytest.raises((CollectiveTimeout, PeerFailureError)) as info:
            comm.allreduce(np.ones(2), ReduceOp.SUM, name=f"only.{engine.rank}")
        return engine.cycles - before, str(info.value)

    results, _ = run_engines(2, body, timeout=60, timeout_seconds=WAIT)
    assert any("no progress for 2 s" in message for _, message in results), results
    for cycles, _ in results:
        assert cycles < 10 * FEW, cycles


def test_ops_submitted_within_a_cycle_time_of_the_first_share_its_cycle() -> None:
    """A backward pass hands its gradients over one by one, a layer's bias and weight
    a fraction of a millisecond apart: an idle engine waits a cycle time after the first
    before it negotiates, so that those following run in the same cycle and batch
    (Horovod's pace) instead of a negotiation each. A long cycle time here, so that the
    engine thread's wake-up latency cannot blur the gap."""
    def body(engine: Engine) -> tuple[int, int, list[list[int]]]:
        comm = Collectives(engine)
        comm.allreduce(np.ones(2), ReduceOp.SUM, name="warm")
        stats = engine.executor.stats
        batches, fused = stats["batches"], stats["fused"]
        first = engine.submit([ops.allreduce_op(engine, np.full(3, engine.rank + 1),
                                                op=ReduceOp.SUM, name="bias")])
        time.sleep(0.02)
        second = engine.submit([ops.allreduce_op(engine, np.full(5, engine.rank + 1),
                                                 op=ReduceOp.SUM, name="weight")])
        time.sleep(0.3)         # the engine thread runs the cycle, not synchronize()
        results = [engine.synchronize(h).tolist() for h in (first, second)]
        return stats["batches"] - batches, stats["fused"] - fused, results

    out, _ = run_engines(2, body, cycle_time_ms=100.0)
    for batches, fused, results in out:
        assert results == [[3] * 3, [3] * 5]
        assert (batches, fused) == (1, 2), out
