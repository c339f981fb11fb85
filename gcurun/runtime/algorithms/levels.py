"""The two-level allreduce (Horovod's hierarchical allreduce, NCCL's two levels): the
ranks of each host reduce-scatter the buffer among themselves (shared memory), the ranks
with the same local index reduce their one segment across the hosts (a ring per local
index, each carrying 1/local_size of the data over the network), and the ranks of each
host allgather the segments again.

Over H hosts of L ranks each, every host's link carries 2(H-1)/H of the buffer each way
instead of the flat ring's 2(HL-1)/(HL), in 2(H-1) network steps instead of 2(HL-1);
the price is 2(L-1)/L of the buffer through shared memory, in steps of their own.
:func:`two_level_seconds` and :func:`flat_seconds` state that cost model, which decides
the automatic choice (and which ``benchmarks/scale_model.py`` fits to measurements).

It runs over the job's own transport: :class:`Subgroup` sees some of its ranks as a
transport of their own, so no connection is opened for it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from gcurun.runtime.algorithms.pieces import Finish, Pieces
from gcurun.runtime.algorithms.ring import cut
from gcurun.runtime.algorithms.segments import Segment, even_counts, to_segments
from gcurun.runtime.api import Buffer, Transport
from gcurun.runtime.dtypes import Combine

Mode = Literal["auto", "on", "off"]     # two levels: when faster, whenever possible, never
Phase = Callable[[str, bool], None]  # told when each level starts and ends


class HostLayout:
    """Which ranks of a transport share a host: ``hosts[r]`` is rank r's host, numbered
    in order of first appearance. The same on every rank (it comes from every rank's
    host name, gathered)."""

    __slots__ = ("hosts", "host_count", "local_size")

    def __init__(self, hosts: Sequence[int]):
        self.hosts = tuple(hosts)
        counts: dict[int, int] = {}
        for host in self.hosts:
            counts[host] = counts.get(host, 0) + 1
        self.host_count = len(counts)
        sizes = set(counts.values())
        # Ranks per host when every host has the same number; 0 otherwise.
        self.local_size = sizes.pop() if len(sizes) == 1 else 0

    @classmethod
    def from_names(cls, names: Sequence[str]) -> HostLayout:
        """The layout of ranks whose hosts are named ``names`` (in rank order)."""
        index: dict[str, int] = {}
        return cls([index.setdefault(name, len(index)) for name in names])

    @property
    def two_level(self) -> bool:
        """Whether the two-level allreduce applies: at least 2 hosts, and the same number
        of ranks, at least 2, on every host."""
        return self.host_count >= 2 and self.local_size >= 2

    def local_ranks(self, rank: int) -> list[int]:
        """The ranks on ``rank``'s host, ascending."""
        host = self.hosts[rank]
        return [r for r, h in enumerate(self.hosts) if h == host]

    def cross_ranks(self, rank: int) -> list[int]:
        """The ranks with ``rank``'s local index, one per host, in host order."""
        index = self.local_ranks(rank).index(rank)
        by_host: dict[int, list[int]] = {}
        for r, h in enumerate(self.hosts):
            by_host.setdefault(h, []).append(r)
        return [by_host[h][index] for h in sorted(by_host)]

    def __repr__(self) -> str:
        return f"HostLayout({list(self.hosts)})"


class Subgroup:
    """Some ranks of ``parent`` as a transport of their own: rank i is ``members[i]``.
    Messages travel over the parent's links (shared memory between ranks of a host)."""

    def __init__(self, parent: Transport, members: Sequence[int]):
        self.parent = parent
        self.members = list(members)
        self.rank = self.members.index(parent.rank)
        self.size = len(self.members)
        self.pieces_in_one_message = parent.pieces_in_one_message

    def send(self, buf: Buffer, dest: int) -> None:
        self.parent.send(buf, self.members[dest])

    def recv(self, buf: Buffer, source: int) -> None:
        self.parent.recv(buf, self.members[source])

    def sendrecv(self, sendbuf: Buffer, dest: int, recvbuf: Buffer, source: int) -> None:
        self.parent.sendrecv(sendbuf, self.members[dest], recvbuf, self.members[source])

    def sendrecv_parts(self, sendbufs: Sequence[Buffer], dest: int,
                       recvbufs: Sequence[Buffer], source: int) -> None:
        self.parent.sendrecv_parts(sendbufs, self.members[dest], recvbufs,
                                   self.members[source])

    def close(self) -> None:
        """The parent's links stay open: they are the parent's."""


@dataclass(frozen=True)
class LinkCosts:
    """The cost model's parameters: seconds per message (``*_latency``) and bytes per
    second (``*_bandwidth``) of a step between ranks of one host (shared memory) and
    between hosts (one host's network link, each way), and the bytes per second at which
    a rank reduces (adds) data that arrived."""

    shm_latency: float
    shm_bandwidth: float
    net_latency: float
    net_bandwidth: float
    reduce_bandwidth: float


