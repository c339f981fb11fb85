"""The ring: reduce-scatter and allgather over :class:`Pieces` (one buffer or a fused
batch of tensors, seen as their concatenation).

A message spans as many pieces as its range of the virtual buffer covers
(:meth:`Transport.sendrecv_parts`), so a batch costs the messages of one buffer of its
size; both ends cut each message alike, from the same layout. Where data is reduced on
arrival it travels in chunks, reduced while still in cache; both sides of every transfer
compute the same chunk boundaries, so message sizes always match (MPI needs that). The
one exception is between ranks whose bytes go by socket (other hosts), where a message
is a byte stream: there the ring streams in chunks of its own (:func:`streams`). The mpi
transport streams too, in a job on several hosts: there every rank streams, so both ends
of each exchange still cut it alike.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

import numpy as np

from gcurun.runtime.algorithms.pieces import Finish, Pieces
from gcurun.runtime.algorithms.segments import Segment, to_segments
from gcurun.runtime.api import InFlight, Transport
from gcurun.runtime.dtypes import Combine

# Reducing on arrival: what has come of a chunk is reduced in pieces of at least this
# many bytes (fewer calls into numpy, each on data still in cache). With the default
# STREAM_BYTES a streamed chunk is one such piece: it is reduced once it is all there,
# while the next chunk moves.
ARRIVAL_BYTES = 256 << 10
# Between hosts the ring moves chunks of this size, whatever its chunk elsewhere, two in
# flight: the kernel always has bytes to send, but a short queue of them. On two hosts
# joined by a 2 Gbit/s link, an 8 MiB allreduce took 39-41 ms in chunks of 2 MiB, 37 ms
# in chunks of 512 KiB and 35.3-35.6 ms in chunks of 256 KiB (TCP's ceiling: 35.1 ms).
STREAM_BYTES = 256 << 10


def streams(t: Transport, dest: int, source: int) -> bool:
    """Whether ``t`` leaves exchanges that send to ``dest`` and receive from ``source``
    in flight (``start_sendrecv_parts``; tcp, for peers on other hosts)."""
    query = getattr(t, "streams", None)
    return query is not None and query(dest, source)


def ring_reduce_scatter(t: Transport, pieces: Pieces, segments: Sequence[Segment],
                        ufunc: Combine, tmp: np.ndarray, finish: Finish | None = None,
                        spare: np.ndarray | None = None,
                        stream_bytes: int = STREAM_BYTES) -> None:
    """Rank r ends with segment r reduced into the outputs. Segments travel in chunks of
    ``len(tmp)`` elements, each one message however many pieces it spans. ``finish``
    (averaging, scaling) is applied to each chunk of segment r as soon as it is reduced,
    while it is still in cache: every element is finished once, by its owner.

    With ``spare`` (a second buffer like ``tmp``), where the transport leaves exchanges
    with both neighbours in flight (:func:`streams`), each step streams: chunks of
    ``stream_bytes`` (default STREAM_BYTES), two in flight at a time (the next starts as
    the reduction of the last begins), each reduced as it arrives (in pieces of
    ARRIVAL_BYTES), so the link does not wait for the reduction. Between such peers a
    message is a byte stream, so the neighbours may cut it otherwise (one of them may not
    stream). Every exchange of a step is done when the step ends: the next sends what this
    one reduced, and the caller may reuse the buffers on return."""
    p, r = t.size, t.rank
    right, left = (r + 1) % p, (r - 1) % p
    start: Callable[..., InFlight | None] | None = None
    buffers = (tmp, tmp)
    if spare is not None and streams(t, right, left):
        start = t.start_sendrecv_parts  # type: ignore[attr-defined]
        chunk = min(len(tmp), len(spare), max(stream_bytes // tmp.itemsize, 1))
        buffers = (tmp[:chunk], spare[:chunk])
    for step in range(p - 1):
        exchanges = _Step(t, start, pieces, segments[(r - step - 1) % p],
                          segments[(r - step - 2) % p], buffers, step == 0)
        last = step == p - 2
        current = exchanges.post(0) if exchanges.count else None
        flights = []
        for index in range(exchanges.count):
            assert current is not None
            if current.flight is not None:
                flights.append(current.flight)
            then = partial(exchanges.post, index + 1) if index + 1 < exchanges.count \
                else None
            current = _reduce_arriving(current, ufunc, finish if last else None, then)
        for flight in flights:  # (a last chunk may only receive: earlier sends may wait)
            flight.wait()


class _Chunk:
    """One chunk's exchange: its incoming parts (``(local, acc)``), the views of the
    receive buffer they arrive in, and the exchange while it is in flight (None: done)."""

    __slots__ = ("incoming", "arrived", "flight")

    def __init__(self, incoming: list[tuple[np.ndarray, np.ndarray]],
                 arrived: list[np.ndarray], flight: InFlight | None):
        self.incoming, self.arrived, self.flight = incoming, arrived, flight


class _Step:
    """The exchanges of one step of the ring's reduce-scatter, a chunk each: ``sent`` and
    ``received`` are the segments that go right and come from the left; chunks alternate
    between the two ``buffers``."""

    def __init__(self, t: Transport, start: Callable[..., InFlight | None] | None,
                 pieces: Pieces, sent: Segment, received: Segment,
                 buffers: tuple[np.ndarray, np.ndarray], first: bool):
        self.t, self.start, self.pieces = t, start, pieces
        self.sent, self.received, self.buffers = sent, received, buffers
        self.chunk = len(buffers[0])
        self.count = -(-max(sent[1], received[1]) // self.chunk)
        self.side = 0 if first else 1    # the first step sends inputs, later ones sums

    def post(self, index: int) -> _Chunk:
        """Start (or, where it cannot be left in flight, run) chunk ``index``'s exchange."""
        t, chunk, begin = self.t, self.chunk, index * self.chunk
        (send_offset, send_length), (recv_offset, recv_length) = self.sent, self.received
        sends = [pair[self.side] for pair in self.pieces.parts(
            send_offset + begin, min(chunk, send_length - begin))]
        incoming = self.pieces.parts(recv_offset + begin, min(chunk, recv_length - begin))
        arrived = cut(self.buffers[index % 2], incoming)
        right, left = (t.rank + 1) % t.size, (t.rank - 1) % t.size
        flight = None if self.start is None else self.start(sends, right, arrived, left)
        if flight is None:
            t.sendrecv_parts(sends, right, arrived, left)
        return _Chunk(incoming, arrived, flight)


