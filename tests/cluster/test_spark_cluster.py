"""gcurun.spark on a Spark standalone cluster across the namespace hosts: the master on
h1, a worker of one core on each host, the driver on h1. Every JVM and rank is gone after
each test."""

from __future__ import annotations

import pytest

from tests.cluster.spark_standalone import (
    DRIVER,
    drive,
    left_on_hosts,
    start_standalone,
    stop_standalone,
)

pytestmark = [pytest.mark.cluster, pytest.mark.integration, pytest.mark.long]


@pytest.fixture
def standalone(netns_cluster, tmp_path):
    pytest.importorskip("pyspark")
    running = start_standalone(netns_cluster, tmp_path / "spark")
    try:
        yield running
    finally:
        left = stop_standalone(running)
    assert not any(left.values()), f"Spark or job processes outlived the test: {left}"


def test_run_puts_three_ranks_on_three_hosts(standalone):
    outcome = drive(standalone, DRIVER, {"function": "where", "num_proc": 3})
    assert "error" not in outcome, outcome
    results = outcome["results"]
    hosts = standalone.cluster.hosts
    assert [r["rank"] for r in results] == [0, 1, 2]
    # Each rank's line came back from its host to the driver's stdout.
    lines = outcome["stdout"].splitlines()
    assert all(f"[{r['rank']}] rank {r['rank']} on {r['host']}" in lines for r in results)
    assert all(r["size"] == 3 and r["sum"] == 6.0 and r["local_rank"] == 0 for r in results)
    assert sorted(r["host"] for r in results) == sorted(h.address for h in hosts)
    by_address = {h.address: h for h in hosts}
    assert all(r["netns"] == by_address[r["host"]].net_namespace_inode() for r in results)
    # The job's driver has stopped its session: its executors and ranks are gone while
    # the master and workers still run.
    left = left_on_hosts(standalone.cluster, marks=("CoarseGrainedExecutorBackend",
                                                     "pyspark.daemon", "run_function"))
    assert not any(left.values()), left


def test_run_with_use_mpi_starts_the_daemons_inside_the_tasks_of_three_hosts(standalone):
    outcome = drive(standalone, DRIVER, {"function": "where", "num_proc": 3, "use_mpi": True})
    assert "error" not in outcome, outcome
    results = outcome["results"]
    hosts = standalone.cluster.hosts
    assert [r["rank"] for r in results] == [0, 1, 2]
    assert all(r["size"] == 3 and r["sum"] == 6.0 and r["local_rank"] == 0 for r in results)
    assert sorted(r["host"] for r in results) == sorted(h.address for h in hosts)
    by_address = {h.address: h for h in hosts}
    assert all(r["netns"] == by_address[r["host"]].net_namespace_inode() for r in results)
    lines = outcome["stdout"].splitlines()
    assert all(f"[{r['rank']}] rank {r['rank']} on {r['host']}" in lines for r in results)
    # h1 runs the driver, whose mpirun starts h1's rank itself; the other hosts' ranks
    # are children of an MPI daemon that is a child of the Spark task's Python worker.
    for r in results:
        if r["host"] == hosts[0].address:
            continue
        chain = r["ancestors"]
        daemon = next(i for i, cmd in enumerate(chain) if "prted" in cmd)
        assert any("pyspark" in cmd for cmd in chain[daemon + 1:]), chain
    left = left_on_hosts(standalone.cluster, marks=(
        "CoarseGrainedExecutorBackend", "pyspark.daemon", "run_function", "prted",
        "prterun", "mpirun", "mpi_shim", "gcurun.spark._rsh"))
    assert not any(left.values()), left


def test_an_executor_killed_under_run_elastic_reforms_the_job(standalone, tmp_path):
    outcome = drive(standalone, DRIVER, {
        "function": "elastic_steps", "args": [4, str(tmp_path)],
        "kill_executor_of": str(tmp_path),
        "elastic": {"num_proc": 3, "min_num_proc": 2, "max_num_proc": 3,
                    "start_timeout": 300, "elastic_timeout": 300}})
    assert "error" not in outcome, outcome
    results = outcome["results"]
    killed = int((tmp_path / "kill").read_text().split()[1])
    assert results and killed not in [r["pid"] for r in results]
    # Steps 0 (3 workers) and then 3 more steps with 2 or 3 workers each.
    assert all(3.0 + 3 * 2.0 <= r["total"] <= 12.0 for r in results), results
