"""Adasum: an allreduce that adds orthogonal gradients and averages parallel ones.

Two vectors combine as ``(1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b``; the ranks'
tensors combine pairwise up a binary tree in rank order ((0,1), (2,3), then their
results, ...), so every rank computes the same result. Here each rank gathers every
rank's tensor and evaluates the tree itself: simple and exact, at the price of receiving
all the tensors (fine for the few ranks of a host; the ring reductions are for the rest).
A rank left without a partner at some level goes up unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from gcurun.runtime.torch.tensors import stage, to_tensor, write_back


def combine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The Adasum of two vectors (dot products in float64)."""
    a64, b64 = a.astype(np.float64, copy=False), b.astype(np.float64, copy=False)
    dot, aa, bb = float(a64 @ b64), float(a64 @ a64), float(b64 @ b64)
    if aa == 0.0:
        return b.copy()
    if bb == 0.0:
        return a.copy()
    return ((1.0 - dot / (2.0 * aa)) * a + (1.0 - dot / (2.0 * bb)) * b).astype(a.dtype)


def tree(rows: list[np.ndarray]) -> np.ndarray:
    """The Adasum of the ranks' vectors, combined pairwise in rank order."""
    while len(rows) > 1:
        paired = [combine(rows[i], rows[i + 1]) for i in range(0, len(rows) - 1, 2)]
        if len(rows) % 2:
            paired.append(rows[-1])
        rows = paired
    return rows[0]


def prepare(tensor: torch.Tensor, *, inplace: bool, pre: float, post: float
            ) -> tuple[np.ndarray, Callable[[np.ndarray], torch.Tensor], Any]:
    """The row to gather from every rank, how to turn the gathered rows into the Adasum
    result, and what must stay alive until then. Raises TypeError for a tensor that is
    not floating-point."""
    if not (tensor.dtype.is_floating_point):
        raise TypeError(f"op=Adasum needs a floating-point tensor, not {tensor.dtype}; use "
                        "Sum or Average for integers")
    staged = stage(tensor, "allreduce(op=Adasum)")
    flat = staged.array.reshape(1, -1)
    if pre != 1.0:
        flat = flat * pre

    def finish(result: np.ndarray) -> torch.Tensor:
        reduced = tree(list(result)).reshape(staged.array.shape)
        if post != 1.0:
            reduced = reduced * post
        if inplace:
            staged.array[...] = reduced
            return write_back(staged)
        return to_tensor(reduced, tensor)

    return flat, finish, (staged, flat)
