"""Namespace hosts for the SSH integration tests, and a Slurm on namespace hosts of its own:
one of each per test session, torn down whatever happens. Without root, ip, unshare, sshd
(or Slurm and munge) the tests skip and say why."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster import slurm
from tests.cluster.netns import (
    NetnsCluster,
    reap_stale_clusters,
    start_cluster,
    stop_cluster,
    stop_on_signals,
    unavailable_reason,
)
from tests.cluster.slurm import SlurmCluster

REPO = Path(__file__).resolve().parents[2]
HOSTS = 3
SLURM_HOSTS = 3
SHAPED_RATE = "1gbit"


@pytest.fixture(scope="session")
def netns_cluster() -> NetnsCluster:
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    reap_stale_clusters()
    # The hosts share this machine's files; PYTHONPATH stands in for gcurun being
    # installed there, as it must be on real hosts.
    cluster = start_cluster(HOSTS, setenv={"PYTHONPATH": str(REPO)})
    stop_on_signals(cluster.name)
    try:
        yield cluster
    finally:
        stop_cluster(cluster.name)


@pytest.fixture(scope="session")
def shaped_cluster() -> Iterator[NetnsCluster]:
    """Two hosts whose links are shaped to SHAPED_RATE, each with a docker0 that leads
    nowhere and has the same address on both."""
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    if shutil.which("tc") is None:
        pytest.skip("'tc' not found; install iproute2")
    reap_stale_clusters()
    cluster = start_cluster(2, setenv={"PYTHONPATH": str(REPO)}, rate=SHAPED_RATE,
                            docker0=True)
    stop_on_signals(cluster.name)
    try:
        yield cluster
    finally:
        stop_cluster(cluster.name)


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """A real Slurm on namespace hosts of its own (h1..h3, 2 CPUs and 2 fake GPUs each),
    torn down whatever happens."""
    reason = slurm.unavailable_reason()
    if reason:
        pytest.skip(reason)
    reap_stale_clusters()
    cluster = start_cluster(SLURM_HOSTS)
    stop_on_signals(cluster.name)
    try:
        running = slurm.start_slurm(cluster)
        try:
            yield running
        finally:
            slurm.stop_slurm(running)
    finally:
        stop_cluster(cluster.name)


@pytest.fixture
def slurm_jobs(slurm_cluster: SlurmCluster) -> Iterator[SlurmCluster]:
    """The session's Slurm, left without jobs after the test (cancelled if need be), so
    the next test gets every node."""
    yield slurm_cluster
    slurm.cancel_all(slurm_cluster)
