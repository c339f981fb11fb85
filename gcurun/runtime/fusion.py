"""Tensor fusion: which ready allreduces travel together, and one ring pass over them.

:func:`plan_batches` is pure: it groups a cycle's agreed ops (the same list on every rank)
into batches, so every rank forms the same batches. A batch of allreduces is reduced by
one ring pass over a *virtual* buffer, :class:`Pieces`: small tensors are packed into a
preallocated fusion buffer, while tensors of at least :func:`copy_limit` join the pass
as they are. Copying a large tensor in and out of a fusion buffer would read and write
every byte twice more than the ring itself does, and on a host whose memory bandwidth
is the bottleneck that costs more than the per-message overhead the copy would save.

Messages never cross a piece boundary, so both ends of every transfer compute the same
sizes from the same piece layout.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from gcurun.runtime import algorithms as alg
from gcurun.runtime.api import Transport
from gcurun.runtime.dtypes import aligned_empty


# Tensors smaller than half a ring chunk are copied into the fusion buffer; larger ones
# are reduced where they lie. A copy in and out costs about four times a tensor's size in
# memory traffic; a piece of its own costs a message or two more per ring step, and a
# message costs tens of microseconds, the price of copying a few hundred KiB.
def copy_limit(chunk_bytes: int) -> int:
    return max(chunk_bytes // 2, 64 << 10)


Part = tuple[np.ndarray, np.ndarray]          # (input view, output view), equal lengths


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


class Pieces:
    """Several (input, output) pairs of one dtype, seen as one buffer of their
    concatenation. An output may be its own input (in place)."""

    def __init__(self, pairs: Sequence[Part]):
        self.pairs = [(src, out) for src, out in pairs if len(src)]
        starts, total = [], 0
        for src, _ in self.pairs:
            starts.append(total)
            total += len(src)
        self.starts = starts
        self.total = total

    def parts(self, offset: int, length: int, chunk: int | None) -> list[Part]:
        """The views covering elements [offset, offset + length), cut at piece
        boundaries and, when ``chunk`` is given, every ``chunk`` elements of a piece."""
        parts: list[Part] = []
        stop = offset + length
        for (src, out), start in zip(self.pairs, self.starts, strict=True):
            end = start + len(src)
            if end <= offset or start >= stop:
                continue
            lo, hi = max(offset, start) - start, min(stop, end) - start
            step = chunk or hi - lo
            for a in range(lo, hi, step):
                b = min(a + step, hi)
                parts.append((src[a:b], out[a:b]))
        return parts


Finish = Callable[[np.ndarray], None]


def ring_reduce_scatter(t: Transport, pieces: Pieces, segments: Sequence[alg.Segment],
                        ufunc: np.ufunc, tmp: np.ndarray, finish: Finish | None = None
                        ) -> None:
    """The reduce-scatter half of a ring allreduce over ``pieces``: rank r ends with
    segment r reduced into the outputs. ``tmp`` holds one chunk. ``finish`` (averaging,
    scaling) is applied to each chunk of segment r as soon as it is reduced, while it is
    still in cache: every element is finished once, by its owner, before the allgather."""
    p, r = t.size, t.rank
    right, left = (r + 1) % p, (r - 1) % p
    chunk = len(tmp)
    empty = tmp[:0]
    outgoing: list[np.ndarray] | None = None
    for step in range(p - 1):
        send_index, recv_index = (r - step - 1) % p, (r - step - 2) % p
        if outgoing is None:
            outgoing = [src for src, _ in pieces.parts(*segments[send_index], chunk)]
        incoming = pieces.parts(*segments[recv_index], chunk)
        for i in range(max(len(outgoing), len(incoming))):
            send = outgoing[i] if i < len(outgoing) else empty
            if i < len(incoming):
                local, acc = incoming[i]
                arrived = tmp[:len(local)]
                t.sendrecv(send, right, arrived, left)
                ufunc(local, arrived, out=acc)
                if finish is not None and step == p - 2:
                    finish(acc)
            else:
                t.sendrecv(send, right, empty, left)
        outgoing = [acc for _, acc in incoming]


def ring_allgather(t: Transport, pieces: Pieces, segments: Sequence[alg.Segment]) -> None:
    """The allgather half: every rank holds its own reduced segment r in the outputs;
    afterwards every rank holds all of them."""
    p, r = t.size, t.rank
    right, left = (r + 1) % p, (r - 1) % p
    empty = pieces.pairs[0][1][:0]
    for step in range(p - 1):
        outgoing = pieces.parts(*segments[(r - step) % p], None)
        incoming = pieces.parts(*segments[(r - step - 1) % p], None)
        for i in range(max(len(outgoing), len(incoming))):
            send = outgoing[i][1] if i < len(outgoing) else empty
            recv = incoming[i][1] if i < len(incoming) else empty
            t.sendrecv(send, right, recv, left)


def ring_allreduce(t: Transport, pieces: Pieces, ufunc: np.ufunc, tmp: np.ndarray,
                   phase: Callable[[str, bool], None] | None = None,
                   finish: Finish | None = None) -> None:
    """Every output = ``finish`` of the reduction over all ranks of its input: one ring
    pass over the concatenation. ``phase(name, started)`` is told when each half starts
    and ends."""
    if pieces.total == 0:
        return
    if t.size == 1:
        for src, out in pieces.pairs:
            if out is not src:
                out[...] = src
            if finish is not None:
                finish(out)
        return
    segments = alg.to_segments(alg.even_counts(pieces.total, t.size))
    if phase is not None:
        phase("RING_REDUCESCATTER", True)
    ring_reduce_scatter(t, pieces, segments, ufunc, tmp, finish)
    if phase is not None:
        phase("RING_REDUCESCATTER", False)
        phase("RING_ALLGATHER", True)
    ring_allgather(t, pieces, segments)
    if phase is not None:
        phase("RING_ALLGATHER", False)


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
