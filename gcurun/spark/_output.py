"""Rank output from the Spark tasks to the driver (Horovod's ``stdout``/``stderr``).

A task (or an elastic agent) starts its rank with its stdout and stderr on pipes and
forwards what it reads, in chunks of at most :data:`CHUNK_BYTES`, to the driver over an
authenticated connection (the job's secret, the handshake of
:mod:`gcurun.rendezvous.wire`). The driver hands each chunk to gcurun's
:class:`~gcurun.launch.supervision.output.OutputSink`, the one that prefixes and writes
the ranks' lines of every gcurun launcher: whole lines with the rank's prefix, a
timestamp when asked, never blocking on a slow reader. The task reads a chunk only when
the previous one was sent, so a rank that writes faster than the driver takes waits on
its pipe and nothing piles up in memory. When the driver cannot be reached the task
writes the rank's output to its own stdout and stderr (the executor's log) instead.

The stdlib-side helpers here (:func:`pump`, :func:`open_channel`, :func:`accept_channel`)
run in the executors' Python workers; :class:`OutputService` runs in the driver.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import IO, Any

from gcurun.launch.api import OutputEvent
from gcurun.launch.function_service import listen, stop_serving
from gcurun.launch.remote.run_function import recv_blob, send_blob
from gcurun.rendezvous import wire

log = logging.getLogger("gcurun.spark")

MAGIC = b"GCUSO01\n"
LABEL = b"gcurun-spark-output"
CHUNK_BYTES = 64 * 1024
CONNECT_SECONDS = 30.0
HANDSHAKE_SECONDS = 30.0
SEND_SECONDS = 30.0
# How long a task waits for its rank's pipes to close once the rank has exited (a child
# of the rank may hold them open).
DRAIN_SECONDS = 10.0
STREAMS = ("stdout", "stderr")

Send = Callable[[str, bytes], None]


def pump(pipes: Iterable[tuple[str, IO[bytes] | None]], send: Send) -> list[threading.Thread]:
    """Threads (started) that read each ``(stream, pipe)`` and call ``send(stream,
    chunk)`` per chunk read, then ``send(stream, b"")`` at its end."""
    def forward(stream: str, pipe: IO[bytes]) -> None:
        fd = pipe.fileno()
        try:
            while True:
                try:
                    chunk = os.read(fd, CHUNK_BYTES)
                except OSError:
                    chunk = b""
                send(stream, chunk)
                if not chunk:
                    return
        finally:
            pipe.close()

    threads = [threading.Thread(target=forward, args=(stream, pipe), daemon=True,
                                name=f"gcurun-output-{stream}")
               for stream, pipe in pipes if pipe is not None]
    for thread in threads:
        thread.start()
    return threads


def drain(threads: Iterable[threading.Thread], seconds: float = DRAIN_SECONDS) -> None:
    """Wait for :func:`pump`'s threads, ``seconds`` in all."""
    deadline = time.monotonic() + seconds
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))


def open_channel(address: tuple[str, int], secret: bytes, magic: bytes, label: bytes,
                 timeout: float = CONNECT_SECONDS) -> socket.socket:
    """An authenticated connection to a driver service; raises OSError or WireError, or
    ConnectionError when the service cannot prove it knows ``secret``."""
    deadline = time.monotonic() + timeout
    sock = socket.create_connection(address, timeout=timeout)
    try:
        server_nonce, client_nonce = wire.client_handshake(sock, secret, magic, label,
                                                           deadline)
        proof = wire.recv_exact(sock, wire.MAC_BYTES, deadline)
        if wire.check_proof(secret, label, server_nonce, client_nonce, proof) is None:
            raise ConnectionError("the driver's service could not prove it knows the "
                                  "job's secret")
    except BaseException:
        sock.close()
        raise
    return sock


def accept_channel(conn: socket.socket, secret: bytes, magic: bytes, label: bytes,
                   deadline: float) -> bool:
    """The driver's side of :func:`open_channel`: whether the peer proved the secret
    (then it has our proof too)."""
    nonce = wire.server_challenge(conn, magic, deadline)
    answer = wire.recv_exact(conn, wire.NONCE_BYTES + wire.MAC_BYTES, deadline)
    checked = wire.check_answer(secret, label, nonce, answer, 0)
    if checked is None:
        return False
    wire.send_all(conn, wire.server_proof(secret, label, nonce, checked[0]), deadline)
    return True


def to_executor_log(stream: str, data: bytes) -> None:
    """``data`` on this task's own stdout or stderr (the executor's log)."""
    fd = 1 if stream == "stdout" else 2
    view = memoryview(data)
    with contextlib.suppress(OSError):
        while view:
            view = view[os.write(fd, view):]


