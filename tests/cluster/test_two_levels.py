"""The two-level allreduce across namespace hosts, on both backends: exact sums of
uneven sizes, single tensors and fused batches, and the timeline naming what ran
(correctness only; the speed is the cross-host benchmark's business)."""

from __future__ import annotations

import shutil
import sys

import pytest

from tests.helpers import RANKS, rank_reports, run_gcurun

pytestmark = [pytest.mark.cluster, pytest.mark.integration]

CHECK = str(RANKS / "two_levels_check.py")
TWO_LEVELS = ["LOCAL_ALLGATHER", "LOCAL_REDUCESCATTER", "CROSS_ALLGATHER",
              "CROSS_REDUCESCATTER"]
FLAT = ["RING_ALLGATHER", "RING_REDUCESCATTER"]


def run_check(cluster, tmp_path, hosts: str, *options: str) -> dict[int, dict]:
    res = run_gcurun("-H", hosts, "--ssh-config", str(cluster.ssh_config),
                     "-x", f"CHECK_DIR={tmp_path}", *options, sys.executable, CHECK,
                     timeout=240)
    assert res.returncode == 0, res.stderr[-3000:]
    reports = rank_reports(res.stdout)
    size = sum(int(spec.split(":")[1]) for spec in hosts.split(","))
    assert sorted(reports) == list(range(size)), res.stdout
    for report in reports.values():
        assert report["bad"] == [], report
    return reports


@pytest.mark.parametrize(("options", "ran"), [
    (("--hierarchical-allreduce",), TWO_LEVELS),
    (("--no-hierarchical-allreduce",), FLAT),
    ((), TWO_LEVELS),     # automatic: shared memory beats the network at every size here
], ids=["forced", "off", "automatic"])
def test_two_hosts_of_two_ranks_over_tcp(netns_cluster, tmp_path, options, ran):
    for report in run_check(netns_cluster, tmp_path, "h1:2,h2:2", *options).values():
        assert report["backend"] == "tcp"
        assert set(ran) <= set(report["phases"]), report
        assert not set(TWO_LEVELS + FLAT) - set(ran) & set(report["phases"]), report


@pytest.mark.mpi
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs mpirun")
def test_two_hosts_of_two_ranks_over_mpi_by_horovods_variable(netns_cluster, tmp_path):
    reports = run_check(netns_cluster, tmp_path, "h1:2,h2:2", "--mpi",
                        "--network-interface", f"{netns_cluster.subnet_prefix}.0/24",
                        "-x", "HOROVOD_HIERARCHICAL_ALLREDUCE=1")
    for report in reports.values():
        assert report["backend"] == "mpi"
        assert set(TWO_LEVELS) <= set(report["phases"]) and \
            not set(FLAT) & set(report["phases"]), report


@pytest.mark.mpi
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs mpirun")
def test_two_hosts_of_one_rank_over_mpi_stream_the_ring(netns_cluster, tmp_path):
    """Between hosts the mpi transport leaves the ring's chunks in flight (and gcurun
    gives Open MPI an eager limit above them): exact sums, the flat ring."""
    reports = run_check(netns_cluster, tmp_path, "h1:1,h2:1", "--mpi",
                        "--network-interface", f"{netns_cluster.subnet_prefix}.0/24")
    for report in reports.values():
        assert report["backend"] == "mpi" and report["streams"], report
        assert set(FLAT) <= set(report["phases"]), report


def test_three_hosts_of_two_ranks_and_uneven_hosts(netns_cluster, tmp_path):
    """Three hosts take two levels; hosts with different numbers of ranks cannot, and
    run the flat ring even when told to take two levels."""
    for report in run_check(netns_cluster, tmp_path, "h1:2,h2:2,h3:2",
                            "--hierarchical-allreduce").values():
        assert set(TWO_LEVELS) <= set(report["phases"]), report
    for report in run_check(netns_cluster, tmp_path, "h1:2,h2:1",
                            "--hierarchical-allreduce").values():
        assert set(FLAT) <= set(report["phases"]) and \
            not set(TWO_LEVELS) & set(report["phases"]), report
