"""The connection machinery under the launcher's rendezvous servers: listening sockets
on one port, a selector loop in a daemon thread, the HMAC handshake (both ways) with a
deadline, length-prefixed JSON frames, buffered non-blocking sends, and commands posted
from other threads to the serving thread.

:class:`FrameServer` knows nothing of ranks or generations. Its subclasses
(:class:`gcurun.rendezvous.server.RendezvousServer`, and through it the elastic server)
give meaning to the messages through its **extension points**, all called on the serving
thread:

- :meth:`FrameServer.accepted` (a connection was accepted, before its handshake);
- :meth:`FrameServer.handle` (one message of an authenticated connection; raising
  ``ValueError``, ``KeyError``, ``TypeError`` or ``WireError`` refuses the connection);
- :meth:`FrameServer.connection_lost` (a connection ended, after it was dropped);
- :meth:`FrameServer.forget` (a connection was dropped for any reason);
- :meth:`FrameServer.run_command` (a command :meth:`FrameServer.post` ed by another
  thread).

and through its services for them: :meth:`FrameServer.send` and :meth:`FrameServer.post`.
Connections that fail the handshake or send garbage are logged and dropped; one whose
proof of the secret is wrong is told so first (:data:`wire.REFUSED`), so a rank with
another secret can say why it cannot join. A connection that has not proved it knows the
secret within ``handshake_timeout`` is dropped, and at most ``max_pending`` such
connections are held at once: when one more comes, the oldest of them is dropped to make
room. Authenticated connections (the job's ranks) never count against that bound, and a
rank answers the challenge within a round trip, so idle or hostile clients can neither
pile up nor crowd the ranks out (a rank whose connection was dropped before its handshake
ended connects again). The first few refusals are logged, then only counted.
"""

from __future__ import annotations

import errno
import logging
import selectors
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gcurun.errors import LaunchError
from gcurun.rendezvous import wire

log = logging.getLogger("gcurun.rendezvous")

LABEL = b"gcurun-rendezvous"
ANSWER_BYTES = wire.NONCE_BYTES + wire.MAC_BYTES
REFUSALS_SHOWN = 5          # refused connections logged one by one; later ones are counted
BIND_ATTEMPTS = 20          # free ports tried when several addresses must share one


@dataclass(eq=False)
class Connection:
    """One client's connection, as the serving thread sees it. ``generation``, ``rank``,
    ``host`` and ``said_bye`` are for the subclasses' bookkeeping."""

    sock: socket.socket
    peer: str
    nonce: bytes
    deadline: float
    ready: bool = False
    inbuf: bytearray = field(default_factory=bytearray)
    outbuf: bytearray = field(default_factory=bytearray)
    generation: int | None = None
    rank: int | None = None
    host: str = "?"
    said_bye: bool = False


