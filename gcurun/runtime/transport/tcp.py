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
"""

from __future__ import annotations

import logging
import os
import secrets
import select
import socket
import struct
import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np

from gcurun.rendezvous import wire
from gcurun.rendezvous.client import RendezvousClient
from gcurun.runtime.api import Buffer, CollectiveTimeout, PeerFailureError
from gcurun.runtime.transport import shm
from gcurun.runtime.transport.cma import CrossMemory, Extent, address_of
from gcurun.runtime.transport.links import Link, Mover

log = logging.getLogger("gcurun.runtime.tcp")

PEER_LABEL = b"gcurun-peer"
CONNECT_EXTRA = struct.Struct("<IIB")      # connector's rank, generation, features
ACCEPT_EXTRA = struct.Struct("<IB")        # acceptor's rank, features
CAN_READ_YOU = 1                           # feature: single-copy reads of the other side
CAN_SHARE_RINGS = 2                        # feature: shared-memory rings
DESCRIPTOR = struct.Struct("<QQ")          # address, bytes (address 0: a list follows)
MAX_EXTENTS = 1 << 16
ACK = b"\x06"
CMA_MIN_BYTES = 64 << 10
SOCKET_BUFFER_BYTES = 4 << 20
HANDSHAKE_SECONDS = 10.0
ABORT_GRACE_SECONDS = 1.0
FAST_READS = 200


class TCPTransport:
    """Point-to-point between the ranks of one generation of a ``tcp`` job."""

    # sendrecv_parts moves a message of many pieces as one (one descriptor, one read).
    pieces_in_one_message = True

    def __init__(self, *, rank: int, size: int, generation: int, hostname: str,
                 rendezvous: tuple[str, int], secret: bytes, timeout: float, cma: bool,
                 rings: bool = True):
        self.rank, self.size = rank, size
        self.generation = generation
        self.hostname = hostname
        self.timeout = timeout
        self._secret = secret
        self._cma = CrossMemory(enabled=cma)
        self._client = RendezvousClient(rendezvous, secret, timeout, self._aborted_by)
        self._rings = rings and shm.available()
        self._links: dict[int, Link] = {}
        # Per same-host peer that reads us and that we read: a large exchange, fast.
        self._swaps: dict[int, Callable[[list[Buffer], list[Buffer], int], bool]] = {}
        self._ready = threading.Condition()
        self._peers: list[dict] | None = None
        self._abort: str | None = None
        self._aborted = threading.Event()
        self._closing = False
        self._listeners: list[socket.socket] = []
        self._wake_r, self._wake_w = socket.socketpair()
        self._acceptor: threading.Thread | None = None
        self._mover = Mover(timeout, lambda: self._abort, self._failure)

    # -- setup ----------------------------------------------------------------------------

    def start(self) -> list[dict]:
        """Join the job: rendezvous, listen, learn every rank's addresses."""
        local_ip = self._client.connect()
        info: dict[str, Any] = {"rank": self.rank, "host": self.hostname, "pid": os.getpid(),
                                "cma": self._cma.advertisement()}
        tcp = self._listen_tcp(local_ip)
        info["tcp"] = [local_ip, tcp.getsockname()[1]]
        unix_name = self._listen_unix()
        if unix_name is not None:
            info["unix"] = unix_name.hex()
        self._acceptor = threading.Thread(target=self._accept_loop, name="gcurun-accept",
                                          daemon=True)
        self._acceptor.start()
        peers = self._client.register(self.generation, self.rank, self.size, info)
        with self._ready:
            self._peers = peers
            self._ready.notify_all()
        return peers

    def _listen_tcp(self, ip: str) -> socket.socket:
        family = socket.AF_INET6 if ":" in ip else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.bind((ip, 0))
        sock.listen(128)
        self._listeners.append(sock)
        return sock

    def _listen_unix(self) -> bytes | None:
        if not hasattr(socket, "AF_UNIX"):
            return None
        name = b"\0gcurun-" + secrets.token_hex(12).encode()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(name)
            sock.listen(128)
        except OSError:
            sock.close()
            return None
        self._listeners.append(sock)
        return name

    def _accept_loop(self) -> None:
        while not self._closing:
            try:
                ready, _, _ = select.select([*self._listeners, self._wake_r], [], [])
            except (OSError, ValueError):
                return
            for listener in ready:
                if listener is self._wake_r:
                    return
                try:
                    sock, addr = listener.accept()
                except OSError:
                    continue
                where = f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) and addr else "unix"
                threading.Thread(target=self._admit, args=(sock, where), daemon=True,
                                 name="gcurun-admit").start()

    def _features(self, info: dict, sock: socket.socket) -> int:
        """What this rank can do with the peer described by ``info`` over ``sock``."""
        if info.get("host") != self.hostname:
            return 0
        features = CAN_READ_YOU if self._cma.can_read(info.get("cma", {})) else 0
        if self._rings and sock.family == socket.AF_UNIX:
            features |= CAN_SHARE_RINGS
        return features

    def _admit(self, sock: socket.socket, where: str) -> None:
        """Authenticate a connecting peer; refuse and log anything else."""
        deadline = time.monotonic() + min(HANDSHAKE_SECONDS, self.timeout)
        try:
            server_nonce = wire.server_challenge(sock, wire.PEER_MAGIC, deadline)
            answer = wire.recv_exact(sock, wire.NONCE_BYTES + CONNECT_EXTRA.size
                                     + wire.MAC_BYTES, deadline)
            checked = wire.check_answer(self._secret, PEER_LABEL, server_nonce, answer,
                                        CONNECT_EXTRA.size)
            if checked is None:
                raise wire.WireError("failed authentication (wrong secret, or not a gcurun "
                                     "rank)")
            client_nonce, extra = checked
            peer, generation, theirs = CONNECT_EXTRA.unpack(extra)
            if generation != self.generation or not 0 <= peer < self.rank:
                raise wire.WireError(f"claims to be rank {peer} of generation {generation}, "
                                     f"not a lower rank of generation {self.generation}")
            info = self._peer_info(peer, deadline)
            mine = self._features(info, sock)
            wire.send_all(sock, wire.server_proof(self._secret, PEER_LABEL, server_nonce,
                                                  client_nonce,
                                                  ACCEPT_EXTRA.pack(self.rank, mine)), deadline)
            channel = None
            if mine & theirs & CAN_SHARE_RINGS:
                channel = _receive_channel(sock, deadline)
        except (wire.WireError, OSError, struct.error) as exc:
            if not self._closing:
                log.warning("rank %d: refused a connection from %s: %s", self.rank, where, exc)
            sock.close()
            return
        self._adopt(Link(sock, peer, int(info.get("pid", 0)), bool(mine & CAN_READ_YOU),
                         bool(theirs & CAN_READ_YOU), channel))

    def _adopt(self, link: Link) -> None:
        _tune(link.sock)
        with self._ready:
            if link.peer in self._links or self._closing:
                link.close()
                return
            if link.channel is not None and link.pull and link.pushed:
                self._swaps[link.peer] = self._swapper(link)
            self._links[link.peer] = link
            self._ready.notify_all()

    def _peer_info(self, peer: int, deadline: float) -> dict:
        with self._ready:
            while self._peers is None:
                if self._abort or not self._ready.wait(max(0.0, deadline - time.monotonic())):
                    raise wire.WireError("arrived before this rank knew its peers")
            return self._peers[peer]

    def _connect(self, peer: int) -> Link:
        deadline = time.monotonic() + self.timeout
        info = self._peer_info(peer, deadline)
        sock = _dial_unix(info.get("unix")) if info.get("host") == self.hostname else None
        try:
            if sock is None:
                host, port = info["tcp"]
                sock = socket.create_connection((host, port), timeout=self.timeout)
            mine = self._features(info, sock)
            server_nonce, client_nonce = wire.client_handshake(
                sock, self._secret, wire.PEER_MAGIC, PEER_LABEL, deadline,
                CONNECT_EXTRA.pack(self.rank, self.generation, mine))
            proof = wire.recv_exact(sock, ACCEPT_EXTRA.size + wire.MAC_BYTES, deadline)
            extra = wire.check_proof(self._secret, PEER_LABEL, server_nonce, client_nonce,
                                     proof, ACCEPT_EXTRA.size)
            if extra is None or ACCEPT_EXTRA.unpack(extra)[0] != peer:
                raise wire.WireError("its listener did not prove it belongs to this job")
            theirs = ACCEPT_EXTRA.unpack(extra)[1]
            channel = None
            if mine & theirs & CAN_SHARE_RINGS:
                channel = _send_channel(sock)
        except (wire.WireError, OSError) as exc:
            if sock is not None:
                sock.close()
            raise self._failure(peer, f"cannot connect to it ({exc})") from None
        self._adopt(Link(sock, peer, int(info.get("pid", 0)), bool(mine & CAN_READ_YOU),
                         bool(theirs & CAN_READ_YOU), channel))
        return self._links[peer]

    def _link(self, peer: int) -> Link:
        link = self._links.get(peer)
        if link is not None:
            return link
        if self._abort is not None:
            raise PeerFailureError(self._abort)
        if self.rank < peer:
            return self._connect(peer)
        deadline = time.monotonic() + self.timeout
        with self._ready:
            while peer not in self._links:
                if self._abort is not None:
                    raise PeerFailureError(self._abort)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CollectiveTimeout(f"rank {peer} did not connect within "
                                            f"{self.timeout:g} s")
                self._ready.wait(left)
            return self._links[peer]

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
        links = []
        if recvs:
            inc = self._link(source)
            links.append(inc)
            if inc.pull and recv_bytes >= CMA_MIN_BYTES:
                self._expect_descriptor(inc, recvs, recv_bytes)
            else:
                inc.recvs.extend([memoryview(buf).cast("B"), 0, None] for buf in recvs)
        if sends:
            out = self._link(dest)
            if not links or out is not links[0]:
                links.append(out)
            if out.pushed and send_bytes >= CMA_MIN_BYTES:
                out.sends.append([_describe(sends), 0, None])
                out.recvs.append([memoryview(bytearray(1)), 0, None])
            else:
                out.sends.extend([memoryview(buf).cast("B"), 0, None] for buf in sends)
        if links:
            self._mover.progress(links)

    def _expect_descriptor(self, link: Link, recvbufs: list[Buffer], nbytes: int) -> None:
        """Queue the receipt of a large message as a descriptor of where it lies in the
        peer, its reading, and the acknowledgement that frees the peer's buffer."""
        descriptor = bytearray(DESCRIPTOR.size)

        def acknowledge() -> None:
            link.sends.append([ACK, 0, None])

        def header() -> None:
            address, length = DESCRIPTOR.unpack(descriptor)
            self._on_descriptor(link, recvbufs, nbytes, address, length, acknowledge)

        link.recvs.append([memoryview(descriptor), 0, header])

    def _on_descriptor(self, link: Link, recvbufs: list[Buffer], nbytes: int, address: int,
                       length: int, then: Callable[[], None]) -> None:
        """Read the message a descriptor announced: one extent at ``address``, or (address
        0) ``length`` extents whose list follows the descriptor at once, in which case the
        read waits for the list. ``then()`` runs after the read."""
        if address:
            self._pull(link, recvbufs, nbytes, [(address, length)])
            then()
            return
        if not 0 < length <= MAX_EXTENTS:
            raise self._failure(link.peer, f"announced {length} pieces (protocol error)")
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
            raise self._failure(link.peer, f"sent {total} bytes where {nbytes} were "
                                           "expected (protocol error)")
        try:
            if len(remote) == 1 and len(recvbufs) == 1:
                self._cma.read(link.pid, address_of(recvbufs[0]), remote[0][0], nbytes)
            else:
                self._cma.read_parts(link.pid, [(address_of(buf), buf.nbytes)
                                                for buf in recvbufs], remote)
        except OSError as exc:
            raise self._failure(link.peer, f"its memory cannot be read ({exc})") from None

    def _swapper(self, link: Link) -> Callable[[list[Buffer], list[Buffer], int], bool]:
        """The exchange of two large messages with a same-host peer that reads us and
        that we read, written out: the descriptors cross through the rings in one step
        (:meth:`shm.Channel.exchanger`), each side copies the other's pieces, and the
        acknowledgements cross in another step; where a step finds its message not there
        yet, the general machinery waits for it. The messages are the general path's, so
        a peer on either path understands them. The function takes the non-empty pieces
        to send and to receive into (``nbytes`` in all), and returns False, having done
        nothing, when the link is busy or its ring lacks room."""
        channel, mover = link.channel, self._mover
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
            if link.sends or link.recvs or self._closing:
                return False
            if len(sendbufs) == 1:
                pack_into(mine, 0, address_of(sendbufs[0]), sendbufs[0].nbytes)
                swap = swap_one
            else:       # a count and the list of extents, one message
                swap = channel.exchanger(memoryview(_describe(sendbufs)), their_view,
                                         doorbell, FAST_READS)
            got = swap()
            if got < 0:
                return False
            if got == 0:
                link.recvs.append([their_view, 0, None])
                mover.progress([link])
            address, length = unpack(theirs)
            self._on_descriptor(link, recvbufs, nbytes, address, length, nothing)
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

    def _failure(self, peer: int, what: str) -> PeerFailureError:
        """The error for a broken link to ``peer``. A peer's connection usually breaks
        because the job is failing elsewhere: wait a moment for the rendezvous's abort,
        which names the root cause, before blaming ``peer``."""
        self._aborted.wait(ABORT_GRACE_SECONDS)
        if self._abort is not None:
            return PeerFailureError(self._abort)
        host = "?"
        if self._peers is not None:
            host = self._peers[peer].get("host", "?")
        return PeerFailureError(f"rank {peer} (host {host}): {what}")

    # -- failure and shutdown --------------------------------------------------------------

    def _aborted_by(self, reason: str) -> None:
        """The rendezvous says the job is over: wake every blocked call."""
        self._abort = self._abort or reason
        self._aborted.set()
        with self._ready:
            self._ready.notify_all()
            links = list(self._links.values())
        for link in links:
            try:
                link.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def abort(self, reason: str) -> None:
        """Tell every rank of the job that this one failed."""
        self._client.abort(reason)

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        self._client.close()
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        if self._acceptor is not None:
            self._acceptor.join(timeout=2)
        with self._ready:
            links, self._links = list(self._links.values()), {}
            self._swaps.clear()
            self._ready.notify_all()
        for link in links:
            link.close()
        for listener in self._listeners:
            listener.close()
        self._wake_r.close()
        self._wake_w.close()


