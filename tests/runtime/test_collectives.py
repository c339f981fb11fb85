"""Every collective and dtype at 1 to 5 ranks, the ranks being threads joined by queues
(fast; the same checks run on real processes of both backends in test_jobs.py)."""

from __future__ import annotations

import pytest

from gcurun.runtime.collectives import Communicator
from tests.runtime.adapter import CommunicatorAPI
from tests.runtime.checks import Checks
from tests.runtime.threads import run_ranks


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
