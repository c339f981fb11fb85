"""Where a Spark job's ranks go (gcurun.spark._layout), with no Spark."""

from __future__ import annotations

from gcurun.spark._layout import TaskReport, assign_ranks, host_of, task_environment


def test_host_of_executor_addresses():
    assert [host_of(a) for a in ("10.0.0.1:4040", "[::1]:7077", "node")] == \
        ["10.0.0.1", "::1", "node"]


def test_ranks_are_grouped_by_host_in_order_of_first_task():
    places = assign_ranks(["a", "b", "a", "c", "b"])
    assert [(p.rank, p.host, p.local_rank, p.local_size) for p in places] == [
        (0, "a", 0, 2), (2, "b", 0, 2), (1, "a", 1, 2), (4, "c", 0, 1), (3, "b", 1, 2)]
    assert [(p.cross_rank, p.cross_size) for p in places] == [
        (0, 3), (1, 3), (0, 2), (2, 3), (1, 2)]


def test_devices_spark_assigned_are_listed_per_host_in_local_rank_order():
    reports = [TaskReport(("3",), 5000), TaskReport(("1",), 5001), TaskReport(("0",), 5002)]
    env = task_environment(["a", "b", "a"], reports, 2, "CUDA_VISIBLE_DEVICES")
    assert (env["GCURUN_RANK"], env["GCURUN_LOCAL_RANK"]) == ("1", "1")
    assert (env["CUDA_VISIBLE_DEVICES"], env["GCURUN_DEVICE"]) == ("3,0", "0")
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("a", "5000")


def test_without_spark_devices_local_ranks_are_the_devices():
    env = task_environment(["a", "a"], [TaskReport(), TaskReport()], 1, "TOPS_VISIBLE_DEVICES")
    assert (env["TOPS_VISIBLE_DEVICES"], env["GCURUN_DEVICE"]) == ("0,1", "1")
    assert "TOPS_VISIBLE_DEVICES" not in task_environment(["a"], [TaskReport()], 0, None)


def test_nics_name_one_network_for_the_tcp_runtime():
    import pytest

    from gcurun.spark import SparkUsageError
    from gcurun.spark.runner import check_num_proc, network_environment

    assert network_environment({"eth1"}) == {"GCURUN_NETWORK_INTERFACE": "eth1"}
    assert network_environment("10.0.0.0/24") == {"GCURUN_NETWORK_INTERFACE": "10.0.0.0/24"}
    assert network_environment(None) == {}
    with pytest.raises(SparkUsageError) as caught:
        network_environment(["eth0", "eth1"])
    assert str(caught.value) == ("nics=['eth0', 'eth1']: gcurun's ranks use one network; "
                                 "give one interface name (eth0) or a CIDR (10.0.0.0/24)")
    with pytest.raises(SparkUsageError) as caught:
        check_num_proc(0, 2)
    assert str(caught.value) == ("gcurun.spark.run(num_proc=0): num_proc must be a whole "
                                 "number of at least 1 (one rank per Spark task)")
    assert check_num_proc(None, 3) == 3
