"""The rendezvous of an elastic job: membership on top of the ranks' registration.

Every worker keeps one authenticated connection to the launcher for its whole life (the
*membership* connection, :class:`MembershipClient`): it says ``hello`` once, then
``join`` each time it wants a place in the next generation, and waits for the answer:
``assign`` (its rank, size, local and cross ranks, whether to synchronize the state),
``removed`` (its slot is gone: it leaves the job) or ``finished``. The launcher's driver
decides; :class:`ElasticRendezvousServer` carries its decisions (``publish``,
``notify``, ``abort_generation``, ``finish``) and reports what the workers do
(``on_event``) without deciding anything.

The ranks of a generation register their transport's addresses as in a fixed job, on
a connection of their transport; a registration is checked against the published
generation, so a worker of an old generation is fenced out. A member that joins for
the next generation, loses its membership connection without a goodbye, or whose
transport aborts, ends the generation for the others at once.
"""

from __future__ import annotations

import logging
import queue
import socket
import threading
from collections.abc import Callable, Sequence
from typing import Any

from gcurun.errors import GcurunError
from gcurun.rendezvous import wire
from gcurun.rendezvous.client import JoinFailure, open_rendezvous, say_goodbye
from gcurun.rendezvous.server import Connection, RendezvousServer

# on_event receives one of:
#   ("hello", worker)  ("joined", worker, after)  ("lost", worker)
#   ("formed", generation)  ("aborted", generation, reason)
ServerEvent = tuple


class ElasticRendezvousServer(RendezvousServer):
    """The launcher's side of an elastic job's rendezvous (see the module docstring),
    built on :class:`RendezvousServer`'s public extension points.

    ``liveness`` (seconds) is how long an accepted connection may stay silent, unable
    to deliver, before the kernel reports it broken (:func:`wire.set_liveness`).
    """

    def __init__(self, host: str | Sequence[str], port: int = 0, *, secret: bytes,
                 on_event: Callable[[ServerEvent], None], liveness: float | None = None,
                 handshake_timeout: float = 10.0):
        super().__init__(host, port, secret=secret, size=1, handshake_timeout=handshake_timeout,
                         max_pending=1024)
        self._on_event = on_event
        self._liveness = liveness
        self._worker_conns: dict[int, Connection] = {}
        self._conn_worker: dict[Connection, int] = {}
        self._joins: dict[int, int] = {}
        self._current = 0
        self._assigned: dict[int, dict[str, Any]] = {}
        self._by_rank: dict[int, int] = {}
        self._removed: set[int] = set()
        self._finished: str | None = None

    # -- the driver's commands ------------------------------------------------------------

    def publish(self, number: int, assignments: Sequence[dict[str, Any]],
                removed: Sequence[int] = ()) -> None:
        """Generation ``number``: one dict per rank (worker, rank, size, local_rank,
        local_size, cross_rank, cross_size, sync); ``removed`` workers leave the job."""
        self.post("publish", (number, [dict(a) for a in assignments], list(removed)))

    def notify(self, seq: int, bits: int) -> None:
        """Tell every member of the current generation that the hosts changed."""
        self.post("notify", (seq, bits))

    def abort_generation(self, number: int, reason: str) -> None:
        self.post("abort_generation", (number, reason))

    def finish(self, reason: str) -> None:
        """The job is over: every waiting worker is told so."""
        self.post("finish", reason)

    # -- the serving thread ---------------------------------------------------------------

    def _emit(self, event: ServerEvent) -> None:
        try:
            self._on_event(event)
        except Exception:  # noqa: BLE001 - a callback must not stop the rendezvous
            logging.getLogger("gcurun.rendezvous").exception("elastic event callback failed")

    def run_command(self, what: str, arg: Any) -> None:
        if what == "publish":
            number, assignments, removed = arg
            self._publish(number, assignments, removed)
        elif what == "notify":
            seq, bits = arg
            for worker in self._assigned:
                conn = self._worker_conns.get(worker)
                if conn is not None:
                    self.send(conn, {"op": "hosts_updated", "seq": seq, "update": bits})
        elif what == "abort_generation":
            number, reason = arg
            self.abort_members(number, reason, report=False)
        elif what == "finish":
            self._finished = arg
            for worker in list(self._joins):
                self._answer(worker)
        else:
            super().run_command(what, arg)

    def _publish(self, number: int, assignments: list[dict[str, Any]],
                 removed: list[int]) -> None:
        self._current = number
        self._assigned = {int(a["worker"]): a for a in assignments}
        self._by_rank = {int(a["rank"]): int(a["worker"]) for a in assignments}
        self._removed.update(removed)
        for worker in list(self._joins):
            self._answer(worker)

    def _answer(self, worker: int) -> None:
        """Answer ``worker``'s pending join, if the published state allows."""
        conn = self._worker_conns.get(worker)
        after = self._joins.get(worker)
        if conn is None or after is None:
            return
        if self._finished is not None:
            message: dict[str, Any] = {"op": "finished", "reason": self._finished}
        elif worker in self._removed:
            message = {"op": "removed", "reason": "its slot is no longer part of the job"}
        elif worker in self._assigned and self._current > after:
            message = {"op": "assign", "generation": self._current,
                       **{k: v for k, v in self._assigned[worker].items() if k != "worker"}}
        else:
            return
        del self._joins[worker]
        self.send(conn, message)

    def accepted(self, sock: socket.socket) -> None:
        if self._liveness:
            wire.set_liveness(sock, self._liveness)

    def handle(self, conn: Connection, message: dict) -> None:
        op = message["op"]
        if op == "hello":
            worker = int(message["worker"])
            conn.host = str(message.get("host", "?"))
            self._worker_conns[worker] = conn
            self._conn_worker[conn] = worker
            self._emit(("hello", worker))
        elif op == "join":
            worker = self._conn_worker[conn]
            after = int(message["after"])
            self._joins[worker] = after
            if worker in self._assigned and after >= self._current:
                self.abort_members(self._current, f"worker {worker} (host {conn.host}) "
                                   f"left generation {after} to re-form", report=False)
            self._emit(("joined", worker, after))
            self._answer(worker)
        else:
            super().handle(conn, message)

    def registration_problem(self, conn: Connection, generation: int, rank: int,
                             size: int) -> str | None:
        if generation != self._current:
            return (f"generation {generation} is over (the job runs generation "
                    f"{self._current}); this worker was fenced out")
        if size != len(self._assigned) or rank not in self._by_rank:
            return (f"rank {rank} of {size} is not a rank of generation {generation} "
                    f"({len(self._assigned)} ranks)")
        return None

    def formed(self, generation: int) -> None:
        self._emit(("formed", generation))

    def aborted(self, generation: int, reason: str) -> None:
        self._emit(("aborted", generation, reason))

    def connection_lost(self, conn: Connection) -> None:
        worker = self._conn_worker.pop(conn, None)
        if worker is None:      # a connection of a generation's transport
            super().connection_lost(conn)
            return
        if self._worker_conns.get(worker) is conn:
            del self._worker_conns[worker]
        self._joins.pop(worker, None)
        if not conn.said_bye:
            if worker in self._assigned:
                self.abort_members(self._current, f"worker {worker} (host {conn.host}) "
                                   "lost its connection to the rendezvous without "
                                   "shutting down; the process probably died", report=False)
            self._emit(("lost", worker))