class FrameServer:
    """Authenticated framed connections on ``host`` (one address or several, all on one
    port). ``start()`` binds (a taken port raises :class:`gcurun.errors.LaunchError`
    naming the address) and serves from a daemon thread; nothing blocks the caller."""

    def __init__(self, host: str | Sequence[str], port: int = 0, *, secret: bytes,
                 max_pending: int, handshake_timeout: float = 10.0):
        if len(secret) < 16:
            raise ValueError("secret: use at least 16 random bytes (new_secret())")
        self._hosts = (host,) if isinstance(host, str) else tuple(dict.fromkeys(host))
        if not self._hosts:
            raise ValueError("host: give at least one address to listen on")
        self._host, self._port = self._hosts[0], port
        self._max_pending = max_pending
        self._waiting: dict[socket.socket, Connection] = {}   # not authenticated, oldest first
        self._refused = 0
        self._secret = secret
        self._handshake_timeout = handshake_timeout
        self._listener: socket.socket | None = None
        self._listeners: list[socket.socket] = []
        self._selector: selectors.BaseSelector | None = None
        self._wake_r, self._wake_w = socket.socketpair()
        self._commands: list[tuple[str, Any]] = []
        self._commands_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._conns: dict[socket.socket, Connection] = {}   # the serving thread's

    # -- the launcher's side --------------------------------------------------------------

    def start(self) -> None:
        if self._listener is not None:
            return
        self._listeners = self._bind_all()
        self._listener = self._listeners[0]
        self._port = self._listener.getsockname()[1]
        self._selector = selectors.DefaultSelector()
        for listener in self._listeners:
            self._selector.register(listener, selectors.EVENT_READ, "listener")
        self._wake_r.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._thread = threading.Thread(target=self._serve, name="gcurun-rendezvous",
                                        daemon=True)
        self._thread.start()

    @property
    def address(self) -> tuple[str, int]:
        """(host, port) the ranks connect to; the port is the bound one when 0 was asked."""
        if self._listener is None:
            raise RuntimeError(f"{type(self).__name__}.address: call start() first")
        return self._host, self._port

    @property
    def addresses(self) -> list[tuple[str, int]]:
        """Every (host, port) it listens on."""
        port = self.address[1]
        return [(host, port) for host in self._hosts]

    @property
    def shown(self) -> str:
        """Its addresses as messages show them: ``10.0.0.1:4000, 127.0.0.1:4000``."""
        return ", ".join(wire.show_address((h, self._port)) for h in self._hosts)

    def close(self) -> None:
        """Stop serving and close every connection. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._thread is not None:
            self.post("close", None)
            self._thread.join(timeout=5)
        for listener in self._listeners:
            listener.close()
        self._wake_r.close()
        self._wake_w.close()
        if self._refused > REFUSALS_SHOWN:
            log.warning("rendezvous %s: refused %d connections in all", self.shown,
                        self._refused)

    def __enter__(self) -> FrameServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- extension points (the serving thread calls them) --------------------------------

    def accepted(self, sock: socket.socket) -> None:
        """A connection was accepted (its handshake is still to come)."""

    def handle(self, conn: Connection, message: dict) -> None:
        """One message of an authenticated connection. Raise ValueError (or KeyError,
        TypeError, WireError) to refuse the connection as having sent a bad message."""
        raise ValueError(f"unknown op {message.get('op')!r}")

    def connection_lost(self, conn: Connection) -> None:
        """``conn`` ended (closed by its client, or broken) and was dropped."""

    def forget(self, conn: Connection) -> None:
        """``conn`` was dropped (lost, refused, or the server closing): forget it."""

    def run_command(self, what: str, arg: Any) -> None:
        """A command that :meth:`post` queued (other than ``close``)."""
        raise ValueError(f"unknown command {what!r}")

    # -- services for the extension points ------------------------------------------------

    def post(self, what: str, arg: Any) -> None:
        """Have the serving thread run ``run_command(what, arg)`` (from any thread);
        ``close`` stops the serving thread."""
        with self._commands_lock:
            self._commands.append((what, arg))
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    def send(self, conn: Connection, message: dict | bytes) -> None:
        """Queue ``message`` (a frame) to ``conn`` and send what the socket takes now."""
        conn.outbuf += message if isinstance(message, bytes) else wire.encode_frame(message)
        self._flush(conn)

    # -- the serving thread ---------------------------------------------------------------

    def _bind_all(self) -> list[socket.socket]:
        """A listening socket on every address, all on one port (a free one, when 0 was
        asked, that every address has free)."""
        for attempt in range(BIND_ATTEMPTS):
            first = self._bind(self._hosts[0], self._port)
            port, bound = first.getsockname()[1], [first]
            try:
                for host in self._hosts[1:]:
                    bound.append(self._bind(host, port))
            except LaunchError:
                for sock in bound:
                    sock.close()
                if self._port or attempt == BIND_ATTEMPTS - 1:
                    raise
                continue
            return bound
        raise AssertionError("unreachable")

    def _bind(self, host: str, port: int) -> socket.socket:
        shown = wire.show_address((host, port))
        try:
            family, kind, proto, _, addr = socket.getaddrinfo(
                host, port, type=socket.SOCK_STREAM)[0]
        except socket.gaierror as exc:
            raise LaunchError(f"rendezvous address {shown}: cannot resolve '{host}' "
                              f"({exc.strerror}); give an address of this host that the "
                              "ranks' hosts can reach") from None
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(addr)
            sock.listen(min(socket.SOMAXCONN, 4096))
        except OSError as exc:
            sock.close()
            hint = ("another process uses that port; pick another port or 0 for a free one"
                    if exc.errno == errno.EADDRINUSE else
                    "give an address of this host that the ranks' hosts can reach")
            raise LaunchError(f"rendezvous cannot listen on {shown}: {exc.strerror}; "
                              f"{hint}") from None
        sock.setblocking(False)
        return sock

    def _serve(self) -> None:
        assert self._selector is not None
        running = True
        while running:
            for key, mask in self._selector.select(timeout=0.25):
                if key.data == "listener":
                    self._accept(key.fileobj)  # type: ignore[arg-type]
                elif key.data == "wake":
                    running = self._run_commands()
                else:
                    self._service(key.data, mask)
            now = time.monotonic()
            for conn in list(self._waiting.values()):   # oldest first: deadlines in order
                if now <= conn.deadline:
                    break
                self._refuse(conn, "sent no valid handshake within "
                             f"{self._handshake_timeout:g} s")
        for conn in list(self._conns.values()):
            self._drop(conn)
        self._selector.close()

    def _accept(self, listener: socket.socket) -> None:
        assert self._selector is not None
        while True:
            try:
                sock, addr = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                log.warning("rendezvous %s: accept failed: %s", self.shown, exc)
                return
            peer = wire.show_address((addr[0], addr[1])) if isinstance(addr, tuple) \
                else str(addr)
            if len(self._waiting) >= self._max_pending:
                self._refuse(next(iter(self._waiting.values())),
                             "dropped to make room: it had not authenticated and "
                             f"{self._max_pending} connections wait for their handshake")
            sock.setblocking(False)
            conn = Connection(sock, peer, wire.nonce(),
                              time.monotonic() + self._handshake_timeout)
            conn.outbuf += wire.RENDEZVOUS_MAGIC + conn.nonce
            self._conns[sock] = self._waiting[sock] = conn
            self._selector.register(sock, selectors.EVENT_READ | selectors.EVENT_WRITE, conn)
            self.accepted(sock)

    def _run_commands(self) -> bool:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        with self._commands_lock:
            commands, self._commands = self._commands, []
        for what, arg in commands:
            if what == "close":
                return False
            self.run_command(what, arg)
        return True

    def _service(self, conn: Connection, mask: int) -> None:
        if mask & selectors.EVENT_READ:
            try:
                data = conn.sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                data = None
            except OSError:
                data = b""
            if data == b"":
                self._lost(conn)
                return
            if data:
                conn.inbuf += data
                self._consume(conn)
        if conn.sock in self._conns and mask & selectors.EVENT_WRITE:
            self._flush(conn)

    def _consume(self, conn: Connection) -> None:
        if not conn.ready:
            if len(conn.inbuf) < ANSWER_BYTES:
                return
            answer = bytes(conn.inbuf[:ANSWER_BYTES])
            del conn.inbuf[:ANSWER_BYTES]
            checked = wire.check_answer(self._secret, LABEL, conn.nonce, answer, 0)
            if checked is None:
                self._tell_refused(conn)
                self._refuse(conn, "failed authentication (wrong secret, or not a "
                                   "gcurun rank)")
                return
            conn.ready = True
            del self._waiting[conn.sock]
            self.send(conn, wire.server_proof(self._secret, LABEL, conn.nonce, checked[0]))
        while conn.sock in self._conns and len(conn.inbuf) >= wire.FRAME.size:
            (length,) = wire.FRAME.unpack_from(conn.inbuf)
            if length > wire.FRAME_LIMIT:
                self._refuse(conn, f"sent a frame of {length} bytes")
                return
            if len(conn.inbuf) < wire.FRAME.size + length:
                return
            body = bytes(conn.inbuf[wire.FRAME.size:wire.FRAME.size + length])
            del conn.inbuf[:wire.FRAME.size + length]
            try:
                self.handle(conn, wire.decode_body(body))
            except (wire.WireError, KeyError, TypeError, ValueError) as exc:
                self._refuse(conn, f"sent a bad message ({exc})")

    def _flush(self, conn: Connection) -> None:
        assert self._selector is not None
        if conn.sock not in self._conns:
            return          # dropped already (a send to a connection just lost)
        while conn.outbuf:
            try:
                sent = conn.sock.send(conn.outbuf)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self._lost(conn)
                return
            del conn.outbuf[:sent]
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.outbuf else 0)
        self._selector.modify(conn.sock, events, conn)

    def _tell_refused(self, conn: Connection) -> None:
        """Say (best effort, without waiting) that ``conn``'s proof was wrong."""
        try:
            conn.sock.send(bytes(conn.outbuf) + wire.REFUSED)
        except OSError:
            pass

    def _refuse(self, conn: Connection, why: str) -> None:
        self._note_refusal(conn.peer, why)
        self._drop(conn)

    def _note_refusal(self, peer: str, why: str) -> None:
        self._refused += 1
        if self._refused <= REFUSALS_SHOWN:
            log.warning("rendezvous %s: refused the connection from %s: %s", self.shown,
                        peer, why)
        if self._refused == REFUSALS_SHOWN:
            log.warning("rendezvous %s: further refused connections are counted, not "
                        "shown", self.shown)

    def _lost(self, conn: Connection) -> None:
        if self._drop(conn):
            self.connection_lost(conn)

    def _drop(self, conn: Connection) -> bool:
        """Close ``conn`` and forget it; False when it was gone already."""
        assert self._selector is not None
        if self._conns.pop(conn.sock, None) is None:
            return False
        self._waiting.pop(conn.sock, None)
        self._selector.unregister(conn.sock)
        conn.sock.close()
        self.forget(conn)
        return True
