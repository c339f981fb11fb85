"""Namespace hosts for the SSH integration tests: one cluster per test session, torn down
whatever happens. Without root, ip, unshare or sshd the tests skip and say why."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cluster.netns import (
    NetnsCluster,
    reap_stale_clusters,
    start_cluster,
    stop_cluster,
    stop_on_signals,
    unavailable_reason,
)

REPO = Path(__file__).resolve().parents[2]
HOSTS = 3


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
