"""The ring: reduce-scatter and allgather over :class:`Pieces` (one buffer or a fused
batch of tensors, seen as their concatenation).

A message spans as many pieces as its range of the virtual buffer covers
(:meth:`Transport.sendrecv_parts`), so a batch costs the messages of one buffer of its
size; both ends cut each message alike, from the same layout. Where data is reduced on
arrival it travels in chunks, reduced while still in cache; both sides of every transfer
compute the same chunk boundaries, so message sizes always match (MPI needs that).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gcurun.runtime.algorithms.pieces import Finish, Pieces
from gcurun.runtime.algorithms.segments import Segment, to_segments
from gcurun.runtime.api import Transport


def ring_reduce_scatter(t: Transport, pieces: Pieces, segments: Sequence[Segment],
                        ufunc: np.ufunc, tmp: np.ndarray, finish: Finish | None = None
                        ) -> None:
    """Rank r ends with segment r reduced into the outputs. Segments travel in chunks of
    ``len(tmp)`` elements, each one message however many pieces it spans. ``finish``
    (averaging, scaling) is applied to each chunk of segment r as soon as it is reduced,
    while it is still in cache: every element is finished once, by its owner."""
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


def ring_allgather(t: Transport, pieces: Pieces, segments: Sequence[Segment]) -> None:
    """Every rank holds its own segment r in the outputs; afterwards every rank holds all
    of them. A segment is one message each way (nothing is computed on arrival)."""
    p, r = t.size, t.rank
    right, left = (r + 1) % p, (r - 1) % p
    for step in range(p - 1):
        sends = [out for _, out in pieces.parts(*segments[(r - step) % p])]
        recvs = [out for _, out in pieces.parts(*segments[(r - step - 1) % p])]
        t.sendrecv_parts(sends, right, recvs, left)


def allgather(t: Transport, out: np.ndarray, segments: Sequence[Segment]) -> None:
    """The allgather of one flat buffer whose segment r this rank holds already."""
    ring_allgather(t, Pieces([(out, out)]), segments)


def reduce_scatter(t: Transport, send: np.ndarray, counts: Sequence[int], out: np.ndarray,
                   ufunc: np.ufunc, tmp: np.ndarray, scratch: np.ndarray) -> None:
    """``out`` = rank r's segment (``counts[r]`` elements) of the reduction of ``send``.
    ``scratch`` holds the largest segment (the other segments' sums pass through it)."""
    if t.size == 1:
        out[...] = send
        return
    segments = to_segments(counts)
    pairs = [(send[o:o + n], out if i == t.rank else scratch[:n])
             for i, (o, n) in enumerate(segments)]
    ring_reduce_scatter(t, Pieces(pairs), segments, ufunc, tmp)
