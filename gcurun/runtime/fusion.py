"""Tensor fusion: which ready allreduces travel together, and one ring pass over them.

:func:`plan_batches` is pure: it groups a cycle's agreed ops (the same list on every rank)
into batches, so every rank forms the same batches. A batch of allreduces is reduced by
one ring pass over a *virtual* buffer, :class:`Pieces`: small tensors are packed into a
preallocated fusion buffer, while tensors of at least :func:`copy_limit` join the pass
as they are. Copying a large tensor in and out of a fusion buffer would read and write
every byte twice more than the ring itself does, and on a host whose memory bandwidth
is the bottleneck that costs more than the per-message overhead the copy would save.

A message spans as many pieces as its range of the virtual buffer covers
(:meth:`Transport.sendrecv_parts`), so a batch costs the messages of one buffer of its
size; both ends cut each message alike, from the same layout.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from gcurun.runtime import algorithms as alg
from gcurun.runtime.api import Transport
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

    def parts(self, offset: int, length: int) -> list[Part]:
        """The views covering elements [offset, offset + length), cut at piece
        boundaries."""
        parts: list[Part] = []
        stop = offset + length
        index = max(bisect.bisect_right(self.starts, offset) - 1, 0)
        while index < len(self.pairs) and self.starts[index] < stop:
            src, out = self.pairs[index]
            start = self.starts[index]
            lo, hi = max(offset - start, 0), min(stop - start, len(src))
            if hi > lo:
                parts.append((src[lo:hi], out[lo:hi]))
            index += 1
        return parts


Finish = Callable[[np.ndarray], None]


def ring_reduce_scatter(t: Transport, pieces: Pieces, segments: Sequence[alg.Segment],
                        ufunc: np.ufunc, tmp: np.ndarray, finish: Finish | None = None
                        ) -> None:
    """The reduce-scatter half of a ring allreduce over ``pieces``: rank r ends with
    segment r reduced into the outputs. Segments travel in chunks of ``len(tmp)``
    elements, each one message however many pieces it spans. ``finish`` (averaging,
    scaling) is applied to each chunk of segment r as soon as it is reduced, while it is
    still in cache: every element is finished once, by its owner, before the allgather."""
    p, r = t.size, t.rank
    right, left = (r + 1) % p, (r - 1) % p
    chunk = len(tmp)
    for step in range(p - 1):
        send_offset, send_length = segments[(r - step - 1) % p]
        recv_offset, recv_length = segments[(r - step - 2) % p]
        last = step == p - 2
        for start in range(0, max(send_length, recv_length), chunk):
            # The first step sends inputs; later ones the sums of the step before.
            sends = [pair[1 if step else 0] for pair in
                     pieces.parts(send_offset + start, min(chunk, send_length - start))]
            incoming = pieces.parts(recv_offset + start, min(chunk, recv_length - start))
            arrived, position = [], 0
            for local, _ in incoming:         # cut as the sender cuts the same range
                arrived.append(tmp[position:position + len(local)])
                position += len(local)
            t.sendrecv_parts(sends, right, arrived, left)
            for (local, acc), theirs in zip(incoming, arrived, strict=True):
                ufunc(local, theirs, out=acc)
                if finish is not None and last:
                    finish(acc)


def ring_allgather(t: Transport, pieces: Pieces, segments: Sequence[alg.Segment]) -> None:
    """The allgather half: every rank holds its own reduced segment r in the outputs;
    afterwards every rank holds all of them. A segment is one message each way."""
    p, r = t.size, t.rank
    right, left = (r + 1) % p, (r - 1) % p
    for step in range(p - 1):
        sends = [out for _, out in pieces.parts(*segments[(r - step) % p])]
        recvs = [out for _, out in pieces.parts(*segments[(r - step - 1) % p])]
        t.sendrecv_parts(sends, right, recvs, left)


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
