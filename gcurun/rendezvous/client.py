"""A rank's side of the rendezvous (see :mod:`gcurun.rendezvous.server`)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from gcurun.errors import CollectiveTimeout, PeerFailureError
from gcurun.rendezvous import wire
from gcurun.rendezvous.server import LABEL


class RendezvousClient:
    """One authenticated connection to the job's rendezvous, open for the job's life.

    ``on_abort(reason)`` runs on the reader thread when the job aborts or the connection
    drops unexpectedly.
    """

    def __init__(self, address: tuple[str, int], secret: bytes, timeout: float,
                 on_abort: Callable[[str], None]):
        self.address = address
        self._secret = secret
        self._timeout = timeout
        self._on_abort = on_abort
        self._sock: socket.socket | None = None
        self._send_lock = threading.Lock()
        self._peers: list[dict] | None = None
        self._error: str | None = None
        self._answered = threading.Event()
        self._closing = False
        self._reader: threading.Thread | None = None

    def connect(self) -> str:
        """Connect and authenticate; returns this host's address on the route to the
        rendezvous (where peers on other hosts can reach this rank)."""
        deadline = time.monotonic() + self._timeout
        shown = wire.show_address(self.address)
        sock = self._dial(deadline)
        try:
            server_nonce, client_nonce = wire.client_handshake(
                sock, self._secret, wire.RENDEZVOUS_MAGIC, LABEL, deadline)
            proof = wire.recv_exact(sock, wire.MAC_BYTES, deadline)
        except wire.WireError as exc:
            sock.close()
            raise PeerFailureError(f"the rendezvous at {shown} refused this rank ({exc}); "
                                   "is GCURUN_SECRET the one the launcher set?") from None
        if wire.check_proof(self._secret, LABEL, server_nonce, client_nonce, proof) is None:
            sock.close()
            raise PeerFailureError(f"the server at {shown} could not prove it knows the "
                                   "job's secret; refusing to join it")
        sock.settimeout(None)
        self._sock = sock
        self._reader = threading.Thread(target=self._read, name="gcurun-rendezvous-client",
                                        daemon=True)
        self._reader.start()
        return sock.getsockname()[0]

    def _dial(self, deadline: float) -> socket.socket:
        host, port = self.address
        while True:
            try:
                return socket.create_connection(
                    (host, port), timeout=max(0.1, deadline - time.monotonic()))
            except OSError as exc:
                if time.monotonic() + 0.1 > deadline:
                    raise CollectiveTimeout(
                        f"cannot reach the rendezvous at {wire.show_address(self.address)} "
                        f"({exc.strerror or exc}); is the launcher running and "
                        "GCURUN_RENDEZVOUS an address this host can reach?") from None
                time.sleep(0.1)

    def register(self, generation: int, rank: int, size: int,
                 info: dict[str, Any]) -> list[dict]:
        """Publish ``info``; return every rank's info once all ranks have registered."""
        self._send({"op": "register", "generation": generation, "rank": rank, "size": size,
                    "info": info})
        if not self._answered.wait(self._timeout):
            raise CollectiveTimeout(
                f"init: not every rank reached the rendezvous within {self._timeout:g} s; "
                "a rank may have failed to start (set GCURUN_TIMEOUT_SECONDS to wait longer)")
        if self._error is not None:
            raise PeerFailureError(f"init: the rendezvous refused this rank: {self._error}")
        assert self._peers is not None
        return self._peers

    def abort(self, reason: str) -> None:
        """Ask the rendezvous to abort every rank (best effort)."""
        try:
            self._send({"op": "abort", "reason": reason})
        except OSError:
            pass

    def close(self) -> None:
        """Say goodbye (this rank is leaving on purpose) and disconnect. Idempotent."""
        if self._closing:
            return
        self._closing = True
        if not self._answered.is_set():
            self._error = "this rank closed its connection while registering"
            self._answered.set()
        sock, self._sock = self._sock, None
        if sock is None:
            return
        say_goodbye(sock, self._send_lock, self._reader)

    def _send(self, message: dict[str, Any]) -> None:
        sock = self._sock
        if sock is None:
            raise OSError("not connected")
        with self._send_lock:
            sock.sendall(wire.encode_frame(message))

    def _read(self) -> None:
        sock = self._sock
        assert sock is not None
        reason = None
        try:
            while True:
                message = wire.recv_frame(sock, None)
                op = message.get("op")
                if op == "peers":
                    self._peers = list(message["peers"])
                    self._answered.set()
                elif op == "error":
                    self._error = str(message.get("message"))
                    self._answered.set()
                elif op == "abort":
                    reason = f"the job was aborted: {message.get('reason')}"
                    break
        except (wire.WireError, KeyError, TypeError, ValueError, OSError) as exc:
            if not self._closing:
                where = wire.show_address(self.address)
                reason = (f"lost the connection to the rendezvous at {where} ({exc}); the "
                          "launcher stopped or the network failed")
        if reason is not None and not self._closing:
            self._error = self._error or reason
            self._answered.set()
            self._on_abort(reason)


def say_goodbye(sock: socket.socket, send_lock: Any, reader: threading.Thread | None) -> None:
    """Leave a rendezvous connection on purpose: ``bye`` (1 s at most, under the sender's
    lock), shut down and close ``sock``, then give its ``reader`` thread 2 s to end
    (unless the caller is that thread)."""
    try:
        with send_lock:
            sock.settimeout(1.0)
            sock.sendall(wire.encode_frame({"op": "bye"}))
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
    if reader is not None and reader is not threading.current_thread():
        reader.join(timeout=2)
