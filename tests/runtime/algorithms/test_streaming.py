"""The ring reducing what has arrived while the rest is still in flight, on thread ranks
whose transport hands a message over a few bytes at a time (a cut that ends inside an
element, too), with the part not yet arrived poisoned: a reduction of bytes that have
not arrived, or a next chunk started into a buffer still being reduced, gives a wrong
sum. Its links carry byte streams, as tcp's between hosts do (neighbours may cut a
message each their own way), and every byte sent must be read by the end."""

from __future__ import annotations

import queue
import random
from typing import Any

import numpy as np
import pytest

from gcurun.runtime import algorithms as alg
from gcurun.runtime.algorithms import ring
from gcurun.runtime.algorithms.reduction import Reducer
from tests.runtime.threads import QueueTransport, in_threads, transports

POISON = 0xA5


class Flight:
    """A receive handed over as asked: whole messages come off the queue, but only the
    bytes asked for (rounded up to ``grain``) reach the caller's buffers."""

    def __init__(self, owner: Streams, recvs: list[Any], source: int):
        self.owner = owner
        self.targets = [memoryview(buf).cast("B") for buf in recvs if memoryview(buf).nbytes]
        self.source = source
        self.total = sum(len(view) for view in self.targets)
        self.staged = bytearray()
        self.fetched = 0                # messages taken off the queue (a piece each)
        self.given = 0
        for view in self.targets:
            view[:] = bytes([POISON]) * len(view)

    def received(self, at_least: int) -> int:
        want = min(self.total, -(-max(at_least, 1) // self.owner.grain) * self.owner.grain)
        while len(self.staged) < want:
            piece = np.empty(len(self.targets[self.fetched]), np.uint8)
            self.owner.recv(piece, self.source)
            self.staged += piece.tobytes()
            self.fetched += 1
        position = 0
        for view in self.targets:       # hand over bytes [given, want)
            lo, hi = max(self.given - position, 0), min(want - position, len(view))
            if hi > lo:
                view[lo:hi] = self.staged[position + lo:position + hi]
            position += len(view)
        self.given = max(self.given, want)
        return self.given

    def wait(self) -> None:
        self.received(self.total)


class Streams(QueueTransport):
    """A queue transport whose links carry byte streams, as tcp's do (a receiver may cut
    what it reads otherwise than its sender), that leaves exchanges in flight (sends at
    once, receives as asked) except over the links it takes for same-host ones (a
    share ``decline`` of them, fixed per pair of ranks, as a host layout fixes them:
    there ``start_sendrecv_parts`` gives None); it logs each exchange it starts."""

    grain = 24
    decline = 0.0

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.log: list[tuple[str, int]] = []
        self.flights: list[Flight] = []
        self.stash: dict[int, bytearray] = {}
        self.started = 0

    def same_host(self, peer: int) -> bool:
        pair = (min(self.rank, peer), max(self.rank, peer))
        return random.Random(f"{pair}").random() < self.decline

    def streams(self, dest: int, source: int) -> bool:
        return not (self.same_host(dest) or self.same_host(source))

    def recv(self, buf: Any, source: int) -> None:
        target = memoryview(buf).cast("B")
        stash = self.stash.setdefault(source, bytearray())
        while len(stash) < len(target):
            try:
                stash += self._queues[(source, self.rank)].get(timeout=self.timeout).tobytes()
            except queue.Empty:
                raise AssertionError(f"rank {self.rank}: nothing from rank {source}") from None
        target[:] = stash[:len(target)]
        del stash[:len(target)]

    def start_sendrecv_parts(self, sendbufs: list[Any], dest: int, recvbufs: list[Any],
                             source: int) -> Flight | None:
        if not self.streams(dest, source):
            return None
        for buf in sendbufs:
            self.send(buf, dest)
        self.started += 1
        self.log.append(("start", 0))
        flight = Flight(self, list(recvbufs), source)
        self.flights.append(flight)
        return flight

    def sendrecv_parts(self, sendbufs: list[Any], dest: int, recvbufs: list[Any],
                       source: int) -> None:
        """As tcp: an exchange queued behind others in flight moves after them."""
        for flight in self.flights:
            flight.wait()
        self.flights.clear()
        super().sendrecv_parts(sendbufs, dest, recvbufs, source)


def run_streaming(size: int, body, grain: int = 24, decline: float = 0.0) -> list[Any]:
    """``body`` on thread ranks of Streams; afterwards no rank has a byte left unread."""
    ranks = transports(size, Streams)
    for t in ranks:
        t.grain, t.decline = grain, decline
    results = in_threads(size, lambda rank: body(ranks[rank]), 30.0)
    for t in ranks:
        assert not any(t.stash.values()), f"rank {t.rank} left bytes unread"
        assert all(t._queues[(source, t.rank)].empty() for source in range(size))
    return results


def fused_ring(t: QueueTransport, pieces: alg.Pieces, ufunc: np.ufunc, chunk: int,
               dtype: np.dtype, finish=None, stream_gather: bool = False) -> None:
    segments = alg.to_segments(alg.even_counts(pieces.total, t.size))
    alg.ring_reduce_scatter(t, pieces, segments, ufunc, np.empty(chunk, dtype), finish,
                            np.empty(chunk, dtype))
    alg.ring_allgather(t, pieces, segments, stream_gather)


@pytest.mark.parametrize("size", [2, 3, 4, 5])
@pytest.mark.parametrize("decline", [0.0, 0.5])
@pytest.mark.parametrize("stream_bytes", [24, 2000])
def test_the_streamed_ring_reduces_exactly_what_arrived(size: int, decline: float,
                                                        stream_bytes: int,
                                                        monkeypatch) -> None:
    """Streaming neighbours cut chunks of ``stream_bytes`` (3 or 250 elements, or the
    ring chunk where that is smaller); the others the ring chunk."""
    monkeypatch.setattr(ring, "ARRIVAL_BYTES", 40)   # many pieces per chunk
    monkeypatch.setattr(ring, "STREAM_BYTES", stream_bytes)
    cases = [(lengths, chunk) for lengths in ([1], [size + 1], [37], [400], [5, 0, 301, 7],
                                              [64, 64, 64])
             for chunk in (1, 3, 64, 250)]

    def body(t: Streams) -> list[np.ndarray]:
        got = []
        for lengths, chunk in cases:
            for dtype, ufunc in ((np.dtype(np.int64), np.add),
                                 (np.dtype(np.float64), np.maximum)):
                sends = [np.arange(n, dtype=dtype) * (t.rank + 1) + 1 for n in lengths]
                outs = [np.empty_like(s) for s in sends]
                fused_ring(t, alg.Pieces(list(zip(sends, outs, strict=True))), ufunc,
                           chunk, dtype, stream_gather=True)
                got.append(np.concatenate(outs))
        return got

    results = run_streaming(size, body, decline=decline)
    for rank_results in results:
        index = 0
        for lengths, _ in cases:
            base = np.concatenate([np.arange(n) for n in lengths])
            assert rank_results[index].tolist() == \
                (base * size * (size + 1) // 2 + size).tolist()
            assert rank_results[index + 1].tolist() == (base * size + 1).tolist()
            index += 2


def test_the_next_chunk_is_in_flight_while_the_last_is_reduced() -> None:
    """Three ranks, 1000 elements: two steps of six chunks of 64. In the last step (where
    ``finish`` logs what it finishes), each chunk's exchange starts before the chunk
    before it is reduced to its end."""
    def body(t: Streams) -> tuple[list[tuple[str, int]], int, list[float]]:
        send = np.arange(1000, dtype=np.float64) + t.rank
        out = np.empty_like(send)

        def finish(acc: np.ndarray) -> None:
            t.log.append(("finish", len(acc)))
            np.multiply(acc, 0.5, out=acc)

        fused_ring(t, alg.Pieces([(send, out)]), np.add, 64, np.dtype(np.float64), finish)
        return t.log, t.started, out.tolist()

    for log, started, out in run_streaming(3, body, grain=8):
        assert out == ((np.arange(1000) * 3 + 3) * 0.5).tolist()
        assert started == 12
        last_step = [i for i, (what, _) in enumerate(log) if what == "start"][6:]
        finished, starts = 0, 0
        for what, count in log[last_step[0]:]:
            if what == "finish":
                finished += count
                continue
            if starts:
                assert finished < 64 * starts, log
            starts += 1
        assert starts == 6 and finished in (333, 334)


@pytest.mark.parametrize(("decline", "starts"), [(0.0, 8), (1.0, 0)])
def test_two_ranks_on_two_hosts_take_the_streamed_ring(decline: float, starts: int) -> None:
    """Two ranks that stream take the ring (chunks of STREAM_BYTES) even where their
    halves fit a ring chunk: an averaged sum and an in-place sum of 400 KiB halves, cut
    mid-element, two exchanges of two chunks each per call; two that do not stream
    (one host) take the ring of two. Below the gathering size nothing streams."""
    chunk_bytes = 1 << 20

    def body(t: Streams) -> list[Any]:
        reducer = Reducer(t, chunk_bytes)
        got = []
        for n in (102_401, 1_000):
            send = np.arange(n, dtype=np.float64) * (t.rank + 1)
            out = np.empty_like(send)
            reducer.allreduce(alg.Pieces([(send, out)]), np.add,
                              lambda acc: np.divide(acc, 2, out=acc))
            got.append(out.tolist())
            inplace = send.copy()
            reducer.allreduce(alg.Pieces([(inplace, inplace)]), np.add, None, key=inplace)
            got.append(inplace.tolist())
        return [got, t.started]

    assert 102_401 * 8 // 2 > ring.STREAM_BYTES
    for got, started in run_streaming(2, body, grain=4096 + 3, decline=decline):
        assert got[0] == (np.arange(102_401) * 1.5).tolist()
        assert got[1] == (np.arange(102_401) * 3.0).tolist()
        assert got[2] == (np.arange(1_000) * 1.5).tolist()
        assert got[3] == (np.arange(1_000) * 3.0).tolist()
        assert started == starts
