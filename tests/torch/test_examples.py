"""The examples as users run them: the training script at 1 and 2 ranks (same global
batch, so the losses must follow each other), its checkpoints (written by the same 2-rank
job), and the benchmark."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch==2.13.0)")

from tests.helpers import ROOT  # noqa: E402
from tests.runtime.jobs import MPIRUN, run_job  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.torch]
TRAIN = str(ROOT / "examples" / "pytorch_train.py")
BENCHMARK = str(ROOT / "examples" / "pytorch_synthetic_benchmark.py")
SMALL = ("--train-size", "1024", "--test-size", "256", "--log-interval", "1")
LOSS = re.compile(r"epoch (\d+) step +(\d+) loss ([0-9.]+)")


def losses(stdout: str) -> dict[tuple[int, int], float]:
    return {(int(e), int(s)): float(v) for e, s, v in LOSS.findall(stdout)}


# horovod.torch's public names (its API reference).
HOROVOD_TORCH = {
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
    "cross_rank", "cross_size", "allreduce", "allreduce_", "allreduce_async",
    "allreduce_async_", "allgather", "broadcast", "broadcast_", "broadcast_object",
    "allgather_object", "broadcast_parameters", "broadcast_optimizer_state",
    "DistributedOptimizer", "Compression", "Average", "Sum", "Adasum", "synchronize", "poll",
}


def test_the_training_example_is_a_horovod_script_but_for_its_import() -> None:
    tree = ast.parse(Path(TRAIN).read_text())
    imports = [ast.unparse(node) for node in ast.walk(tree)
               if isinstance(node, (ast.Import, ast.ImportFrom))]
    assert [line for line in imports if "gcurun" in line] == [
        "import gcurun.runtime.torch as hvd"]
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    assert "gcurun" not in names
    used = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name) and node.value.id == "hvd"}
    assert used and used <= HOROVOD_TORCH, used - HOROVOD_TORCH


TWO_RANKS = (*SMALL, "--max-steps", "8", "--batch-size", "32", "--lr", "0.01")


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory):
    """One 2-rank job of the example, one epoch, writing checkpoints: the job the two
    tests below share, and its checkpoint directory."""
    directory = tmp_path_factory.mktemp("checkpoints")
    job = run_job("tcp", 2, TRAIN, *TWO_RANKS, "--epochs", "1", "--checkpoint-dir",
                  str(directory), timeout=120)
    return job, directory


# The two share one job (two_ranks): under xdist they run in one worker.
shares_the_job = pytest.mark.xdist_group("torch-examples")


@shares_the_job
def test_two_ranks_follow_one_rank_on_the_same_global_batch(two_ranks) -> None:
    one = run_job("local", 1, TRAIN, *SMALL, "--epochs", "1", "--max-steps", "8",
                  "--batch-size", "64", "--lr", "0.02", timeout=120)
    two, _ = two_ranks
    assert one.returncodes == [0] and two.returncodes == [0, 0], one.stderr + two.stderr
    single, double = losses(one.stdout), losses(two.stdout)
    assert len(single) == 8 and single.keys() == double.keys(), one.stdout + two.stdout
    assert single[(0, 7)] < single[(0, 0)], "the loss falls"
    for key, value in single.items():
        assert double[key] == pytest.approx(value, rel=1e-3, abs=1e-4), (key, one.stdout,
                                                                        two.stdout)
    assert len(two.lines("test loss")) == 1, "only rank 0 reports"


@shares_the_job
def test_rank_0_writes_checkpoints_and_the_job_resumes_from_them(two_ranks) -> None:
    first, directory = two_ranks
    assert first.returncodes == [0, 0], first.stderr
    assert sorted(p.name for p in directory.iterdir()) == ["checkpoint-1.pt"]
    again = run_job("tcp", 2, TRAIN, *TWO_RANKS, "--epochs", "2", "--checkpoint-dir",
                    str(directory), timeout=120)
    assert again.returncodes == [0, 0], again.stderr
    assert {epoch for epoch, _ in losses(again.stdout)} == {1}, again.stdout
    assert sorted(p.name for p in directory.iterdir()) == ["checkpoint-1.pt",
                                                           "checkpoint-2.pt"]


@pytest.mark.mpi
@pytest.mark.skipif(MPIRUN is None, reason="mpirun is not on PATH")
def test_the_synthetic_benchmark_reports_horovods_figures() -> None:
    job = run_job("mpi", 2, BENCHMARK, "--model", "mlp", "--num-warmup-batches", "1",
                  "--num-batches-per-iter", "2", "--num-iters", "3", timeout=120)
    assert job.returncodes == [0] * len(job.returncodes), job.stderr
    assert len(job.lines("Iter #")) == 3, job.stdout
    assert re.search(r"^Img/sec per CPU: [0-9.]+ \+-[0-9.]+$", job.stdout, re.M), job.stdout
    assert re.search(r"^Total img/sec on 2 CPU\(s\): [0-9.]+ \+-[0-9.]+$", job.stdout,
                     re.M), job.stdout
