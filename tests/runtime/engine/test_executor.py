"""The executor: fused layouts, and plans kept for ops that come again."""

from __future__ import annotations

import numpy as np
import pytest

from gcurun.runtime.algorithms import HostLayout
from gcurun.runtime.api import ReduceOp
from gcurun.runtime.dtypes import DTYPE_CODES
from gcurun.runtime.engine.executor import Executor, layout
from gcurun.runtime.engine.pages import HugePages
from gcurun.runtime.engine.requests import Agreed, Op, OpKind
from tests.runtime.threads import QueueTransport, run_ranks


def test_a_layout_packs_members_under_the_limit_in_order() -> None:
    plan = layout(np.dtype(np.float32), [10, 5000, 3, 7], limit=64)
    assert plan.offsets == [0, -1, 10, 13]
    assert plan.packed == 20 and plan.counts == [10, 5000, 3, 7]


def agreed(name: str, count: int) -> Agreed:
    return Agreed(name, int(OpKind.ALLREDUCE), DTYPE_CODES[np.dtype(np.float32)], (count,),
                  int(ReduceOp.SUM), -1, 1.0, 1.0, None, None)


@pytest.mark.parametrize("arrays", ["kept", "new every step"])
def test_a_plan_is_kept_for_the_same_agreed_ops_and_results_stay_exact(arrays: str) -> None:
    counts = [3, 40000, 5, 70000, 1]      # small ones packed, large ones where they lie

    def body(t: QueueTransport) -> list[list[np.ndarray]]:
        transport = t
        executor = Executor(transport, chunk_bytes=4096, threshold_bytes=1 << 20,
                            huge_pages=False)
        items = [agreed(f"t{i}", n) for i, n in enumerate(counts)]
        rounds = []
        tensors: list[np.ndarray] = []
        for step in range(3):
            if arrays == "new every step" or step == 0:
                tensors = [np.full(n, transport.rank + 1.0 + step, np.float32)
                           for n in counts]
            else:
                for tensor in tensors:
                    tensor[...] = transport.rank + 1.0 + step
            ops = [Op(OpKind.ALLREDUCE, a.name, t, t, inplace=True, rop=int(ReduceOp.SUM))
                   for a, t in zip(items, tensors, strict=True)]
            done: dict[str, np.ndarray] = {}
            executor.run(list(zip(items, ops, strict=True)), 0,
                         lambda op, result, done=done: done.__setitem__(op.name, result))
            rounds.append([done[a.name].copy() for a in items])
            assert all(done[a.name] is t for a, t in zip(items, tensors, strict=True))
        assert len(executor._plans) == 1
        return rounds

    for rounds in run_ranks(2, body):
        for step, results in enumerate(rounds):
            for result, n in zip(results, counts, strict=True):
                assert np.array_equal(result, np.full(n, 3.0 + 2 * step, np.float32))


@pytest.mark.parametrize(("hosts", "wanted"), [
    (["a", "b"], [False, False]),
    (["a", "a"], [True, True]),
    (["a", "a", "b"], [True, True, False]),
])
def test_only_a_rank_with_a_peer_on_its_host_collapses_its_tensors(
        hosts: list[str], wanted: list[bool]) -> None:
    """A peer on this rank's host reads its large tensors where they lie (single-copy
    reads); a peer on another host gets them through a socket, and the kernel's copy of
    each new gradient onto huge pages bought nothing there (ResNet-18 at half width, 2
    hosts: about 10 ms of the engine's CPU a step)."""
    if not HugePages().enabled:
        pytest.skip("this kernel cannot collapse memory into huge pages (MADV_COLLAPSE)")

    def body(t: QueueTransport) -> bool:
        executor = Executor(t, chunk_bytes=4096, threshold_bytes=1 << 20,
                            layout=HostLayout.from_names(hosts))
        return executor.pages.enabled

    assert run_ranks(len(hosts), body) == wanted
