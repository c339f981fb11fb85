"""The two-level allreduce on thread ranks: host layouts, the choice between it and the
flat ring, and exact sums at awkward lengths, fused and alone (the queue transport
asserts that both sides of every message agree on its size)."""

from __future__ import annotations

import numpy as np
import pytest

from gcurun.runtime import algorithms as alg
from tests.runtime.threads import QueueTransport, in_threads, run_ranks, transports

LEVELS = ["LOCAL_REDUCESCATTER", "CROSS_REDUCESCATTER", "CROSS_ALLGATHER", "LOCAL_ALLGATHER"]


class Together(QueueTransport):
    """A queue transport that also moves several exchanges at once (as tcp and mpi do):
    every message sent, then every one received. Counts its calls."""

    together = 0

    def sendrecv_together(self, exchanges) -> None:
        self.together += 1
        for sends, dest, _, _ in exchanges:
            for buf in sends:
                self.send(buf, dest)
        for _, _, recvs, source in exchanges:
            for buf in recvs:
                self.recv(buf, source)


def recording(phases: list[tuple[str, bool]]):
    """A phase callback that records (name, started) as it hears them."""
    def phase(name: str, started: bool) -> None:
        phases.append((name, started))

    return phase


def well_nested(phases: list[tuple[str, bool]]) -> bool:
    """Each level starts once and ends once after it started, the starts in order (the
    pipeline's slices overlap the levels)."""
    starts = [name for name, started in phases if started]
    ends = [name for name, started in phases if not started]
    return starts == LEVELS and sorted(ends) == sorted(LEVELS) and all(
        phases.index((name, True)) < phases.index((name, False)) for name in LEVELS)


def test_a_layout_numbers_hosts_in_order_and_knows_its_groups() -> None:
    layout = alg.HostLayout.from_names(["b", "a", "b", "a", "c", "c"])
    assert layout.hosts == (0, 1, 0, 1, 2, 2)
    assert (layout.host_count, layout.local_size, layout.two_level) == (3, 2, True)
    assert layout.local_ranks(3) == [1, 3]
    assert layout.cross_ranks(3) == [2, 3, 5]      # the second rank of each host
    assert layout.cross_ranks(0) == [0, 1, 4]


@pytest.mark.parametrize("names", [["a", "a", "b"], ["a", "b", "c"], ["a", "a", "a"], ["a"]])
def test_layouts_without_two_levels(names: list[str]) -> None:
    """Uneven hosts, one rank per host, or one host: the flat ring only."""
    assert not alg.HostLayout.from_names(names).two_level


def test_the_choice_follows_the_mode_the_layout_and_the_model() -> None:
    two = alg.HostLayout.from_names(["a", "a", "b", "b"])
    uneven = alg.HostLayout.from_names(["a", "a", "b"])
    assert alg.use_two_levels("on", two, 8)
    assert not alg.use_two_levels("off", two, 1 << 30)
    assert not alg.use_two_levels("on", uneven, 1 << 30)
    assert not alg.use_two_levels("on", None, 1 << 30)
    # Shared memory much faster than the network: two levels win at every size.
    fast = alg.LinkCosts(shm_latency=5e-6, shm_bandwidth=10e9, net_latency=30e-6,
                         net_bandwidth=0.25e9, reduce_bandwidth=4e9)
    assert all(alg.use_two_levels("auto", two, n, fast) for n in (1 << 10, 1 << 20, 1 << 28))
    # Shared memory slower than the hosts' links together: the flat ring wins when large,
    # two levels (fewer network steps) when small.
    slow = alg.LinkCosts(shm_latency=5e-6, shm_bandwidth=2e9, net_latency=30e-6,
                         net_bandwidth=12.5e9, reduce_bandwidth=4e9)
    assert alg.use_two_levels("auto", two, 1 << 12, slow)
    assert not alg.use_two_levels("auto", two, 1 << 28, slow)


def test_the_model_counts_the_bytes_each_link_carries() -> None:
    """Bandwidth only: the flat ring over 2 hosts x 2 ranks carries 1.5 x S over each
    host's link, two levels S across plus 2 x 1/2 S through shared memory."""
    costs = alg.LinkCosts(shm_latency=0, shm_bandwidth=1e30, net_latency=0,
                          net_bandwidth=1.0, reduce_bandwidth=1e30)
    assert alg.flat_seconds(8.0, 2, 2, costs) == pytest.approx(12.0)
    assert alg.two_level_seconds(8.0, 2, 2, costs) == pytest.approx(8.0)
    assert alg.two_level_seconds(8.0, 4, 1, costs) == alg.flat_seconds(8.0, 4, 1, costs)


# (host of each rank): hosts side by side, interleaved, and three hosts of three.
LAYOUTS = [[0, 0, 1, 1], [0, 1, 0, 1], [0, 0, 0, 1, 1, 1, 2, 2, 2], [0, 0, 1, 1, 2, 2]]