class WorkerRemoved(GcurunError):
    """The driver no longer assigns this worker's slot: it leaves the job (exit 0)."""

    exit_code = 0


class RendezvousLost(GcurunError):
    """The membership connection broke: this worker can no longer take part in the job."""


class MembershipClient:
    """A worker's one connection to an elastic job's rendezvous, for its whole life.

    ``on_hosts_updated(seq, bits)`` runs on the reader thread when the hosts change;
    ``on_lost(reason)`` when the connection breaks (not after :meth:`close`).
    """

    def __init__(self, address: tuple[str, int], secret: bytes, *, worker: int, host: str,
                 timeout: float, liveness: float | None,
                 on_hosts_updated: Callable[[int, int], None],
                 on_lost: Callable[[str], None]):
        self.address, self.worker, self.host = address, worker, host
        self._secret, self._timeout, self._liveness = secret, timeout, liveness
        self._on_hosts_updated, self._on_lost = on_hosts_updated, on_lost
        self._sock: socket.socket | None = None
        self._send_lock = threading.Lock()
        self._answers: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
        self._closing = False
        self._lost: str | None = None
        self._reader: threading.Thread | None = None

    def connect(self) -> None:
        """Connect, authenticate and say hello. Raises RendezvousLost when the
        rendezvous cannot be reached within the timeout or refuses this worker."""
        try:
            sock = open_rendezvous(self.address, self._secret, self._timeout, "worker")
        except JoinFailure as exc:
            raise RendezvousLost(str(exc)) from None
        sock.settimeout(None)
        if self._liveness:
            wire.set_liveness(sock, self._liveness)
        self._sock = sock
        self._send({"op": "hello", "worker": self.worker, "host": self.host})
        self._reader = threading.Thread(target=self._read, name="gcurun-membership",
                                        daemon=True)
        self._reader.start()

    def join(self, after: int) -> dict[str, Any]:
        """Ask for a place in the generation after ``after``; wait for the driver.

        Returns the ``assign`` message. Raises WorkerRemoved (removed, or the job
        finished) or RendezvousLost (the connection broke). There is no client-side
        deadline: the driver decides, and a dead launcher breaks the connection."""
        if self._lost is not None:
            raise RendezvousLost(self._lost)
        self._send({"op": "join", "after": after})
        answer = self._answers.get()
        op = answer.get("op")
        if op == "assign":
            return answer
        if op == "lost":
            raise RendezvousLost(str(answer["reason"]))
        raise WorkerRemoved(f"worker {self.worker} (host {self.host}) is no longer part of "
                            f"the job: {answer.get('reason')}")

    def close(self) -> None:
        """Say goodbye and disconnect (at process exit). Idempotent."""
        if self._closing:
            return
        self._closing = True
        sock, self._sock = self._sock, None
        if sock is None:
            return
        say_goodbye(sock, self._send_lock, self._reader)

    def _send(self, message: dict[str, Any]) -> None:
        sock = self._sock
        if sock is None:
            raise RendezvousLost(self._lost or "the membership connection is closed")
        try:
            with self._send_lock:
                sock.sendall(wire.encode_frame(message))
        except OSError as exc:
            raise RendezvousLost(f"lost the connection to the rendezvous ({exc})") from None

    def _read(self) -> None:
        sock = self._sock
        assert sock is not None
        try:
            while True:
                message = wire.recv_frame(sock, None)
                op = message.get("op")
                if op == "hosts_updated":
                    self._on_hosts_updated(int(message["seq"]), int(message["update"]))
                elif op in ("assign", "removed", "finished"):
                    self._answers.put(message)
        except (wire.WireError, KeyError, TypeError, ValueError, OSError) as exc:
            if self._closing:
                return
            where = wire.show_address(self.address)
            self._lost = (f"lost the connection to the rendezvous at {where} ({exc}); this "
                          "worker can no longer take part in the job")
            self._answers.put({"op": "lost", "reason": self._lost})
            self._on_lost(self._lost)

