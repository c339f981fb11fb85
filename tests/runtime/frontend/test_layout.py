"""Local and cross ranks from the host of every rank."""

from __future__ import annotations

from gcurun.runtime.frontend.layout import RankLayout, derive_rank_layout


def test_two_hosts_of_two() -> None:
    hosts = ["a", "a", "b", "b"]
    assert [derive_rank_layout(hosts, r) for r in range(4)] == [
        RankLayout(0, 4, 0, 2, 0, 2, True), RankLayout(1, 4, 1, 2, 0, 2, True),
        RankLayout(2, 4, 0, 2, 1, 2, True), RankLayout(3, 4, 1, 2, 1, 2, True)]


def test_uneven_and_interleaved_hosts() -> None:
    hosts = ["a", "b", "a", "a"]
    got = [derive_rank_layout(hosts, r) for r in range(4)]
    assert [(t.local_rank, t.local_size) for t in got] == [(0, 3), (0, 1), (1, 3), (2, 3)]
    assert [(t.cross_rank, t.cross_size) for t in got] == [(0, 2), (1, 2), (0, 1), (0, 1)]
    assert not got[0].homogeneous
