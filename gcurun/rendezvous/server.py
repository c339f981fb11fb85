"""Where the ranks of a ``tcp`` job find each other.

The launcher runs a :class:`RendezvousServer` in a background thread. Each rank connects,
proves it knows the job's secret (HMAC challenge-response, both ways), registers its
listening addresses, and receives every rank's once all have registered. The connection
stays open for the job's life: it carries aborts (a rank that failed, or a rank whose
connection dropped without saying goodbye) to every rank within milliseconds.

Each ``init()`` of the ranks is a new *generation*; a job may shut down and init again.
It listens only on the addresses the ranks are given; the connections themselves
(handshake, frames, limits on unauthenticated clients) are :mod:`.serving`'s.

Extension points for a server of another membership (the elastic one,
:mod:`gcurun.rendezvous.elastic`), besides :class:`.serving.FrameServer`'s, called on the
serving thread: :meth:`RendezvousServer.registration_problem` (why a registration is
refused), :meth:`RendezvousServer.formed` (every rank of a generation registered) and
:meth:`RendezvousServer.aborted` (a generation aborted, the first time); with the
service :meth:`RendezvousServer.abort_members`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from gcurun.rendezvous.serving import LABEL, Connection, FrameServer
from gcurun.rendezvous.wire import new_secret

__all__ = ["LABEL", "Connection", "RendezvousServer", "new_secret"]

log = logging.getLogger("gcurun.rendezvous")


def default_max_pending(size: int) -> int:
    """Connections that may wait for their handshake at once: every rank of the job
    connecting together, and room for as many more."""
    return max(64, 2 * size)


class RendezvousServer(FrameServer):
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
        super().__init__(host, port, secret=secret, handshake_timeout=handshake_timeout,
                         max_pending=default_max_pending(size) if max_pending is None
                         else max_pending)
        self._size = size
        self._on_abort = on_abort
        self._lock = threading.Lock()
        self._generations: dict[int, dict[int, Connection]] = {}
        self._infos: dict[int, dict[int, dict]] = {}
        self._aborted: dict[int, str] = {}
        self._global_abort: str | None = None

    # -- the launcher's side --------------------------------------------------------------

    def abort(self, reason: str) -> None:
        """Tell every connected rank, of every generation, that the job is over."""
        self.post("abort", reason)

    def registered(self, generation: int | None = None) -> dict[int, dict]:
        """Rank -> the info it registered, for ``generation`` (default: the newest)."""
        with self._lock:
            if not self._infos:
                return {}
            gen = max(self._infos) if generation is None else generation
            return dict(self._infos.get(gen, {}))

    def __enter__(self) -> RendezvousServer:
        self.start()
        return self

    # -- extension points -----------------------------------------------------------------

    def registration_problem(self, conn: Connection, generation: int, rank: int,
                             size: int) -> str | None:
        """Why rank ``rank`` of ``size`` may not register for ``generation`` (the rank
        is told so), or None to accept it. A generation is complete when ``size`` ranks
        registered."""
        if size != self._size:
            return (f"rank {rank} says the job has {size} ranks but the launcher started "
                    f"{self._size}; check GCURUN_SIZE")
        if not 0 <= rank < self._size or conn.rank is not None:
            return f"rank {rank} is not a free rank of 0..{self._size - 1}"
        return None

    def formed(self, generation: int) -> None:
        """Every rank of ``generation`` registered and was sent the peers."""

    def aborted(self, generation: int, reason: str) -> None:
        """``generation`` aborted, the first time (and ``report`` was asked)."""
        if self._on_abort is not None:
            try:
                self._on_abort(reason)
            except Exception:  # noqa: BLE001 - a callback must not stop the rendezvous
                log.exception("rendezvous on_abort callback failed")

    # -- services for them (serving thread) -----------------------------------------------

    def abort_members(self, generation: int, reason: str, *, report: bool = True) -> None:
        """Tell every registered rank of ``generation`` that it aborted (``reason``);
        the first time, :meth:`aborted` is called unless ``report`` is False."""
        first = generation not in self._aborted
        self._aborted.setdefault(generation, reason)
        for member in list(self._generations.get(generation, {}).values()):
            self.send(member, {"op": "abort", "generation": generation, "reason": reason})
        if first and report:
            self.aborted(generation, reason)

    # -- FrameServer's extension points ---------------------------------------------------

    def run_command(self, what: str, arg: Any) -> None:
        if what != "abort":
            super().run_command(what, arg)
            return
        self._global_abort = arg
        for gen in list(self._generations):
            self.abort_members(gen, arg)

    def handle(self, conn: Connection, message: dict) -> None:
        op = message["op"]
        if op == "register":
            self._register(conn, message)
        elif op == "abort":
            gen = conn.generation
            if gen is not None:
                self.abort_members(gen, str(message["reason"]))
        elif op == "bye":
            conn.said_bye = True
        else:
            super().handle(conn, message)

    def connection_lost(self, conn: Connection) -> None:
        """Without a goodbye, a registered rank died: its generation aborts."""
        gen = conn.generation
        if gen is not None and not conn.said_bye:
            self.abort_members(gen, f"rank {conn.rank} (host {conn.host}) lost its "
                                    "connection to the rendezvous without shutting "
                                    "down; the process probably died")

    def forget(self, conn: Connection) -> None:
        gen = conn.generation
        if gen is not None:
            members = self._generations.get(gen, {})
            if members.get(conn.rank) is conn:     # type: ignore[arg-type]
                del members[conn.rank]             # type: ignore[arg-type]
            if not members:
                self._generations.pop(gen, None)

    # -- registration ---------------------------------------------------------------------

    def _register(self, conn: Connection, message: dict) -> None:
        gen, rank, size = int(message["generation"]), int(message["rank"]), int(message["size"])
        info = message["info"]
        if not isinstance(info, dict):
            raise ValueError("info is not an object")
        members = self._generations.setdefault(gen, {})
        problem = self.registration_problem(conn, gen, rank, size)
        if problem is None and rank in members:
            problem = f"rank {rank} registered twice for generation {gen}"
        if problem:
            self.send(conn, {"op": "error", "message": problem})
            log.warning("rendezvous %s: %s (from %s)", self.shown, problem, conn.peer)
            if not members:
                self._generations.pop(gen, None)
            return
        conn.generation, conn.rank, conn.host = gen, rank, str(info.get("host", "?"))
        members[rank] = conn
        with self._lock:
            self._infos.setdefault(gen, {})[rank] = info
        reason = self._aborted.get(gen) or self._global_abort
        if reason is not None:
            self.send(conn, {"op": "abort", "generation": gen, "reason": reason})
        elif len(members) == size:
            infos = self.registered(gen)
            peers = [infos[r] for r in range(size)]
            for member in members.values():
                self.send(member, {"op": "peers", "generation": gen, "peers": peers})
            self.formed(gen)
