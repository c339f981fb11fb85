"""The elastic driver's rules, driven by event sequences with a fake clock and RNG."""

from __future__ import annotations

import random

import pytest

from gcurun.launch.elastic.assignment import assign_slots, layout
from gcurun.launch.elastic.config import ElasticConfig
from gcurun.launch.elastic.driver import ElasticDriver
from gcurun.launch.elastic.events import (
    ADDED,
    REMOVED,
    Aborted,
    AbortGeneration,
    ConnectionLost,
    Discovered,
    Finish,
    Formed,
    Interrupt,
    Joined,
    NotifyHostsUpdated,
    Publish,
    StartWorkers,
    StopHost,
    Tick,
    WorkerExited,
)
from gcurun.launch.elastic.hosts import cooldown_seconds


class FixedRandom(random.Random):
    def __init__(self, value: float):
        super().__init__(0)
        self.value = value

    def uniform(self, a: float, b: float) -> float:
        return a + (b - a) * self.value


def of(actions, kind):
    return [a for a in actions if isinstance(a, kind)]


def hosts(*spec: str) -> tuple[tuple[str, int], ...]:
    return tuple((s.split(":")[0], int(s.split(":")[1])) for s in spec)


def started(driver: ElasticDriver, *spec: str, now: float = 0.0, **config):
    """A driver whose first generation formed and runs on ``spec``."""
    actions = driver.handle(Discovered(now, hosts(*spec)))
    gen = of(actions, Publish)[0].generation
    for a in gen.members:
        driver.handle(Joined(now, a.worker, 0))
    driver.handle(Formed(now, gen.number))
    assert driver.phase == "running"
    return gen


def make(min_np=2, **kw) -> ElasticDriver:
    return ElasticDriver(ElasticConfig(min_np=min_np, **kw), rng=FixedRandom(0.5))


def test_assignment_deals_slots_host_by_host_with_cross_ranks():
    slots = assign_slots([("a", 2), ("b", 1), ("c", 2)], None)
    assert slots == [("a", 0), ("a", 1), ("b", 0), ("c", 0), ("c", 1)]
    assert assign_slots([("a", 2), ("b", 2)], 3) == [("a", 0), ("a", 1), ("b", 0)]
    members = layout(slots, [10, 11, 12, 13, 14])
    assert [(m.rank, m.local_rank, m.local_size, m.cross_rank, m.cross_size)
            for m in members] == [(0, 0, 2, 0, 3), (1, 1, 2, 0, 2), (2, 0, 1, 1, 3),
                                  (3, 0, 2, 2, 3), (4, 1, 2, 1, 2)]


def test_start_waits_for_np_slots_then_forms_generation_one_with_sync():
    driver = make(min_np=2, start_np=3)
    assert of(driver.handle(Discovered(0, hosts("a:1", "b:1"))), Publish) == []
    actions = driver.handle(Discovered(1, hosts("a:1", "b:1", "c:1")))
    (publish,) = of(actions, Publish)
    assert publish.generation.number == 1 and publish.generation.sync
    assert [a.host for a in publish.generation.members] == ["a", "b", "c"]
    assert [s.host for s in of(actions, StartWorkers)] == ["a", "b", "c"]


def test_start_times_out_with_the_min_np_message():
    driver = make(min_np=3, elastic_timeout=5)
    driver.handle(Discovered(0, hosts("a:1", "b:1")))
    assert driver.handle(Tick(4.9)) == [] and driver.phase == "waiting"
    (finish,) = of(driver.handle(Tick(5.0)), Finish)
    assert finish.code == 1
    assert finish.message == (
        "timed out waiting for the minimum number of slots: only 2 available (a:1, b:1) "
        "but --min-np is 3, for the whole --elastic-timeout of 5 s; add hosts, lower "
        "--min-np or raise --elastic-timeout")


