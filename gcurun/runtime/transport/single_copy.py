"""Large messages between ranks of one host, in a single copy: the sender announces
a message by a 16-byte descriptor of where it lies in its memory, the receiver copies it
straight out of the sender (:mod:`gcurun.runtime.transport.cma`) and acknowledges, which
frees the sender's buffer. A sendrecv of large messages with one such peer swaps both
descriptors, and later both acknowledgements, in one ring step each (:meth:`SingleCopy.swapper`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from gcurun.runtime.api import Buffer, PeerFailureError
from gcurun.runtime.transport._tcp_common import DESCRIPTOR, FAST_READS, MAX_EXTENTS, describe
from gcurun.runtime.transport.cma import CrossMemory, Extent, address_of
from gcurun.runtime.transport.links import Link, Mover

ACK = b"\x06"


class SingleCopy:
    """The single-copy protocol of large messages over the links of one transport:
    ``failure(peer, what)`` makes the error for a peer that breaks it."""

    def __init__(self, cma: CrossMemory, mover: Mover,
                 failure: Callable[[int, str], PeerFailureError]):
        self.cma = cma
        self.mover = mover
        self.failure = failure

    def expect_descriptor(self, link: Link, recvbufs: list[Buffer], nbytes: int) -> None:
        """Queue the receipt of a large message as a descriptor of where it lies in the
        peer, its reading, and the acknowledgement that frees the peer's buffer."""
        descriptor = bytearray(DESCRIPTOR.size)

        def acknowledge() -> None:
            link.sends.append([ACK, 0, None])

        def header() -> None:
            address, length = DESCRIPTOR.unpack(descriptor)
            self.on_descriptor(link, recvbufs, nbytes, address, length, acknowledge)

        link.recvs.append([memoryview(descriptor), 0, header])

    def on_descriptor(self, link: Link, recvbufs: list[Buffer], nbytes: int, address: int,
                      length: int, then: Callable[[], None]) -> None:
        """Read the message a descriptor announced: one extent at ``address``, or (address
        0) ``length`` extents whose list follows the descriptor at once, in which case the
        read waits for the list. ``then()`` runs after the read."""
        if address:
            self._pull(link, recvbufs, nbytes, [(address, length)])
            then()
            return
        if not 0 < length <= MAX_EXTENTS:
            raise self.failure(link.peer, f"announced {length} pieces (protocol error)")
        table = bytearray(length * DESCRIPTOR.size)

        def listed() -> None:
            self._pull(link, recvbufs, nbytes, list(DESCRIPTOR.iter_unpack(table)))
            then()

        # The list follows the header at once: read it before anything else queued.
        link.recvs.insert(0, [memoryview(table), 0, listed])

    def _pull(self, link: Link, recvbufs: list[Buffer], nbytes: int,
              remote: list[Extent]) -> None:
        """Copy the peer's ``remote`` extents into ``recvbufs`` (``nbytes`` in all)."""
        total = sum(length for _, length in remote) if len(remote) > 1 else remote[0][1]
        if total != nbytes:
            raise self.failure(link.peer, f"sent {total} bytes where {nbytes} were "
                                          "expected (protocol error)")
        try:
            if len(remote) == 1 and len(recvbufs) == 1:
                self.cma.read(link.pid, address_of(recvbufs[0]), remote[0][0], nbytes)
            else:
                self.cma.read_parts(link.pid, [(address_of(buf), buf.nbytes)
                                               for buf in recvbufs], remote)
        except OSError as exc:
            raise self.failure(link.peer, f"its memory cannot be read ({exc})") from None

    def swapper(self, link: Link,
                closing: Callable[[], bool]) -> Callable[[list[Buffer], list[Buffer], int], bool]:
        """The exchange of two large messages with a same-host peer that reads us and
        that we read, written out: the descriptors cross through the rings in one step
        (:meth:`shm.Channel.exchanger`), each side copies the other's pieces, and the
        acknowledgements cross in another step; where a step finds its message not there
        yet, the general machinery waits for it. The messages are the general path's, so
        a peer on either path understands them. The function takes the non-empty pieces
        to send and to receive into (``nbytes`` in all), and returns False, having done
        nothing, when the link is busy or its ring lacks room."""
        channel, mover = link.channel, self.mover
        assert channel is not None
        doorbell = partial(mover.ring_doorbell, link)
        mine, theirs = bytearray(DESCRIPTOR.size), bytearray(DESCRIPTOR.size)
        their_view, acked = memoryview(theirs), memoryview(bytearray(1))
        swap_one = channel.exchanger(memoryview(mine), their_view, doorbell, FAST_READS)
        swap_acks = channel.exchanger(memoryview(ACK), acked, doorbell, FAST_READS)
        pack_into, unpack = DESCRIPTOR.pack_into, DESCRIPTOR.unpack

        def nothing() -> None:
            pass

        def run(sendbufs: list[Buffer], recvbufs: list[Buffer], nbytes: int) -> bool:
            if link.sends or link.recvs or closing():
                return False
            if len(sendbufs) == 1:
                pack_into(mine, 0, address_of(sendbufs[0]), sendbufs[0].nbytes)
                swap = swap_one
            else:       # a count and the list of extents, one message
                swap = channel.exchanger(memoryview(describe(sendbufs)), their_view,
                                         doorbell, FAST_READS)
            got = swap()
            if got < 0:
                return False
            if got == 0:
                link.recvs.append([their_view, 0, None])
                mover.progress([link])
            address, length = unpack(theirs)
            self.on_descriptor(link, recvbufs, nbytes, address, length, nothing)
            if link.recvs:          # a list of extents is on its way
                mover.progress([link])
            got = swap_acks()
            if got <= 0:
                if got < 0:
                    link.sends.append([ACK, 0, None])
                link.recvs.append([acked, 0, None])
                mover.progress([link])
            return True

        return run