class OutputChannel:
    """A task's connection to the driver's :class:`OutputService` for one rank's output.
    Sending never raises: once the connection fails, output goes to the executor's log."""

    def __init__(self, address: tuple[str, int], secret: bytes, rank: int) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        try:
            self._sock = open_channel(address, secret, MAGIC, LABEL)
            wire.send_all(self._sock, wire.encode_frame({"op": "hello", "rank": rank}),
                          time.monotonic() + SEND_SECONDS)
        except (OSError, wire.WireError) as exc:
            log.warning("rank %d's output goes to the executor's log: the driver's output "
                        "service is out of reach (%s)", rank, exc)
            self._drop()

    def send(self, stream: str, data: bytes) -> None:
        with self._lock:
            if self._sock is not None:
                try:
                    send_blob(self._sock, {"op": "output", "stream": stream}, data,
                              time.monotonic() + SEND_SECONDS)
                    return
                except (OSError, wire.WireError):
                    self._drop()
            if data:
                to_executor_log(stream, data)

    def close(self) -> None:
        with self._lock:
            self._drop()

    def _drop(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


class OutputService:
    """The driver's end: rank output from the tasks' :class:`OutputChannel`, written to
    ``sink`` (one writer at a time). A rank is heard from once (a retried task's second
    connection is refused); its output has *ended* when its connection closed."""

    def __init__(self, host: str, secret: bytes, sink: Any) -> None:
        self._host = host
        self._secret = secret
        self._sink = sink
        self._listener: socket.socket | None = None
        self._cond = threading.Condition()
        self._conns: set[socket.socket] = set()
        self._write_lock = threading.Lock()
        self.connected: set[int] = set()
        self.ended: set[int] = set()

    @property
    def address(self) -> tuple[str, int]:
        assert self._listener is not None
        return self._host, int(self._listener.getsockname()[1])

    def start(self) -> None:
        self._listener = listen(self._host, 128)
        threading.Thread(target=self._accept, daemon=True, name="gcurun-spark-output").start()

    def write(self, event: OutputEvent) -> None:
        with self._write_lock:
            self._sink.write(event)

    def wait_ended(self, ranks: Iterable[int], timeout: float,
                   gone: Callable[[], bool] = lambda: False) -> bool:
        """Whether the output of every rank of ``ranks`` ended within ``timeout``; stops
        waiting early, once ``gone()`` (the tasks are over) and no connection is open."""
        wanted = set(ranks)
        deadline = time.monotonic() + timeout
        with self._cond:
            while not wanted <= self.ended:
                if gone() and self.connected <= self.ended:
                    return False
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.2))
        return True

    def close(self) -> None:
        """Stop listening and drop the connections still open (their ranks are gone)."""
        with self._cond:
            conns, self._conns = self._conns, set()
        stop_serving(self._listener, conns)

    def _accept(self) -> None:
        assert self._listener is not None
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with self._cond:
                self._conns.add(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True,
                             name="gcurun-spark-output-rank").start()

    def _serve(self, conn: socket.socket) -> None:
        rank: int | None = None
        open_streams: set[str] = set()
        try:
            deadline = time.monotonic() + HANDSHAKE_SECONDS
            if not accept_channel(conn, self._secret, MAGIC, LABEL, deadline):
                return
            hello = wire.recv_frame(conn, deadline)
            if hello.get("op") != "hello" or not isinstance(hello.get("rank"), int):
                return
            with self._cond:
                if hello["rank"] in self.connected:
                    log.warning("a second output connection for rank %d was refused",
                                hello["rank"])
                    return
                rank = int(hello["rank"])
                self.connected.add(rank)
            conn.settimeout(None)
            while True:
                header, data = recv_blob(conn, None)
                stream = header.get("stream")
                if header.get("op") != "output" or stream not in STREAMS:
                    raise wire.WireError(f"an output frame for {stream!r}")
                self.write(OutputEvent(rank, stream, data))
                (open_streams.add if data else open_streams.discard)(stream)
        except (OSError, wire.WireError, ValueError) as exc:
            if rank is not None and not isinstance(exc, wire.WireClosed):
                log.debug("rank %d's output connection ended: %s", rank, exc)
        finally:
            conn.close()
            if rank is not None:
                for stream in sorted(open_streams):   # what was cut off ends its line
                    self.write(OutputEvent(rank, stream, b""))  # type: ignore[arg-type]
                with self._cond:
                    self._conns.discard(conn)
                    self.ended.add(rank)
                    self._cond.notify_all()
