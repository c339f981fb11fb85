"""The collective algorithms, written once over :class:`gcurun.runtime.api.Transport`.

Every function takes flat, C-contiguous numpy arrays and moves raw bytes; nothing is
pickled. Where data is reduced on arrival (reduce-scatter) it travels in chunks, so that
each chunk is reduced while it is still in cache; a broadcast chain forwards chunks as
they arrive. Both sides of every transfer compute the same chunk boundaries, so message
sizes always match (MPI needs that).

These functions know nothing of tensor names or validation; :mod:`gcurun.runtime.collectives`
negotiates first and calls them only when every rank agreed on the shapes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from gcurun.runtime.api import Transport

Segment = tuple[int, int]   # (offset, length) in elements


def even_counts(total: int, parts: int) -> list[int]:
    """Split ``total`` into ``parts`` counts differing by at most one, larger ones first."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def to_segments(counts: Sequence[int]) -> list[Segment]:
    segments, offset = [], 0
    for count in counts:
        segments.append((offset, count))
        offset += count
    return segments


def ring_reduce_scatter(t: Transport, send: np.ndarray, segments: Sequence[Segment],
                        ufunc: np.ufunc, acc_of: Callable[[int], np.ndarray],
                        tmp: np.ndarray) -> None:
    """Reduce ``send`` over all ranks so that rank r ends with segment r reduced in
    ``acc_of(r)``. ``acc_of(i)`` is where segment i accumulates (its length); it may alias
    ``send``'s own segment i (in-place allreduce). ``tmp`` holds one chunk."""
    p, r = t.size, t.rank
    right, left = (r + 1) % p, (r - 1) % p
    chunk = len(tmp)
    outgoing: np.ndarray | None = None
    for step in range(p - 1):
        send_index = (r - step - 1) % p
        recv_index = (r - step - 2) % p
        if outgoing is None:
            offset, length = segments[send_index]
            outgoing = send[offset:offset + length]
        offset, length = segments[recv_index]
        local = send[offset:offset + length]
        acc = acc_of(recv_index)
        for start in range(0, max(len(outgoing), length), chunk):
            stop = min(start + chunk, length)
            incoming = tmp[:max(stop - start, 0)]
            t.sendrecv(outgoing[start:start + chunk], right, incoming, left)
            if stop > start:
                ufunc(local[start:stop], incoming, out=acc[start:stop])
        outgoing = acc


def ring_allgather(t: Transport, out: np.ndarray, segments: Sequence[Segment]) -> None:
    """Every rank holds its own segment r of ``out``; afterwards all hold every segment.

    Segments travel whole: nothing is computed on arrival, so chunks would only add
    per-message costs (the transport splits what is too large for it)."""
    p, r = t.size, t.rank
    right, left = (r + 1) % p, (r - 1) % p
    for step in range(p - 1):
        send_offset, send_length = segments[(r - step) % p]
        recv_offset, recv_length = segments[(r - step - 1) % p]
        t.sendrecv(out[send_offset:send_offset + send_length], right,
                   out[recv_offset:recv_offset + recv_length], left)


def ring_allreduce(t: Transport, send: np.ndarray, out: np.ndarray, ufunc: np.ufunc,
                   tmp: np.ndarray) -> None:
    """``out`` = reduction of every rank's ``send`` (``out`` may be ``send``): a ring
    reduce-scatter followed by a ring allgather, both pipelined in chunks of ``len(tmp)``."""
    if t.size == 1:
        if out is not send:
            out[...] = send
        return
    if t.size == 2 and len(send) <= 2 * len(tmp):
        # The same two messages as the general ring below, without its bookkeeping (it
        # is a noticeable part of a 4 MiB allreduce's time).
        peer = 1 - t.rank
        mine, theirs, mine_len = pair_halves(len(send), t.rank)
        incoming = tmp[:mine_len]
        t.sendrecv(send[theirs], peer, incoming, peer)
        ufunc(send[mine], incoming, out=out[mine])
        t.sendrecv(out[mine], peer, out[theirs], peer)
        return
    segments = to_segments(even_counts(len(send), t.size))

    def acc_of(index: int) -> np.ndarray:
        offset, length = segments[index]
        return out[offset:offset + length]

    ring_reduce_scatter(t, send, segments, ufunc, acc_of, tmp)
    ring_allgather(t, out, segments)


def pair_halves(count: int, rank: int) -> tuple[slice, slice, int]:
    """The ring of two ranks over ``count`` elements: (the half ``rank`` reduces, the half
    its peer reduces, the length of the first). Rank 0 takes the first, larger half, as
    :func:`even_counts` would."""
    half = (count + 1) // 2
    if rank == 0:
        return slice(0, half), slice(half, None), half
    return slice(half, None), slice(0, half), count - half


def gather_allreduce(t: Transport, send: np.ndarray, out: np.ndarray, ufunc: np.ufunc,
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


def reduce_scatter(t: Transport, send: np.ndarray, counts: Sequence[int], out: np.ndarray,
                   ufunc: np.ufunc, tmp: np.ndarray, scratch: np.ndarray) -> None:
    """``out`` = rank r's segment (``counts[r]`` elements) of the reduction of ``send``.
    ``scratch`` holds the largest segment."""
    segments = to_segments(counts)
    r = t.rank
    if t.size == 1:
        out[...] = send
        return

    def acc_of(index: int) -> np.ndarray:
        return out if index == r else scratch[:segments[index][1]]

    ring_reduce_scatter(t, send, segments, ufunc, acc_of, tmp)


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


def pairwise_alltoall(t: Transport, send: np.ndarray, send_segments: Sequence[Segment],
                      out: np.ndarray, recv_segments: Sequence[Segment]) -> None:
    """Rank r sends ``send_segments[j]`` of ``send`` to rank j and receives rank j's block
    into ``recv_segments[j]`` of ``out``: p-1 rounds of pairwise exchange."""
    p, r = t.size, t.rank
    offset, length = send_segments[r]
    recv_offset, _ = recv_segments[r]
    out[recv_offset:recv_offset + length] = send[offset:offset + length]
    for step in range(1, p):
        dest, source = (r + step) % p, (r - step) % p
        s_off, s_len = send_segments[dest]
        r_off, r_len = recv_segments[source]
        t.sendrecv(send[s_off:s_off + s_len], dest, out[r_off:r_off + r_len], source)


def reduce_blocks(ufunc: np.ufunc, blocks: Sequence[np.ndarray], out: np.ndarray) -> None:
    """``out`` = blocks[0] op blocks[1] op ... in rank order (identical on every rank)."""
    if len(blocks) == 1:
        out[...] = blocks[0]
        return
    ufunc(blocks[0], blocks[1], out=out)
    for block in blocks[2:]:
        ufunc(out, block, out=out)
