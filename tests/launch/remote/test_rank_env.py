"""The rank environment's Paddle and JAX variables: what their own launchers set
(docs/frameworks.md), computed from a rank's place in the plan."""

from __future__ import annotations

import pytest

from gcurun.hosts.api import HostSpec
from gcurun.launch.planning.plan import build_plan
from gcurun.launch.remote.rank_env import (
    PER_RANK_VARIABLES,
    Endpoints,
    endpoint_port,
    paddle_endpoints,
    rank_environment,
)


def env_of(rank=1, device_var="TOPS_VISIBLE_DEVICES", device="1", **kw):
    args = dict(rank=rank, size=4, local_rank=rank % 2, local_size=2, cross_rank=rank // 2,
                cross_size=2, node_rank=rank // 2, hostname="b", master_addr="a",
                master_port=29500, device_var=device_var, device=device)
    return rank_environment(**{**args, **kw})


def test_paddle_reads_what_its_launcher_would_set():
    endpoints = paddle_endpoints(["a", "b"], [2, 2], 29500)
    assert endpoints == ["a:29501", "a:29502", "b:29501", "b:29502"]
    env = env_of(rank=3, endpoints=Endpoints(endpoints), node_count=2)
    assert {k: v for k, v in env.items() if k.startswith("PADDLE_")} == {
        "PADDLE_TRAINER_ID": "3", "PADDLE_GLOBAL_RANK": "3", "PADDLE_TRAINERS_NUM": "4",
        "PADDLE_GLOBAL_SIZE": "4", "PADDLE_LOCAL_RANK": "1", "PADDLE_RANK_IN_NODE": "1",
        "PADDLE_LOCAL_SIZE": "2", "PADDLE_NNODES": "2", "PADDLE_MASTER": "a:29500",
        "PADDLE_TRAINER_ENDPOINTS": "a:29501,a:29502,b:29501,b:29502",
        "PADDLE_CURRENT_ENDPOINT": "b:29502", "PADDLE_DISTRI_BACKEND": "xccl",
        "PADDLE_XCCL_BACKEND": "gcu"}
    # Isolated (no visible list given), the rank sees one device, its own, at index 0.
    assert env["FLAGS_selected_gcus"] == "0" and env["TOPS_VISIBLE_DEVICES"] == "1"
    assert env["JAX_COORDINATOR_ADDRESS"] == "a:29500" and env["JAX_LOCAL_DEVICE_IDS"] == "0"
    assert env["GCURUN_DEVICE"] == "1"


def test_a_rank_seeing_its_hosts_devices_is_told_its_index():
    env = env_of(rank=3, device="5", visible_devices=("7", "5"))
    assert (env["TOPS_VISIBLE_DEVICES"], env["GCURUN_DEVICE"]) == ("7,5", "5")
    assert env["FLAGS_selected_gcus"] == env["JAX_LOCAL_DEVICE_IDS"] == "1"
    # The same id twice: the local rank's entry is the rank's.
    assert env_of(rank=3, device="0", visible_devices=("0", "0"))["FLAGS_selected_gcus"] == "1"
    with pytest.raises(ValueError, match="device '9' is not among the visible devices '7,5'"):
        env_of(device="9", visible_devices=("7", "5"))


@pytest.mark.parametrize(("device_var", "flag", "backend"), [
    ("CUDA_VISIBLE_DEVICES", "FLAGS_selected_gpus", None),
    ("ROCR_VISIBLE_DEVICES", "FLAGS_selected_gpus", None),
    ("ASCEND_RT_VISIBLE_DEVICES", "FLAGS_selected_npus", "npu"),
    ("MLU_VISIBLE_DEVICES", "FLAGS_selected_mlus", "mlu"),
])
def test_each_accelerator_gets_paddles_device_flag(device_var, flag, backend):
    env = env_of(device_var=device_var)
    assert env[flag] == "0"
    assert env.get("PADDLE_XCCL_BACKEND") == backend
    assert env.get("PADDLE_DISTRI_BACKEND") == ("xccl" if backend else None)


def test_without_a_device_paddle_uses_gloo_and_jax_picks_no_device():
    for env in (env_of(device_var=None, device=None), env_of(device=None)):
        assert env["PADDLE_DISTRI_BACKEND"] == "gloo"
        assert not any(k.startswith("FLAGS_selected_") for k in env)
        assert "JAX_LOCAL_DEVICE_IDS" not in env and "PADDLE_XCCL_BACKEND" not in env
    # Without endpoints (a launcher that does not know them), none are made up.
    assert "PADDLE_TRAINER_ENDPOINTS" not in env_of() and "PADDLE_CURRENT_ENDPOINT" not in env_of()
    assert env_of()["PADDLE_NNODES"] == "2"         # the cross size stands in


def test_ipv6_addresses_are_bracketed_and_ports_stay_in_range():
    assert paddle_endpoints(["fe80::1"], [1], 29500) == ["[fe80::1]:29501"]
    assert env_of(master_addr="fe80::1")["PADDLE_MASTER"] == "[fe80::1]:29500"
    assert [endpoint_port(65534, lr) for lr in range(3)] == [65535, 65532, 65531]


def test_the_plan_names_local_hosts_by_loopback_or_this_hosts_name():
    alone = build_plan((HostSpec("localhost", slots=2),), ["x"], master_port=40000)
    assert alone.ranks[1].env["PADDLE_TRAINER_ENDPOINTS"] == "127.0.0.1:40001,127.0.0.1:40002"
    assert alone.ranks[1].env["PADDLE_MASTER"] == "127.0.0.1:40000"
    mixed = build_plan((HostSpec("localhost"), HostSpec("far")), ["x"], master_port=40000,
                       this_host="me.example")
    assert mixed.ranks[0].env["PADDLE_TRAINER_ENDPOINTS"] == "me.example:40001,far:40001"
    assert mixed.ranks[1].env["PADDLE_CURRENT_ENDPOINT"] == "far:40001"


def test_per_rank_variables_are_those_that_differ_between_ranks():
    plan = build_plan((HostSpec("a", slots=2), HostSpec("b", slots=2)), ["x"],
                      master_addr="a", master_port=40000)
    names = {n for r in plan.ranks for n in r.env}
    differ = {n for n in names if len({r.env.get(n) for r in plan.ranks}) > 1}
    assert differ - {"TOPS_VISIBLE_DEVICES"} <= PER_RANK_VARIABLES


def test_an_endpoint_list_longer_than_the_kernel_allows_is_left_out():
    """No program starts with one variable over 128 KiB (E2BIG): 10,000 ranks' endpoints
    would be 170 kB, so such ranks get their own endpoint and no list."""
    short = Endpoints(paddle_endpoints(["a"], [4], 29500))
    assert short.joined == "a:29501,a:29502,a:29503,a:29504"
    long = Endpoints(paddle_endpoints([f"node{i:04}" for i in range(1250)], [8] * 1250, 29500))
    assert long.joined is None
    env = env_of(rank=3, size=10000, endpoints=long)
    assert "PADDLE_TRAINER_ENDPOINTS" not in env
    assert env["PADDLE_CURRENT_ENDPOINT"] == "node0000:29504"
