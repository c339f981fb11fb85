"""The algorithms on thread ranks, at awkward lengths, rank counts and chunk sizes (the
queue transport asserts that both sides of every message agree on its size)."""

from __future__ import annotations

import numpy as np
import pytest

from gcurun.runtime import algorithms as alg
from tests.runtime.threads import run_ranks

SIZES = [1, 2, 3, 4, 5, 7]


@pytest.mark.parametrize("size", SIZES)
def test_ring_allreduce_at_awkward_lengths_and_chunks(size: int) -> None:
    cases = [(n, chunk) for n in (0, 1, size - 1, size, size + 1, 37, 1000)
             for chunk in (1, 3, 64)]

    def body(comm) -> list[np.ndarray]:
        t, out = comm.transport, []
        for n, chunk in cases:
            send = np.arange(n, dtype=np.int64) * (t.rank + 1)
            result = np.empty_like(send)
            alg.ring_allreduce(t, send, result, np.add, np.empty(chunk, np.int64))
            out.append(result)
            inplace = send.copy()
            alg.ring_allreduce(t, inplace, inplace, np.maximum, np.empty(chunk, np.int64))
            out.append(inplace)
        return out

    for results in run_ranks(size, body):
        for (n, _), total, biggest in zip(cases, results[::2], results[1::2], strict=True):
            assert total.tolist() == (np.arange(n) * size * (size + 1) // 2).tolist()
            assert biggest.tolist() == (np.arange(n) * size).tolist()


@pytest.mark.parametrize("size", [*SIZES, 8, 9])
def test_bruck_allgather_puts_blocks_in_rank_order(size: int) -> None:
    def body(comm) -> np.ndarray:
        block = np.full(3, comm.rank, np.uint8)
        out = np.empty(3 * size, np.uint8)
        alg.bruck_allgather(comm.transport, block, np.empty_like(out), out)
        return out

    for out in run_ranks(size, body):
        assert out.tolist() == [r for r in range(size) for _ in range(3)]


@pytest.mark.parametrize("size", SIZES)
def test_broadcast_chain_and_tree_from_every_root(size: int) -> None:
    def body(comm) -> list[list[int]]:
        got = []
        for root in range(size):
            for n in (5, 50):   # one chunk (tree) and many (chain)
                buf = np.arange(n) + 100 * root if comm.rank == root else np.zeros(n, int)
                alg.broadcast(comm.transport, buf, root, chunk=7)
                got.append(buf.tolist())
        return got

    want = [(np.arange(n) + 100 * root).tolist() for root in range(size) for n in (5, 50)]
    assert run_ranks(size, body) == [want] * size


@pytest.mark.parametrize("size", SIZES)
def test_reduce_scatter_owns_the_right_rows(size: int) -> None:
    counts = alg.even_counts(2 * size + 3, size)

    def body(comm) -> list[int]:
        send = np.arange(sum(counts), dtype=np.int64) + comm.rank
        out = np.empty(counts[comm.rank], np.int64)
        alg.reduce_scatter(comm.transport, send, counts, out, np.add, np.empty(2, np.int64),
                           np.empty(max(counts), np.int64))
        return out.tolist()

    total = np.arange(sum(counts)) * size + size * (size - 1) // 2
    starts = np.cumsum([0, *counts])
    assert run_ranks(size, body) == [total[starts[r]:starts[r + 1]].tolist()
                                     for r in range(size)]


def test_even_counts() -> None:
    assert alg.even_counts(10, 4) == [3, 3, 2, 2]
    assert alg.even_counts(2, 4) == [1, 1, 0, 0]
    assert alg.to_segments([3, 0, 2]) == [(0, 3), (3, 0), (3, 2)]