def test_failure_aborts_blacklists_and_reforms_with_the_survivors():
    driver = make()
    gen = started(driver, "a:1", "b:1", "c:1")
    actions = driver.handle(WorkerExited(10, gen.members[2].worker, None, 9))
    assert of(actions, AbortGeneration) == [AbortGeneration(1, "worker 2 on c was killed "
                                                               "by signal 9")]
    for a in gen.members[:2]:
        actions = driver.handle(Joined(11, a.worker, 1))
    assert of(actions, StopHost) == [StopHost("c", "worker 2 failed")]
    (publish,) = of(actions, Publish)
    new = publish.generation
    assert new.number == 2 and new.sync and new.workers == (0, 1)
    assert [a.host for a in new.members] == ["a", "b"]
    assert of(actions, StartWorkers) == []
    assert driver.hosts["c"].blacklisted and driver.resets == 1


def test_rank_zero_is_a_survivor_even_when_an_older_host_comes_back():
    driver = make(cooldown=(1, 2))
    gen = started(driver, "a:1", "b:1", "c:1")
    driver.handle(WorkerExited(1, gen.members[0].worker, 1))
    for a in gen.members[1:]:
        driver.handle(Joined(1, a.worker, 1))
    driver.handle(Formed(1, 2))
    # a's cooldown ends; discovery still lists it: readmitted, added after the holders
    actions = driver.handle(Discovered(10, hosts("a:1", "b:1", "c:1")))
    (start,) = of(actions, StartWorkers)
    assert start.host == "a" and start.assignments[0].rank == 2
    new_worker = start.assignments[0].worker
    assert of(driver.handle(Joined(11, new_worker, 0)), NotifyHostsUpdated) == [
        NotifyHostsUpdated(2, 1, ADDED)]
    actions = []
    for w in driver.generation.workers:
        actions += driver.handle(Joined(12, w, 2))
    (publish,) = of(actions, Publish)
    assert publish.generation.members[0].host == "b"
    assert publish.generation.sync


@pytest.mark.parametrize("count, low, high, expected", [
    (1, 1, 3600, 2.5), (2, 1, 3600, 4.5), (3, 1, 3600, 8.5),
    (1, 2, 3, 3.0), (3, 10, 20, 20.0), (1, 5, 5, 5.0)])
def test_cooldown_is_horovods_formula_clamped(count, low, high, expected):
    assert cooldown_seconds(count, low, high, 0.5) == expected


def test_blacklisted_host_comes_back_only_when_listed_after_its_cooldown():
    driver = make(min_np=1, cooldown=(1, 2))
    gen = started(driver, "a:1", "b:1")
    driver.handle(WorkerExited(0, gen.members[1].worker, 3))
    driver.handle(Joined(0, gen.members[0].worker, 1))
    assert driver.hosts["b"].cooldown_until == 2.0     # 1*2 + 0.5 -> clamped to 2
    driver.handle(Formed(0, 2))
    assert of(driver.handle(Discovered(1.5, hosts("a:1", "b:1"))), StartWorkers) == []
    assert of(driver.handle(Discovered(2.5, hosts("a:1"))), StartWorkers) == []
    assert driver.hosts["b"].blacklisted
    (start,) = of(driver.handle(Discovered(3, hosts("a:1", "b:1"))), StartWorkers)
    assert start.host == "b" and not driver.hosts["b"].blacklisted


def test_without_a_cooldown_range_the_blacklist_is_permanent():
    driver = make(min_np=1)
    gen = started(driver, "a:1", "b:1")
    driver.handle(WorkerExited(0, gen.members[1].worker, 3))
    driver.handle(Joined(0, gen.members[0].worker, 1))
    driver.handle(Formed(0, 2))
    assert of(driver.handle(Discovered(10_000, hosts("a:1", "b:1"))), StartWorkers) == []


