"""Every collective and dtype at 1 to 5 ranks, the ranks being threads joined by queues
(fast; the same checks run on real processes of both backends in test_jobs.py)."""

from __future__ import annotations

import pytest

from tests.runtime.adapter import CommunicatorAPI
from tests.runtime.checks import Checks
from tests.runtime.threads import run_ranks


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5])
def test_every_collective_and_dtype(size: int) -> None:
    counts = run_ranks(size, lambda comm: Checks(CommunicatorAPI(comm), big=9001).run_all(),
                       chunk_bytes=1024)
    assert len(set(counts)) == 1 and counts[0] > 500
