"""RayExecutor refuses arguments that make no job, quoting them (pure: no Ray)."""

from __future__ import annotations

import pytest

from gcurun.errors import UsageError
from gcurun.ray import RayExecutor, RayHostDiscovery, RayUsageError
from gcurun.ray.elastic import RayHostDiscovery as ElasticRayDiscovery
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
                         "group), num_hosts=H with num_workers_per_host=W, or min_workers=N "
                         "for an elastic job")


def test_counts_must_be_positive_whole_numbers():
    assert refused(num_workers=0) == ("RayExecutor(num_workers=0): num_workers must be a "
                                      "whole number of at least 1")
    assert refused(num_hosts=2, num_workers_per_host=0) == (
        "RayExecutor(num_workers_per_host=0): it must be a whole number of at least 1")


def test_gpus_per_worker_needs_use_gpu():
    assert refused(num_workers=1, gpus_per_worker=2) == (
        "RayExecutor(gpus_per_worker=2, use_gpu=False): gpus_per_worker needs use_gpu=True")


def test_elastic_arguments_are_checked_with_horovods_words():
    assert refused(min_workers=1, num_workers=1) == (
        "RayExecutor(min_workers=1, num_workers=1): Both `min_workers` and `num_workers` "
        "provided. Give min_workers (and max_workers) for an elastic job, or num_workers "
        "for a fixed-size one")
    assert refused(max_workers=4) == (
        "RayExecutor(max_workers=4, min_workers=None): `max_workers` provided without any "
        "positive `min_workers`; elastic jobs need min_workers of 1 or more")
    assert refused(min_workers=3, max_workers=2) == (
        "RayExecutor(max_workers=2) is below min_workers=3; give max_workers of at least 3")
    assert refused(min_workers=1, cooldown_range=(0, 10)) == (
        "RayExecutor(cooldown_range=(0, 10)): the lower limit 0 cannot be lower than 1 s")
    assert refused(min_workers=1, cooldown_range=(5, 4000)) == (
        "RayExecutor(cooldown_range=(5, 4000)): the upper limit 4000 cannot be higher than "
        "3600 s")
    assert refused(min_workers=1, cooldown_range=(9, 5)) == (
        "RayExecutor(cooldown_range=(9, 5)): MIN is above MAX; give MIN first")
    assert refused(min_workers=1, num_hosts=2) == (
        "RayExecutor(min_workers=1, num_hosts=2): an elastic job takes the hosts discovery "
        "finds; drop num_hosts")


def test_an_elastic_executor_takes_ray_discovery_unless_told_otherwise():
    settings = RayExecutor.create_settings()
    executor = RayExecutor(settings, min_workers=2, max_workers=4, cpus_per_worker=2)
    assert executor.settings.elastic is True
    executor.start()
    assert isinstance(settings.discovery, RayHostDiscovery)
    assert settings.discovery.cpus_per_worker == 2
    executor.shutdown()


def _nodes(*entries):
    return lambda: [{"NodeManagerAddress": name, "Resources": resources, "alive": alive}
                    for name, resources, alive in entries]


def test_ray_discovery_counts_the_slots_of_live_nodes(monkeypatch):
    import ray

    monkeypatch.setattr(ray, "nodes", _nodes(("10.0.0.1", {"CPU": 8, "GPU": 2}, True),
                                             ("10.0.0.2", {"CPU": 3}, True),
                                             ("10.0.0.3", {"CPU": 8}, False)))
    assert RayHostDiscovery(cpus_per_worker=2).find_available_hosts_and_slots() == {
        "10.0.0.1": 4, "10.0.0.2": 1}
    assert RayHostDiscovery(use_gpu=True, gpus_per_worker=1).find_available_hosts_and_slots() \
        == {"10.0.0.1": 2}
    assert ElasticRayDiscovery(use_gpu=True, cpus_per_slot=1, gpus_per_slot=2) \
        .find_available_hosts_and_slots() == {"10.0.0.1": 1}


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