def _add_then_remove(driver: ElasticDriver):
    """Horovod's test_reset_limit schedule: a host added, then one removed."""
    gen = started(driver, "a:1", "b:1")
    (start,) = of(driver.handle(Discovered(1, hosts("a:1", "b:1", "c:1"))), StartWorkers)
    driver.handle(Joined(1, start.assignments[0].worker, 0))
    actions = []
    for w in gen.workers:
        actions += driver.handle(Joined(2, w, 1))
    (publish,) = of(actions, Publish)
    driver.handle(Formed(2, 2))
    assert of(driver.handle(Discovered(3, hosts("a:1", "b:1"))), NotifyHostsUpdated) == [
        NotifyHostsUpdated(2, 2, REMOVED)]
    actions = []
    for w in publish.generation.workers:
        actions += driver.handle(Joined(4, w, 2))
    return actions


def test_reset_limit_one_fails_on_the_second_reset():
    (finish,) = of(_add_then_remove(make(reset_limit=1)), Finish)
    assert finish.code == 1
    assert "a reset was needed but the job was reset 1 times already, the --reset-limit" \
        in finish.message and finish.message.endswith("raise --reset-limit")


def test_reset_limit_two_allows_both_and_a_graceful_removal_skips_the_sync():
    actions = _add_then_remove(make(reset_limit=2))
    assert of(actions, Finish) == []
    (publish,) = of(actions, Publish)
    assert publish.generation.number == 3 and not publish.generation.sync
    assert publish.removed == (2,)
    assert not any(h.blacklisted for h in make().hosts.values())


def test_reset_limit_zero_allows_no_change():
    driver = make(reset_limit=0)
    gen = started(driver, "a:1", "b:1", "c:1")
    driver.handle(WorkerExited(1, gen.members[2].worker, 1))
    actions = []
    for w in gen.workers[:2]:
        actions += driver.handle(Joined(2, w, 1))
    assert of(actions, Finish)[0].code == 1


def test_removal_below_min_np_then_an_add_syncs_everyone():
    driver = make(min_np=3)
    gen = started(driver, "a:1", "b:1", "c:1")
    driver.handle(Discovered(1, hosts("a:1", "b:1")))
    actions = []
    for w in gen.workers:
        actions += driver.handle(Joined(2, w, 1))
    assert of(actions, Publish) == []
    assert driver.phase == "waiting"
    actions = driver.handle(Discovered(3, hosts("a:1", "b:1", "d:1")))
    (publish,) = of(actions, Publish)
    assert publish.generation.sync                   # d is new: everyone syncs
    assert [a.host for a in publish.generation.members] == ["a", "b", "d"]


def test_every_member_failing_ends_with_the_root_cause_code():
    driver = make()
    gen = started(driver, "a:1", "b:1")
    driver.handle(WorkerExited(1, gen.members[1].worker, None, 9))
    (finish,) = of(driver.handle(WorkerExited(2, gen.members[0].worker, 3)), Finish)
    assert finish.code == 137
    assert finish.message == ("every worker of generation 1 failed; the first failure: "
                              "worker 1 on b was killed by signal 9")


def test_lost_connection_counts_as_a_failure_and_the_barrier_has_a_deadline():
    driver = make(elastic_timeout=30)
    gen = started(driver, "a:1", "b:1", "c:1")
    driver.handle(ConnectionLost(5, gen.members[2].worker))
    driver.handle(Joined(6, gen.members[0].worker, 1))
    # b never re-joins: failed at the deadline, and blacklisted with c
    assert driver.handle(Tick(20)) == []
    actions = driver.handle(Tick(35))
    assert {s.host for s in of(actions, StopHost)} == {"b", "c"}
    # only a is left: below --min-np 2, so the job waits for slots
    assert driver.phase == "waiting"


