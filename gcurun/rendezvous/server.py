"""Where the ranks of a ``tcp`` job find each other.

The launcher runs a :class:`RendezvousServer` in a background thread. Each rank connects,
proves it knows the job's secret (HMAC challenge-response, both ways), registers its
listening addresses, and receives every rank's once all have registered. The connection
stays open for the job's life: it carries aborts (a rank that failed, or a rank whose
connection dropped without saying goodbye) to every rank within milliseconds.

Each ``init()`` of the ranks is a new *generation*; a job may shut down and init again.
Connections that fail the handshake or send garbage are logged and dropped; the job goes on.
It listens only on the addresses the ranks are given. A connection that has not proved
it knows the secret within ``handshake_timeout`` is dropped, and at most ``max_pending``
such connections are held at once (more are closed as they come), so idle or hostile
clients cannot pile up; the first few refusals are logged, then only counted.
"""

from __future__ import annotations

import errno
import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gcurun.errors import LaunchError
from gcurun.rendezvous import wire
from gcurun.rendezvous.wire import new_secret

__all__ = ["RendezvousServer", "new_secret"]

log = logging.getLogger("gcurun.rendezvous")

LABEL = b"gcurun-rendezvous"
ANSWER_BYTES = wire.NONCE_BYTES + wire.MAC_BYTES
REFUSALS_SHOWN = 5          # refused connections logged one by one; later ones are counted
BIND_ATTEMPTS = 20          # free ports tried when several addresses must share one


def default_max_pending(size: int) -> int:
    """Connections that may wait for their handshake at once: every rank of the job
    connecting together, and room for as many more."""
    return max(64, 2 * size)


@dataclass(eq=False)
class _Conn:
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


