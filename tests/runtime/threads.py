"""Ranks as threads of the test process, joined by queues: a transport for unit tests of
the algorithms and the engine that needs no processes and no sockets."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from gcurun.runtime.api import CollectiveTimeout


class QueueTransport:
    """Messages are byte copies put on one queue per (source, destination) pair."""

    pieces_in_one_message = False

    def __init__(self, rank: int, size: int, queues: dict[tuple[int, int], queue.Queue],
                 timeout: float = 10.0):
        self.rank, self.size = rank, size
        self._queues = queues
        self.timeout = timeout
        self.sent: list[tuple[int, int]] = []    # (destination, bytes) of every message
        self.exchanges = 0                       # calls that moved bytes, each one message
                                                 # on a transport that sends pieces as one

    def send(self, buf: Any, dest: int) -> None:
        data = np.frombuffer(memoryview(buf).cast("B"), np.uint8).copy()
        if len(data):
            self.sent.append((dest, len(data)))
            self._queues[(self.rank, dest)].put(data)

    def recv(self, buf: Any, source: int) -> None:
        target = memoryview(buf).cast("B")
        if not len(target):
            return
        try:
            data = self._queues[(source, self.rank)].get(timeout=self.timeout)
        except queue.Empty:
            raise CollectiveTimeout(f"rank {self.rank}: nothing from rank {source}") from None
        assert len(data) == len(target), (
            f"rank {self.rank} expected {len(target)} bytes from {source}, got {len(data)}")
        target[:] = data.tobytes()

    def sendrecv(self, sendbuf: Any, dest: int, recvbuf: Any, source: int) -> None:
        self.sendrecv_parts([sendbuf], dest, [recvbuf], source)

    def sendrecv_parts(self, sendbufs: list[Any], dest: int, recvbufs: list[Any],
                       source: int) -> None:
        """A message per non-empty piece, so that a receiver that cuts a message other
        than its sender does fails the length check of :meth:`recv`."""
        if any(memoryview(buf).nbytes for buf in [*sendbufs, *recvbufs]):
            self.exchanges += 1
        for buf in sendbufs:
            self.send(buf, dest)
        for buf in recvbufs:
            self.recv(buf, source)

    def close(self) -> None:
        pass


Q = TypeVar("Q", bound=QueueTransport)


def transports(size: int, kind: type[Q]) -> list[Q]:
    """The transports (of ``kind``) of ``size`` thread ranks, joined by one queue per
    pair."""
    queues: dict[tuple[int, int], queue.Queue] = {
        (a, b): queue.Queue() for a in range(size) for b in range(size)}
    return [kind(r, size, queues) for r in range(size)]


def in_threads(size: int, rank_main: Callable[[int], Any], timeout: float) -> list[Any]:
    """``rank_main(rank)`` on a thread per rank; their results in rank order, re-raising
    the first exception a rank raised. Every rank must finish within ``timeout``."""
    results: list[Any] = [None] * size
    errors: list[BaseException | None] = [None] * size

    def run(rank: int) -> None:
        try:
            results[rank] = rank_main(rank)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            errors[rank] = exc

    # One name for every rank's thread, as every real rank's main thread is MainThread:
    # the engine compares the threads that unnamed ops come from by name.
    threads = [threading.Thread(target=run, args=(r,), daemon=True, name="rank-main")
               for r in range(size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
        assert not thread.is_alive(), f"a rank did not finish within {timeout} s"
    for error in errors:
        if error is not None:
            raise error
    return results


def run_ranks(size: int, body: Callable[[QueueTransport], Any],
              timeout: float = 30.0) -> list[Any]:
    """Run ``body(transport)`` on ``size`` thread ranks; return their results in rank
    order, re-raising the first exception a rank raised."""
    ranks = transports(size, QueueTransport)
    return in_threads(size, lambda rank: body(ranks[rank]), timeout)