# What the automatic choice assumes when nothing better is known: hosts whose shared
# memory moves 8 GB/s between two ranks, on a 10 Gbit/s network (1.25 GB/s each way).
# Two levels then win at every size on up to 6 hosts, and on more hosts below a size the
# model below computes (16-256 MiB for 7 to 128 hosts of 2 or 8 ranks).
# ``--hierarchical-allreduce`` and ``--no-hierarchical-allreduce`` override it.
ASSUMED_COSTS = LinkCosts(shm_latency=10e-6, shm_bandwidth=8e9, net_latency=30e-6,
                          net_bandwidth=1.25e9, reduce_bandwidth=4e9)


def flat_seconds(nbytes: float, hosts: int, local: int, costs: LinkCosts) -> float:
    """The flat ring over ``hosts`` x ``local`` ranks (ranks of a host next to each
    other): 2(p-1) steps of nbytes/p each, every step as slow as its network hop (when
    there are several hosts) and the reduce-scatter's steps reducing what arrived."""
    p = hosts * local
    if p < 2:
        return 0.0
    piece = nbytes / p
    if hosts > 1:
        step = costs.net_latency + piece / costs.net_bandwidth
    else:
        step = costs.shm_latency + piece / costs.shm_bandwidth
    return 2 * (p - 1) * step + (p - 1) * piece / costs.reduce_bandwidth


def two_level_seconds(nbytes: float, hosts: int, local: int, costs: LinkCosts) -> float:
    """The two-level allreduce: a reduce-scatter and an allgather among the ``local``
    ranks of each host, and between them ``local`` rings across the ``hosts``, each over
    nbytes/local, sharing the host's link (so each gets 1/local of its bandwidth)."""
    if hosts < 2 or local < 2:
        return flat_seconds(nbytes, hosts, local, costs)
    inside = nbytes / local
    local_step = costs.shm_latency + inside / costs.shm_bandwidth
    across = inside / hosts
    cross_step = costs.net_latency + across * local / costs.net_bandwidth
    reduce = ((local - 1) * inside + (hosts - 1) * across) / costs.reduce_bandwidth
    return 2 * (local - 1) * local_step + 2 * (hosts - 1) * cross_step + reduce


def use_two_levels(mode: Mode, layout: HostLayout | None, nbytes: int,
                   costs: LinkCosts = ASSUMED_COSTS) -> bool:
    """Whether an allreduce of ``nbytes`` takes two levels: never when ``mode`` is
    "off" or the layout does not allow it (fewer than 2 hosts, or hosts with different
    numbers of ranks, or 1 rank each); always when "on"; when "auto", if the cost model
    says it is faster. A function of the agreed mode, layout and size only, so every
    rank decides alike."""
    if mode == "off" or layout is None or not layout.two_level:
        return False
    if mode == "on":
        return True
    hosts, local = layout.host_count, layout.local_size
    return two_level_seconds(nbytes, hosts, local, costs) < \
        flat_seconds(nbytes, hosts, local, costs)


