"""Interfaces of the runtime: the reduction ops, the transport protocol every backend
implements, and the runtime's errors (all :class:`gcurun.errors.CollectiveError`).

The collective algorithms (:mod:`gcurun.runtime.algorithms`) are written once over
:class:`Transport`; a backend only moves bytes between two ranks.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gcurun.errors import CollectiveError, CollectiveTimeout, PeerFailureError

# Anything exporting the buffer protocol, C-contiguous (numpy arrays, memoryviews, bytearrays).
Buffer = Any


class ReduceOp(enum.IntEnum):
    """How allreduce and reducescatter combine tensors; values match Horovod's."""

    AVERAGE = 0
    SUM = 1
    ADASUM = 2
    MIN = 3
    MAX = 4
    PRODUCT = 5

    @property
    def title(self) -> str:
        return self.name.capitalize()


class Transport(Protocol):
    """Ordered, reliable byte messages between two ranks of one job.

    Message sizes are known to both sides in advance (the algorithms agree on them), so
    a transport sends no lengths. Messages between one pair of ranks arrive in the order
    they were sent. Every blocking call gives up after the transport's timeout without
    progress and raises :class:`CollectiveTimeout`; a peer that died makes it raise
    :class:`PeerFailureError`. Zero-byte buffers are no-ops on both sides.
    """

    rank: int
    size: int
    # Whether sendrecv_parts moves a message of many pieces as one (else as a message
    # per piece): fusion then packs fewer small tensors into its buffer.
    pieces_in_one_message: bool

    def send(self, buf: Buffer, dest: int) -> None:
        """Send all of ``buf`` to ``dest``; returns when ``buf`` may be reused."""

    def recv(self, buf: Buffer, source: int) -> None:
        """Fill all of the writable ``buf`` with the next bytes from ``source``."""

    def sendrecv(self, sendbuf: Buffer, dest: int, recvbuf: Buffer, source: int) -> None:
        """Send ``sendbuf`` to ``dest`` while receiving ``recvbuf`` from ``source``,
        overlapped, so that rings of ranks never deadlock."""

    def sendrecv_parts(self, sendbufs: Sequence[Buffer], dest: int,
                       recvbufs: Sequence[Buffer], source: int) -> None:
        """:meth:`sendrecv` of messages made of several buffers: ``sendbufs`` go to
        ``dest`` while what ``source`` sends fills ``recvbufs``. The receiver cuts a
        message exactly as its sender does (the same byte counts, in order; zero-byte
        buffers do not count). Fused tensors travel so, without being copied into one
        buffer first; a transport may move such a message as one."""

    def close(self) -> None:
        """Release connections and threads. Idempotent."""

    # A transport may also offer ``sendrecv_together(exchanges)``: several
    # ``sendrecv_parts`` at once, ``(sendbufs, dest, recvbufs, source)`` each, no peer in
    # two of them, all in flight together (tcp and mpi do; the two-level allreduce uses
    # it where it is there, and takes the exchanges in turn where it is not).
    #
    # And ``start_sendrecv_parts(sendbufs, dest, recvbufs, source)``: the same exchange
    # started and left in flight, returned as an :class:`InFlight`, or None where this
    # pair of peers gains nothing from it (then nothing was started; the caller runs
    # ``sendrecv_parts``), with ``streams(dest, source)`` saying beforehand which it will
    # be for an exchange that sends to ``dest`` and receives from ``source``. Between tcp's
    # such peers a message is a byte stream: each side may cut it as it likes. The ring
    # reduces what has arrived of a chunk while the rest, and the next chunks, still move
    # (tcp does, for peers on other hosts; mpi, in a job on several hosts, for every pair
    # of its ranks alike, since an MPI message is received as it was sent).
    #
    # And a ``blocked`` attribute: a :class:`Blocked` while a call has waited past its
    # first quick spins without progress, else None (tcp and mpi have it; the engine's
    # stall watch reads it from another thread to name a rank that does not answer).
    # Where it is there, ``job_aborted(reason)`` makes every blocked and later call raise
    # :class:`PeerFailureError` with ``reason`` on this rank alone.


@dataclass(frozen=True)
class Blocked:
    """A transport call of this rank waits for ``peers``: no byte has moved since
    ``since`` (a ``time.monotonic()`` reading)."""

    peers: tuple[int, ...]
    since: float

    def as_own_wait(self, now: float) -> str:
        """The words added to an abort that reached this rank while it waited: the
        ranks it waited for itself, which a rank that gave up waiting for this one
        could not see (with more than two ranks, the one at fault may be further on)."""
        who = " and ".join(f"rank {peer}" for peer in self.peers)
        return (f" (this rank was itself waiting for {who}, which had sent nothing for "
                f"{max(0.0, now - self.since):.1f} s)")


class InFlight(Protocol):
    """An exchange started by ``start_sendrecv_parts``: its bytes move while the caller
    works, and further ones may be started behind it (messages keep their order)."""

    def received(self, at_least: int) -> int:
        """Move bytes until at least ``at_least`` bytes of the receive (its buffers
        taken together, in order) have arrived, or all of them; how many have."""

    def wait(self) -> None:
        """Move bytes until the whole exchange is done (the sent buffers may change)."""


class NotInitializedError(CollectiveError, ValueError):
    """A runtime function was called before ``init()`` or after ``shutdown()``."""

    def __init__(self, what: str):
        super().__init__(f"{what}: gcurun.runtime is not initialized; call "
                         "gcurun.runtime.init() first")


class MismatchError(CollectiveError):
    """Ranks called one collective with different shapes, dtypes, ops or roots.

    Raised on every rank with the same message.
    """


class ArgumentError(CollectiveError, ValueError):
    """A rank passed invalid arguments to a collective (a bad root, splits or dtype).

    Raised on every rank, so that no rank waits for a call its peers abandoned.
    """


__all__ = ["ArgumentError", "Blocked", "Buffer", "CollectiveError", "CollectiveTimeout",
           "MismatchError", "NotInitializedError", "PeerFailureError", "ReduceOp", "Transport"]
