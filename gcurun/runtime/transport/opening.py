"""The one way to open a transport for a set of ranks: the job's, a process set's, or
the benchmarks' own."""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gcurun.runtime.api import Transport
from gcurun.runtime.settings import RuntimeEnv

# Gathers one picklable value from every rank of the enclosing job, in rank order.
Allgather = Callable[[Any], list[Any]]


@dataclass
class Opened:
    """A transport among some ranks, from this rank's side."""

    transport: Transport | None                 # None: this rank is not a member
    peers: list[dict[str, Any]] = field(default_factory=list)  # tcp: every member's info
    closers: list[Callable[[], None]] = field(default_factory=list)

    def close(self) -> None:
        """Close the transport, then any rendezvous served for it. Idempotent."""
        closers, self.closers = self.closers, []
        for close in closers:
            close()


def open_transport(backend: str, env: RuntimeEnv, ranks: Sequence[int], rank: int, *,
                   hostname: str, comm: Any = None, allgather: Allgather | None = None,
                   rendezvous: tuple[tuple[str, int], bytes] | None = None,
                   generation: int = 1) -> Opened:
    """A transport among ``ranks`` (ascending ranks of the enclosing job, of which this
    process is ``rank``); every rank of the enclosing job calls it (the steps that need
    all of them are collective), the others get no transport.

    ``local``: the one-process transport. ``mpi``: ``comm`` (an mpi4py communicator of
    the enclosing job), or its sub-communicator of ``ranks``. ``tcp``: through
    ``rendezvous`` (address, secret) when given, else one that the lowest of ``ranks``
    serves for the occasion, found through ``allgather``.

    Raises :class:`gcurun.errors.CollectiveError` when the ranks cannot connect.
    """
    ranks = list(ranks)
    member = rank in ranks
    if backend == "local":
        from gcurun.runtime.transport.single import SelfTransport

        return Opened(SelfTransport() if member else None)
    if backend == "mpi":
        return _open_mpi(env, ranks, member, comm)
    if backend != "tcp":
        raise ValueError(f"backend {backend!r}: use 'local', 'mpi' or 'tcp'")
    opened = Opened(None)
    if rendezvous is None:
        if allgather is None:
            raise ValueError("open_transport(tcp) needs a rendezvous or an allgather")
        rendezvous = _serve_rendezvous(ranks, rank, hostname, allgather, opened)
    if not member:
        return opened
    from gcurun.runtime.transport.tcp import TCPTransport

    address, secret = rendezvous
    # The launcher planned every rank of the job on one host: nothing to offer elsewhere.
    single_host = env.facts is not None and env.facts.local_size == env.facts.size
    transport = TCPTransport(rank=ranks.index(rank), size=len(ranks), generation=generation,
                             hostname=hostname, rendezvous=(str(address[0]), int(address[1])),
                             secret=secret, timeout=env.timeout_seconds, cma=env.cma,
                             rings=env.rings, interface=env.network_interface,
                             single_host=single_host,
                             liveness=env.liveness_seconds if env.elastic_worker is not None
                             else None)
    opened.closers.insert(0, transport.close)
    try:
        opened.peers = transport.start()
    except BaseException:
        opened.close()
        raise
    opened.transport = transport
    return opened


def _open_mpi(env: RuntimeEnv, ranks: list[int], member: bool, comm: Any) -> Opened:
    from gcurun.runtime.transport.mpi import MPITransport

    if comm.Get_size() == len(ranks):
        transport = MPITransport(comm, env.timeout_seconds)
        return Opened(transport, closers=[transport.close])
    group = comm.Get_group().Incl(ranks)
    sub = comm.Create(group)                  # collective over the enclosing job
    group.Free()
    if not member:
        return Opened(None)
    transport = MPITransport(sub, env.timeout_seconds)
    sub.Free()                                # the transport keeps its own duplicate
    return Opened(transport, closers=[transport.close])


def _serve_rendezvous(ranks: list[int], rank: int, hostname: str, allgather: Allgather,
                      opened: Opened) -> tuple[tuple[str, int], bytes]:
    """The lowest of ``ranks`` serves a rendezvous for them; every rank of the enclosing
    job learns where (two allgathers over it)."""
    from gcurun.rendezvous.server import RendezvousServer, new_secret

    hosts = allgather(hostname)
    offer = None
    if rank == ranks[0]:
        alone = len({hosts[r] for r in ranks}) == 1
        secret = new_secret()
        server = RendezvousServer("127.0.0.1" if alone else socket.gethostname(), 0,
                                  secret=secret, size=len(ranks))
        server.start()
        opened.closers.append(server.close)
        offer = (server.address, secret)
    found = allgather(offer)[ranks[0]]
    return found
