"""Which network the tcp backend uses between namespace hosts that each have a docker0
with the same address (leading nowhere): the one every peer reaches, the one named by
--network-interface (a name or a CIDR), and, where the chosen one reaches no peer, a
failure within the timeout that names both hosts and the addresses tried."""

from __future__ import annotations

import re
import sys

import pytest

from tests.helpers import RANKS, rank_reports, run_gcurun

pytestmark = [pytest.mark.cluster, pytest.mark.integration]

CHECK = str(RANKS / "collective_check.py")
TIMEOUT_SECONDS = 20        # the ranks' GCURUN_TIMEOUT_SECONDS in the failing cases


def run_job(cluster, hosts: str, *options: str):
    return run_gcurun("-H", hosts, "--ssh-config", str(cluster.ssh_config), *options,
                      "-x", f"GCURUN_TIMEOUT_SECONDS={TIMEOUT_SECONDS}", sys.executable,
                      CHECK, timeout=6 * TIMEOUT_SECONDS)


def reduced_right(res, size: int) -> None:
    assert res.returncode == 0, res.stderr[-3000:]
    got = rank_reports(res.stdout)
    assert sorted(got) == list(range(size)), res.stdout
    assert all(rep["backend"] == "tcp" for rep in got.values())
    assert all(rep["checksum"] == sum(range(1001)) * size * (size + 1) // 2
               for rep in got.values()), got


@pytest.mark.parametrize("choice", ["eth0", "cidr"])
def test_a_chosen_network_by_name_or_cidr(shaped_cluster, choice):
    network = "eth0" if choice == "eth0" else f"{shaped_cluster.subnet_prefix}.0/24"
    res = run_job(shaped_cluster, "h1:2,h2:2", "--network-interface", network)
    reduced_right(res, 4)


def test_a_network_that_leads_nowhere_fails_naming_both_hosts_and_the_addresses(
        shaped_cluster):
    """docker0 has the same address on every host: a rank trying a peer's docker0
    reaches its own host, which refuses it. The job fails (no hang), and the launcher's
    report says which ranks, on which hosts, could not connect over which addresses."""
    res = run_job(shaped_cluster, "h1:1,h2:1", "--network-interface", "docker0")
    assert res.returncode != 0, res.stdout
    address = re.escape(shaped_cluster.docker0)
    assert re.search(rf"rank 0 \(host h1\) cannot connect to rank 1 \(host h2\): tried "
                     rf"{address}:[0-9]+ \([a-z ]+\)", res.stderr), res.stderr[-3000:]
    assert "--network-interface" in res.stderr


def test_a_network_a_host_lacks_fails_saying_what_the_host_has(shaped_cluster):
    res = run_job(shaped_cluster, "h1:1,h2:1", "--network-interface", "10.9.9.0/24")
    assert res.returncode != 0, res.stdout
    assert re.search(r"network interface 10\.9\.9\.0/24: host h[12]: no address of this "
                     r"host is on 10\.9\.9\.0/24 \(it has .*docker0 "
                     + re.escape(shaped_cluster.docker0), res.stderr), res.stderr[-3000:]


def test_ranks_on_the_launchers_own_host_offer_an_address_the_others_reach(shaped_cluster):
    """Ranks on the launcher's host reach the rendezvous at 127.0.0.1; the hosts behind
    them must be offered another address (the lower rank on h1 connects to it)."""
    res = run_job(shaped_cluster, "h1:1,localhost:1,h2:1")
    reduced_right(res, 3)
