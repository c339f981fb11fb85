"""gcurun.run over SSH on namespace hosts: the function runs inside each host, its
results come back in rank order, a remote rank's exception is raised here."""

from __future__ import annotations

import os
import shutil
import socket

import pytest

import gcurun
from gcurun.errors import RankFunctionError

pytestmark = [pytest.mark.cluster, pytest.mark.integration]


@pytest.fixture
def profile(netns_cluster, tmp_path):
    path = tmp_path / "cluster.yaml"
    path.write_text(f"ssh:\n  config_file: {netns_cluster.ssh_config}\n"
                    "grace_seconds: 3\n")
    return str(path)


def test_results_come_back_from_every_host_in_rank_order(netns_cluster, profile):
    # Defined here, so it travels by value: this test module is no package the ranks
    # could import it from.
    def where() -> tuple[int, str, int]:
        return int(os.environ["GCURUN_RANK"]), socket.gethostname(), os.stat(
            "/proc/self/ns/net").st_ino

    got = gcurun.run(where, hosts="h1:2,h2:1", profile=profile)
    assert [(r, host) for r, host, _ in got] == [(0, "h1"), (1, "h1"), (2, "h2")]
    assert [ns for _, _, ns in got] == [netns_cluster.host(h).net_namespace_inode()
                                        for h in ("h1", "h1", "h2")]


def test_a_mixed_job_runs_the_launchers_rank_here_and_collectives_work(netns_cluster,
                                                                       profile):
    def total():
        import numpy as np

        import gcurun.runtime as hvd

        hvd.init()
        try:
            value = hvd.allreduce(np.array([hvd.rank() + 1.0]), op=hvd.Sum, name="t")
            return hvd.rank(), socket.gethostname(), float(value[0])
        finally:
            hvd.shutdown()

    got = gcurun.run(total, hosts="localhost:1,h2:1", profile=profile)
    assert got == [(0, socket.gethostname(), 3.0), (1, "h2", 3.0)]


def test_a_remote_ranks_exception_names_its_rank_and_host(netns_cluster, profile):
    def fail_on_h2():
        if socket.gethostname() == "h2":
            raise RuntimeError("no data on this host")
        import time

        time.sleep(60)

    with pytest.raises(RankFunctionError) as info:
        gcurun.run(fail_on_h2, hosts="h1:1,h2:1", profile=profile)
    assert (info.value.rank, info.value.host, info.value.error_type) == (
        1, "h2", "RuntimeError")
    assert str(info.value).startswith("rank 1 on h2 raised RuntimeError: no data on this host")


@pytest.mark.mpi
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs mpirun")
def test_under_mpirun_across_hosts_each_rank_reaches_the_launcher(netns_cluster, profile):
    def where() -> tuple[int, str, str]:
        return (int(os.environ["GCURUN_RANK"]), socket.gethostname(),
                os.environ["OMPI_COMM_WORLD_RANK"])

    got = gcurun.run(where, hosts="h1:1,h2:1", use_mpi=True, profile=profile,
                     network_interface=f"{netns_cluster.subnet_prefix}.0/24")
    assert got == [(0, "h1", "0"), (1, "h2", "1")]
