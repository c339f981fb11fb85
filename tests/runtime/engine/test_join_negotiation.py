"""Joins in the negotiation, cycle by cycle on thread ranks."""

from __future__ import annotations

import numpy as np

from gcurun.runtime.api import ReduceOp
from gcurun.runtime.engine.negotiation import Controller
from gcurun.runtime.engine.requests import Op, OpKind
from tests.runtime.threads import QueueTransport, run_ranks


def test_a_rank_that_joins_after_the_others_described_a_name_completes_it() -> None:
    # The others describe an uncached name in a cycle before the last rank's join is
    # admitted; the cycle in which it joins must make the name ready everywhere.
    def body(t: QueueTransport) -> list[list[str]]:
        controller = Controller(t, capacity=64, chunk_bytes=1 << 16)
        pending = {}
        if t.rank != 0:
            x = np.array([-3, 5], np.int64)
            pending["join.avg"] = op = Op(OpKind.ALLREDUCE, "join.avg", x, x.reshape(-1),
                                          rop=int(ReduceOp.AVERAGE))
            controller.admit(op)
        return [[a.name for a in controller.cycle(pending, shutdown=False,
                                                  joined=t.rank == 0 and n > 0,
                                                  now_ns=0).ready] for n in range(3)]

    for size in (2, 3):
        assert run_ranks(size, body) == [[[], ["join.avg"], []]] * size