class TwoLevels:
    """The two-level allreduce of one rank: its host's ranks and its cross-host ring.

    A large buffer goes through in slices, pipelined: while one slice crosses the hosts,
    the next is reduced inside the host and an earlier one gathered there, so that the
    network is kept busy while shared memory works. Each tick of the pipeline is one
    exchange with the host's ring and one with the cross-host ring, at once where the
    transport can (``sendrecv_together``); the slices' messages to the same ring in a
    tick travel as one. Every rank runs the same schedule (the slices, and the exchanges
    of each, follow from the sizes alone), so the messages of every pair of ranks match.
    """

    WINDOW = 4      # slices in flight at once (each holds a ring chunk of scratch)

    def __init__(self, transport: Transport, layout: HostLayout):
        self.t = transport
        self.local = Subgroup(transport, layout.local_ranks(transport.rank))
        self.cross = Subgroup(transport, layout.cross_ranks(transport.rank))
        self._together = getattr(transport, "sendrecv_together", None)

    def allreduce(self, pieces: Pieces, ufunc: Combine, tmp: np.ndarray,
                  finish: Finish | None = None, phase: Phase | None = None,
                  spare: Callable[[int], np.ndarray] | None = None) -> None:
        """Every output = ``finish`` of the reduction of its input over every rank.
        ``tmp`` receives a ring chunk (its length is the chunk); ``spare(i)`` gives the
        i-th further buffer like it (slices in flight need one each; without it, one
        slice at a time). ``phase(name, started)`` hears when the first slice starts and
        the last ends each level: LOCAL_REDUCESCATTER, CROSS_REDUCESCATTER,
        CROSS_ALLGATHER, LOCAL_ALLGATHER."""
        chunk = len(tmp)
        size = self.local.size * chunk          # a slice: one chunk per local rank
        bounds = [(start, min(size, pieces.total - start))
                  for start in range(0, pieces.total, size)] or [(0, 0)]
        window = min(self.WINDOW, len(bounds)) if spare is not None else 1
        buffers = [tmp] + [spare(i) for i in range(1, window)] if spare else [tmp]
        track = _Levels(phase, len(bounds))
        waiting = list(bounds)
        active: list[list] = []         # [slice's generator, its exchange, its buffer]
        free = list(buffers)
        while waiting or active:
            if waiting and free:        # a slice a tick: they stay a level apart
                offset, length = waiting.pop(0)
                buffer = free.pop(0)
                part = Pieces(pieces.parts(offset, length))
                steps = self._slice(part, length, ufunc, buffer, finish, track)
                active.append([steps, next(steps), buffer])
            self._exchange([exchange for _, exchange, _ in active])
            still = []
            for entry in active:
                try:
                    entry[1] = entry[0].send(None)
                    still.append(entry)
                except StopIteration:
                    free.append(entry[2])
            active = still

    def _exchange(self, exchanges: list[tuple[Subgroup, list, list]]) -> None:
        """One tick: every slice's message to its ring, those to the same ring as one."""
        merged: dict[int, tuple[Subgroup, list, list]] = {}
        for group, sends, recvs in exchanges:
            into = merged.setdefault(id(group), (group, [], []))
            into[1].extend(sends)
            into[2].extend(recvs)
        calls = [(sends, group.members[(group.rank + 1) % group.size], recvs,
                  group.members[(group.rank - 1) % group.size])
                 for group, sends, recvs in merged.values()]
        if self._together is not None and len(calls) > 1:
            self._together(calls)
            return
        for sends, dest, recvs, source in calls:
            self.t.sendrecv_parts(sends, dest, recvs, source)

    def _slice(self, pieces: Pieces, total: int, ufunc: Combine, tmp: np.ndarray,
               finish: Finish | None, track: _Levels):
        """The exchanges of one slice of ``total`` elements, one per yield (the same
        number on every rank), reducing what arrived after each."""
        local, cross = self.local, self.cross
        segments = to_segments(even_counts(total, local.size))
        widest = segments[0][1]         # (local rank 0's segment is the longest)
        track.enter("LOCAL_REDUCESCATTER")
        yield from _reduce_scatter(local, pieces, segments, ufunc, tmp, None, widest)
        track.leave("LOCAL_REDUCESCATTER")
        offset, length = segments[local.rank]
        mine = Pieces([(out, out) for _, out in pieces.parts(offset, length)])
        across = to_segments(even_counts(length, cross.size))
        widest = even_counts(widest, cross.size)[0]
        track.enter("CROSS_REDUCESCATTER")
        yield from _reduce_scatter(cross, mine, across, ufunc, tmp, finish, widest)
        track.leave("CROSS_REDUCESCATTER")
        track.enter("CROSS_ALLGATHER")
        yield from _allgather(cross, mine, across)
        track.leave("CROSS_ALLGATHER")
        track.enter("LOCAL_ALLGATHER")
        yield from _allgather(local, pieces, segments)
        track.leave("LOCAL_ALLGATHER")


def _reduce_scatter(group: Subgroup, pieces: Pieces, segments: Sequence[Segment],
                    ufunc: Combine, tmp: np.ndarray, finish: Finish | None, widest: int):
    """The ring's reduce-scatter (see :func:`.ring.ring_reduce_scatter`) as exchanges
    to yield: a chunk each, as many per step as the widest segment needs on any rank."""
    p, r = group.size, group.rank
    chunk = len(tmp)
    for step in range(p - 1):
        send_offset, send_length = segments[(r - step - 1) % p]
        recv_offset, recv_length = segments[(r - step - 2) % p]
        last = step == p - 2
        for start in range(0, max(widest, 1), chunk):
            sends = [pair[1 if step else 0] for pair in pieces.parts(
                send_offset + start, min(chunk, send_length - start))]
            incoming = pieces.parts(recv_offset + start, min(chunk, recv_length - start))
            arrived = cut(tmp, incoming)
            yield group, sends, arrived
            for (mine, acc), theirs in zip(incoming, arrived, strict=True):
                ufunc(mine, theirs, out=acc)
                if finish is not None and last:
                    finish(acc)


def _allgather(group: Subgroup, pieces: Pieces, segments: Sequence[Segment]):
    """The ring's allgather as exchanges to yield, one per step."""
    p, r = group.size, group.rank
    for step in range(p - 1):
        yield (group, [out for _, out in pieces.parts(*segments[(r - step) % p])],
               [out for _, out in pieces.parts(*segments[(r - step - 1) % p])])


class _Levels:
    """Tells ``phase`` when the first slice enters a level and the last leaves it."""

    def __init__(self, phase: Phase | None, slices: int):
        self.phase = phase
        self.slices = slices
        self.counts: dict[str, list[int]] = {}

    def enter(self, name: str) -> None:
        count = self.counts.setdefault(name, [0, 0])
        count[0] += 1
        if count[0] == 1 and self.phase is not None:
            self.phase(name, True)

    def leave(self, name: str) -> None:
        count = self.counts[name]
        count[1] += 1
        if count[1] == self.slices and self.phase is not None:
            self.phase(name, False)
