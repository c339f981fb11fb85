"""Moving queued bytes over a rank's links: non-blocking sockets, or shared-memory rings
(with the socket as doorbell and death notice) between ranks of one host.

Each link holds, in order, the sends and the receives queued on it; each entry is
``[view, position, then]`` where ``then()`` runs when the entry completes (and may queue
more). :meth:`Mover.progress` moves everything queued on a set of links, waiting when
nothing can move: it spins first (a peer usually answers within microseconds, and a
sleeping rank loses its core on a busy host; the CPU is yielded now and then), for as
long as the waits before suggest (:mod:`gcurun.runtime.transport._waiting`), and then
sleeps in poll() until a socket or doorbell wakes it.
"""

from __future__ import annotations

import os
import select
import socket
import time
from collections.abc import Callable
from typing import Any

from gcurun.runtime.api import Blocked, CollectiveTimeout, PeerFailureError
from gcurun.runtime.transport._waiting import (
    YIELD_AFTER_SECONDS,
    Spin,
    nap,
    yield_ran_others,
)
from gcurun.runtime.transport.shm import NAP_MAX_SECONDS, Channel

POLL_IN, POLL_OUT = select.POLLIN, select.POLLOUT
# A wait asleep on a socket wakes once this much of the message it receives has come
# (or all of it), not for every packet of a message that trickles in at a link's rate.
WAKE_BYTES = 1 << 16


class Link:
    """A connection to one peer."""

    __slots__ = ("sock", "peer", "pid", "pull", "pushed", "channel", "sends", "recvs",
                 "hung_up", "wake_bytes")

    def __init__(self, sock: socket.socket, peer: int, pid: int, pull: bool, pushed: bool,
                 channel: Channel | None):
        self.sock = sock
        self.peer = peer
        self.pid = pid
        self.pull = pull            # large messages from the peer arrive as descriptors
        self.pushed = pushed        # the peer reads our large messages itself
        self.channel = channel      # shared-memory rings, or None: bytes go by the socket
        self.sends: list[list[Any]] = []
        self.recvs: list[list[Any]] = []
        # The peer closed its end of the doorbell socket: it left, though its last
        # bytes may still be waiting in the ring.
        self.hung_up = False
        self.wake_bytes = 1         # the socket's SO_RCVLOWAT

    def close(self) -> None:
        self.sock.close()
        if self.channel is not None:
            self.channel.close()


