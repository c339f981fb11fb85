"""Scripts written for Horovod, their imports untouched, under ``gcurun --horovod-alias on``
on both backends (tcp: gcurun's own launcher; mpi: ``--mpi``): Horovod's TF2 custom training
loop (broadcasts inside the ``tf.function`` step, on Keras 3 variables, with and without
LossScaleOptimizer) and Horovod's Keras recipe through ``horovod.keras``; both scripts in
one job per backend (ranks/horovod_scripts.py), each reported by a test of its own."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("tensorflow", reason="TensorFlow is not installed "
                                         "(pip install tensorflow-cpu)")

from tests.helpers import run_gcurun  # noqa: E402
from tests.runtime.jobs import MPIRUN  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.tensorflow]
RANKS = Path(__file__).resolve().parent / "ranks"
BACKENDS = [pytest.param((), id="tcp"),
            pytest.param(("--mpi",), id="mpi", marks=[
                pytest.mark.mpi,
                pytest.mark.skipif(MPIRUN is None, reason="mpirun is not on PATH")])]
# The mpi runs are left to -m long: the TensorFlow binding on mpi is checked by default in
# tests/tensorflow/test_jobs.py.
BACKENDS[1] = pytest.param(*BACKENDS[1].values, id="mpi",
                           marks=[*BACKENDS[1].marks, pytest.mark.long])


@pytest.fixture(scope="module")
def scripts_job():
    """One job of both scripts (ranks/horovod_scripts.py) per backend, shared by the two
    tests below; its stdout, with gcurun's rank prefixes."""
    outputs: dict[tuple[str, ...], str] = {}

    def job(flags: tuple[str, ...]) -> str:
        if flags not in outputs:
            done = run_gcurun("-np", "2", *flags, "--horovod-alias", "on", sys.executable,
                              str(RANKS / "horovod_scripts.py"), timeout=400)
            assert done.returncode == 0, done.stdout + done.stderr
            outputs[flags] = done.stdout
        return outputs[flags]
    return job


# The two share one job (scripts_job): under xdist they run in one worker.
shares_the_job = pytest.mark.xdist_group("tensorflow-horovod-scripts")


@shares_the_job
@pytest.mark.parametrize("flags", BACKENDS)
def test_horovods_tf2_loop_gives_every_rank_rank_0s_weights(flags: tuple[str, ...],
                                                            scripts_job) -> None:
    lines = scripts_job(flags).splitlines()
    for rank in range(2):
        for what in ("float32", "mixed"):
            assert f"[{rank}] rank {rank} of 2 {what} ok" in lines, lines


@shares_the_job
@pytest.mark.parametrize("flags", BACKENDS)
def test_horovods_keras_recipe_runs_through_horovod_keras(flags: tuple[str, ...],
                                                          scripts_job) -> None:
    lines = scripts_job(flags).splitlines()
    assert "[0] rank 0 of 2 ok" in lines, lines
    assert "[1] rank 1 of 2 ok" in lines, lines
