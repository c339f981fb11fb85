"""Every collective and dtype at 1 to 5 ranks, the ranks being threads joined by queues
(fast; the same checks run on real processes of both backends in test_jobs.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from gcurun.runtime.api import ReduceOp
from gcurun.runtime.collectives import Communicator
from tests.runtime.adapter import CommunicatorAPI
from tests.runtime.checks import Checks
from tests.runtime.threads import QueueTransport, in_threads, run_ranks, transports


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5])
def test_every_collective_and_dtype(size: int) -> None:
    counts = run_ranks(size, lambda comm: Checks(CommunicatorAPI(comm), big=9001).run_all(),
                       chunk_bytes=1024)
    assert len(set(counts)) == 1 and counts[0] > 500


@pytest.mark.parametrize("size", [1, 2, 3])
def test_repeated_large_allreduces_with_whole_halves_in_one_chunk(size: int) -> None:
    """With chunks of 2 MiB a large tensor's half fits in one: from its second call on,
    two ranks take the quick ring (_pair_allreduce), the others the prepared one; a tensor
    called in place again and again keeps its exchanges prepared."""
    def body(comm: Communicator) -> tuple[int, bool, bool]:
        count = Checks(CommunicatorAPI(comm)).repeated_large()
        return count, "big.sum" in comm._inline, comm._held[0] is not None

    results = run_ranks(size, body, chunk_bytes=2 << 20)
    assert len(set(results)) == 1 and results[0][0] > 10
    assert results[0][1:] == (size == 2, size == 2)


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
        self.live.remove(run)
        self.released += 1


def test_a_tensor_reduced_in_place_again_and_again_keeps_its_exchanges_prepared() -> None:
    """Two ranks prepare a tensor's two ring exchanges at its second in-place call in a
    row on the quick ring (a signature's first call takes the general way) and run them
    from the next; a tensor taking turns with the held one neither
    takes its place nor makes new ones; one tensor at most is held; forgetting the
    plans releases it."""
    ranks = transports(2, PreparingTransport)

    def body(rank: int) -> list[tuple[int, int, int, int]]:
        t = ranks[rank]
        comm = Communicator(t, 2 << 20)
        a, b = np.empty(20005), np.empty(20005)
        counts = []
        for call, (x, name) in enumerate([(a, "a")] * 5 + [(b, "b"), (a, "a")] * 3
                                         + [(b, "b")] * 2):
            x[...] = np.arange(len(x)) + rank + call
            comm.allreduce(x, ReduceOp.SUM, name=name, inplace=True)
            assert np.array_equal(x, 2 * np.arange(len(x)) + 1 + 2 * call), (rank, call)
            counts.append((t.made, t.runs, t.released, len(t.live)))
        for k in range(1030):               # more signatures than the plans kept
            comm.allreduce(np.ones(1), ReduceOp.SUM, name=f"small.{k}")
        counts.append((t.made, t.runs, t.released, len(t.live)))
        return counts

    for counts in in_threads(2, body, timeout=60):
        assert counts[4] == (2, 4, 0, 2)                # A made at call 3, run at 4 and 5
        assert counts[10] == (2, 10, 0, 2)              # B taking turns: A runs on
        assert counts[12] == (4, 10, 2, 2)              # B twice in a row: B takes over
        assert counts[-1] == (4, 10, 4, 0)              # the plans forgotten: released
