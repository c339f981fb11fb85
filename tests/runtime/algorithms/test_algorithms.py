"""The algorithms on thread ranks, at awkward lengths, rank counts and chunk sizes (the
queue transport asserts that both sides of every message agree on its size)."""

from __future__ import annotations

import numpy as np
import pytest

from gcurun.runtime import algorithms as alg
from tests.runtime.threads import QueueTransport, run_ranks

SIZES = [1, 2, 3, 4, 5, 7]


def ring(t: QueueTransport, send: np.ndarray, out: np.ndarray, ufunc: np.ufunc,
         tmp: np.ndarray) -> None:
    """The ring allreduce of one buffer: its two halves, as the reduction routine runs
    them."""
    if t.size == 1:
        out[...] = send
        return
    pieces = alg.Pieces([(send, out)])
    segments = alg.to_segments(alg.even_counts(len(send), t.size))
    alg.ring_reduce_scatter(t, pieces, segments, ufunc, tmp)
    alg.ring_allgather(t, pieces, segments)


@pytest.mark.parametrize("size", SIZES)
def test_ring_allreduce_at_awkward_lengths_and_chunks(size: int) -> None:
    cases = [(n, chunk) for n in (0, 1, size - 1, size, size + 1, 37, 1000)
             for chunk in (1, 3, 64)]

    def body(t) -> list[np.ndarray]:
        out = []
        for n, chunk in cases:
            send = np.arange(n, dtype=np.int64) * (t.rank + 1)
            result = np.empty_like(send)
            ring(t, send, result, np.add, np.empty(chunk, np.int64))
            out.append(result)
            inplace = send.copy()
            ring(t, inplace, inplace, np.maximum, np.empty(chunk, np.int64))
            out.append(inplace)
        return out

    for results in run_ranks(size, body):
        for (n, _), total, biggest in zip(cases, results[::2], results[1::2], strict=True):
            assert total.tolist() == (np.arange(n) * size * (size + 1) // 2).tolist()
            assert biggest.tolist() == (np.arange(n) * size).tolist()


@pytest.mark.parametrize("size", [*SIZES, 8, 9])
def test_bruck_allgather_puts_blocks_in_rank_order(size: int) -> None:
    def body(t) -> np.ndarray:
        block = np.full(3, t.rank, np.uint8)
        out = np.empty(3 * size, np.uint8)
        alg.bruck_allgather(t, block, np.empty_like(out), out)
        return out

    for out in run_ranks(size, body):
        assert out.tolist() == [r for r in range(size) for _ in range(3)]


@pytest.mark.parametrize("size", SIZES)
def test_broadcast_chain_and_tree_from_every_root(size: int) -> None:
    def body(t) -> list[list[int]]:
        got = []
        for root in range(size):
            for n in (5, 50):   # one chunk (tree) and many (chain)
                buf = np.arange(n) + 100 * root if t.rank == root else np.zeros(n, int)
                alg.broadcast(t, buf, root, chunk=7)
                got.append(buf.tolist())
        return got

    want = [(np.arange(n) + 100 * root).tolist() for root in range(size) for n in (5, 50)]
    assert run_ranks(size, body) == [want] * size


@pytest.mark.parametrize("size", SIZES)
def test_reduce_scatter_owns_the_right_rows(size: int) -> None:
    counts = alg.even_counts(2 * size + 3, size)

    def body(t) -> list[int]:
        send = np.arange(sum(counts), dtype=np.int64) + t.rank
        out = np.empty(counts[t.rank], np.int64)
        alg.reduce_scatter(t, send, counts, out, np.add, np.empty(2, np.int64),
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


@pytest.mark.parametrize("size", [1, 2, 3])
@pytest.mark.parametrize("count", [5, 9000, 70001])
def test_the_reduction_routine_gathers_pairs_and_rings_to_the_same_result(
        size: int, count: int) -> None:
    """Small tensors are gathered, two ranks take the ring of two, more the ring; a
    finish is applied once; in place or not."""
    def body(t: QueueTransport) -> list[np.ndarray]:
        reducer = alg.Reducer(t, chunk_bytes=1 << 20)
        send = np.arange(count, dtype=np.float64) + t.rank
        out = np.empty_like(send)
        halve = lambda x: np.multiply(x, 0.5, out=x)  # noqa: E731
        reducer.allreduce(alg.Pieces([(send, out)]), np.add, halve)
        again = send.copy()
        reducer.allreduce(alg.Pieces([(again, again)]), np.add, None, key=again)
        return [out, again]

    want = np.arange(count) * size + sum(range(size))
    for out, again in run_ranks(size, body):
        assert np.array_equal(out, want * 0.5) and np.array_equal(again, want)
