"""The Ray Train backend (gcurun.ray.train.GcurunConfig) on the tests' local Ray: Ray
Train's DataParallelTrainer runs a loop in which hvd.init() joins one gcurun job whose
ranks are Ray Train's."""

from __future__ import annotations

import json

import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("ray.train")
pytest.importorskip("torch")

# Marked long: a Ray Train V2 run (its controller actor, then its workers) took 96 s on
# this 2-core machine under load, more than the default run's budget for tests/ray.
pytestmark = [pytest.mark.ray, pytest.mark.integration, pytest.mark.torch, pytest.mark.long]


def _loop(config):
    import json

    import torch
    from ray import train

    import gcurun.runtime.torch as hvd

    hvd.init()
    context = train.get_context()
    mean = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), name="mean").item()
    facts = {"rank": hvd.rank(), "size": hvd.size(), "local_rank": hvd.local_rank(),
             "ray_rank": context.get_world_rank(), "ray_local_rank": context.get_local_rank(),
             "ray_size": context.get_world_size(), "mean": mean, "scale": config["scale"]}
    # Ray Train V2 keeps reported metrics only with checkpoints: each rank writes a file.
    with open(f"{config['out']}/rank{hvd.rank()}.json", "w") as out:
        json.dump(facts, out)


def test_a_ray_train_loop_runs_as_one_gcurun_job(local_ray, tmp_path):
    from ray.train import RunConfig, ScalingConfig

    from gcurun.ray.train import DataParallelTrainer, GcurunConfig

    trainer = DataParallelTrainer(
        _loop, train_loop_config={"scale": 3, "out": str(tmp_path)},
        backend_config=GcurunConfig(timeout_s=60),
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="gcurun-backend", storage_path=str(tmp_path)))
    trainer.fit()
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for rank, facts in enumerate(ranks):
        assert facts["rank"] == facts["ray_rank"] == rank
        assert facts["size"] == facts["ray_size"] == 2
        assert facts["local_rank"] == facts["ray_local_rank"]
        assert facts["mean"] == pytest.approx(1.5)
        assert facts["scale"] == 3
