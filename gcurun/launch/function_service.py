"""The launcher's side of :func:`gcurun.run`: a server that hands the pickled function to
every rank and collects what each returned or raised.

Every connection first proves it knows the job's secret (the HMAC handshake of
:mod:`gcurun.rendezvous.wire`, both ways) before anything is unpickled; the protocol's
names come from the rank's side, :mod:`gcurun.launch.remote.run_function`.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gcurun.errors import LaunchError
from gcurun.launch.remote import run_function as rank_side
from gcurun.rendezvous import wire

log = logging.getLogger("gcurun.run")

HANDSHAKE_SECONDS = 30.0
ANSWER_BYTES = wire.NONCE_BYTES + wire.MAC_BYTES


@dataclass(frozen=True)
class Outcome:
    """What one rank sent back: ``ok`` and its pickled result, or its pickled report."""

    ok: bool
    data: bytes



def listen(host: str, backlog: int) -> socket.socket:
    """A socket listening on ``host`` at a free port (an IPv6 one takes IPv4 too).
    Raises OSError."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind((host, 0))
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    return sock


def stop_serving(listener: socket.socket | None, conns: Iterable[socket.socket] = ()) -> None:
    """Shut ``conns`` down (their peers see the end) and stop ``listener``."""
    for conn in conns:
        with contextlib.suppress(OSError):
            conn.shutdown(socket.SHUT_RDWR)
    if listener is not None:
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)
        listener.close()

class FunctionService:
    """Serves ``payload`` (a pickled function) to ranks ``0..size-1`` on ``host``.

    ``start()`` binds (raises LaunchError when it cannot) and accepts in a daemon thread;
    ``close()`` stops it. Outcomes arrive in :attr:`outcomes` by rank. Each rank is served
    once: a second process that says it is a rank already served (a retried or
    speculative copy) gets no function. :attr:`started` holds the ranks served
    (:attr:`hosts` the host each named), :attr:`dropped` those whose connection closed
    before their outcome came.
    """

    def __init__(self, payload: bytes, size: int, secret: bytes, host: str = "127.0.0.1"):
        self._payload = payload
        self._size = size
        self._secret = secret
        self._host = host
        self._listener: socket.socket | None = None
        self._lock = threading.Condition()
        self._closed = False
        self._conns: set[socket.socket] = set()
        self.outcomes: dict[int, Outcome] = {}
        self.started: set[int] = set()
        self.dropped: set[int] = set()
        self.hosts: dict[int, str] = {}

    @property
    def port(self) -> int:
        assert self._listener is not None
        return int(self._listener.getsockname()[1])

    def start(self) -> None:
        try:
            self._listener = listen(self._host, min(self._size, 1024))
        except OSError as exc:
            raise LaunchError(f"gcurun.run cannot serve its function on {self._host}: "
                              f"{exc.strerror or exc}") from None
        threading.Thread(target=self._accept, name="gcurun-run-service", daemon=True).start()

    def close(self) -> None:
        """Stop accepting and drop every connection still open (its rank is gone)."""
        with self._lock:
            self._closed = True
            self._lock.notify_all()
            conns, self._conns = self._conns, set()
        stop_serving(self._listener, conns)

    def wait_for(self, ranks: list[int], timeout: float) -> bool:
        """Whether every rank of ``ranks`` has sent its outcome within ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while not all(r in self.outcomes for r in ranks):
                left = deadline - time.monotonic()
                if left <= 0 or self._closed:
                    return False
                self._lock.wait(left)
        return True

    def wait_until(self, ready: Callable[[FunctionService], bool], timeout: float) -> bool:
        """Whether ``ready(self)`` (called under the service's lock, after every change of
        what ranks did) became true within ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while not ready(self):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(left)
        return True

    def _accept(self) -> None:
        assert self._listener is not None
        while True:
            try:
                conn, peer = self._listener.accept()
            except OSError:
                return   # closed
            with self._lock:
                if self._closed:
                    conn.close()
                    return
                self._conns.add(conn)
            threading.Thread(target=self._serve, args=(conn, peer), daemon=True,
                             name="gcurun-run-rank").start()

    def _serve(self, conn: socket.socket, peer: object) -> None:
        rank = None
        try:
            rank = self._greet(conn)
            if rank is not None:
                # As long as the function runs: the job's end closes the connection.
                # (The greeting's sends left a timeout of what remained of its deadline
                # on the socket: a function running longer would be taken for lost.)
                conn.settimeout(None)
                header, data = rank_side.recv_blob(conn, None)
                if header.get("op") == "result" and header.get("rank") == rank:
                    with self._lock:
                        self.outcomes[rank] = Outcome(bool(header.get("ok")), data)
                        self._lock.notify_all()
        except (wire.WireError, OSError) as exc:
            log.debug("gcurun.run: connection from %s dropped: %s", peer, exc)
        finally:
            with self._lock:
                self._conns.discard(conn)
                if rank is not None and rank not in self.outcomes:
                    self.dropped.add(rank)
                    self._lock.notify_all()
            conn.close()

    def _greet(self, conn: socket.socket) -> int | None:
        """Authenticate the rank and send it the function; its rank, or None."""
        deadline = time.monotonic() + HANDSHAKE_SECONDS
        nonce = wire.server_challenge(conn, rank_side.MAGIC, deadline)
        answer = wire.recv_exact(conn, ANSWER_BYTES, deadline)
        checked = wire.check_answer(self._secret, rank_side.LABEL, nonce, answer, 0)
        if checked is None:
            return None
        wire.send_all(conn, wire.server_proof(self._secret, rank_side.LABEL, nonce,
                                              checked[0]), deadline)
        hello = wire.recv_frame(conn, deadline)
        rank = hello.get("rank")
        if hello["op"] != "hello" or not isinstance(rank, int) or not 0 <= rank < self._size:
            return None
        with self._lock:
            if rank in self.started:
                log.warning("gcurun.run: a second process for rank %d was refused", rank)
                return None
            self.started.add(rank)
            self.hosts[rank] = str(hello.get("host") or "")
            self._lock.notify_all()
        rank_side.send_blob(conn, {"op": "function"}, self._payload, deadline)
        return rank
