"""benchmarks/cluster_allreduce.py without hosts: the pattern every turn checks (a wrong
sum must fail the run), its options and its table."""

from __future__ import annotations

import argparse
import socket

import numpy as np
import pytest

from benchmarks.cluster_allreduce import (
    BenchmarkError,
    Cell,
    Layout,
    LayoutResult,
    Rank,
    format_table,
    parse_layouts,
    parse_size,
    parse_variants,
    run_turn,
    size_range,
)
from benchmarks.cluster_allreduce_rank import check, expected, fill, max_calls, turn


class Simulated:
    """Rank 0 of ``size`` ranks whose other ranks live in this process: its allreduce
    is a true in-place Sum unless ``skip`` says which call to leave out."""

    def __init__(self, size: int, skip: int | None = None):
        self.rank, self.size, self.skip, self.calls = 0, size, skip, 0
        self.others: list[np.ndarray] = []

    def open(self) -> None:
        self.calls = 0

    def allreduce(self, buf: np.ndarray) -> None:
        self.calls += 1
        if self.calls == 1 or not self.others or self.others[0].shape != buf.shape:
            self.others = [np.empty_like(buf) for _ in range(1, self.size)]
            for rank, other in enumerate(self.others, start=1):
                fill(other, rank)
        if self.calls == self.skip:
            return
        total = buf + sum(self.others)
        buf[...] = total
        for other in self.others:
            other[...] = total

    def barrier(self) -> None:
        self.others = []        # the timed calls start from the pattern again

    def close(self) -> None:
        pass


@pytest.mark.parametrize("size", [2, 3, 4, 16])
def test_a_true_sum_passes_at_the_most_calls_a_turn_takes(size):
    variant = Simulated(size)
    result = turn(variant, 3 * 64, max_calls(size))
    assert result["error"] is None and result["seconds"] > 0
    assert all(np.isfinite(expected(size, max_calls(size))))


@pytest.mark.parametrize("skip", [1, 2, 7])
def test_a_call_left_out_fails_the_turn(skip):
    # Call 1 is the warm-up; the rest are the timed calls, checked after the last one.
    result = turn(Simulated(4, skip=skip), 8 * 100, 10)
    assert result["error"] is not None and "expected" in result["error"]
    assert result["error"].startswith("warm-up call" if skip == 1 else "after 10 timed calls")


def test_a_rank_missing_from_the_sum_is_named_by_its_first_wrong_element():
    ranks = [np.empty(9) for _ in range(4)]
    for rank, buf in enumerate(ranks):
        fill(buf, rank)
    assert check(sum(ranks), 4, 1) is None
    wrong = check(sum(ranks[:3]), 4, 1)
    assert wrong is not None and wrong.startswith("element 0 is ")
    assert "3 of 3 elements at index 0 mod 3 wrong" in wrong


def test_the_default_variants_are_gcurun_and_its_peers():
    from benchmarks.cluster_allreduce import parse_args

    assert parse_args([]).variants == ["gcurun-tcp", "gcurun-mpi", "mpirun", "gloo"]


def test_options_quote_bad_input():
    assert parse_layouts("2x1, 4x1,2x2") == [Layout(2, 1), Layout(4, 1), Layout(2, 2)]
    assert [parse_size(s) for s in ("64K", "64KiB", "256M", "1g", "65536")] == \
        [65536, 65536, 256 << 20, 1 << 30, 65536]
    assert parse_layouts("1x2") == [Layout(1, 2)]      # one host: shared memory only
    with pytest.raises(argparse.ArgumentTypeError, match="layout '1x1': write HOSTSxRANKS "
                                                         "with at least 2 ranks"):
        parse_layouts("2x1,1x1")
    with pytest.raises(argparse.ArgumentTypeError, match="size '100K': sizes are powers"):
        parse_size("100K")
    with pytest.raises(argparse.ArgumentTypeError, match="size '64 kb/s'"):
        parse_size("64 kb/s")
    with pytest.raises(argparse.ArgumentTypeError, match="variants 'nccl': pick from"):
        parse_variants("nccl")
    with pytest.raises(BenchmarkError, match="--min-bytes 2048 is above --max-bytes 1024"):
        size_range(2048, 1024)
    assert size_range(64 << 10, 1 << 20) == [64 << 10, 128 << 10, 256 << 10, 512 << 10,
                                               1 << 20]


