"""`gcurun --mpi` with MPICH and Intel MPI across two namespace hosts: Hydra reaches the
second host over SSH with the cluster's ssh config (an ssh script as ``-launcher-exec``), the mpi
backend's allreduce runs through mpi4py on both, and a failing remote rank stops the job
with nothing left on either host."""

from __future__ import annotations

import json
import sys
import uuid

import pytest

from tests.cluster.test_mpi_cluster import RANK, nothing_left, with_token
from tests.helpers import RANKS, run_gcurun
from tests.launch.mpi.flavours import Flavour, each_flavour

pytest.importorskip("tests.cluster.netns", reason="the namespace-host fixture is not here")

pytestmark = [pytest.mark.cluster, pytest.mark.integration, pytest.mark.mpi,
              pytest.mark.long, each_flavour]

COLLECTIVE = str(RANKS / "collective_check.py")


def flavour_args(cluster, flavour: Flavour, *hosts: str) -> list[str]:
    return ["--mpi", "--mpirun", flavour.mpirun(), "-H", ",".join(hosts), "--ssh-config",
            str(cluster.ssh_config), "--network-interface", f"{cluster.subnet_prefix}.0/24",
            "--grace-seconds", "3"]


def test_allreduce_across_two_hosts(netns_cluster, flavour: Flavour):
    res = run_gcurun(*flavour_args(netns_cluster, flavour, "h1:1", "h2:1"), sys.executable,
                     COLLECTIVE, timeout=180)
    assert res.returncode == 0, res.stderr
    lines = sorted(res.stdout.splitlines())
    assert [line[:4] for line in lines] == ["[0] ", "[1] "], res.stdout
    reports = [json.loads(line[4:]) for line in lines]
    expected = sum(range(1001)) * 3
    assert [(r["backend"], r["rank"], r["size"], r["local_rank"], r["cross_rank"],
             r["checksum"], r["hosts"]) for r in reports] == [
        ("mpi", 0, 2, 0, 0, expected, ["h1", "h2"]),
        ("mpi", 1, 2, 0, 1, expected, ["h1", "h2"])]


def test_a_failing_remote_rank_stops_both_hosts(netns_cluster, flavour: Flavour):
    token = uuid.uuid4().hex
    script = (f"if [ $RANK = 3 ]; then sleep 0.5; exit 9; fi; sleep 120 & "
              f"GO_FILE=/nonexistent exec {sys.executable} {RANK} {token}")
    res = run_gcurun(*flavour_args(netns_cluster, flavour, "h1:2", "h2:2"), "bash", "-c",
                     script, token, timeout=180)
    assert res.returncode == 9, res.stderr
    assert "gcurun: job failed: rank 3 on h2 exited with code 9 (root cause)" in res.stderr
    assert nothing_left(token), [p.cmdline() for p in with_token(token)]
