"""Broadcast: a binomial tree for one chunk, a pipelined chain for more."""

from __future__ import annotations

import numpy as np

from gcurun.runtime.api import Transport


def broadcast(t: Transport, buf: np.ndarray, root: int, chunk: int) -> None:
    """Copy ``buf`` of ``root`` into ``buf`` of every rank: a binomial tree for buffers of
    at most one chunk, else a pipelined chain root -> root+1 -> ... in chunks."""
    p = t.size
    if p == 1 or len(buf) == 0:
        return
    virtual = (t.rank - root) % p
    if len(buf) <= chunk or p == 2:
        _tree_broadcast(t, buf, root, virtual)
        return
    nxt, prv = (t.rank + 1) % p, (t.rank - 1) % p
    pieces = [buf[start:start + chunk] for start in range(0, len(buf), chunk)]
    for index, piece in enumerate(pieces):
        if virtual == 0:
            t.send(piece, nxt)                                     # the root
        elif virtual == p - 1 or index == 0:
            t.recv(piece, prv)                                     # the end of the chain
        else:
            t.sendrecv(pieces[index - 1], nxt, piece, prv)         # forward while receiving
    if 0 < virtual < p - 1:
        t.send(pieces[-1], nxt)


def _tree_broadcast(t: Transport, buf: np.ndarray, root: int, virtual: int) -> None:
    p = t.size
    mask = 1
    while mask < p:
        if virtual & mask:
            t.recv(buf, (virtual - mask + root) % p)
            break
        mask <<= 1
    mask >>= 1
    while mask > 0:
        if virtual + mask < p:
            t.send(buf, (virtual + mask + root) % p)
        mask >>= 1
