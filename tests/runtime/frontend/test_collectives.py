"""Every collective and dtype at 1 to 5 ranks through the engine's synchronous calls, the
ranks being threads joined by queues (fast; the same checks run on real processes of
both backends in test_jobs.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from gcurun.runtime.api import ReduceOp
from gcurun.runtime.engine.background import Engine
from gcurun.runtime.frontend.collectives import Collectives
from tests.runtime.adapter import EngineAPI
from tests.runtime.checks import Checks
from tests.runtime.engines import run_engines
from tests.runtime.threads import QueueTransport


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5])
def test_every_collective_and_dtype(size: int) -> None:
    counts, _ = run_engines(size, lambda engine: Checks(
        EngineAPI(Collectives(engine)), big=9001).run_all(), chunk_bytes=1024,
        timeout=120)
    assert len(set(counts)) == 1 and counts[0] > 500


@pytest.mark.parametrize("size", [1, 2, 3])
def test_repeated_large_allreduces_take_quick_cycles(size: int) -> None:
    """With chunks of 2 MiB a large tensor's half fits in one: from a name's second call
    on, the ranks take quick cycles (one negotiation exchange, then the reduction
    routine); two ranks keep a tensor called in place again and again prepared."""
    def body(engine: Engine) -> tuple[int, bool, bool]:
        count = Checks(EngineAPI(Collectives(engine))).repeated_large()
        return count, engine.controller.quick_cycles > 10, \
            engine.executor.reducer.held is not None

    results, _ = run_engines(size, body, chunk_bytes=2 << 20, timeout=120, idle_cycles=False)
    assert len(set(results)) == 1 and results[0][0] > 10
    assert results[0][1:] == (True, size == 2)


class PreparingTransport(QueueTransport):
    """A queue transport with prepared exchanges, counting those of large buffers: made,
    run and released."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.made = self.runs = self.released = 0
        self.live: set[Callable[[], None]] = set()

    def prepare_sendrecv(self, sendbuf: Any, dest: int, recvbuf: Any,
                         source: int) -> Callable[[], None]:
        large = memoryview(sendbuf).nbytes >= 64 << 10

        def run() -> None:
            self.runs += large
            self.sendrecv(sendbuf, dest, recvbuf, source)

        if large:
            self.made += 1
            self.live.add(run)
        return run

    def release_sendrecv(self, run: Callable[[], None]) -> None:
        if run in self.live:
            self.live.remove(run)
            self.released += 1


def test_a_tensor_reduced_in_place_again_and_again_keeps_its_exchanges_prepared() -> None:
    """Two ranks prepare a tensor's two ring exchanges at its second in-place quick
    cycle in a row (a name's first call is negotiated in full) and run them from then
    on; a tensor taking turns with the held one neither takes its place nor makes new
    ones; one tensor at most is held; the engine's end releases it."""
    def body(engine: Engine) -> list[tuple[int, int, int, int]]:
        t = engine.t
        comm = Collectives(engine)
        a, b = np.empty(20005), np.empty(20005)
        counts = []
        for call, (x, name) in enumerate([(a, "a")] * 5 + [(b, "b"), (a, "a")] * 3
                                         + [(b, "b")] * 2):
            x[...] = np.arange(len(x)) + t.rank + call
            comm.allreduce(x, ReduceOp.SUM, name=name, inplace=True)
            assert np.array_equal(x, 2 * np.arange(len(x)) + 1 + 2 * call), (t.rank, call)
            counts.append((t.made, t.runs, t.released, len(t.live)))
        return counts

    # Without idle cycles every call's cycles are its own: each call after a name's
    # first takes a quick cycle.
    results, ranks = run_engines(2, body, chunk_bytes=2 << 20, kind=PreparingTransport,
                                 timeout=60, idle_cycles=False)
    for counts, t in zip(results, ranks, strict=True):
        assert counts[2] == (2, 2, 0, 2)                # A made and run at call 3
        assert counts[4] == (2, 6, 0, 2)                # and run at 4 and 5
        assert counts[10] == (2, 12, 0, 2)              # B taking turns: A runs on
        assert counts[12] == (4, 14, 2, 2)              # B twice in a row: B takes over
        assert (t.made, t.released, len(t.live)) == (4, 4, 0)   # released at the end