class Mover:
    """Moves the bytes queued on links, with the transport's timeout and failure rules."""

    def __init__(self, timeout: float, aborted: Callable[[], str | None],
                 failure: Callable[[int, str], PeerFailureError]):
        self.timeout = timeout
        self._aborted = aborted
        self._failure = failure
        self._spin = Spin()
        # What the current wait waits for, once it sleeps (read by the stall watch).
        self.blocked: Blocked | None = None

    def progress(self, links: list[Link], done: Callable[[], bool] | None = None) -> None:
        """Move every queued send and receive of ``links`` until all are done, or until
        ``done()`` (checked after each pass) says enough has moved; raise
        CollectiveTimeout after ``timeout`` seconds without progress."""
        last_moved = time.monotonic()
        while True:
            moved = False
            pending = False
            for link in links:
                moved |= self._pump_ring(link) if link.channel else self._pump_socket(link)
                pending = pending or bool(link.sends or link.recvs)
            if not pending or (done is not None and done()):
                return
            if moved:
                last_moved = time.monotonic()
            else:
                self._wait(links, last_moved)

    # -- moving -----------------------------------------------------------------------------

    def _pump_socket(self, link: Link) -> bool:
        sock, moved = link.sock, False
        try:
            while link.sends:
                op = link.sends[0]
                view, position = op[0], op[1]
                sent = sock.send(view[position:] if position else view)
                moved = True
                op[1] = position = position + sent
                if position < len(view):
                    break
                link.sends.pop(0)
                if op[2] is not None:
                    op[2]()
        except (BlockingIOError, InterruptedError):
            pass
        except OSError as exc:
            raise self._broken(link, exc) from None
        try:
            while link.recvs:
                op = link.recvs[0]
                view, position = op[0], op[1]
                got = sock.recv_into(view[position:] if position else view)
                if got == 0:
                    raise self._closed(link)
                moved = True
                op[1] = position = position + got
                if position < len(view):
                    break
                link.recvs.pop(0)
                if op[2] is not None:
                    op[2]()
        except (BlockingIOError, InterruptedError):
            pass
        except OSError as exc:
            raise self._broken(link, exc) from None
        return moved

    def _pump_ring(self, link: Link) -> bool:
        channel = link.channel
        assert channel is not None
        wrote = read = False
        while link.sends:
            op = link.sends[0]
            view, position = op[0], op[1]
            count = channel.outgoing.write(view[position:] if position else view)
            if not count:
                break
            wrote = True
            op[1] = position = position + count
            if position < len(view):
                break
            link.sends.pop(0)
            if op[2] is not None:
                op[2]()
        while link.recvs:
            op = link.recvs[0]
            view, position = op[0], op[1]
            count = channel.incoming.read_into(view[position:] if position else view)
            if not count:
                break
            read = True
            op[1] = position = position + count
            if position < len(view):
                break
            link.recvs.pop(0)
            if op[2] is not None:
                op[2]()
        # A callback may have queued a send (an acknowledgement): the next pass moves it.
        if (wrote and channel.outgoing.sleeping(reader=True)) or \
                (read and channel.incoming.sleeping(reader=False)):
            self.ring_doorbell(link)
        return wrote or read

    # -- waiting ----------------------------------------------------------------------------

    def _ready(self, links: list[Link], poll: Callable[[int], list]) -> bool:
        for link in links:
            channel = link.channel
            if channel is not None and ((link.recvs and channel.incoming.readable())
                                        or (link.sends and channel.outgoing.writable())):
                return True
        return bool(poll(0))

    def _wait(self, links: list[Link], last_moved: float) -> None:
        """Return when a link of ``links`` may move (or to re-check the deadline).

        A wait that has shared-memory rings with bytes still to move among its links
        spins, then sleeps (see :mod:`._waiting`). One on sockets alone (peers on other
        hosts, shared memory turned off, or rings whose part is done) sleeps at once: the
        kernel wakes it when the bytes it waits for have come (see :meth:`_wake_after`),
        where a spin would look with a system call each time while a large message
        trickles in at the link's rate, and on a host whose cores are all busy would run
        beside the training thread for the whole transfer.
        """
        poller = select.poll()
        sockets = False
        rings: list[Link] = []      # those with bytes to move (a finished one: no spin)
        for link in links:
            if not (link.sends or link.recvs):
                continue
            if link.channel is not None:
                rings.append(link)
                continue
            poller.register(link.sock, (POLL_IN if link.recvs else 0)
                            | (POLL_OUT if link.sends else 0))
            sockets = True
            if link.recvs:
                self._wake_after(link)
        poll = poller.poll if sockets else _never
        spin = self._spin.seconds if rings else 0.0
        while True:
            if self._ready(links, poll):
                if rings:
                    self._spin.ended(time.monotonic() - last_moved)
                if self.blocked is not None:
                    self.blocked = None
                return
            for link in links:
                if link.hung_up and (link.sends or link.recvs):
                    raise self._closed(link)        # and the ring holds nothing for us
            reason = self._aborted()
            if reason is not None:
                raise PeerFailureError(reason)
            waited = time.monotonic() - last_moved
            if waited > self.timeout:
                raise self._timeout(links)
            if waited > spin:
                if rings and yield_ran_others():
                    continue        # a busy host: keep yielding (see _waiting)
                break
            if waited > YIELD_AFTER_SECONDS:
                os.sched_yield()
        blocked = self.blocked
        if blocked is None or blocked.since != last_moved:
            self.blocked = Blocked(_stuck(links), last_moved)
        self._sleep(links, rings, poller, waited)
        if rings:
            self._spin.ended(time.monotonic() - last_moved)

    def _wake_after(self, link: Link) -> None:
        """Have ``link``'s socket read as readable only once the rest of the message it
        receives has come, or ``WAKE_BYTES`` of it (``SO_RCVLOWAT``; a receive still
        takes what has come, and the end of the connection still wakes)."""
        op = link.recvs[0]
        wanted = max(1, min(len(op[0]) - op[1], WAKE_BYTES))
        if wanted != link.wake_bytes:
            try:
                link.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, wanted)
            except OSError as exc:
                raise self._broken(link, exc) from None
            link.wake_bytes = wanted

    def _sleep(self, links: list[Link], rings: list[Link], poller: Any,
               waited: float) -> None:
        """Sleep in poll(): on the sockets ``poller`` holds, and on the doorbells of
        ``rings`` (the shared-memory links of ``links`` with bytes to move)."""
        for link in rings:
            poller.register(link.sock, POLL_IN)
            self._set_sleeping(link, True)
        try:
            if rings and self._ready(links, lambda _: []):
                return
            left = self.timeout - waited
            # A doorbell can be lost (see shm): sleep on rings in naps.
            seconds = min(left, nap(waited, NAP_MAX_SECONDS)) if rings else left
            poller.poll(max(1, int(seconds * 1000)))
        finally:
            for link in rings:
                self._set_sleeping(link, False)
                self._drain_doorbell(link)
        reason = self._aborted()
        if reason is not None:
            raise PeerFailureError(reason)

    @staticmethod
    def _set_sleeping(link: Link, value: bool) -> None:
        channel = link.channel
        assert channel is not None
        if link.recvs:
            channel.incoming.set_sleeping(reader=True, value=value)
        if link.sends:
            channel.outgoing.set_sleeping(reader=False, value=value)

    def ring_doorbell(self, link: Link) -> None:
        try:
            link.sock.send(b"\x07")
        except (BlockingIOError, InterruptedError):
            pass                    # the peer has doorbells waiting already
        except OSError as exc:
            raise self._broken(link, exc) from None

    def _drain_doorbell(self, link: Link) -> None:
        """Read the doorbells rung meanwhile. The end of the socket is no error yet: a
        peer that leaves (its collectives done) closes it right after writing its last
        bytes into the ring, which are read first (see :meth:`_wait`)."""
        try:
            while not link.hung_up:
                if not link.sock.recv(4096):
                    link.hung_up = True
        except (BlockingIOError, InterruptedError):
            pass
        except OSError as exc:
            raise self._broken(link, exc) from None

    # -- failures ---------------------------------------------------------------------------

    def _closed(self, link: Link) -> PeerFailureError:
        return self._failure(link.peer, "it closed its connection while this rank still "
                                        "waited for it (it left the job: it exited, failed "
                                        "or was killed)")

    def _broken(self, link: Link, exc: OSError) -> PeerFailureError:
        return self._failure(link.peer, f"the connection broke ({exc.strerror or exc})")

    def _timeout(self, links: list[Link]) -> CollectiveTimeout:
        return CollectiveTimeout(
            f"no progress for {self.timeout:g} s waiting for "
            + " and ".join(f"rank {peer}" for peer in _stuck(links))
            + "; it may be stuck, or not calling this collective (set "
            "GCURUN_TIMEOUT_SECONDS to wait longer)")


