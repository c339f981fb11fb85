"""The one allreduce routine, for fused batches and single tensors alike.

:meth:`Reducer.allreduce` reduces :class:`Pieces` over every rank: a small single tensor
is gathered and reduced in rank order (ceil(log2 p) exchanges instead of the ring's
2(p-1)); ranks on several hosts with several ranks each may take two levels (shared
memory inside a host, a ring per local index across hosts: :mod:`.levels`), when its
mode and cost model say so; two ranks whose halves fit one chunk each take the ring of
two written out flat (the same two messages as the ring, without its bookkeeping),
unless their bytes go by socket (other hosts), where the ring streams; everything else
takes the ring. A tensor reduced in place again and again between two
ranks has its ring's two exchanges prepared (MPI persistent requests), from its second
call in a row on.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from gcurun.runtime.algorithms.gather import gather_allreduce
from gcurun.runtime.algorithms.levels import HostLayout, Mode, TwoLevels, use_two_levels
from gcurun.runtime.algorithms.pieces import Finish, Pieces
from gcurun.runtime.algorithms.ring import (
    STREAM_BYTES,
    ring_allgather,
    ring_reduce_scatter,
    streams,
)
from gcurun.runtime.algorithms.segments import even_counts, pair_halves, to_segments
from gcurun.runtime.api import Transport
from gcurun.runtime.dtypes import Combine, aligned_empty
from gcurun.runtime.transport.prepared import prepared_sendrecv, release_sendrecv

# Up to this size a single tensor is gathered and reduced locally: ceil(log2 p)
# exchanges instead of the ring's 2(p-1), which matters more than bandwidth when small.
GATHER_REDUCE_BYTES = 64 << 10

Phase = Callable[[str, bool], None]     # told when each part of a reduction starts, ends


class Scratch:
    """Reusable receive buffers: a ring chunk per dtype, on huge pages, and, made on
    first use, room to gather every rank's small tensor."""

    def __init__(self, chunk_bytes: int, size: int):
        self.chunk_bytes = chunk_bytes
        self.size = size
        self._chunks: dict[np.dtype, np.ndarray] = {}
        self._spares: dict[tuple[np.dtype, int], np.ndarray] = {}
        self._gather: np.ndarray | None = None

    def resize(self, chunk_bytes: int) -> None:
        """Ring chunks of ``chunk_bytes`` from now on (every rank at the same point: both
        ends of a transfer cut it alike)."""
        if chunk_bytes != self.chunk_bytes:
            self.chunk_bytes = chunk_bytes
            self._chunks.clear()
            self._spares.clear()

    def chunk_len(self, dtype: np.dtype) -> int:
        """Elements of ``dtype`` in one ring chunk."""
        return max(1, self.chunk_bytes // max(dtype.itemsize, 1))

    def chunk(self, dtype: np.dtype) -> np.ndarray:
        """A receive buffer of one chunk of ``dtype``."""
        chunk = self._chunks.get(dtype)
        if chunk is None:
            chunk = self._chunks[dtype] = aligned_empty(self.chunk_len(dtype), dtype)
        return chunk

    def spare(self, dtype: np.dtype, index: int) -> np.ndarray:
        """The ``index``-th further receive buffer of one chunk of ``dtype`` (the
        two-level pipeline's slices in flight need one each; a streaming ring's second
        chunk is the first), made on first use."""
        key = (dtype, index)
        chunk = self._spares.get(key)
        if chunk is None:
            chunk = self._spares[key] = aligned_empty(self.chunk_len(dtype), dtype)
        return chunk

    def gather(self) -> np.ndarray:
        """Room for gather_allreduce of up to GATHER_REDUCE_BYTES."""
        if self._gather is None:
            self._gather = np.empty(2 * self.size * GATHER_REDUCE_BYTES, np.uint8)
        return self._gather


class Reducer:
    """Runs allreduces over one transport; owns the scratch buffers and the prepared
    exchanges of the one tensor held (see :meth:`allreduce`). ``layout`` (which ranks
    share a host) and ``two_levels`` (its mode; the same on every rank) decide when the
    two-level allreduce runs."""

    def __init__(self, transport: Transport, chunk_bytes: int,
                 layout: HostLayout | None = None, two_levels: Mode = "auto"):
        self.t = transport
        self.scratch = Scratch(chunk_bytes, transport.size)
        self.layout = layout if layout is not None and layout.two_level else None
        self.mode: Mode = two_levels
        # The ring's chunk between hosts (see :mod:`.ring`); autotune may change it.
        self.stream_bytes = STREAM_BYTES
        self._levels: TwoLevels | None = None
        # The held tensor (the caller's array) and its ring's two prepared exchanges;
        # a weak reference to the last large in-place tensor that ran without them.
        self.held: Any = None
        self._runs: tuple[Callable[[], None], Callable[[], None]] | None = None
        self._last: weakref.ref | None = None

    def allreduce(self, pieces: Pieces, ufunc: Combine, finish: Finish | None = None,
                  phase: Phase | None = None, key: Any = None) -> None:
        """Every output = ``finish`` of the reduction over all ranks of its input.

        ``phase(name, started)`` hears of each part (GATHER_REDUCE, RING_REDUCESCATTER,
        RING_ALLGATHER, or the two levels' LOCAL_REDUCESCATTER, CROSS_REDUCESCATTER,
        CROSS_ALLGATHER, LOCAL_ALLGATHER). ``key`` (the caller's array, for a single
        tensor reduced in place) lets two ranks hold the ring's exchanges prepared for
        that tensor when it comes twice in a row: a fast path, the same messages as
        without it.
        """
        total, t = pieces.total, self.t
        if total == 0:
            return
        if t.size == 1:
            for src, out in pieces.pairs:
                if out is not src:
                    out[...] = src
                if finish is not None:
                    finish(out)
            return
        if len(pieces.pairs) == 1:
            src, out = pieces.pairs[0]
            if total * src.itemsize <= GATHER_REDUCE_BYTES:
                if phase is not None:
                    phase("GATHER_REDUCE", True)
                gather_allreduce(t, src, out, ufunc, self.scratch.gather())
                if finish is not None:
                    finish(out)
                if phase is not None:
                    phase("GATHER_REDUCE", False)
                return
            # (Two ranks on two hosts take the ring, which streams: see ring_reduce_scatter.)
            if t.size == 2 and total <= 2 * self.scratch.chunk_len(src.dtype) and \
                    not streams(t, 1 - t.rank, 1 - t.rank):
                self._pair(src, out, ufunc, finish, phase, key)
                return
        dtype = pieces.pairs[0][0].dtype
        if self.layout is not None and use_two_levels(self.mode, self.layout,
                                                      total * dtype.itemsize):
            if self._levels is None:
                self._levels = TwoLevels(t, self.layout)
            self._levels.allreduce(pieces, ufunc, self.scratch.chunk(dtype), finish, phase,
                                   partial(self.scratch.spare, dtype))
            return
        segments = to_segments(even_counts(total, t.size))
        tmp = self.scratch.chunk(dtype)
        stream = streams(t, (t.rank + 1) % t.size, (t.rank - 1) % t.size)
        spare = self.scratch.spare(dtype, 0) if stream else None   # (made only if needed)
        if phase is not None:
            phase("RING_REDUCESCATTER", True)
        ring_reduce_scatter(t, pieces, segments, ufunc, tmp, finish, spare, self.stream_bytes)
        if phase is not None:
            phase("RING_REDUCESCATTER", False)
            phase("RING_ALLGATHER", True)
        ring_allgather(t, pieces, segments, stream, self.stream_bytes)
        if phase is not None:
            phase("RING_ALLGATHER", False)

    def _pair(self, src: np.ndarray, out: np.ndarray, ufunc: Combine,
              finish: Finish | None, phase: Phase | None, key: Any) -> None:
        """The ring of two: halves swapped, reduced, swapped back."""
        t = self.t
        peer = 1 - t.rank
        mine, theirs, mine_len = pair_halves(len(src), t.rank)
        incoming = self.scratch.chunk(src.dtype)[:mine_len]
        runs = None
        if key is not None:
            runs = self._runs if key is self.held else self._hold(key, src, mine, theirs,
                                                                  incoming)
            if runs is not None:
                self._last = None       # (a row of another tensor's calls ends)
        if phase is not None:
            phase("RING_REDUCESCATTER", True)
        if runs is not None:
            runs[0]()           # the far half out, the peer's near half in
        else:
            t.sendrecv(src[theirs], peer, incoming, peer)
        if ufunc is np.minimum or ufunc is np.maximum:
            ufunc(src[mine], incoming, out=out[mine])
        else:                   # (out as a keyword costs more)
            ufunc(src[mine], incoming, out[mine])
        if finish is not None:
            finish(out[mine])
        if phase is not None:
            phase("RING_REDUCESCATTER", False)
            phase("RING_ALLGATHER", True)
        if runs is not None:
            runs[1]()           # the near half out, the far half in
        else:
            t.sendrecv(out[mine], peer, out[theirs], peer)
        if phase is not None:
            phase("RING_ALLGATHER", False)

    def _hold(self, key: Any, src: np.ndarray, mine: slice, theirs: slice,
              incoming: np.ndarray) -> tuple[Callable[[], None], Callable[[], None]] | None:
        """At the second in-place call in a row with one tensor, make its two exchanges
        the transport's prepared ones, in place of any other tensor's (they keep their
        buffers alive). Tensors taking turns are never held, nor take the held one's
        place. None: run this call without them."""
        last = self._last
        if last is None or last() is not key:
            self._last = weakref.ref(key)
            return None
        self.release()
        made: list[Callable[[], None]] = []
        peer = 1 - self.t.rank
        try:        # an optimization: a transport that cannot prepare is not one
            for send, recv in ((src[theirs], incoming), (src[mine], src[theirs])):
                made.append(prepared_sendrecv(self.t, send, peer, recv, peer))
        except Exception:  # noqa: BLE001 - the plain exchanges go on working
            for run in made:
                release_sendrecv(self.t, run)
            return None
        self.held, self._runs = key, (made[0], made[1])
        return self._runs

    def release(self) -> None:
        """Free the held tensor's prepared exchanges, if any."""
        if self._runs is not None:
            for run in self._runs:
                release_sendrecv(self.t, run)
        self.held, self._runs = None, None
