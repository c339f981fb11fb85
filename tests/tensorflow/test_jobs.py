"""gcurun.runtime.tensorflow on real rank processes, on both backends: the collectives
(eager, tf.function, TF1 sessions), TF2 and TF1 training, and Keras 3 model.fit, each
against a 1-rank run on the full batch; the three in one job (ranks/binding.py), each
reported by a test of its own."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("tensorflow", reason="TensorFlow is not installed "
                                         "(pip install tensorflow-cpu)")

from tests.runtime.jobs import MPIRUN, run_job  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.tensorflow]
needs_mpi = pytest.mark.skipif(MPIRUN is None, reason="mpirun is not on PATH")
RANKS = Path(__file__).resolve().parent / "ranks"

ONE_AND_TWO = [
    pytest.param("local", 1, id="1-rank", marks=pytest.mark.long),  # tcp-2 by default
    pytest.param("tcp", 2, id="tcp-2"),
    # The mpi transport under every binding: tests/torch/test_jobs.py by default.
    pytest.param("mpi", 2, id="mpi-2", marks=[pytest.mark.mpi, needs_mpi, pytest.mark.long]),
]
TWO = ONE_AND_TWO[1:]
# Training on mpi is the same rank code as on tcp; the default run keeps tcp, -m long runs
# both.
TWO_MPI_LONG = [TWO[0], pytest.param("mpi", 2, id="mpi-2",
                                     marks=[pytest.mark.mpi, needs_mpi, pytest.mark.long])]


def _all_ok(job, size: int) -> None:
    assert job.returncodes == [0] * len(job.returncodes), job.stdout + job.stderr
    for rank in range(size):
        assert len(job.lines(f"rank {rank} of {size} ok")) == 1, job.stdout + job.stderr


def _part_ok(job, size: int, part: str) -> None:
    """``part``'s checks passed on every rank of a ranks/binding.py job."""
    for rank in range(size):
        assert len(job.lines(f"{part}: rank {rank} of {size} ok")) == 1, \
            job.stdout + job.stderr


@pytest.fixture(scope="module")
def binding_job(tmp_path_factory: pytest.TempPathFactory):
    """One job of ranks/binding.py per (backend, size), shared by the three tests below:
    TensorFlow starts once per rank for the collectives, training and Keras parts."""
    jobs = {}

    def job(backend: str, size: int):
        if (backend, size) not in jobs:
            directory = tmp_path_factory.mktemp(f"binding-{backend}-{size}")
            jobs[backend, size] = run_job(backend, size, str(RANKS / "binding.py"),
                                          str(directory), timeout=400)
        return jobs[backend, size]
    return job


# The three share one job (binding_job): under xdist they run in one worker.
shares_the_job = pytest.mark.xdist_group("tensorflow-binding")


@shares_the_job
@pytest.mark.parametrize(("backend", "size"), ONE_AND_TWO)
def test_every_collective_eagerly_in_functions_and_in_sessions(backend: str, size: int,
                                                               binding_job) -> None:
    _part_ok(binding_job(backend, size), size, "collectives")


@shares_the_job
@pytest.mark.parametrize(("backend", "size"), TWO_MPI_LONG)
def test_tape_and_tf1_training_match_one_rank_on_the_full_batch(backend: str, size: int,
                                                                binding_job) -> None:
    _part_ok(binding_job(backend, size), size, "training")


@shares_the_job
@pytest.mark.parametrize(("backend", "size"), TWO_MPI_LONG)
def test_keras_fit_matches_one_rank_on_the_full_batch(backend: str, size: int,
                                                      binding_job) -> None:
    """The last part; then the job ended well: every rank's exit status 0."""
    job = binding_job(backend, size)
    _part_ok(job, size, "keras_fit")
    assert job.returncodes == [0] * size, job.stdout + job.stderr


@pytest.mark.parametrize(("backend", "size"), [
    pytest.param("tcp", 3, id="tcp-3"),
    pytest.param("mpi", 3, id="mpi-3", marks=[pytest.mark.mpi, needs_mpi, pytest.mark.long]),
])
def test_collectives_on_process_sets(backend: str, size: int) -> None:
    _all_ok(run_job(backend, size, str(RANKS / "process_sets.py"), timeout=300), size)
