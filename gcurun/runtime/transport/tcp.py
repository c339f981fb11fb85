"""The ``tcp`` backend: ranks connect to each other directly, found through the rendezvous.

- Every rank listens on TCP (on its address on the route to the rendezvous) and, for
  peers of the same host, on an abstract Unix socket; the lower rank of a pair connects,
  on first use. Each connection starts with the HMAC handshake of :mod:`gcurun.rendezvous.wire`;
  strangers and garbage are logged and dropped without disturbing the job.
- Between ranks of one host, bytes travel through shared-memory rings
  (:mod:`gcurun.runtime.transport.shm`), and a large message as a 16-byte descriptor: the receiver
  copies the data straight out of the sender's buffer (:mod:`gcurun.runtime.transport.cma`, proven
  per pair with a token) and acknowledges. A sendrecv of large messages with one such
  peer swaps both descriptors, and later both acknowledgements, in one ring step each.
- :mod:`gcurun.runtime.transport.links` moves sends and receives together, so a ring of ranks never
  deadlocks, and a wait without progress ends in a timeout.
- An abort from the rendezvous (a rank failed or died) shuts every connection down, so a
  rank blocked in a collective raises within milliseconds.

This module moves the data; :mod:`.tcp_connections` makes and breaks the links,
:mod:`.single_copy` reads large messages out of a same-host peer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

import numpy as np

from gcurun.runtime.api import Blocked, Buffer
from gcurun.runtime.transport._tcp_common import CMA_MIN_BYTES, FAST_READS, MAX_EXTENTS, describe
from gcurun.runtime.transport.links import Link, Streaming
from gcurun.runtime.transport.tcp_connections import Connections

Exchange = tuple[Sequence[Buffer], int, Sequence[Buffer], int]


class TCPTransport(Connections):
    """Point-to-point between the ranks of one generation of a ``tcp`` job."""

    # sendrecv_parts moves a message of many pieces as one (one descriptor, one read).
    pieces_in_one_message = True

    @property
    def blocked(self) -> Blocked | None:
        """What a call of this rank waits for, once it sleeps (see :class:`Blocked`)."""
        return self._mover.blocked

    # -- data -----------------------------------------------------------------------------

    def send(self, buf: Buffer, dest: int) -> None:
        self._transfer((buf,), dest, (), dest)

    def recv(self, buf: Buffer, source: int) -> None:
        self._transfer((), source, (buf,), source)

    def sendrecv(self, sendbuf: Buffer, dest: int, recvbuf: Buffer, source: int) -> None:
        self._transfer((sendbuf,), dest, (recvbuf,), source)

    def sendrecv_parts(self, sendbufs: Sequence[Buffer], dest: int,
                       recvbufs: Sequence[Buffer], source: int) -> None:
        """A sendrecv of one message each way made of several buffers (see
        :meth:`Transport.sendrecv_parts`; here only the totals must match). A large
        message between ranks of one host is one descriptor and one single-copy read,
        however many pieces it has."""
        if len(sendbufs) > MAX_EXTENTS:         # more than a descriptor may list: one copy
            sendbufs = [np.concatenate([np.frombuffer(memoryview(buf).cast("B"), np.uint8)
                                        for buf in sendbufs])]
        self._transfer(sendbufs, dest, recvbufs, source)

    def sendrecv_together(self, exchanges: Sequence[Exchange]) -> None:
        """Several :meth:`sendrecv_parts` at once, ``(sendbufs, dest, recvbufs, source)``
        each, no peer in two of them: their messages are queued on their links and moved
        together, so that a link to another host and one inside this host (the two-level
        allreduce's) work at the same time."""
        links: list[Link] = []
        for sendbufs, dest, recvbufs, source in exchanges:
            if len(sendbufs) > MAX_EXTENTS:
                sendbufs = [np.concatenate([np.frombuffer(memoryview(buf).cast("B"),
                                                          np.uint8) for buf in sendbufs])]
            sends = [buf for buf in sendbufs if buf.nbytes]
            recvs = [buf for buf in recvbufs if buf.nbytes]
            for link in self._queue(sends, dest, recvs, source, _total(sends), _total(recvs)):
                if link not in links:
                    links.append(link)
        if links:
            self._mover.progress(links)

    def streams(self, dest: int, source: int) -> bool:
        """Whether exchanges sending to ``dest`` and receiving from ``source`` are left in
        flight (:meth:`start_sendrecv_parts`): both links carry their bytes over the socket
        alone (peers on other hosts, or on this one with GCURUN_SHM=0 and GCURUN_CMA=0).
        Links are made on first use, as by any exchange."""
        return _by_socket(self._link(dest)) and _by_socket(self._link(source))

    def start_sendrecv_parts(self, sendbufs: Sequence[Buffer], dest: int,
                             recvbufs: Sequence[Buffer], source: int) -> Streaming | None:
        """:meth:`sendrecv_parts` started and left in flight (see
        :class:`gcurun.runtime.api.InFlight`) where the links used carry bytes over their
        socket alone (see :meth:`streams`): the kernel moves the bytes while this rank
        reduces. None, with nothing started, where a peer shares memory with this rank:
        its bytes move only while a rank copies them."""
        sends = [buf for buf in sendbufs if buf.nbytes]
        recvs = [buf for buf in recvbufs if buf.nbytes]
        if not sends and not recvs:
            return None
        out = self._link(dest) if sends else None
        inc = self._link(source) if recvs else None
        if not (_by_socket(out) and _by_socket(inc)):
            return None
        links = self._queue(sends, dest, recvs, source, _total(sends), _total(recvs))
        streaming = Streaming(self._mover, links,
                              out.sends[-len(sends):] if out is not None else [],
                              inc.recvs[-len(recvs):] if inc is not None else [])
        self._mover.progress(links, lambda: True)   # into the kernel, what fits now
        return streaming

    def prepare_sendrecv(self, sendbuf: Buffer, dest: int, recvbuf: Buffer,
                         source: int) -> Callable[[], None]:
        """A sendrecv of two fixed buffers, run many times (the negotiation of every
        collective): with one same-host peer, small ones are a write to the ring and a
        read from it (:meth:`shm.Channel.exchanger`), made once the link exists. Large
        ones take :meth:`sendrecv` every time: the general path announces them by
        descriptors, and the peer may be on it."""
        send_view = memoryview(sendbuf).cast("B")
        recv_view = memoryview(recvbuf).cast("B")
        size = len(recv_view)
        if size >= CMA_MIN_BYTES or len(send_view) >= CMA_MIN_BYTES:
            return partial(self.sendrecv, sendbuf, dest, recvbuf, source)
        mover = self._mover
        link: Link | None = None         # the link that ``swap`` moves bytes over
        swap: Callable[[], int] | None = None

        def swap_over(over: Link | None) -> Callable[[], int] | None:
            if over is None or over.channel is None or dest != source:
                return None
            return over.channel.exchanger(send_view, recv_view,
                                          partial(mover.ring_doorbell, over), FAST_READS)

        def run() -> None:
            nonlocal link, swap
            if swap is None or self._closing or link.sends or link.recvs:  # type: ignore[union-attr]
                self.sendrecv(sendbuf, dest, recvbuf, source)
                if swap is None:    # a link is made on first use, and kept until close()
                    link = self._links.get(dest)
                    swap = swap_over(link)
                return
            got = swap()
            if got == size:
                return
            if got < 0:         # no room in the ring: the general way
                self.sendrecv(sendbuf, dest, recvbuf, source)
                return
            link.recvs.append([recv_view, got, None])  # type: ignore[union-attr]
            mover.progress([link])  # type: ignore[list-item]

        return run

    def _transfer(self, sendbufs: Sequence[Buffer], dest: int, recvbufs: Sequence[Buffer],
                  source: int, quick: bool = True) -> None:
        """Send the non-empty pieces of ``sendbufs`` to ``dest`` as one message and receive
        one from ``source`` into those of ``recvbufs``: both large and with one peer that
        reads us and that we read, by the quick large exchange (unless ``quick`` is
        False), else queued on the links and moved."""
        sends = [buf for buf in sendbufs if buf.nbytes]
        recvs = [buf for buf in recvbufs if buf.nbytes]
        send_bytes, recv_bytes = _total(sends), _total(recvs)
        if quick and dest == source and send_bytes >= CMA_MIN_BYTES \
                and recv_bytes >= CMA_MIN_BYTES:
            swap = self._swaps.get(dest)
            if swap is not None and swap(sends, recvs, recv_bytes):
                return
        links = self._queue(sends, dest, recvs, source, send_bytes, recv_bytes)
        if links:
            self._mover.progress(links)

    def _queue(self, sends: list[Buffer], dest: int, recvs: list[Buffer], source: int,
               send_bytes: int, recv_bytes: int) -> list[Link]:
        """Queue a message of ``sends`` (non-empty buffers, ``send_bytes`` in all) to
        ``dest`` and the receipt of one from ``source`` into ``recvs``; the links to move."""
        links = []
        if recvs:
            inc = self._link(source)
            links.append(inc)
            if inc.pull and recv_bytes >= CMA_MIN_BYTES:
                self._single.expect_descriptor(inc, recvs, recv_bytes)
            else:
                inc.recvs.extend([memoryview(buf).cast("B"), 0, None] for buf in recvs)
        if sends:
            out = self._link(dest)
            if not links or out is not links[0]:
                links.append(out)
            if out.pushed and send_bytes >= CMA_MIN_BYTES:
                out.sends.append([describe(sends), 0, None])
                out.recvs.append([memoryview(bytearray(1)), 0, None])
            else:
                out.sends.extend([memoryview(buf).cast("B"), 0, None] for buf in sends)
        return links


def _by_socket(link: Link | None) -> bool:
    """Whether ``link`` (None: not used) carries its bytes over its socket alone."""
    return link is None or (link.channel is None and not link.pull and not link.pushed)


def _total(bufs: list[Buffer]) -> int:
    """The bytes of ``bufs`` in all."""
    return bufs[0].nbytes if len(bufs) == 1 else sum(buf.nbytes for buf in bufs)
