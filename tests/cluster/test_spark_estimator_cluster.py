"""The torch Estimator on a Spark standalone cluster across the namespace hosts (master
on h1, a worker of one core on each host, the driver on h1): examples/spark_estimator.py
fits on 3 ranks, one per host, and predicts a held-out DataFrame better than chance; every
rank ends with the same weights; no JVM or rank is left after the test."""

from __future__ import annotations

import pytest

from tests.cluster.spark_standalone import (
    ESTIMATOR_DRIVER,
    drive,
    start_standalone,
    stop_standalone,
)

pytestmark = [pytest.mark.cluster, pytest.mark.integration, pytest.mark.long]


@pytest.fixture
def standalone(netns_cluster, tmp_path):
    pytest.importorskip("pyspark")
    pytest.importorskip("torch")
    running = start_standalone(netns_cluster, tmp_path / "spark")
    try:
        yield running
    finally:
        left = stop_standalone(running)
    assert not any(left.values()), f"Spark or job processes outlived the test: {left}"


@pytest.mark.timeout(1500)
def test_an_estimator_fits_and_transforms_across_three_hosts(standalone, tmp_path):
    # The namespace hosts share this machine's file system: the store is one directory
    # that every executor reaches at the same path, as NFS would give.
    store = tmp_path / "store"
    outcome = drive(standalone, ESTIMATOR_DRIVER,
                    {"num_proc": 3, "epochs": 3, "store": str(store)}, timeout=1200)
    assert "error" not in outcome, outcome
    print(f"\nheld-out accuracy {outcome['accuracy']:.3f} on {outcome['rows']} rows, "
          f"chance {outcome['chance']:.3f}; digests {outcome['digests']}")
    assert outcome["accuracy"] > outcome["chance"] + 0.2
    assert len(outcome["digests"]) == 3 and len(set(outcome["digests"])) == 1
    assert (store / "runs" / "cluster" / "checkpoint.pt").exists()
