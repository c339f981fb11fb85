"""The ``tcp`` transport's connections: joining through the rendezvous, listening
(TCP, and an abstract Unix socket for peers of the same host), the authenticated
handshake of every link (the lower rank of a pair connects, on first use), failures
and shutdown. :class:`gcurun.runtime.transport.tcp.TCPTransport` moves data over them.

A rank listens on, and offers peers on other hosts, the addresses of
:mod:`.addresses` (every address that might reach it, or the chosen interface's); a
connecting rank tries them in turn, each attempt bounded, and names both hosts and
every address it tried when none leads to the peer. The socket-level helpers are in
:mod:`._tcp_sockets`.
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
from collections.abc import Callable
from typing import Any

from gcurun.errors import UsageError
from gcurun.rendezvous import wire
from gcurun.rendezvous.client import RendezvousClient
from gcurun.runtime.api import Buffer, CollectiveTimeout, PeerFailureError
from gcurun.runtime.transport import shm
from gcurun.runtime.transport._tcp_sockets import (
    dial_unix,
    failure_reason,
    receive_channel,
    send_channel,
    tune,
)
from gcurun.runtime.transport.addresses import (
    host_interfaces,
    offered_addresses,
    parse_interface_choice,
    trial_order,
)
from gcurun.runtime.transport.cma import CrossMemory
from gcurun.runtime.transport.links import Link, Mover
from gcurun.runtime.transport.single_copy import SingleCopy

log = logging.getLogger("gcurun.runtime.tcp")

PEER_LABEL = b"gcurun-peer"
CONNECT_EXTRA = struct.Struct("<IIBI")     # connector's rank, generation, features, and
                                           # the rank it wants (an address may lead elsewhere)
ACCEPT_EXTRA = struct.Struct("<IB")        # acceptor's rank, features
CAN_READ_YOU = 1                           # feature: single-copy reads of the other side
CAN_SHARE_RINGS = 2                        # feature: shared-memory rings
HANDSHAKE_SECONDS = 10.0
ABORT_GRACE_SECONDS = 1.0
ATTEMPT_SECONDS = 5.0       # one connection attempt to one address of a peer
CONNECT_PASSES = 3          # times every address of a peer is tried before giving up
PASS_PAUSE_SECONDS = 0.5


class Connections:
    """The links between the ranks of one generation of a ``tcp`` job."""

    def __init__(self, *, rank: int, size: int, generation: int, hostname: str,
                 rendezvous: tuple[str, int], secret: bytes, timeout: float, cma: bool,
                 rings: bool = True, interface: str | None = None,
                 single_host: bool = False, liveness: float | None = None):
        """``interface`` (a NAME or a CIDR) restricts the addresses offered to peers on
        other hosts to that network's; ``single_host`` says that every rank is on this
        host (the launcher planned so), so only the address on the route to the
        rendezvous is offered; ``liveness`` (seconds) has the kernel report a peer's TCP
        link broken after that long without a word from it (a cut link sends nothing)."""
        self.rank, self.size = rank, size
        self.liveness = liveness
        self.interface = interface
        self.single_host = single_host
        self._own: list[str] = []           # every address of this host
        self.generation = generation
        self.hostname = hostname
        self.timeout = timeout
        self._secret = secret
        self._cma = CrossMemory(enabled=cma)
        self._client = RendezvousClient(rendezvous, secret, timeout, self._told_to_abort)
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
        self._single = SingleCopy(self._cma, self._mover, self._failure)

    # -- setup ----------------------------------------------------------------------------

    def start(self) -> list[dict]:
        """Join the job: rendezvous, listen, learn every rank's addresses."""
        local_ip = self._client.connect()
        info: dict[str, Any] = {"rank": self.rank, "host": self.hostname, "pid": os.getpid(),
                                "cma": self._cma.advertisement()}
        offered = [[ip, self._listen_tcp(ip).getsockname()[1]] for ip in self._offer(local_ip)]
        info["tcp"] = offered[0]            # the best: where the launcher reached this rank
        info["addresses"] = offered
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

    def _offer(self, route_ip: str) -> list[str]:
        """The addresses this rank listens on and offers its peers, best first."""
        if self.single_host and self.interface is None:
            return [route_ip]
        interfaces = host_interfaces()
        self._own = [a for addrs in interfaces.values() for a in addrs]
        try:
            choice = parse_interface_choice(self.interface) if self.interface else None
            return offered_addresses(route_ip, interfaces, choice)
        except ValueError as exc:
            raise UsageError(f"network interface {self.interface}: host {self.hostname}: "
                             f"{exc}; give a name or CIDR that every host of the job has "
                             "(--network-interface, GCURUN_NETWORK_INTERFACE)") from None

    def _listen_tcp(self, ip: str) -> socket.socket:
        family = socket.AF_INET6 if ":" in ip else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.bind((ip, 0))
            sock.listen(128)
        except OSError:
            sock.close()
            raise
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
            peer, generation, theirs, wanted = CONNECT_EXTRA.unpack(extra)
            if generation != self.generation or not 0 <= peer < self.rank:
                raise wire.WireError(f"claims to be rank {peer} of generation {generation}, "
                                     f"not a lower rank of generation {self.generation}")
            if wanted != self.rank:
                raise wire.WireError(f"rank {peer} wanted rank {wanted}, not this one (one "
                                     "of that rank's addresses leads here too)")
            info = self._peer_info(peer, deadline)
            mine = self._features(info, sock)
            wire.send_all(sock, wire.server_proof(self._secret, PEER_LABEL, server_nonce,
                                                  client_nonce,
                                                  ACCEPT_EXTRA.pack(self.rank, mine)), deadline)
            channel = None
            if mine & theirs & CAN_SHARE_RINGS:
                channel = receive_channel(sock, deadline)
        except (wire.WireError, OSError, struct.error) as exc:
            if not self._closing:
                log.warning("rank %d: refused a connection from %s: %s", self.rank, where, exc)
            sock.close()
            return
        self._adopt(Link(sock, peer, int(info.get("pid", 0)), bool(mine & CAN_READ_YOU),
                         bool(theirs & CAN_READ_YOU), channel))

    def _adopt(self, link: Link) -> None:
        tune(link.sock)
        if self.liveness is not None:
            wire.set_liveness(link.sock, self.liveness)
        with self._ready:
            if link.peer in self._links or self._closing:
                link.close()
                return
            if link.channel is not None and link.pull and link.pushed:
                self._swaps[link.peer] = self._single.swapper(link, self._is_closing)
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
        sock = dial_unix(info.get("unix")) if info.get("host") == self.hostname else None
        if sock is not None:
            try:
                return self._handshake(peer, info, sock, deadline)
            except (wire.WireError, OSError) as exc:
                sock.close()
                raise self._failure(peer, f"cannot connect to it ({exc})") from None
        tried: dict[str, str] = {}
        addresses = self._trial_order(info)
        for attempt in range(CONNECT_PASSES):
            if attempt:
                time.sleep(min(PASS_PAUSE_SECONDS, max(0.0, deadline - time.monotonic())))
            for host, port in addresses:
                where = wire.show_address((host, port))
                left = deadline - time.monotonic()
                if left <= 0 or self._abort is not None:
                    break
                try:
                    sock = socket.create_connection((host, port),
                                                    timeout=min(ATTEMPT_SECONDS, left))
                except OSError as exc:
                    tried[where] = failure_reason(exc)
                    continue
                try:
                    return self._handshake(peer, info, sock, min(
                        deadline, time.monotonic() + HANDSHAKE_SECONDS))
                except (wire.WireError, OSError) as exc:
                    sock.close()
                    tried[where] = failure_reason(exc)
        raise self._unreachable(peer, info, tried)

    def _trial_order(self, info: dict) -> list[tuple[str, int]]:
        """A peer's addresses in the order to try them (see :mod:`.addresses`)."""
        offered = [(str(a), int(p)) for a, p in info.get("addresses") or [info["tcp"]]]
        offers = [(str(p.get("host")), [a for a, _ in p.get("addresses") or [p["tcp"]]])
                  for p in self._peers or []]
        order = trial_order(str(info.get("host")), [a for a, _ in offered], offers,
                            self._own)
        ports = dict(offered)
        return [(a, ports[a]) for a in order]

    def _unreachable(self, peer: int, info: dict, tried: dict[str, str]) -> PeerFailureError:
        """The error when no address of ``peer`` led to it."""
        if self._abort is not None:
            return PeerFailureError(self._abort)
        what = "; ".join(f"{where} ({why})" for where, why in tried.items()) or "nothing"
        return PeerFailureError(
            f"rank {self.rank} (host {self.hostname}) cannot connect to rank {peer} (host "
            f"{info.get('host', '?')}): tried {what}. Give the network every host reaches "
            "with --network-interface NAME|CIDR (GCURUN_NETWORK_INTERFACE)")

    def _handshake(self, peer: int, info: dict, sock: socket.socket, deadline: float) -> Link:
        """Authenticate a new connection to ``peer`` and adopt it as that peer's link.
        Raises WireError or OSError (the caller closes ``sock``)."""
        mine = self._features(info, sock)
        server_nonce, client_nonce = wire.client_handshake(
            sock, self._secret, wire.PEER_MAGIC, PEER_LABEL, deadline,
            CONNECT_EXTRA.pack(self.rank, self.generation, mine, peer))
        proof = wire.recv_exact(sock, ACCEPT_EXTRA.size + wire.MAC_BYTES, deadline)
        extra = wire.check_proof(self._secret, PEER_LABEL, server_nonce, client_nonce,
                                 proof, ACCEPT_EXTRA.size)
        if extra is None or ACCEPT_EXTRA.unpack(extra)[0] != peer:
            raise wire.WireError("its listener did not prove it is that rank of this job")
        theirs = ACCEPT_EXTRA.unpack(extra)[1]
        channel = None
        if mine & theirs & CAN_SHARE_RINGS:
            channel = send_channel(sock)
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

    def job_aborted(self, reason: str) -> None:
        """Learn that this generation of the job is over for this rank (the rendezvous
        says a rank failed, or an elastic worker lost the launcher): every blocked call
        wakes and raises :class:`PeerFailureError` with ``reason``, as does every later
        one (the first reason given is kept). Sends nothing to the other ranks; that is
        :meth:`abort`. Safe from any thread; a second call is harmless."""
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

    def _told_to_abort(self, reason: str) -> None:
        """The rendezvous passed on another rank's failure: abort, adding the ranks this
        one is waiting for now, if any (see :meth:`Blocked.as_own_wait`)."""
        blocked = self._mover.blocked
        if blocked is not None:
            reason += blocked.as_own_wait(time.monotonic())
        self.job_aborted(reason)

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

    def _is_closing(self) -> bool:
        return self._closing
