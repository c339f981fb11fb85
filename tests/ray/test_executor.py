"""RayExecutor on a real local Ray: ranks, collectives, the calls of Horovod's API, errors
naming their rank, and nothing of a job left after shutdown.

One local Ray (4 CPUs, tests/ray/conftest.py) serves them; a few executors of 2 ranks
run on it."""

from __future__ import annotations

import os
import sys

import pytest

ray = pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")
pytest.importorskip("torch")

from gcurun.ray import RayExecutor  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.integration, pytest.mark.torch]

EXIT_SECONDS = 30


class Counter:
    """An executable: created in each actor after its environment is set."""

    def __init__(self, start: int, *, step: int) -> None:
        import gcurun.runtime.torch as hvd

        hvd.init()
        self.value = start + step * hvd.rank()


@pytest.fixture(scope="module")
def job(local_ray):
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=60), num_workers=2)
    executor.start(executable_cls=Counter, executable_args=[10], executable_kwargs={"step": 5},
                   extra_env_vars={"GCURUN_TEST_MARK": "seen", "MARK_NUMBER": 7})
    try:
        yield executor
    finally:
        executor.shutdown()


def ranks_and_mean(_executable):
    import torch

    import gcurun.runtime.torch as hvd

    hvd.init()
    mean = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), name="mean").item()
    return {"rank": hvd.rank(), "size": hvd.size(), "local_rank": hvd.local_rank(),
            "local_size": hvd.local_size(), "cross_rank": hvd.cross_rank(),
            "cross_size": hvd.cross_size(), "mean": mean,
            "env": {name: os.environ.get(name) for name in
                    ("HOROVOD_RANK", "RANK", "LOCAL_RANK", "WORLD_SIZE", "GCURUN_HOSTNAME")}}


def test_each_rank_knows_its_place_and_allreduce_averages(job):
    results = job.execute(ranks_and_mean)
    assert [r["rank"] for r in results] == [0, 1]
    for rank, result in enumerate(results):
        assert result["size"] == 2 and result["local_size"] == 2
        assert result["local_rank"] == rank
        assert result["cross_rank"] == 0 and result["cross_size"] == 1
        assert result["mean"] == pytest.approx(1.5)
        assert result["env"]["HOROVOD_RANK"] == result["env"]["RANK"] == str(rank)
        assert result["env"]["LOCAL_RANK"] == str(rank)
        assert result["env"]["WORLD_SIZE"] == "2"
    assert results[0]["env"]["GCURUN_HOSTNAME"] == results[1]["env"]["GCURUN_HOSTNAME"]


def test_the_executable_was_made_with_its_arguments(job):
    assert job.execute(lambda counter: counter.value) == [10, 15]


def test_execute_single_runs_on_rank_zero_alone(job):
    assert job.execute_single(lambda counter: (os.environ["GCURUN_RANK"], counter.value)) \
        == ("0", 10)


def test_run_passes_args_and_kwargs(job):
    def scaled(a, b, *, c):
        return (a + b) * c + int(os.environ["GCURUN_RANK"])

    assert job.run(scaled, args=[1, 2], kwargs={"c": 10}) == [30, 31]
    assert ray.get(job.run_remote(scaled, args=[0, 1], kwargs={"c": 2})) == [2, 3]


def test_extra_env_vars_reach_every_rank(job):
    assert job.execute(lambda _: (os.environ["GCURUN_TEST_MARK"], os.environ["MARK_NUMBER"])) \
        == [("seen", "7"), ("seen", "7")]


def _fail_on_rank_one(_executable):
    import torch

    import gcurun.runtime.torch as hvd

    hvd.init()
    if hvd.rank() == 1:
        raise ValueError("rank one cannot go on")
    # Rank 0 waits in a collective that rank 1 never joins: the abort ends it.
    return hvd.allreduce(torch.ones(1), name="never").item()


def _gone(pids):
    processes = []
    for pid in pids:
        try:
            processes.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(processes, timeout=EXIT_SECONDS)
    return [p.pid for p in alive]


def _job_placement_groups():
    table = ray.util.placement_group_table()
    return {pg_id for pg_id, info in table.items() if info["state"] != "REMOVED"}


def test_an_error_names_its_rank_and_nothing_outlives_the_job(local_ray):
    before = _job_placement_groups()
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=60), num_workers=2)
    executor.start()
    pids = executor.execute(lambda _: os.getpid())
    assert len(set(pids)) == 2 and os.getpid() not in pids
    with pytest.raises(ValueError, match="rank one cannot go on") as raised:
        executor.execute(_fail_on_rank_one)
    notes = getattr(raised.value, "__notes__", [])
    assert any(note.startswith("gcurun.ray: raised on rank 1 of 2") for note in notes), notes
    executor.shutdown()
    assert _gone(pids) == []
    assert _job_placement_groups() == before
    executor.shutdown()                       # idempotent


def test_shutdown_after_a_clean_job_leaves_nothing(local_ray):
    before = _job_placement_groups()
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=60), num_workers=1,
                           placement_strategy="SPREAD")
    executor.start()
    assert _job_placement_groups() != before
    pids = executor.execute(lambda _: os.getpid())
    executor.shutdown()
    assert _gone(pids) == []
    assert _job_placement_groups() == before


@pytest.mark.skipif(sys.platform != "linux", reason="Ray's local cluster on Linux")
def test_infeasible_job_times_out_and_leaves_no_placement_group(local_ray):
    before = _job_placement_groups()
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=30, placement_group_timeout_s=1),
                           num_workers=9)
    with pytest.raises(TimeoutError, match="placement_group_timeout_s=1 s"):
        executor.start()
    assert _job_placement_groups() == before
