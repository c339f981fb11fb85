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
        rendezvous (where peers on other hosts can reach this rank). Raises
        CollectiveTimeout (it could not be reached, or kept dropping this rank's
        connection, until the timeout) or PeerFailureError (it refused this rank's
        secret, or is not the job's rendezvous), each saying which."""
        try:
            sock = open_rendezvous(self.address, self._secret, self._timeout, "rank")
        except JoinFailure as exc:
            error = CollectiveTimeout if exc.timed_out else PeerFailureError
            raise error(f"init: {exc}") from None
        sock.settimeout(None)
        self._sock = sock
        self._reader = threading.Thread(target=self._read, name="gcurun-rendezvous-client",
                                        daemon=True)
        self._reader.start()
        return sock.getsockname()[0]

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


class JoinFailure(Exception):
    """Why a rank (or worker) could not join the rendezvous; ``timed_out`` when it was
    the deadline that ended the tries (it may work later), not a refusal."""

    def __init__(self, message: str, *, timed_out: bool) -> None:
        super().__init__(message)
        self.timed_out = timed_out


RETRY_SECONDS = 0.1      # between two connections, at first
RETRY_MAX_SECONDS = 1.0  # and at most, as the tries go on


def open_rendezvous(address: tuple[str, int], secret: bytes, timeout: float,
                    who: str) -> socket.socket:
    """A connection to the rendezvous at ``address``, authenticated both ways within
    ``timeout`` seconds. A connection refused (the launcher not listening yet) or
    closed before its handshake ended (the rendezvous dropped it, crowded by
    connections that did not authenticate) is tried again until then.

    Raises JoinFailure saying what happened: the rendezvous could not be reached, kept
    dropping the connection, or did not answer in time; it refused the secret (``who``,
    a rank or a worker, has another GCURUN_SECRET); it is not gcurun's rendezvous; or it
    could not prove it knows the secret."""
    shown = wire.show_address(address)
    deadline = time.monotonic() + timeout
    pause, dropped, why = RETRY_SECONDS, 0, ""
    while True:
        sock: socket.socket | None = None
        try:
            sock = socket.create_connection(
                address, timeout=max(0.1, deadline - time.monotonic()))
            server_nonce, client_nonce = wire.client_handshake(
                sock, secret, wire.RENDEZVOUS_MAGIC, LABEL, deadline)
            proof = wire.recv_exact(sock, wire.MAC_BYTES, deadline)
        except wire.WireTimeout:
            _close(sock)
            raise JoinFailure(
                f"the rendezvous at {shown} accepted this {who}'s connection but did not "
                f"finish the handshake within {timeout:g} s (the launcher is overloaded, "
                "or a firewall holds the connection); set GCURUN_TIMEOUT_SECONDS to wait "
                "longer", timed_out=True) from None
        except wire.WireClosed as exc:
            _close(sock)
            dropped, why = dropped + 1, str(exc)
        except wire.WireError as exc:   # not the rendezvous's protocol
            _close(sock)
            raise JoinFailure(f"{shown} is not gcurun's rendezvous ({exc}); check "
                              "GCURUN_RENDEZVOUS", timed_out=False) from None
        except OSError as exc:          # no connection at all
            _close(sock)
            why = exc.strerror or str(exc)
        else:
            if proof == wire.REFUSED:
                sock.close()
                raise JoinFailure(f"the rendezvous at {shown} refused this {who}'s proof of "
                                  "the job's secret: GCURUN_SECRET is not the one the "
                                  "launcher set", timed_out=False)
            if wire.check_proof(secret, LABEL, server_nonce, client_nonce, proof) is None:
                sock.close()
                raise JoinFailure(f"the server at {shown} could not prove it knows the "
                                  "job's secret; refusing to join it", timed_out=False)
            return sock
        if time.monotonic() + pause > deadline:
            if dropped:
                raise JoinFailure(
                    f"the rendezvous at {shown} closed this {who}'s connection before its "
                    f"handshake ended, {dropped} times in {timeout:g} s (last: {why}); it is "
                    "crowded by connections that do not authenticate, or the launcher is "
                    "stopping", timed_out=True)
            raise JoinFailure(
                f"cannot reach the rendezvous at {shown} within {timeout:g} s ({why}); is "
                "the launcher running and GCURUN_RENDEZVOUS an address this host can "
                "reach?", timed_out=True)
        time.sleep(pause)
        pause = min(RETRY_MAX_SECONDS, pause * 2)


def _close(sock: socket.socket | None) -> None:
    if sock is not None:
        sock.close()


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
