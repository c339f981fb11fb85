"""Namespace hosts with shaped links and a docker0 each: the options of
netns-cluster.sh that the cross-host benchmark and the interface tests build on."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.cluster.conftest import SHAPED_RATE
from tests.cluster.netns import NetnsCluster, measure_link_rate, shape_cluster
from tests.helpers import RANKS, rank_reports, run_gcurun

pytestmark = [pytest.mark.cluster, pytest.mark.integration]

RATE, RATE_BITS = SHAPED_RATE, 1e9


def qdiscs(cluster: NetnsCluster, index: int) -> tuple[str, str]:
    """tc's view of host ``index``'s link: the bridge's end, then the host's own."""
    host = cluster.hosts[index - 1]
    outer = subprocess.run(["tc", "qdisc", "show", "dev", f"{cluster.name}v{index}"],
                           capture_output=True, text=True, check=True, timeout=30).stdout
    inner = subprocess.run(["tc", "-n", host.netns, "qdisc", "show", "dev", "eth0"],
                           capture_output=True, text=True, check=True, timeout=30).stdout
    return outer, inner


def in_host(cluster: NetnsCluster, host: str, *argv: str) -> str:
    return subprocess.run(["ip", "netns", "exec", cluster.host(host).netns, *argv],
                          capture_output=True, text=True, check=True, timeout=30).stdout


def test_both_ends_of_every_link_carry_the_token_bucket(shaped_cluster):
    assert shaped_cluster.link_rate_bits == RATE_BITS
    for index in (1, 2):
        for end in qdiscs(shaped_cluster, index):
            assert "tbf" in end and "rate 1Gbit" in end, end


def test_a_tcp_stream_runs_near_the_set_rate_each_way(shaped_cluster):
    # A functional check that shaping is on (unshaped, these veths carry several times
    # more); TCP's payload gets at most 0.956 of a tbf rate at MTU 1500.
    for source, target in (("h1", "h2"), ("h2", "h1")):
        rate = measure_link_rate(shaped_cluster, source, target, seconds=1.5)
        assert 0.6 * RATE_BITS < rate < 1.05 * RATE_BITS, (source, target, rate)


def test_shape_off_removes_the_buckets_and_on_puts_them_back(shaped_cluster):
    unshaped = shape_cluster(shaped_cluster, None)
    try:
        assert unshaped.link_rate_bits is None
        assert all("tbf" not in end for i in (1, 2) for end in qdiscs(unshaped, i))
    finally:
        reshaped = shape_cluster(shaped_cluster, RATE)
    assert reshaped.link_rate_bits == RATE_BITS
    assert all("tbf" in end for i in (1, 2) for end in qdiscs(reshaped, i))


def test_every_host_has_the_same_docker0_and_it_leads_nowhere(shaped_cluster):
    address = shaped_cluster.docker0
    assert address == "10.213.255.1"
    for host in ("h1", "h2"):
        links = in_host(shaped_cluster, host, "ip", "-4", "-o", "addr", "show", "dev",
                        "docker0")
        assert f"inet {address}/24" in links
        # The address is the host's own, and the rest of its /24 goes out docker0, whose
        # other end is inside the same namespace: nothing there reaches another host.
        assert in_host(shaped_cluster, host, "ip", "route", "get", address).startswith(
            f"local {address}")
        assert "dev docker0" in in_host(shaped_cluster, host, "ip", "route", "get",
                                        "10.213.255.2")
        routes = in_host(shaped_cluster, host, "ip", "-4", "route", "show")
        assert "default" not in routes


def test_a_four_rank_job_over_hosts_with_docker0_reduces_correctly(shaped_cluster):
    res = run_gcurun("-np", "4", "-H", "h1:2,h2:2", "--ssh-config",
                     str(shaped_cluster.ssh_config), sys.executable,
                     str(RANKS / "collective_check.py"), timeout=120)
    assert res.returncode == 0, res.stderr
    got = rank_reports(res.stdout)
    assert sorted(got) == [0, 1, 2, 3]
    assert all(rep["checksum"] == sum(range(1001)) * 10 for rep in got.values())
