"""What the engine's modules share about results: averaging or scaling a reduction,
shaping a result like the caller's array, reducing data that rode inline."""

from __future__ import annotations

from typing import Any

import numpy as np

from gcurun.runtime.algorithms import reduce_blocks
from gcurun.runtime.api import ReduceOp
from gcurun.runtime.dtypes import average, scale


def finish_reduction(out: np.ndarray, op: ReduceOp, size: int, postscale: float) -> None:
    """Average (over ``size`` ranks) or post-scale a reduction, in place."""
    if op == ReduceOp.AVERAGE:
        average(out, size, postscale)
    else:
        scale(out, postscale)


def deliver(arr: np.ndarray, flat: np.ndarray, inplace: bool) -> np.ndarray:
    """Shape the result like ``arr``; in-place calls write it back into ``arr``."""
    result = flat.reshape(arr.shape)
    if inplace and not np.may_share_memory(result, arr):
        arr[...] = result
        return arr
    return arr if inplace else result


def reduce_views(plan: Any, tensor: np.ndarray, inplace: bool) -> np.ndarray:
    """Every rank's inline data (``plan.views``, shaped like ``tensor``) reduced with
    ``plan.ufunc`` in rank order: into ``tensor`` in place, else into a new array. Two
    ranks and a result of at least one dimension (``plan.plain``) take one ufunc call
    that makes the result (the common case of a tiny allreduce's latency)."""
    views = plan.views
    if plan.plain:
        if not inplace:
            return plan.ufunc(views[0], views[1])
        if plan.ufunc is not np.minimum and plan.ufunc is not np.maximum:
            return plan.ufunc(views[0], views[1], tensor)   # (out as a keyword costs more)
    out = tensor if inplace else np.empty_like(views[0])
    reduce_blocks(plan.ufunc, views, out)
    return out
