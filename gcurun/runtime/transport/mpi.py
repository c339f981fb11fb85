"""The ``mpi`` backend: the transport over mpi4py point-to-point calls on raw buffers.

Only buffer calls (``Send``/``Irecv``/``Isend`` and the persistent ``Send_init``/
``Recv_init``) are used, never the lowercase pickling ones. Waits poll ``Test``/``Testall``
instead of blocking in ``Waitall`` so that a rank that never arrives becomes a
:class:`CollectiveTimeout` rather than a hang; the poll spins (yielding the CPU now and
then, so oversubscribed jobs still progress), then tests and sleeps, longer and longer
(:mod:`gcurun.runtime.transport._waiting`): a rank waiting for a slow one costs almost
no CPU. No call blocks in MPI itself, not even a send of a few bytes: one to a stopped
rank can block in Open MPI's shared memory, out of the timeout's reach.

In a job on several hosts the ring's exchanges are left in flight
(:meth:`MPITransport.start_sendrecv_parts`): chunks of a few hundred KiB, two or three
queued at a time, each reduced once it is there while the next ones move. One message of
a whole segment over the library's TCP path moved at half a 2 Gbit/s link on two hosts
(``docs/benchmarks.md``); a short queue of chunks keeps it busy, at the link's rate once
Open MPI sends a chunk without a handshake (``gcurun --mpi`` raises its
``btl_tcp_eager_limit`` above the chunk; under a plain mpirun, pass
``--mca btl_tcp_eager_limit 524288``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from gcurun.runtime.api import Blocked, Buffer, CollectiveTimeout, PeerFailureError
from gcurun.runtime.settings import RankFacts
from gcurun.runtime.transport._waiting import (
    YIELD_AFTER_SECONDS,
    Spin,
    nap,
    yield_ran_others,
)

TAG = 0x6763
# MPI counts are C ints: larger messages go in pieces (both sides split the same way).
PIECE_BYTES = 1 << 30
FAST_SPINS = 200


class MPITransport:
    """Point-to-point on a private duplicate of ``comm``."""

    pieces_in_one_message = False       # sendrecv_parts: a message per piece
    # What the current wait waits for, once it sleeps (read by the stall watch).
    blocked: Blocked | None = None
    _abort: str | None = None           # see job_aborted

    def __init__(self, comm: Any, timeout_seconds: float):
        from mpi4py import MPI

        self._mpi = MPI
        self._byte = MPI.BYTE
        self.comm = comm.Dup()
        self.comm.Set_errhandler(MPI.ERRORS_RETURN)
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self.timeout = timeout_seconds
        self._persistent: dict[Callable[[], None], tuple] = {}
        self._spin = Spin()
        # Whether the ranks are on several hosts: the same answer on every rank (see
        # streams), from the collective call that groups them by shared memory.
        local = self.comm.Split_type(MPI.COMM_TYPE_SHARED, key=self.rank)
        self._across_hosts = local.Get_size() < self.size
        local.Free()

    def job_aborted(self, reason: str) -> None:
        """End this rank's part: a call blocked now, and every later one that has to
        wait, raises :class:`PeerFailureError` with ``reason`` (the first kept). Safe
        from any thread; the other ranks learn of it when this one's failure ends the
        job."""
        self._abort = self._abort or reason

    def send(self, buf: Buffer, dest: int) -> None:
        self._transfer(buf, dest, None, dest)

    def recv(self, buf: Buffer, source: int) -> None:
        self._transfer(None, source, buf, source)

    def sendrecv(self, sendbuf: Buffer, dest: int, recvbuf: Buffer, source: int) -> None:
        self._transfer(sendbuf, dest, recvbuf, source)

    def sendrecv_parts(self, sendbufs: Sequence[Buffer], dest: int,
                       recvbufs: Sequence[Buffer], source: int) -> None:
        """One MPI message per piece, all of them in flight at once: each large piece
        takes the MPI library's single-copy path where it lies (an indexed datatype over
        the pieces would be packed through bounce buffers instead). A piece over
        ``PIECE_BYTES`` goes as several messages, cut alike on both ends."""
        sends = _messages(sendbufs)
        recvs = _messages(recvbufs)
        if len(sends) <= 1 and len(recvs) <= 1:
            self._transfer(sends[0] if sends else None, dest, recvs[0] if recvs else None,
                           source)
            return
        mpi = self._mpi
        try:
            receives, sending = self._start(sends, dest, recvs, source)
            requests = receives + sending
            if not mpi.Request.Testall(requests):
                self._wait(requests, [source] * len(recvs) + [dest] * len(sends))
        except mpi.Exception as exc:
            raise self._failed(source if recvs else dest, exc) from None

    def sendrecv_together(self, exchanges: Sequence[tuple[Sequence[Buffer], int,
                                                          Sequence[Buffer], int]]) -> None:
        """Several :meth:`sendrecv_parts` at once, ``(sendbufs, dest, recvbufs, source)``
        each, no peer in two of them: every message of every one in flight together."""
        requests: list = []
        peers: list[int] = []
        try:
            for sendbufs, dest, recvbufs, source in exchanges:
                recvs, sends = _messages(recvbufs), _messages(sendbufs)
                receives, sending = self._start(sends, dest, recvs, source)
                requests += receives + sending
                peers += [source] * len(recvs) + [dest] * len(sends)
        except self._mpi.Exception as exc:
            raise self._failed(peers, exc) from None
        if requests:
            self.complete(requests, peers)

    def streams(self, dest: int, source: int) -> bool:
        """Whether exchanges that send to ``dest`` and receive from ``source`` are left
        in flight (:meth:`start_sendrecv_parts`): in a job on several hosts, between any
        two of its ranks. An MPI message is received as it was sent, so unlike tcp's
        answer, which depends on the peers, this one is the same for every pair: both
        ends of every exchange cut it alike."""
        return self._across_hosts

    def start_sendrecv_parts(self, sendbufs: Sequence[Buffer], dest: int,
                             recvbufs: Sequence[Buffer], source: int) -> _Flight | None:
        """:meth:`sendrecv_parts` started and left in flight (see
        :class:`gcurun.runtime.api.InFlight`) where :meth:`streams` says so: its messages
        move (as the library progresses them, in every later call) while this rank
        reduces. None, with nothing started, elsewhere."""
        sends, recvs = _messages(sendbufs), _messages(recvbufs)
        if not self._across_hosts or not sends and not recvs:
            return None
        try:
            receives, sending = self._start(sends, dest, recvs, source)
        except self._mpi.Exception as exc:
            raise self._failed(source if recvs else dest, exc) from None
        return _Flight(self, receives, [buf.nbytes for buf in recvs], source, sending, dest)

    def _start(self, sends: list[Buffer], dest: int, recvs: list[Buffer],
               source: int) -> tuple[list, list]:
        """Post a message each: the receives of ``recvs`` from ``source`` (first), the
        sends of ``sends`` to ``dest``; the two lists of requests."""
        comm, byte = self.comm, self._byte
        return ([comm.Irecv([buf, byte], source, TAG) for buf in recvs],
                [comm.Isend([buf, byte], dest, TAG) for buf in sends])

    def complete(self, requests: list, peers: list[int]) -> None:
        """Wait for ``requests`` (``peers[i]``: the rank ``requests[i]`` waits for) as
        every call of this transport waits (see :meth:`_wait`)."""
        try:
            if not self._mpi.Request.Testall(requests):
                self._wait(requests, peers)
        except self._mpi.Exception as exc:
            raise self._failed(peers, exc) from None

    def _failed(self, peers: int | list[int], exc: Exception) -> PeerFailureError:
        """The error of an MPI call that failed between this rank and ``peers`` (one
        rank, or those of several messages)."""
        who = f"rank {peers}" if isinstance(peers, int) else f"ranks {sorted(set(peers))}"
        return PeerFailureError(f"MPI failed between rank {self.rank} and {who}: {exc}")

    def prepare_sendrecv(self, sendbuf: Buffer, dest: int, recvbuf: Buffer,
                         source: int) -> Callable[[], None]:
        """A sendrecv of these two fixed buffers, to run many times, as MPI persistent
        requests: each run skips argument parsing and request setup (the latency of tiny
        collectives, a few microseconds of large ones). The requests hold the buffers
        until :meth:`release_sendrecv` or :meth:`close`. Empty buffers, and those sent
        in pieces, take :meth:`sendrecv` every time (their messages are its own)."""
        send_bytes, recv_bytes = memoryview(sendbuf).nbytes, memoryview(recvbuf).nbytes
        if not 0 < send_bytes <= PIECE_BYTES or not 0 < recv_bytes <= PIECE_BYTES:
            return partial(self.sendrecv, sendbuf, dest, recvbuf, source)
        receive = self.comm.Recv_init([recvbuf, self._byte], source, TAG)
        try:
            send = self.comm.Send_init([sendbuf, self._byte], dest, TAG)
        except self._mpi.Exception:
            receive.Free()
            raise
        both, peers = [receive, send], [source, dest]
        # Bound methods of the two requests, cheaper than Startall/Testall over a list.
        start_receive, start_send, test_receive = receive.Start, send.Start, receive.Test
        exception = self._mpi.Exception
        def finish_send() -> None:      # (with a deadline, even a small one: see _transfer)
            if not send.Test():
                self._wait([send], [dest])

        def run() -> None:
            try:
                start_send()        # first: the peer waits for it, not for our receive
                start_receive()
                spins = 0
                while not test_receive():
                    spins += 1
                    if spins > FAST_SPINS:      # a slow peer: wait with the clock
                        self._wait(both, peers)
                        return
                finish_send()
            except exception as exc:
                raise self._failed(source, exc) from None

        self._persistent[run] = (receive, send)
        return run

    def release_sendrecv(self, run: Callable[[], None]) -> None:
        """Free the requests of a :meth:`prepare_sendrecv` that will not run again."""
        for request in self._persistent.pop(run, ()):
            self._free(request)

    def _free(self, request: Any) -> None:
        try:
            request.Free()
        except self._mpi.Exception:     # (an active one is freed once it completes)
            pass

    def _transfer(self, sendbuf: Buffer | None, dest: int, recvbuf: Buffer | None,
                  source: int) -> None:
        send_bytes = 0 if sendbuf is None else sendbuf.nbytes
        recv_bytes = 0 if recvbuf is None else recvbuf.nbytes
        if send_bytes > PIECE_BYTES or recv_bytes > PIECE_BYTES:     # in several messages
            self.sendrecv_parts([] if sendbuf is None else [sendbuf], dest,
                                [] if recvbuf is None else [recvbuf], source)
            return
        comm, byte = self.comm, self._byte
        try:
            requests = []
            if recv_bytes:
                requests.append(comm.Irecv([recvbuf, byte], source, TAG))
            if send_bytes:
                # Never a blocking Send, even of a few bytes: one to a stopped rank can
                # block (Open MPI's shared memory), out of reach of the timeout.
                requests.append(comm.Isend([sendbuf, byte], dest, TAG))
            if requests and not self._mpi.Request.Testall(requests):
                peers = ([source] if recv_bytes else []) + ([dest] if send_bytes else [])
                self._wait(requests, peers)
        except self._mpi.Exception as exc:
            raise self._failed(source if recv_bytes else dest, exc) from None

    def _wait(self, requests: list, peers: list[int]) -> None:
        """Poll until done: spin (the latency of a peer that keeps up; the CPU yielded
        now and then), then test and sleep, longer and longer (a slow peer costs almost
        no CPU), or yield where that runs other threads (see :mod:`._waiting`); give up
        after the timeout. ``peers[i]`` is the rank that ``requests[i]`` waits for."""
        test_all, spin = self._mpi.Request.Testall, self._spin
        start = time.monotonic()
        spins = 0
        sleeping = False
        while not test_all(requests):
            spins += 1
            if spins & 63 and not sleeping:
                continue
            waited = time.monotonic() - start
            if waited > self.timeout:
                names = " and ".join(f"rank {peer}" for peer in _waiting_for(requests, peers))
                raise CollectiveTimeout(
                    f"no progress for {self.timeout:g} s waiting for {names}; it may be "
                    "stuck, or not calling this collective (set GCURUN_TIMEOUT_SECONDS to "
                    "wait longer)")
            if not sleeping and waited < spin.seconds:
                if waited > YIELD_AFTER_SECONDS:
                    os.sched_yield()
                continue
            if not sleeping:
                sleeping = True
                self.blocked = Blocked(_waiting_for(requests, peers), start)
            if self._abort is not None:
                raise PeerFailureError(self._abort)
            if not yield_ran_others():
                time.sleep(nap(waited))
        spin.ended(time.monotonic() - start)
        if sleeping:
            self.blocked = None

    def close(self) -> None:
        comm, self.comm = self.comm, None
        if comm is not None:
            try:
                for requests in self._persistent.values():
                    for request in requests:
                        self._free(request)
                self._persistent.clear()
                comm.Free()
            except self._mpi.Exception:
                pass


class _Flight:
    """An exchange of :meth:`MPITransport.start_sendrecv_parts` in flight: its receives
    complete in order (MPI keeps a pair's messages in order), so what has arrived is
    always a prefix of them."""

    __slots__ = ("_t", "_receives", "_sizes", "_source", "_sends", "_dest", "_next",
                 "_arrived")

    def __init__(self, transport: MPITransport, receives: list, sizes: list[int],
                 source: int, sends: list, dest: int):
        self._t, self._receives, self._sizes, self._source = transport, receives, sizes, source
        self._sends, self._dest = sends, dest
        self._next = 0              # the first receive not known to be complete
        self._arrived = 0           # the bytes of those before it

    def received(self, at_least: int) -> int:
        while self._arrived < at_least and self._next < len(self._receives):
            self._t.complete([self._receives[self._next]], [self._source])
            self._arrived += self._sizes[self._next]
            self._next += 1
        return self._arrived

    def wait(self) -> None:
        rest = self._receives[self._next:]
        self._t.complete(rest + self._sends,
                         [self._source] * len(rest) + [self._dest] * len(self._sends))
        self._next, self._arrived = len(self._receives), sum(self._sizes)
        self._sends = []


def _waiting_for(requests: list, peers: list[int]) -> tuple[int, ...]:
    """The ranks whose requests of ``requests`` are not done (``peers[i]``: the rank that
    ``requests[i]`` waits for)."""
    return tuple(sorted({peer for request, peer in zip(requests, peers, strict=True)
                         if not request.Test()}))


def _messages(bufs: Sequence[Buffer]) -> list[Buffer]:
    """The non-empty pieces of ``bufs``, those over ``PIECE_BYTES`` cut into messages of
    at most that (MPI counts are C ints)."""
    messages: list[Buffer] = []
    for buf in bufs:
        nbytes = buf.nbytes
        if nbytes <= PIECE_BYTES:
            if nbytes:
                messages.append(buf)
            continue
        view = memoryview(buf).cast("B")
        messages.extend(view[start:start + PIECE_BYTES]
                        for start in range(0, nbytes, PIECE_BYTES))
    return messages


def mpi_topology(comm: Any, facts: RankFacts | None) -> tuple[int, int, int, int]:
    """(local_rank, local_size, cross_rank, cross_size) of this rank of ``comm``.

    gcurun's launcher's own numbers win when they describe this very communicator
    (its hosts may share one kernel in tests); otherwise ranks are grouped by the shared
    memory they can reach.
    """
    from mpi4py import MPI

    # The same decision on every rank: Split_type and Split are collective.
    same_as_world = MPI.Comm.Compare(comm, MPI.COMM_WORLD) in (MPI.IDENT, MPI.CONGRUENT)
    if facts is not None and same_as_world and facts.local_rank is not None \
            and facts.local_size is not None and facts.cross_rank is not None \
            and facts.cross_size is not None:
        return facts.local_rank, facts.local_size, facts.cross_rank, facts.cross_size
    local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    local_rank, local_size = local.Get_rank(), local.Get_size()
    local.Free()
    cross = comm.Split(color=local_rank, key=comm.Get_rank())
    cross_rank, cross_size = cross.Get_rank(), cross.Get_size()
    cross.Free()
    return local_rank, local_size, cross_rank, cross_size