class Streaming:
    """An exchange queued on socket links and left in flight (:class:`InFlight`): the
    kernel keeps sending and receiving its bytes while the rank computes; each call
    moves what it can and returns as soon as it has what was asked for."""

    __slots__ = ("_mover", "_links", "_sends", "_recvs", "_total", "_next", "_complete")

    def __init__(self, mover: Mover, links: list[Link], sends: list[list[Any]],
                 recvs: list[list[Any]]):
        self._mover = mover
        self._links = links
        self._sends = sends         # the entries queued on the links (moved in place)
        self._recvs = recvs
        self._total = sum(len(op[0]) for op in recvs)
        self._next = 0              # the first receive entry not yet full
        self._complete = 0          # the bytes of the entries before it

    def received(self, at_least: int) -> int:
        at_least = min(at_least, self._total)
        if self._arrived() < at_least:
            self._mover.progress(self._links, lambda: self._arrived() >= at_least)
        return self._arrived()

    def wait(self) -> None:
        if not self._done():
            self._mover.progress(self._links, self._done)

    def _arrived(self) -> int:
        ops, index = self._recvs, self._next
        while index < len(ops) and ops[index][1] == len(ops[index][0]):
            self._complete += len(ops[index][0])
            index += 1
        self._next = index
        return self._complete + (ops[index][1] if index < len(ops) else 0)

    def _done(self) -> bool:
        return self._arrived() == self._total and all(
            op[1] == len(op[0]) for op in self._sends)


def _stuck(links: list[Link]) -> tuple[int, ...]:
    """The peers of ``links`` that still have bytes to move."""
    return tuple(link.peer for link in links if link.sends or link.recvs)


def _never(_timeout: int) -> list:
    return []