def _total(bufs: list[Buffer]) -> int:
    """The bytes of ``bufs`` in all."""
    return bufs[0].nbytes if len(bufs) == 1 else sum(buf.nbytes for buf in bufs)


def _describe(bufs: list[Buffer]) -> bytes:
    """The descriptor of a large message: its one extent, or (0, count) and the extents."""
    if len(bufs) == 1:
        return DESCRIPTOR.pack(address_of(bufs[0]), bufs[0].nbytes)
    return DESCRIPTOR.pack(0, len(bufs)) + b"".join(
        DESCRIPTOR.pack(address_of(buf), buf.nbytes) for buf in bufs)


def _tune(sock: socket.socket) -> None:
    sock.setblocking(False)
    for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        try:
            sock.setsockopt(socket.SOL_SOCKET, option, SOCKET_BUFFER_BYTES)
        except OSError:
            pass
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _dial_unix(name_hex: str | None) -> socket.socket | None:
    """A connection to a same-host peer's abstract Unix socket, or None (another network
    namespace, no Unix sockets): the caller falls back to TCP."""
    if not name_hex or not hasattr(socket, "AF_UNIX"):
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(bytes.fromhex(name_hex))
    except (OSError, ValueError):
        sock.close()
        return None
    return sock


def _send_channel(sock: socket.socket) -> shm.Channel:
    """Create the rings of a new same-host link and hand their memory to the peer."""
    channel, fd = shm.Channel.create()
    try:
        socket.send_fds(sock, [b"M"], [fd])
    except OSError:
        channel.close()
        raise
    finally:
        os.close(fd)
    return channel


def _receive_channel(sock: socket.socket, deadline: float) -> shm.Channel:
    sock.settimeout(max(0.01, deadline - time.monotonic()))
    try:
        message, fds, _, _ = socket.recv_fds(sock, 1, 1)
    except TimeoutError:
        raise wire.WireError("timed out waiting for the shared memory") from None
    if message != b"M" or len(fds) != 1:
        for fd in fds:
            os.close(fd)
        raise wire.WireError("sent no shared memory where it promised some")
    return shm.Channel(fds[0], creator=False)