@pytest.mark.parametrize("together", [False, True], ids=["one-by-one", "together"])
@pytest.mark.parametrize("pipelined", [False, True], ids=["one-slice", "pipelined"])
@pytest.mark.parametrize("hosts", LAYOUTS, ids=lambda h: "".join(map(str, h)))
def test_two_levels_sum_exactly_at_awkward_lengths(hosts: list[int], pipelined: bool,
                                                   together: bool) -> None:
    """Every length from 0 to past a few slices of chunks of 5 elements, in place and
    not, fused, a finish (halving) applied once to every element; one slice at a time
    or pipelined (spare chunks), over a transport that moves exchanges one by one or
    together."""
    size = len(hosts)
    layout = alg.HostLayout(hosts)
    lengths = [0, 1, 2, size - 1, size, size + 1, 2 * size + 1, 37, 1000]
    ranks = transports(size, Together if together else QueueTransport)

    def body(rank: int) -> list[tuple[np.ndarray, ...]]:
        t = ranks[rank]
        levels = alg.TwoLevels(t, layout)
        tmp = np.empty(5, np.int64)
        spare = (lambda i: np.empty(5, np.int64)) if pipelined else None
        results = []
        for n in lengths:
            send = np.arange(n, dtype=np.int64) * (t.rank + 1)
            out = np.empty_like(send)
            phases: list[tuple[str, bool]] = []
            levels.allreduce(alg.Pieces([(send, out)]), np.add, tmp, None,
                             recording(phases), spare)
            assert well_nested(phases), phases
            inplace = send.copy()
            halve = lambda x: np.floor_divide(x, 2, out=x)  # noqa: E731
            levels.allreduce(alg.Pieces([(inplace, inplace)]), np.add, tmp, halve, None,
                             spare)
            fused = [send.copy() for _ in range(3)]
            levels.allreduce(alg.Pieces([(x, x) for x in fused]), np.add, tmp, None, None,
                             spare)
            results.append((out, inplace, *fused))
        if together and pipelined and size > 4:
            assert t.together > 0
        return results

    total = size * (size + 1) // 2
    for results in in_threads(size, body, 120):
        for n, (out, halved, *fused) in zip(lengths, results, strict=True):
            assert out.tolist() == (np.arange(n) * total).tolist()
            assert halved.tolist() == (np.arange(n) * total // 2).tolist()
            for x in fused:
                assert x.tolist() == (np.arange(n) * total).tolist()


@pytest.mark.parametrize("hosts", LAYOUTS[:3], ids=lambda h: "".join(map(str, h)))
def test_a_fused_batch_takes_two_levels_and_says_so(hosts: list[int]) -> None:
    """Many pieces (some empty, some in place) in one pass; the phases name the levels;
    the tensor is large enough that no rank gathers it instead."""
    size = len(hosts)
    lengths = [3, 0, 50, 1, 17, 9000, 2, 33]

    def body(t: QueueTransport) -> tuple[list[np.ndarray], list[tuple[str, bool]]]:
        reducer = alg.Reducer(t, chunk_bytes=1 << 12, layout=alg.HostLayout(hosts),
                              two_levels="on")
        inputs = [np.arange(n, dtype=np.float64) + t.rank for n in lengths]
        outputs = [x if i % 2 else np.empty_like(x) for i, x in enumerate(inputs)]
        phases: list[tuple[str, bool]] = []
        reducer.allreduce(alg.Pieces(list(zip(inputs, outputs, strict=True))), np.add,
                          None, lambda name, started: phases.append((name, started)))
        return outputs, phases

    for outputs, phases in run_ranks(size, body):
        assert well_nested(phases), phases
        for n, out in zip(lengths, outputs, strict=True):
            assert np.array_equal(out, np.arange(n) * size + sum(range(size)))


def starts(names: list[str]):
    """A phase callback that lists the phases as they start."""
    def phase(name: str, started: bool) -> None:
        if started:
            names.append(name)

    return phase


def test_a_large_single_tensor_takes_two_levels_and_a_small_one_is_gathered() -> None:
    def body(t: QueueTransport) -> list[list[str]]:
        reducer = alg.Reducer(t, 1 << 16, alg.HostLayout([0, 0, 1, 1]), "on")
        seen = []
        for n in (100, 100_003):
            names: list[str] = []
            data = np.full(n, t.rank, np.float64)
            reducer.allreduce(alg.Pieces([(data, data)]), np.add, None,
                              starts(names))
            assert np.all(data == 6)
            seen.append(names)
        return seen

    for seen in run_ranks(4, body):
        assert seen == [["GATHER_REDUCE"], LEVELS]


def test_one_host_per_rank_or_mode_off_keeps_the_flat_ring() -> None:
    def body(t: QueueTransport) -> list[list[str]]:
        seen = []
        for layout, mode in ((alg.HostLayout([0, 1, 2, 3]), "on"),
                             (alg.HostLayout([0, 0, 1, 1]), "off")):
            reducer = alg.Reducer(t, 1 << 12, layout, mode)  # type: ignore[arg-type]
            names: list[str] = []
            data = np.ones(100_000, np.float32)
            reducer.allreduce(alg.Pieces([(data, data)]), np.add, None,
                              starts(names))
            assert np.all(data == 4)
            seen.append(names)
        return seen

    for seen in run_ranks(4, body):
        assert seen == [["RING_REDUCESCATTER", "RING_ALLGATHER"]] * 2


def test_a_subgroup_numbers_its_members_from_zero() -> None:
    def body(t: QueueTransport) -> list[int]:
        members = [1, 3] if t.rank in (1, 3) else [0, 2]
        group = alg.Subgroup(t, members)
        got = np.zeros(1, np.int64)
        group.sendrecv(np.array([t.rank]), 1 - group.rank, got, 1 - group.rank)
        return [group.rank, group.size, int(got[0])]

    assert run_ranks(4, body) == [[0, 2, 2], [0, 2, 3], [1, 2, 0], [1, 2, 1]]