def test_member_dying_while_the_next_generation_forms_is_another_reset():
    driver = make(min_np=1)
    gen = started(driver, "a:1", "b:1", "c:1")
    driver.handle(WorkerExited(1, gen.members[2].worker, 1))
    for w in gen.workers[:2]:
        driver.handle(Joined(2, w, 1))
    assert driver.phase == "forming" and driver.generation.number == 2
    actions = driver.handle(WorkerExited(3, gen.members[1].worker, None, 9))
    assert of(actions, AbortGeneration) == [AbortGeneration(2, "worker 1 on b was killed "
                                                               "by signal 9")]
    (publish,) = of(driver.handle(Joined(4, gen.members[0].worker, 2)), Publish)
    assert publish.generation.number == 3 and publish.generation.workers == (0,)
    assert driver.resets == 2


def test_no_survivor_holding_the_state_ends_the_job():
    driver = make(min_np=1)
    gen = started(driver, "a:1", "b:1", "c:1")
    driver.handle(Discovered(1, hosts("a:1", "b:1", "c:1", "d:1")))
    worker_d = driver.workers[3]
    driver.handle(Joined(1, worker_d.id, 0))
    driver.handle(WorkerExited(2, gen.members[0].worker, 1))
    driver.handle(WorkerExited(2, gen.members[1].worker, 1))
    (finish,) = of(driver.handle(WorkerExited(2, gen.members[2].worker, 1)), Finish)
    assert finish.message.startswith("every worker of generation 1 failed")


def test_prewarm_notifies_only_after_the_new_workers_joined():
    driver = make()
    started(driver, "a:1", "b:1")
    actions = driver.handle(Discovered(1, hosts("a:1", "b:1", "c:1")))
    (start,) = of(actions, StartWorkers)
    assert of(actions, NotifyHostsUpdated) == []
    assert of(driver.handle(Discovered(2, hosts("a:1", "b:1", "c:1"))), StartWorkers) == []
    notify = of(driver.handle(Joined(3, start.assignments[0].worker, 0)), NotifyHostsUpdated)
    assert notify == [NotifyHostsUpdated(1, 1, ADDED)]


def test_prewarmed_worker_dying_blacklists_its_host_without_a_reset():
    driver = make()
    started(driver, "a:1", "b:1")
    (start,) = of(driver.handle(Discovered(1, hosts("a:1", "b:1", "c:1"))), StartWorkers)
    actions = driver.handle(WorkerExited(2, start.assignments[0].worker, 1))
    assert of(actions, StopHost) == [StopHost("c", "worker 2 exited with code 1")]
    assert of(actions, AbortGeneration) == [] and driver.resets == 0
    assert driver.phase == "running"


def test_success_ends_the_job_with_rank_zeros_code_once_every_member_exited():
    driver = make()
    gen = started(driver, "a:1", "b:1")
    assert of(driver.handle(WorkerExited(5, gen.members[1].worker, 0)), Finish) == []
    assert of(driver.handle(WorkerExited(5, gen.members[0].worker, 0)), Finish) == [
        Finish(0, "")]


def test_discovery_failing_first_is_fatal_later_a_warning():
    from gcurun.launch.elastic.events import DiscoveryFailed

    driver = make()
    (finish,) = of(driver.handle(DiscoveryFailed(0, "bad", True, 2)), Finish)
    assert finish.code == 2
    driver = make()
    started(driver, "a:1", "b:1")
    assert of(driver.handle(DiscoveryFailed(1, "bad", False)), Finish) == []


def test_interrupt_finishes_with_128_plus_the_signal():
    driver = make()
    started(driver, "a:1", "b:1")
    assert of(driver.handle(Interrupt(1, 15)), Finish)[0].code == 143


def test_an_abort_from_a_member_reforms_without_blacklisting():
    driver = make()
    gen = started(driver, "a:1", "b:1")
    driver.handle(Aborted(1, 1, "rank 1: collective timed out"))
    actions = []
    for w in gen.workers:
        actions += driver.handle(Joined(2, w, 1))
    (publish,) = of(actions, Publish)
    assert publish.generation.sync and of(actions, StopHost) == []
