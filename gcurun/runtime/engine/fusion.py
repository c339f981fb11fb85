"""Tensor fusion: which ready allreduces travel together, and where they lie.

:func:`plan_batches` is pure: it groups a cycle's agreed ops (the same list on every rank)
into batches, so every rank forms the same batches. A batch of allreduces is reduced by
one pass of the reduction routine over a *virtual* buffer
(:class:`gcurun.runtime.algorithms.Pieces`): small tensors are packed into a
preallocated fusion buffer, while tensors of at least :func:`copy_limit` join the pass
as they are. Copying a large tensor in and out of a fusion buffer would read and write
every byte twice more than the ring itself does, and on a host whose memory bandwidth
is the bottleneck that costs more than the per-message overhead the copy would save.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from gcurun.runtime.dtypes import aligned_empty


def copy_limit(chunk_bytes: int, pieces_in_one_message: bool) -> int:
    """Tensors smaller than this are copied into the fusion buffer; larger ones are
    reduced where they lie. A copy in and out costs about four times a tensor's size in
    memory traffic. Where a transport sends a message of many pieces as one
    (``pieces_in_one_message``), a piece of its own costs only a ufunc call or two more
    per ring step, the price of copying a few KiB; elsewhere it costs a message or two
    more, tens of microseconds, the price of copying a few hundred KiB."""
    if pieces_in_one_message:
        return 16 << 10
    return max(chunk_bytes // 2, 64 << 10)



class BatchKey(NamedTuple):
    """What allreduces must share to be fused: dtype, reduce op and scale factors."""

    dtype: int
    op: int
    prescale: float
    postscale: float


def plan_batches(items: Sequence[tuple[BatchKey | None, int]],
                 threshold_bytes: int) -> list[list[int]]:
    """Group ``items`` (key, bytes) into batches; returns lists of indices into ``items``.

    An item with key None (not an allreduce) is a batch of its own. Allreduces with the
    same key join the open batch of that key while its total stays within
    ``threshold_bytes``; otherwise they open a new one. A threshold of 0 disables fusion.
    Batches come in the order of their first item; indices within a batch ascend.
    """
    batches: list[list[int]] = []
    open_: dict[BatchKey, tuple[int, int]] = {}     # key -> (batch index, bytes so far)
    for index, (key, nbytes) in enumerate(items):
        if key is None or threshold_bytes <= 0:
            batches.append([index])
            continue
        slot = open_.get(key)
        if slot is not None and slot[1] + nbytes <= threshold_bytes:
            batches[slot[0]].append(index)
            open_[key] = (slot[0], slot[1] + nbytes)
            continue
        batches.append([index])
        if nbytes < threshold_bytes:
            open_[key] = (len(batches) - 1, nbytes)
    return batches


class FusionBuffers:
    """Reusable buffers by dtype, grown on demand, so steady-state cycles allocate
    nothing (and the buffer stays in cache between steps)."""

    def __init__(self) -> None:
        self._buffers: dict[np.dtype, np.ndarray] = {}

    def get(self, dtype: np.dtype, count: int) -> np.ndarray:
        buf = self._buffers.get(dtype)
        if buf is None or len(buf) < count:
            buf = aligned_empty(max(count, 2 * len(buf) if buf is not None else count),
                                dtype)
            self._buffers[dtype] = buf
        return buf[:count]
