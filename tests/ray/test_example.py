"""examples/ray_train.py, run small on the tests' local Ray: two ranks train as one model,
started by RayExecutor and by Ray Train with gcurun's backend."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("ray")
pytest.importorskip("torch")

pytestmark = [pytest.mark.ray, pytest.mark.integration, pytest.mark.torch]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ray_train.py"


# Ray Train's run (a controller actor, then its workers) costs minutes on a loaded
# 2-core machine: that path is opt-in here and in tests/ray/test_train.py.
@pytest.mark.parametrize("api", ["executor", pytest.param("ray-train", marks=pytest.mark.long)])
def test_ray_train_example_trains_one_model_on_two_ranks(local_ray, capsys, api):
    spec = importlib.util.spec_from_file_location("ray_train_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    results = example.main(["--api", api, "--num-workers", "2", "--epochs", "1",
                            "--train-size", "256",
                            "--test-size", "64", "--max-steps", "3", "--batch-size", "16"])
    assert [r["rank"] for r in results] == [0, 1]
    assert [r["local_rank"] for r in results] == [0, 1]
    assert {r["size"] for r in results} == {2}
    # The ranks trained one model: the same parameters, loss and accuracy everywhere.
    assert results[0]["parameter_sum"] == pytest.approx(results[1]["parameter_sum"], rel=1e-12)
    assert results[0]["loss"] == results[1]["loss"]
    printed = capsys.readouterr().out
    assert "rank 0 (local rank 0): loss" in printed and "rank 1 (local rank 1): loss" in printed
