"""Fusion: how ready allreduces are batched, and the ring pass over several tensors."""

from __future__ import annotations

import numpy as np
import pytest

from gcurun.runtime import algorithms as alg
from gcurun.runtime.algorithms import Pieces, Reducer
from gcurun.runtime.engine import fusion
from gcurun.runtime.engine.fusion import BatchKey, plan_batches
from tests.runtime.threads import QueueTransport, run_ranks

F32 = BatchKey(10, 1, 1.0, 1.0)
F64 = BatchKey(11, 1, 1.0, 1.0)
SCALED = BatchKey(10, 1, 2.0, 1.0)


def test_same_kind_dtype_and_scaling_share_a_batch_up_to_the_threshold() -> None:
    items = [(F32, 40), (F64, 40), (F32, 40), (None, 0), (SCALED, 8), (F32, 40)]
    assert plan_batches(items, 100) == [[0, 2], [1], [3], [4], [5]]


def test_a_tensor_larger_than_the_threshold_runs_alone_and_leaves_the_batch_open() -> None:
    items = [(F32, 10), (F32, 500), (F32, 10), (F32, 0), (F32, 95)]
    assert plan_batches(items, 100) == [[0, 2, 3], [1], [4]]


def test_a_threshold_of_zero_disables_fusion() -> None:
    assert plan_batches([(F32, 1), (F32, 1), (None, 0)], 0) == [[0], [1], [2]]


def test_pieces_cut_a_range_of_the_concatenation_at_piece_boundaries() -> None:
    a, b, c = np.arange(5.0), np.arange(0.0), np.arange(7.0) + 10
    pieces = Pieces([(a, a), (b, b), (c, c)])
    assert pieces.total == 12 and len(pieces.pairs) == 2      # the empty piece is dropped
    assert [src.tolist() for src, _ in pieces.parts(3, 6)] == [[3.0, 4.0],
                                                               [10.0, 11.0, 12.0, 13.0]]
    assert [src.tolist() for src, _ in pieces.parts(0, 12)] == [a.tolist(), c.tolist()]
    assert [src.tolist() for src, _ in pieces.parts(6, 2)] == [[11.0, 12.0]]
    assert pieces.parts(12, 5) == [] and pieces.parts(4, 0) == [] and pieces.parts(4, -1) == []


def ring(t: QueueTransport, pieces: Pieces) -> None:
    """One buffer through the ring itself (the routine would gather one small buffer)."""
    segments = alg.to_segments(alg.even_counts(pieces.total, t.size))
    alg.ring_reduce_scatter(t, pieces, segments, np.add, np.empty(16))
    alg.ring_allgather(t, pieces, segments)


@pytest.mark.parametrize("size", [2, 3])
def test_a_fused_pass_sends_as_many_messages_as_one_buffer_would(size: int) -> None:
    """Messages span pieces: many small tensors cost no more exchanges than their
    concatenation (on tcp an exchange is one message, read in one call)."""
    lengths = [3, 50, 1, 0, 17, 9, 120, 2, 33]

    def body(t: QueueTransport) -> tuple[list[np.ndarray], int, int]:
        tensors = [np.arange(n, dtype=np.float64) + t.rank for n in lengths]
        Reducer(t, 128).allreduce(Pieces([(x, x) for x in tensors]), np.add)
        fused = t.exchanges
        flat = np.concatenate([np.arange(n, dtype=np.float64) + t.rank for n in lengths])
        ring(t, Pieces([(flat, flat)]))
        return tensors, fused, t.exchanges - fused

    for tensors, fused, single in run_ranks(size, body):
        assert fused == single
        for n, out in zip(lengths, tensors, strict=True):
            assert np.array_equal(out, np.arange(n) * size + sum(range(size)))


@pytest.mark.parametrize("size", [1, 2, 3])
def test_one_ring_pass_reduces_every_piece(size: int) -> None:
    lengths = [0, 1, 7, 100, 3, 1000]

    def body(t: QueueTransport) -> list[np.ndarray]:
        inputs = [np.arange(n, dtype=np.float64) * (t.rank + 1) for n in lengths]
        outputs = [x if i % 2 else np.empty_like(x) for i, x in enumerate(inputs)]
        pieces = Pieces(list(zip([x.copy() if i % 2 == 0 else x for i, x in
                                  enumerate(inputs)], outputs, strict=True)))
        phases: list[tuple[str, bool]] = []
        Reducer(t, 128).allreduce(pieces, np.add, lambda out: np.multiply(out, 0.5, out=out),
                                  lambda n, s: phases.append((n, s)))
        if size > 1:
            assert phases == [("RING_REDUCESCATTER", True), ("RING_REDUCESCATTER", False),
                              ("RING_ALLGATHER", True), ("RING_ALLGATHER", False)]
        return outputs

    results = run_ranks(size, body)
    total = sum(range(1, size + 1))
    for outputs in results:
        for n, out in zip(lengths, outputs, strict=True):
            assert np.array_equal(out, np.arange(n) * total * 0.5)


def test_fusion_buffers_are_reused_and_grow() -> None:
    buffers = fusion.FusionBuffers()
    first = buffers.get(np.dtype(np.float32), 10)
    again = buffers.get(np.dtype(np.float32), 5)
    assert np.shares_memory(first, again) and len(again) == 5
    assert len(buffers.get(np.dtype(np.float32), 1000)) == 1000
    assert fusion.copy_limit(2 << 20, False) == 1 << 20 and fusion.copy_limit(1, False) == 64 << 10
    assert fusion.copy_limit(2 << 20, True) == 16 << 10
