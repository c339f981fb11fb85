"""The tcp runtime across namespace hosts: the launcher serves the rendezvous, remote
ranks reach it at the launcher's address on their SSH connection."""

from __future__ import annotations

import sys

import pytest

from tests.helpers import RANKS, rank_reports, run_gcurun

pytestmark = [pytest.mark.cluster, pytest.mark.integration]


def test_allreduce_across_two_hosts_over_tcp(netns_cluster):
    res = run_gcurun("-np", "4", "-H", "h1:2,h2:2", "--ssh-config",
                     str(netns_cluster.ssh_config), sys.executable,
                     str(RANKS / "collective_check.py"), timeout=120)
    assert res.returncode == 0, res.stderr
    got = rank_reports(res.stdout)
    assert len(res.stdout.splitlines()) == 4 and sorted(got) == [0, 1, 2, 3]
    names = ["h1", "h1", "h2", "h2"]  # each namespace host has its own UTS hostname
    for rank, rep in got.items():
        assert rep["backend"] == "tcp"
        assert rep["checksum"] == sum(range(1001)) * 10
        assert rep["hosts"] == names
        assert (rep["local_rank"], rep["cross_rank"]) == (rank % 2, rank // 2)
