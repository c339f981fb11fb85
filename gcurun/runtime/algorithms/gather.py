"""Gathering one block per rank (Bruck's allgather) and reducing gathered blocks in rank
order: the small allreduce, and what the engine does with data that rode inline."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gcurun.runtime.api import Transport
from gcurun.runtime.dtypes import Combine


def bruck_allgather(t: Transport, block: np.ndarray, work: np.ndarray,
                    out: np.ndarray) -> None:
    """Gather one equal-size ``block`` per rank into ``out`` (rank order) in
    ceil(log2 p) rounds. ``work`` and ``out`` hold p blocks."""
    p, r, width = t.size, t.rank, len(block)
    work[:width] = block
    distance = 1
    while distance < p:
        count = min(distance, p - distance)
        t.sendrecv(work[:count * width], (r - distance) % p,
                   work[distance * width:(distance + count) * width], (r + distance) % p)
        distance *= 2
    # work holds the blocks of ranks r, r+1, ...; rotate them into rank order.
    split = (p - r) * width
    out[r * width:] = work[:split]
    out[:r * width] = work[split:p * width]


def gather_allreduce(t: Transport, send: np.ndarray, out: np.ndarray, ufunc: Combine,
                     scratch: np.ndarray | None = None) -> None:
    """``out`` = reduction of every rank's ``send`` (``out`` may be ``send``), by gathering
    every rank's tensor and reducing in rank order: the same bits on every rank, in
    ceil(log2 p) exchanges. For small tensors. ``scratch`` (optional) holds 2p tensors."""
    p, width = t.size, send.nbytes
    if scratch is None:
        scratch = np.empty(2 * p * width, np.uint8)
    if p == 2:
        theirs = scratch[:width].view(send.dtype)
        t.sendrecv(send, 1 - t.rank, theirs, 1 - t.rank)
        reduce_blocks(ufunc, [send, theirs] if t.rank == 0 else [theirs, send], out)
        return
    gathered, work = scratch[:p * width], scratch[p * width:2 * p * width]
    bruck_allgather(t, send.view(np.uint8), work, gathered)
    blocks = gathered.view(send.dtype).reshape(p, -1) if width else np.empty((p, 0),
                                                                              send.dtype)
    reduce_blocks(ufunc, list(blocks), out)


def reduce_blocks(ufunc: Combine, blocks: Sequence[np.ndarray], out: np.ndarray) -> None:
    """``out`` = blocks[0] op blocks[1] op ... in rank order (identical on every rank)."""
    if len(blocks) == 1:
        out[...] = blocks[0]
        return
    ufunc(blocks[0], blocks[1], out=out)
    for block in blocks[2:]:
        ufunc(out, block, out=out)
