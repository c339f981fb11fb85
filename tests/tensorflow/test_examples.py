"""The TensorFlow examples as users run them: each is a Horovod script but for its import
line; 2 ranks train on the same global batches as 1 rank (so their losses follow each
other); rank 0's checkpoints resume a job, the TF1 recipe's under mpirun through run.sh."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("tensorflow", reason="TensorFlow is not installed "
                                         "(pip install tensorflow-cpu)")

from tests.helpers import ROOT, run_gcurun  # noqa: E402
from tests.runtime.jobs import MPIRUN, run_job  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.tensorflow]
V1 = str(ROOT / "examples" / "tensorflow_v1_train.py")
KERAS = str(ROOT / "examples" / "keras_train.py")
V1_LOSS = re.compile(r"^step +(\d+) loss ([0-9.]+)$", re.M)
KERAS_LOSS = re.compile(r"^epoch (\d+) step +(\d+) loss ([0-9.]+)$", re.M)

# The names of horovod.tensorflow and horovod.tensorflow.keras the examples may use.
HOROVOD_TF = {
    "init", "shutdown", "rank", "size", "local_rank", "local_size", "allreduce",
    "allgather", "broadcast", "broadcast_object", "DistributedOptimizer",
    "BroadcastGlobalVariablesHook", "broadcast_global_variables", "Compression",
}
HOROVOD_KERAS = {
    "init", "shutdown", "rank", "size", "local_rank", "local_size", "allreduce",
    "broadcast_object", "DistributedOptimizer", "callbacks", "load_model",
}


@pytest.mark.parametrize(("script", "module", "names"), [
    (V1, "gcurun.runtime.tensorflow", HOROVOD_TF),
    (KERAS, "gcurun.runtime.tensorflow.keras", HOROVOD_KERAS),
], ids=["tensorflow_v1", "keras"])
def test_the_example_is_a_horovod_script_but_for_its_import(script: str, module: str,
                                                            names: set[str]) -> None:
    tree = ast.parse(Path(script).read_text())
    imports = [ast.unparse(node) for node in ast.walk(tree)
               if isinstance(node, (ast.Import, ast.ImportFrom))]
    assert [line for line in imports if "gcurun" in line] == [f"import {module} as hvd"]
    used = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name) and node.value.id == "hvd"}
    assert used and used <= names, used - names


def _v1_losses(stdout: str) -> dict[int, float]:
    return {int(step): float(loss) for step, loss in V1_LOSS.findall(stdout)}


def _resume_through_run_sh(checkpoints: Path, *args: str) -> str:
    """The TF1 recipe as Horovod_gcu's users start it (gcurun --mpi, bound to NUMA nodes,
    each rank running run.sh), resuming from ``checkpoints``; its stdout, with rank
    prefixes. Without mpirun, the same job on gcurun's own launcher."""
    mpi = ("--mpi", "--bind-to", "numa") if MPIRUN is not None else ()
    done = run_gcurun(*mpi, "-np", "2", "bash", "examples/tensorflow_v1_run.sh", *args,
                      "--checkpoint-dir", str(checkpoints), env={"PYTHON": sys.executable},
                      timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_tf1_two_ranks_follow_one_rank_and_resume_from_rank_0s_checkpoints(
        tmp_path: Path) -> None:
    """The resumed job runs under mpirun through run.sh: the recipe's own way of starting."""
    common = ("--train-size", "1024", "--log-interval", "4", "--seed", "3")
    one = run_job("local", 1, V1, *common, "--steps", "12", "--batch-size", "64",
                  "--lr", "0.1", timeout=240)
    two = run_job("tcp", 2, V1, *common, "--steps", "12", "--batch-size", "32",
                  "--lr", "0.05", "--checkpoint-dir", str(tmp_path),
                  "--checkpoint-steps", "8", timeout=240)
    assert one.returncodes == [0] and two.returncodes == [0, 0], one.stderr + two.stderr
    single, double = _v1_losses(one.stdout), _v1_losses(two.stdout)
    assert sorted(single) == [0, 4, 8] and single.keys() == double.keys(), two.stdout
    for step, loss in single.items():
        assert double[step] == pytest.approx(loss, rel=1e-3), (step, one.stdout, two.stdout)
    assert (tmp_path / "model.ckpt-12.index").exists(), sorted(tmp_path.iterdir())
    again = _resume_through_run_sh(tmp_path, *common, "--steps", "16", "--batch-size", "32",
                                   "--lr", "0.05")
    assert "[0] resumed at step 12" in again.splitlines(), again
    assert re.findall(r"^\[0\] step +(\d+) loss", again, re.M) == ["12"], again


# Covered by default in test_tf1_two_ranks_follow_one_rank_and_resume_from_rank_0s_checkpoints,
# whose resumed job runs this way; from scratch, here, in -m long.
@pytest.mark.long
@pytest.mark.mpi
@pytest.mark.skipif(MPIRUN is None, reason="mpirun is not on PATH")
def test_the_tf1_recipe_runs_under_mpirun_through_run_sh() -> None:
    done = run_gcurun("--mpi", "-np", "2", "--bind-to", "numa", "bash",
                      "examples/tensorflow_v1_run.sh", "--steps", "4", "--log-interval", "2",
                      "--train-size", "256", env={"PYTHON": sys.executable}, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.findall(r"^\[0\] step +(\d+) loss", done.stdout, re.M) == ["0", "2"], \
        done.stdout


def _keras_losses(stdout: str) -> dict[tuple[int, int], float]:
    return {(int(e), int(s)): float(v) for e, s, v in KERAS_LOSS.findall(stdout)}


# The Keras recipe by default: test_horovod_examples.py (Horovod's Keras example) and
# test_jobs.py (fit against one rank); this one, with its checkpoints, in -m long.
@pytest.mark.long
def test_keras_two_ranks_follow_one_rank_and_resume_from_rank_0s_checkpoints(
        tmp_path: Path) -> None:
    common = ("--train-size", "1024", "--test-size", "256", "--log-interval", "4",
              "--warmup-epochs", "0")
    one = run_job("local", 1, KERAS, *common, "--epochs", "1", "--batch-size", "64",
                  "--lr", "0.02", timeout=240)
    two = run_job("tcp", 2, KERAS, *common, "--epochs", "1", "--batch-size", "32",
                  "--lr", "0.01", "--checkpoint-dir", str(tmp_path), timeout=240)
    assert one.returncodes == [0] and two.returncodes == [0, 0], one.stderr + two.stderr
    single, double = _keras_losses(one.stdout), _keras_losses(two.stdout)
    assert len(single) == 4 and single.keys() == double.keys(), one.stdout + two.stdout
    for key, loss in single.items():
        assert double[key] == pytest.approx(loss, rel=1e-3), (key, one.stdout, two.stdout)
    assert len(two.lines("test loss")) == 1, "only rank 0 reports"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-1.keras"]
    again = run_job("tcp", 2, KERAS, *common, "--epochs", "2", "--batch-size", "32",
                    "--lr", "0.01", "--checkpoint-dir", str(tmp_path), timeout=240)
    assert again.returncodes == [0, 0], again.stderr
    assert {epoch for epoch, _ in _keras_losses(again.stdout)} == {1}, again.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-1.keras",
                                                          "checkpoint-2.keras"]
