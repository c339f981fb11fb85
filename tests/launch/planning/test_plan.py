from __future__ import annotations

import pytest

from gcurun.errors import PlanError
from gcurun.hosts.api import HostSpec
from gcurun.launch.planning.plan import assign_ranks, build_plan

A8B8 = (HostSpec("a", 8), HostSpec("b", 8))


def test_slots_fill_in_host_order():
    assert assign_ranks(A8B8, 12, False) == [8, 4]
    assert assign_ranks(A8B8, None, False) == [8, 8]
    assert assign_ranks(A8B8, 3, False) == [3, 0]


def test_oversubscription_deals_round_robin_within_max_slots():
    hosts = (HostSpec("a", 1), HostSpec("b", 1, max_slots=2))
    assert assign_ranks(hosts, 5, True) == [3, 2]


def test_too_many_ranks_is_an_error_naming_the_arithmetic():
    with pytest.raises(PlanError) as err:
        assign_ranks(A8B8, 17, False)
    assert str(err.value) == (
        "-np 17 asks for more ranks than the 16 slots of the hosts (a:8, b:8); "
        "add hosts or slots, lower -np, or pass --oversubscribe")


def test_max_slots_bound_oversubscription():
    with pytest.raises(PlanError, match="exceeds max_slots"):
        assign_ranks((HostSpec("a", 1, max_slots=1),), 2, True)


@pytest.mark.parametrize("np", [0, -3])
def test_np_must_be_positive(np):
    with pytest.raises(PlanError, match=f"-np {np}: the number of ranks must be at least 1"):
        assign_ranks(A8B8, np, False)


def test_cross_rank_follows_horovod():
    # a has 3 ranks, b has 1: local rank 0 exists on both hosts, 1 and 2 only on a.
    plan = build_plan((HostSpec("a", 3), HostSpec("b", 1)), ["x"])
    got = [(r.host, r.local_rank, r.cross_rank, r.cross_size, r.node_rank) for r in plan.ranks]
    assert got == [("a", 0, 0, 2, 0), ("a", 1, 0, 1, 0), ("a", 2, 0, 1, 0), ("b", 0, 1, 2, 1)]