def test_a_rank_reporting_a_wrong_result_stops_the_run():
    ours, theirs = socket.socketpair()
    try:
        rank = Rank(1, "h2", ours, ours.makefile("r", encoding="utf-8"))
        theirs.sendall(b'{"seconds": null, "error": "element 5 is 1.0, expected 2.0"}\n')
        with pytest.raises(BenchmarkError, match="gloo at 64 KiB: rank 1 on h2: element 5"):
            run_turn("gloo", [rank], 64 << 10, 3, 0.001)
        assert theirs.recv(100).startswith(b'{"cmd": "turn", "nbytes": 65536, "calls": 3}')
    finally:
        ours.close()
        theirs.close()


def result(layout: Layout, cores: int, sizes: tuple[int, ...] = (1 << 20, 16 << 20),
           variants: tuple[str, ...] = ("gcurun-tcp", "gcurun-mpi", "mpirun", "gloo")
           ) -> LayoutResult:
    rate = 2e9
    ideal = {n: n * 2 * (layout.ranks - 1) / layout.ranks / (rate / 8) for n in sizes}
    share = {"gcurun-tcp": 0.95, "gcurun-mpi": 0.9, "mpirun": 0.8, "gloo": 0.5,
             "gcurun-tcp-flat": 0.6, "gcurun-tcp-2level": 0.84}
    cells = {(n, v): Cell(3, [ideal[n] / share[v] * f for f in (1.0, 1.1, 0.95)], 3)
             for n in sizes for v in variants}
    return LayoutResult(layout, cores, int(rate), list(sizes), list(variants), cells,
                        (1.25, 2.5))


def test_the_table_has_a_row_per_size_and_variant_with_ratios_for_gcurun():
    table = format_table(result(Layout(2, 1), cores=2))
    rows = [line.split() for line in table.splitlines() if not line.startswith("#")]
    assert len(rows) == 8
    assert rows[0][:2] == ["1048576", "gcurun-tcp"] and rows[2][0] == "mpirun"
    tcp = rows[4][1:]                                       # 16 MiB, gcurun-tcp
    assert tcp[0] == "gcurun-tcp" and len(tcp) == 9         # ... link, vs mpirun, vs gloo
    assert float(tcp[6]) == pytest.approx(0.95, abs=0.01)   # busbw / link: the median round
    assert float(tcp[7]) == pytest.approx(0.95 / 0.8, abs=0.01)
    assert float(tcp[8]) == pytest.approx(0.95 / 0.5, abs=0.01)
    assert rows[6][0] == "mpirun" and len(rows[6]) == 7  # no ratios of its own
    assert "link-bound: 2 ranks on 2 cores" in table
    assert "#   gcurun-tcp: link met at 1 of 1 sizes; mpirun met at 2 of 2; gloo met " \
        "at 2 of 2" in table
    assert "#   gcurun-mpi: link met at 1 of 1 sizes" in table
    assert "results checked right on every rank: 24 turns of 4 variants" in table


def test_a_layout_with_more_ranks_than_cores_is_called_cpu_bound_without_goals():
    table = format_table(result(Layout(2, 2), cores=2))
    assert "CPU-bound: 4 ranks on 2 cores (MPI yields while idle); peers compared " \
        "without a goal" in table
    assert "# goals: none (CPU-bound layout)" in table
    assert "algbw x 1.50" in table


def test_two_levels_are_compared_with_the_flat_ring_at_64_mib():
    table = format_table(result(Layout(2, 2), 2, (16 << 20, 64 << 20),
                                ("gcurun-tcp-flat", "gcurun-tcp-2level")))
    rows = [line.split() for line in table.splitlines() if not line.startswith("#")]
    assert rows[2][:2] == [str(64 << 20), "gcurun-tcp-flat"] and len(rows[2]) == 8
    assert rows[3][0] == "gcurun-tcp-2level" and float(rows[3][-1]) == pytest.approx(1.4)
    assert "# goal: gcurun-tcp-2level >= 1.3 x flat's busbw at 64 MiB: 1.40 (met)" in table
    assert "load average (1 min) of this machine: 1.25 at the start, 2.50 at the end" in table


def test_one_host_has_no_goals():
    table = format_table(result(Layout(1, 2), 2))
    assert "one host: shared memory only, the link idle; 2 ranks on 2 cores" in table
    assert "# goals: none (one host)" in table