def _reduce_arriving(current: _Chunk, ufunc: Combine, finish: Finish | None,
                    then: Callable[[], _Chunk] | None) -> _Chunk | None:
    """Reduce what ``current`` received into its outputs (and ``finish`` them), piece by
    piece as it arrives when its exchange is in flight. ``then`` (the next exchange,
    into the other buffer) is started first when ``current`` is in flight, else once it
    is reduced; its result is returned."""
    incoming, arrived, flight = current.incoming, current.arrived, current.flight
    if flight is None:
        for (local, acc), theirs in zip(incoming, arrived, strict=True):
            ufunc(local, theirs, out=acc)
            if finish is not None:
                finish(acc)
        return then() if then is not None else None
    # The next exchange goes out at once, so the kernel always has bytes to send: the
    # link never idles at the boundary between two chunks.
    following = then() if then is not None else None
    itemsize = arrived[0].itemsize if arrived else 1
    total = sum(len(part) for part in arrived)
    step = max(ARRIVAL_BYTES // itemsize, 1)
    done = 0
    while done < total:
        got = min(flight.received((done + step) * itemsize) // itemsize, total)
        _reduce_range(incoming, arrived, done, got, ufunc, finish)
        done = got
    return following


def _reduce_range(incoming: Sequence[tuple[np.ndarray, np.ndarray]],
                  arrived: Sequence[np.ndarray], lo: int, hi: int, ufunc: Combine,
                  finish: Finish | None) -> None:
    """Reduce elements [lo, hi) of a chunk (its parts taken together)."""
    position = 0
    for (local, acc), theirs in zip(incoming, arrived, strict=True):
        length = len(local)
        first, stop = max(lo - position, 0), min(hi - position, length)
        position += length
        if stop > first:
            if first or stop < length:
                local, acc, theirs = local[first:stop], acc[first:stop], theirs[first:stop]
            ufunc(local, theirs, out=acc)
            if finish is not None:
                finish(acc)
        if position >= hi:
            break


def cut(buffer: np.ndarray, incoming: Sequence[tuple[np.ndarray, np.ndarray]]
        ) -> list[np.ndarray]:
    """Views of ``buffer`` for the parts of ``incoming``, in order: a message cut as its
    sender cuts the same range."""
    arrived, position = [], 0
    for local, _ in incoming:
        arrived.append(buffer[position:position + len(local)])
        position += len(local)
    return arrived


def ring_allgather(t: Transport, pieces: Pieces, segments: Sequence[Segment],
                   stream: bool = False, stream_bytes: int = STREAM_BYTES) -> None:
    """Every rank holds its own segment r in the outputs; afterwards every rank holds all
    of them. A segment is one message each way (nothing is computed on arrival); with
    ``stream``, where the transport leaves exchanges with both neighbours in flight
    (:func:`streams`), in chunks of ``stream_bytes``, two in flight."""
    p, r = t.size, t.rank
    right, left = (r + 1) % p, (r - 1) % p
    chunk = None
    if stream and pieces.pairs and streams(t, right, left):
        chunk = max(stream_bytes // pieces.pairs[0][0].itemsize, 1)
    for step in range(p - 1):
        sends = [out for _, out in pieces.parts(*segments[(r - step) % p])]
        recvs = [out for _, out in pieces.parts(*segments[(r - step - 1) % p])]
        if chunk is None:
            t.sendrecv_parts(sends, right, recvs, left)
        else:
            _sendrecv_streamed(t, sends, right, recvs, left, chunk)


def _sendrecv_streamed(t: Transport, sends: Sequence[np.ndarray], dest: int,
                       recvs: Sequence[np.ndarray], source: int, chunk: int) -> None:
    """``sendrecv_parts(sends, dest, recvs, source)`` between peers that stream
    (:func:`streams`), in chunks of ``chunk`` elements (of the arrays taken together).
    Between such peers a message is a byte stream, so the cut is this side's own;
    handing the kernel a chunk or two at a time, not a whole segment, keeps the queue
    ahead of the link short (see STREAM_BYTES). A third chunk is started before the
    oldest is waited for, so up to three are queued at a time."""
    start = t.start_sendrecv_parts  # type: ignore[attr-defined]
    out, into = Pieces([(a, a) for a in sends]), Pieces([(a, a) for a in recvs])
    flights: list[InFlight] = []
    for begin in range(0, max(out.total, into.total), chunk):
        flights.append(start([a for a, _ in out.parts(begin, chunk)], dest,
                             [a for a, _ in into.parts(begin, chunk)], source))
        if len(flights) > 2:
            flights.pop(0).wait()
    for flight in flights:
        flight.wait()


def allgather(t: Transport, out: np.ndarray, segments: Sequence[Segment]) -> None:
    """The allgather of one flat buffer whose segment r this rank holds already."""
    ring_allgather(t, Pieces([(out, out)]), segments)


def reduce_scatter(t: Transport, send: np.ndarray, counts: Sequence[int], out: np.ndarray,
                   ufunc: Combine, tmp: np.ndarray, scratch: np.ndarray) -> None:
    """``out`` = rank r's segment (``counts[r]`` elements) of the reduction of ``send``.
    ``scratch`` holds the largest segment (the other segments' sums pass through it)."""
    if t.size == 1:
        out[...] = send
        return
    segments = to_segments(counts)
    pairs = [(send[o:o + n], out if i == t.rank else scratch[:n])
             for i, (o, n) in enumerate(segments)]
    ring_reduce_scatter(t, Pieces(pairs), segments, ufunc, tmp)
