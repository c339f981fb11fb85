"""The elastic job's rank plans come from the static planner: the first generation fills
the hosts discovery gives in order, up to max_np, and each rank carries its elastic
environment."""

from __future__ import annotations

from gcurun.config.api import ElasticSettings, Settings
from gcurun.hosts.api import HostSpec
from gcurun.launch.elastic.config import ElasticConfig
from gcurun.launch.elastic.plan import first_plan

HOSTS = (HostSpec("localhost", slots=2), HostSpec("127.0.0.1", slots=2))


def test_the_first_generation_fills_hosts_in_order_up_to_max_np():
    settings = Settings(elastic=ElasticSettings(min_np=1, max_np=3))
    plan = first_plan(["python3", "train.py"], settings, ElasticConfig(min_np=1, max_np=3),
                      HOSTS, liveness=4.0)
    assert [(h.name, h.slots) for h in plan.hosts] == [("localhost", 2), ("127.0.0.1", 1)]
    assert [(r.rank, r.host, r.local_rank, r.cross_rank) for r in plan.ranks] == [
        (0, "localhost", 0, 0), (1, "localhost", 1, 0), (2, "127.0.0.1", 0, 1)]
    env = [r.env for r in plan.ranks]
    assert [(e["GCURUN_RANK"], e["GCURUN_SIZE"], e["GCURUN_LOCAL_SIZE"],
             e["GCURUN_ELASTIC_WORKER"]) for e in env] == [
        ("0", "3", "2", "0"), ("1", "3", "2", "1"), ("2", "3", "1", "2")]
    assert {(e["GCURUN_ELASTIC"], e["HOROVOD_ELASTIC"], e["GCURUN_LIVENESS_TIMEOUT_SECONDS"])
            for e in env} == {("1", "1", "4")}


def test_without_max_np_every_slot_is_planned():
    plan = first_plan(["true"], Settings(), ElasticConfig(min_np=2), HOSTS, liveness=10.0)
    assert plan.size == 4
    assert {r.env["GCURUN_SIZE"] for r in plan.ranks} == {"4"}