def test_environment_contract_for_one_rank():
    plan = build_plan(A8B8, ["python", "t.py"], np=16, master_port=1234,
                      job_env={"FOO": "1", "RANK": "overridden"})
    env = plan.ranks[9].env
    expected = {
        "GCURUN_RANK": "9", "GCURUN_SIZE": "16", "GCURUN_LOCAL_RANK": "1",
        "GCURUN_LOCAL_SIZE": "8", "GCURUN_CROSS_RANK": "1", "GCURUN_CROSS_SIZE": "2",
        "GCURUN_HOSTNAME": "b", "RANK": "9", "WORLD_SIZE": "16", "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "8", "GROUP_RANK": "1", "MASTER_ADDR": "a",
        "MASTER_PORT": "1234", "FOO": "1", "PYTHONUNBUFFERED": "1",
    }
    for key, value in expected.items():
        assert env[key] == value, key
        if key.startswith("GCURUN_"):
            assert env["HOROVOD_" + key[7:]] == value
    assert env["TOPS_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7" and env["GCURUN_DEVICE"] == "1"
    assert env["FLAGS_selected_gcus"] == env["JAX_LOCAL_DEVICE_IDS"] == "1"


def test_devices_are_opaque_and_per_host():
    hosts = (HostSpec("a", 2, devices=("gcu3", "gcu7")), HostSpec("b", 2))
    plan = build_plan(hosts, ["x"], devices=("0", "2"))
    assert [r.device for r in plan.ranks] == ["gcu3", "gcu7", "0", "2"]


def test_short_device_list_is_an_error():
    with pytest.raises(PlanError) as err:
        build_plan((HostSpec("a", 4),), ["x"], devices=("0", "1"))
    assert str(err.value) == ("host 'a' runs 4 ranks but --devices 0,1 lists only 2; "
                              "list at least 4 devices or place fewer ranks there")


def test_no_accelerator_sets_no_device_variable():
    plan = build_plan((HostSpec("a", 2),), ["x"], device_var=None)
    assert all(r.device is None for r in plan.ranks)
    assert not any(k.endswith("VISIBLE_DEVICES") for k in plan.ranks[0].env)


def test_locality_and_launcher_choice():
    local = build_plan((HostSpec("localhost", 2),), ["x"])
    assert local.launcher == "local" and local.master_addr == "127.0.0.1"
    assert all(r.is_local for r in local.ranks)
    mixed = build_plan((HostSpec("localhost", 1), HostSpec("b", 1)), ["x"],
                       master_addr="10.0.0.1")
    assert mixed.launcher == "ssh" and [r.is_local for r in mixed.ranks] == [True, False]
    assert mixed.ranks[1].env["MASTER_ADDR"] == "10.0.0.1"
    here_first = build_plan((HostSpec("localhost", 1), HostSpec("b", 1)), ["x"],
                            this_host="launcher.example")
    assert here_first.master_addr == "launcher.example"
    remote_first = build_plan((HostSpec("b", 1), HostSpec("localhost", 1)), ["x"])
    assert remote_first.master_addr == "b"


def test_empty_command_and_hosts():
    with pytest.raises(PlanError, match="no command given"):
        build_plan(A8B8, [])
    with pytest.raises(PlanError, match="no hosts given"):
        build_plan((), ["x"])


def test_a_plan_holds_at_most_max_ranks():
    huge = [HostSpec("a", 1 << 19), HostSpec("b", (1 << 19) + 1)]
    with pytest.raises(PlanError, match=r"the hosts have 1048577 slots in all, and a rank "
                                        r"for each is more than the 1048576 ranks"):
        assign_ranks(huge, None, False)
    with pytest.raises(PlanError, match=r"-np 1048577: gcurun plans at most 1048576 ranks"):
        assign_ranks([HostSpec("a", 8)], 1048577, True)


# -- what each rank's device variable lists ---------------------------------------------------

def device_view(plan):
    """(host, device variable, GCURUN_DEVICE) per rank, after checking that every
    variable naming the rank's device agrees: index LOCAL_RANK of its host's list, or
    index 0 of its own alone under isolation."""
    rows = []
    for r in plan.ranks:
        visible = r.env[plan.device_var].split(",")
        index = 0 if plan.device_isolation else r.local_rank
        assert visible[index] == r.env["GCURUN_DEVICE"] == r.device, r.rank
        assert tuple(visible) == r.visible_devices, r.rank
        assert r.env["FLAGS_selected_gcus"] == r.env["JAX_LOCAL_DEVICE_IDS"] == str(index)
        rows.append((r.host, r.env[plan.device_var], r.env["GCURUN_DEVICE"]))
    return rows


def test_every_rank_of_a_host_sees_its_hosts_devices_in_local_rank_order():
    plan = build_plan((HostSpec("a", 4), HostSpec("b", 4)), ["x"])
    assert not plan.device_isolation
    assert device_view(plan) == [("a", "0,1,2,3", str(i)) for i in range(4)] + \
        [("b", "0,1,2,3", str(i)) for i in range(4)]


def test_isolation_shows_each_rank_its_own_device_alone():
    plan = build_plan((HostSpec("a", 4), HostSpec("b", 4)), ["x"], device_isolation=True)
    assert plan.device_isolation
    assert device_view(plan) == [(h, str(i), str(i)) for h in "ab" for i in range(4)]


@pytest.mark.parametrize("isolation", [False, True])
def test_a_devices_subset_is_listed_in_its_own_order(isolation):
    plan = build_plan((HostSpec("a", 4), HostSpec("b", 4)), ["x"], np=6,
                      devices=("6", "2", "4", "0"), device_isolation=isolation)
    if isolation:
        assert device_view(plan) == [("a", d, d) for d in "6240"] + \
            [("b", d, d) for d in "62"]
    else:
        # b runs two ranks, yet sees every device chosen for it: index 0 and 1 are theirs.
        assert device_view(plan) == [("a", "6,2,4,0", d) for d in "6240"] + \
            [("b", "6,2,4,0", d) for d in "62"]


def test_a_hosts_own_devices_win_over_the_default_list():
    hosts = (HostSpec("a", 2, devices=("gcu3", "gcu7")), HostSpec("b", 2))
    plan = build_plan(hosts, ["x"], devices=("5", "1"))
    assert device_view(plan) == [("a", "gcu3,gcu7", "gcu3"), ("a", "gcu3,gcu7", "gcu7"),
                                 ("b", "5,1", "5"), ("b", "5,1", "1")]


@pytest.mark.parametrize("isolation", [False, True])
def test_oversubscribed_hosts_number_a_device_per_rank(isolation):
    plan = build_plan((HostSpec("a", 2), HostSpec("b", 2)), ["x"], np=6, oversubscribe=True,
                      device_isolation=isolation)
    shown = [v for _, v, _ in device_view(plan)]
    assert shown == (["0", "1", "2"] * 2 if isolation else ["0,1,2"] * 6)


def test_without_a_device_variable_no_rank_names_a_device():
    plan = build_plan((HostSpec("a", 2),), ["x"], device_var=None)
    assert all(r.visible_devices is None for r in plan.ranks)
    assert not any("GCURUN_DEVICE" in r.env or "FLAGS_selected_gcus" in r.env
                   for r in plan.ranks)
