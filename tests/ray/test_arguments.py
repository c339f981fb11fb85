"""RayExecutor refuses arguments that make no job, quoting them (pure: no Ray)."""

from __future__ import annotations

import pytest

from gcurun.errors import UsageError
from gcurun.ray import RayExecutor, RayUsageError
from gcurun.ray.runner import check_extra_env

pytestmark = pytest.mark.ray


def refused(**kwargs) -> str:
    with pytest.raises(RayUsageError) as raised:
        RayExecutor(RayExecutor.create_settings(), **kwargs)
    assert isinstance(raised.value, ValueError) and isinstance(raised.value, UsageError)
    return str(raised.value)


def test_num_workers_and_num_hosts_exclude_each_other():
    assert refused(num_workers=2, num_hosts=1) == (
        "RayExecutor(num_workers=2, num_hosts=1): give num_workers, or num_hosts with "
        "num_workers_per_host, not both")


def test_one_of_num_workers_and_num_hosts_is_needed():
    assert refused() == ("RayExecutor: give num_workers=N (ranks placed by the placement "
                         "group), or num_hosts=H with num_workers_per_host=W")


def test_counts_must_be_positive_whole_numbers():
    assert refused(num_workers=0) == ("RayExecutor(num_workers=0): num_workers must be a "
                                      "whole number of at least 1")
    assert refused(num_hosts=2, num_workers_per_host=0) == (
        "RayExecutor(num_workers_per_host=0): it must be a whole number of at least 1")


def test_gpus_per_worker_needs_use_gpu():
    assert refused(num_workers=1, gpus_per_worker=2) == (
        "RayExecutor(gpus_per_worker=2, use_gpu=False): gpus_per_worker needs use_gpu=True")


def test_elastic_parameters_are_refused_until_elastic_is_built():
    assert refused(min_workers=1, max_workers=4) == (
        "RayExecutor(min_workers=1, max_workers=4): elastic jobs on Ray are not built in "
        "gcurun.ray yet; give num_workers for a fixed-size job, or run an elastic job "
        "with gcurun --min-np over SSH")


def test_an_unknown_placement_strategy_is_refused():
    assert refused(num_workers=1, placement_strategy="pack") == (
        "RayExecutor(placement_strategy='pack'): use one of PACK, SPREAD, STRICT_PACK, "
        "STRICT_SPREAD")


def test_extra_env_vars_may_not_set_what_gcurun_sets_per_rank():
    with pytest.raises(RayUsageError) as raised:
        check_extra_env({"LOCAL_RANK": 3}, None)
    assert str(raised.value) == ("extra_env_vars={'LOCAL_RANK': 3, ...}: gcurun sets "
                                 "LOCAL_RANK for each rank from where Ray placed it; leave "
                                 "LOCAL_RANK out")
    assert check_extra_env({"OMP_PROC_BIND": 1}, None) == {"OMP_PROC_BIND": "1"}


def test_calls_before_start_say_to_start_first():
    executor = RayExecutor(RayExecutor.create_settings(), num_workers=1)
    with pytest.raises(RuntimeError, match=r"RayExecutor.execute\(\): the executor is not "
                                           r"running; call start\(\) first"):
        executor.execute(lambda _: None)
    executor.shutdown()                       # nothing to do, no error