class RendezvousServer:
    """The rendezvous of one job: ``size`` ranks, authenticated by ``secret``.

    ``host`` is the address to listen on, or several (all on one port). ``start()`` binds
    (a taken port raises :class:`gcurun.errors.LaunchError` naming the address) and serves
    from a daemon thread; nothing blocks the caller. ``on_abort`` is called (from that
    thread) with the reason the first time a generation aborts.
    """

    def __init__(self, host: str | Sequence[str], port: int = 0, *, secret: bytes,
                 size: int, on_abort: Callable[[str], None] | None = None,
                 handshake_timeout: float = 10.0, max_pending: int | None = None):
        if size < 1:
            raise ValueError(f"size={size}: a job has at least one rank")
        if len(secret) < 16:
            raise ValueError("secret: use at least 16 random bytes (new_secret())")
        self._hosts = (host,) if isinstance(host, str) else tuple(dict.fromkeys(host))
        if not self._hosts:
            raise ValueError("host: give at least one address to listen on")
        self._host, self._port = self._hosts[0], port
        self._max_pending = default_max_pending(size) if max_pending is None else max_pending
        self._pending = 0
        self._refused = 0
        self._secret = secret
        self._size = size
        self._on_abort = on_abort
        self._handshake_timeout = handshake_timeout
        self._listener: socket.socket | None = None
        self._listeners: list[socket.socket] = []
        self._selector: selectors.BaseSelector | None = None
        self._wake_r, self._wake_w = socket.socketpair()
        self._commands: list[tuple[str, Any]] = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._generations: dict[int, dict[int, _Conn]] = {}
        self._infos: dict[int, dict[int, dict]] = {}
        self._aborted: dict[int, str] = {}
        self._global_abort: str | None = None

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
            raise RuntimeError("RendezvousServer.address: call start() first")
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

    def abort(self, reason: str) -> None:
        """Tell every connected rank, of every generation, that the job is over."""
        self._command("abort", reason)

    def registered(self, generation: int | None = None) -> dict[int, dict]:
        """Rank -> the info it registered, for ``generation`` (default: the newest)."""
        with self._lock:
            if not self._infos:
                return {}
            gen = max(self._infos) if generation is None else generation
            return dict(self._infos.get(gen, {}))

    def close(self) -> None:
        """Stop serving and close every connection. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._thread is not None:
            self._command("close", None)
            self._thread.join(timeout=5)
        for listener in self._listeners:
            listener.close()
        self._wake_r.close()
        self._wake_w.close()
        if self._refused > REFUSALS_SHOWN:
            log.warning("rendezvous %s: refused %d connections in all", self.shown,
                        self._refused)

    def __enter__(self) -> RendezvousServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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

    def _command(self, what: str, arg: Any) -> None:
        with self._lock:
            self._commands.append((what, arg))
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    def _serve(self) -> None:
        assert self._selector is not None
        conns: dict[socket.socket, _Conn] = {}
        running = True
        while running:
            for key, mask in self._selector.select(timeout=0.25):
                if key.data == "listener":
                    self._accept(key.fileobj, conns)  # type: ignore[arg-type]
                elif key.data == "wake":
                    running = self._run_commands(conns)
                else:
                    self._service(key.data, mask, conns)
            now = time.monotonic()
            for conn in [c for c in conns.values() if not c.ready and now > c.deadline]:
                self._refuse(conn, conns, "sent no valid handshake within "
                             f"{self._handshake_timeout:g} s")
        for conn in list(conns.values()):
            self._drop(conn, conns, quiet=True)
        self._selector.close()

    def _accept(self, listener: socket.socket, conns: dict[socket.socket, _Conn]) -> None:
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
            if self._pending >= self._max_pending:
                sock.close()
                self._note_refusal(peer, f"{self._pending} connections already wait for "
                                   "their handshake")
                continue
            sock.setblocking(False)
            self._pending += 1
            conn = _Conn(sock, peer, wire.nonce(),
                         time.monotonic() + self._handshake_timeout)
            conn.outbuf += wire.RENDEZVOUS_MAGIC + conn.nonce
            conns[sock] = conn
            self._selector.register(sock, selectors.EVENT_READ | selectors.EVENT_WRITE, conn)

    def _run_commands(self, conns: dict[socket.socket, _Conn]) -> bool:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        with self._lock:
            commands, self._commands = self._commands, []
        for what, arg in commands:
            if what == "close":
                return False
            if what == "abort":
                self._global_abort = arg
                for gen in list(self._generations):
                    self._abort_generation(gen, arg, conns)
        return True

    def _service(self, conn: _Conn, mask: int, conns: dict[socket.socket, _Conn]) -> None:
        if mask & selectors.EVENT_READ:
            try:
                data = conn.sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                data = None
            except OSError:
                data = b""
            if data == b"":
                self._lost(conn, conns)
                return
            if data:
                conn.inbuf += data
                self._consume(conn, conns)
        if conn.sock in conns and mask & selectors.EVENT_WRITE:
            self._flush(conn, conns)

    def _consume(self, conn: _Conn, conns: dict[socket.socket, _Conn]) -> None:
        if not conn.ready:
            if len(conn.inbuf) < ANSWER_BYTES:
                return
            answer = bytes(conn.inbuf[:ANSWER_BYTES])
            del conn.inbuf[:ANSWER_BYTES]
            checked = wire.check_answer(self._secret, LABEL, conn.nonce, answer, 0)
            if checked is None:
                self._refuse(conn, conns, "failed authentication (wrong secret, or not a "
                                          "gcurun rank)")
                return
            conn.ready = True
            self._pending -= 1
            self._send(conn, wire.server_proof(self._secret, LABEL, conn.nonce, checked[0]),
                       conns)
        while conn.sock in conns and len(conn.inbuf) >= wire.FRAME.size:
            (length,) = wire.FRAME.unpack_from(conn.inbuf)
            if length > wire.FRAME_LIMIT:
                self._refuse(conn, conns, f"sent a frame of {length} bytes")
                return
            if len(conn.inbuf) < wire.FRAME.size + length:
                return
            body = bytes(conn.inbuf[wire.FRAME.size:wire.FRAME.size + length])
            del conn.inbuf[:wire.FRAME.size + length]
            try:
                self._handle(conn, wire.decode_body(body), conns)
            except (wire.WireError, KeyError, TypeError, ValueError) as exc:
                self._refuse(conn, conns, f"sent a bad message ({exc})")

    def _handle(self, conn: _Conn, message: dict, conns: dict[socket.socket, _Conn]) -> None:
        op = message["op"]
        if op == "register":
            self._register(conn, message, conns)
        elif op == "abort":
            gen = conn.generation
            if gen is not None:
                self._abort_generation(gen, str(message["reason"]), conns)
        elif op == "bye":
            conn.said_bye = True
        else:
            raise ValueError(f"unknown op {op!r}")

    def _register(self, conn: _Conn, message: dict, conns: dict[socket.socket, _Conn]) -> None:
        gen, rank, size = int(message["generation"]), int(message["rank"]), int(message["size"])
        info = message["info"]
        if not isinstance(info, dict):
            raise ValueError("info is not an object")
        members = self._generations.setdefault(gen, {})
        problem = None
        if size != self._size:
            problem = (f"rank {rank} says the job has {size} ranks but the launcher started "
                       f"{self._size}; check GCURUN_SIZE")
        elif not 0 <= rank < self._size or conn.rank is not None:
            problem = f"rank {rank} is not a free rank of 0..{self._size - 1}"
        elif rank in members:
            problem = f"rank {rank} registered twice for generation {gen}"
        if problem:
            self._send(conn, {"op": "error", "message": problem}, conns)
            log.warning("rendezvous %s: %s (from %s)", self.shown, problem, conn.peer)
            return
        conn.generation, conn.rank, conn.host = gen, rank, str(info.get("host", "?"))
        members[rank] = conn
        with self._lock:
            self._infos.setdefault(gen, {})[rank] = info
        reason = self._aborted.get(gen) or self._global_abort
        if reason is not None:
            self._send(conn, {"op": "abort", "reason": reason}, conns)
        elif len(members) == self._size:
            infos = self.registered(gen)
            peers = [infos[r] for r in range(self._size)]
            for member in members.values():
                self._send(member, {"op": "peers", "generation": gen, "peers": peers}, conns)

    def _abort_generation(self, gen: int, reason: str,
                          conns: dict[socket.socket, _Conn]) -> None:
        first = gen not in self._aborted
        self._aborted.setdefault(gen, reason)
        for member in list(self._generations.get(gen, {}).values()):
            self._send(member, {"op": "abort", "reason": reason}, conns)
        if first and self._on_abort is not None:
            try:
                self._on_abort(reason)
            except Exception:  # noqa: BLE001 - a callback must not stop the rendezvous
                log.exception("rendezvous on_abort callback failed")

    def _send(self, conn: _Conn, message: dict | bytes, conns: dict[socket.socket, _Conn]) -> None:
        conn.outbuf += message if isinstance(message, bytes) else wire.encode_frame(message)
        self._flush(conn, conns)

    def _flush(self, conn: _Conn, conns: dict[socket.socket, _Conn]) -> None:
        assert self._selector is not None
        while conn.outbuf:
            try:
                sent = conn.sock.send(conn.outbuf)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self._lost(conn, conns)
                return
            del conn.outbuf[:sent]
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.outbuf else 0)
        self._selector.modify(conn.sock, events, conn)

    def _refuse(self, conn: _Conn, conns: dict[socket.socket, _Conn], why: str) -> None:
        self._note_refusal(conn.peer, why)
        self._drop(conn, conns, quiet=True)

    def _note_refusal(self, peer: str, why: str) -> None:
        self._refused += 1
        if self._refused <= REFUSALS_SHOWN:
            log.warning("rendezvous %s: refused the connection from %s: %s", self.shown,
                        peer, why)
        if self._refused == REFUSALS_SHOWN:
            log.warning("rendezvous %s: further refused connections are counted, not "
                        "shown", self.shown)

    def _lost(self, conn: _Conn, conns: dict[socket.socket, _Conn]) -> None:
        """The connection ended; without a goodbye, a registered rank died."""
        gen = conn.generation
        self._drop(conn, conns, quiet=True)
        if gen is not None and not conn.said_bye:
            self._abort_generation(gen, f"rank {conn.rank} (host {conn.host}) lost its "
                                        "connection to the rendezvous without shutting "
                                        "down; the process probably died", conns)

    def _drop(self, conn: _Conn, conns: dict[socket.socket, _Conn], quiet: bool) -> None:
        assert self._selector is not None
        if conns.pop(conn.sock, None) is None:
            return
        if not conn.ready:
            self._pending -= 1
        self._selector.unregister(conn.sock)
        conn.sock.close()
        gen = conn.generation
        if gen is not None:
            members = self._generations.get(gen, {})
            if members.get(conn.rank) is conn:     # type: ignore[arg-type]
                del members[conn.rank]             # type: ignore[arg-type]
            if not members:
                self._generations.pop(gen, None)

