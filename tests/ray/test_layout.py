"""How a Ray job's actors become ranks (pure: no Ray)."""

from __future__ import annotations

import pytest

from gcurun.ray._layout import WorkerSite, host_names, rank_order, rank_places, worker_environments
from gcurun.ray.runner import Coordinator, MiniSettings

pytestmark = pytest.mark.ray


def test_ranks_are_numbered_node_by_node_in_order_of_first_appearance():
    assert rank_order(["b", "a", "b", "c", "a"]) == [0, 2, 1, 4, 3]


def test_uneven_nodes_get_horovods_cross_ranks():
    places = rank_places(["a", "a", "a", "b", "c", "c"])
    assert [(p.local_rank, p.local_size) for p in places] == \
        [(0, 3), (1, 3), (2, 3), (0, 1), (0, 2), (1, 2)]
    assert [(p.cross_rank, p.cross_size) for p in places] == \
        [(0, 3), (0, 2), (0, 1), (1, 3), (2, 3), (1, 2)]
    assert [p.node_rank for p in places] == [0, 0, 0, 1, 2, 2]


def test_nodes_sharing_an_address_are_named_by_node_id():
    sites = [WorkerSite("n1", "10.0.0.1"), WorkerSite("n2", "10.0.0.1"),
             WorkerSite("n3", "10.0.0.2")]
    assert host_names(sites) == ["n1", "n2", "10.0.0.2"]


def test_each_rank_sees_its_nodes_gpus_in_local_rank_order():
    sites = [WorkerSite("a", "10.0.0.1", ("3",)), WorkerSite("a", "10.0.0.1", ("1",)),
             WorkerSite("b", "10.0.0.2", ("0",))]
    envs = worker_environments(sites, master_port=29500, device_var="CUDA_VISIBLE_DEVICES")
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["3,1", "3,1", "0"]
    assert [e["GCURUN_DEVICE"] for e in envs] == ["3", "1", "0"]
    assert [e["LOCAL_RANK"] for e in envs] == ["0", "1", "0"]
    assert [e["HOROVOD_CROSS_SIZE"] for e in envs] == ["2", "1", "2"]
    assert {e["MASTER_ADDR"] for e in envs} == {"10.0.0.1"}
    assert envs[2]["GCURUN_HOSTNAME"] == "10.0.0.2"


def test_without_gpus_no_device_variable_is_set():
    envs = worker_environments([WorkerSite("a", "10.0.0.1")] * 2, master_port=1234,
                               device_var=None)
    assert "CUDA_VISIBLE_DEVICES" not in envs[0] and "GCURUN_DEVICE" not in envs[0]
    assert envs[1]["GCURUN_RANK"] == "1" and envs[1]["MASTER_PORT"] == "1234"


def test_coordinator_registration_in_any_rank_order():
    coordinator = Coordinator(MiniSettings())
    for rank in (3, 0, 2, 1):
        coordinator.register("h", node_id="a" if rank % 2 == 0 else "b", world_rank=rank)
    assert coordinator.world_size == 4
    assert coordinator.node_id_string == "b:2,a:2"
    info = coordinator.finalize_registration()
    assert info[0] == {"HOROVOD_CROSS_RANK": 0, "HOROVOD_CROSS_SIZE": 2,
                       "HOROVOD_LOCAL_RANK": 0, "HOROVOD_LOCAL_SIZE": 2}
    assert info[3]["HOROVOD_LOCAL_RANK"] == 1 and info[3]["HOROVOD_CROSS_RANK"] == 1


@pytest.mark.parametrize("nodes", [["a", "b", "b", "a"], ["a", "b", "c", "c", "a", "b", "a"],
                                   ["a", "a", "a", "b", "c", "c"]])
def test_ranks_get_the_places_the_runtime_derives(nodes):
    from gcurun.runtime.frontend.layout import derive_rank_layout

    for place in rank_places(nodes):
        derived = derive_rank_layout(nodes, place.rank)
        assert (place.local_rank, place.local_size, place.cross_rank, place.cross_size) == \
            (derived.local_rank, derived.local_size, derived.cross_rank, derived.cross_size)
