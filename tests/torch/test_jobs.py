"""gcurun.runtime.torch on real rank processes: the collectives and DistributedOptimizer
training at 1 and 2 ranks on both backends; at 1 rank and on tcp at 2, both in one job per
size, each reported by a test of its own."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch==2.13.0)")

from tests.runtime.jobs import MPIRUN, run_job  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.torch]
needs_mpi = pytest.mark.skipif(MPIRUN is None, reason="mpirun is not on PATH")
RANKS = Path(__file__).resolve().parent / "ranks"

JOBS = [
    pytest.param("local", 1, id="1-rank"),
    pytest.param("tcp", 2, id="tcp-2"),
    pytest.param("mpi", 2, id="mpi-2", marks=[pytest.mark.mpi, needs_mpi]),
]


def _all_ok(job, size: int) -> list[str]:
    assert job.returncodes == [0] * len(job.returncodes), job.stdout + job.stderr
    lines = []
    for rank in range(size):
        found = job.lines(f"rank {rank} of {size} ok")
        assert len(found) == 1, job.stdout + job.stderr
        lines.append(found[0])
    return lines


# The jobs both tests below run by default: there api.py and train.py share one job
# (ranks/api_and_train.py), so torch starts once per rank for both.
SHARED = {("local", 1), ("tcp", 2)}


@pytest.fixture(scope="module")
def api_and_train():
    """The job of ranks/api_and_train.py per (backend, size), shared by the two tests."""
    jobs = {}

    def job(backend: str, size: int):
        if (backend, size) not in jobs:
            jobs[backend, size] = run_job(backend, size, str(RANKS / "api_and_train.py"),
                                          timeout=300)
        return jobs[backend, size]
    return job


def _part_ok(job, size: int, part: str) -> None:
    for rank in range(size):
        assert len(job.lines(f"{part}: rank {rank} of {size} ok")) == 1, \
            job.stdout + job.stderr


# The two share one job (api_and_train): under xdist they run in one worker.
shares_the_job = pytest.mark.xdist_group("torch-api-and-train")


@shares_the_job
@pytest.mark.parametrize(("backend", "size"), JOBS)
def test_every_collective_on_tensors(backend: str, size: int, api_and_train) -> None:
    if (backend, size) in SHARED:
        _part_ok(api_and_train(backend, size), size, "api")
    else:
        _all_ok(run_job(backend, size, str(RANKS / "api.py"), timeout=180), size)


# Training on mpi is the same rank code as on tcp; the mpi transport is in the collectives'
# test by default, and training on it in -m long.
TRAINING = [*JOBS[:2], pytest.param("mpi", 2, id="mpi-2",
                                    marks=[pytest.mark.mpi, needs_mpi, pytest.mark.long])]


@shares_the_job
@pytest.mark.parametrize(("backend", "size"), TRAINING)
def test_training_matches_one_rank_on_the_full_batch(backend: str, size: int,
                                                     api_and_train) -> None:
    """After training, the shared job ended well: every rank's exit status 0."""
    if (backend, size) in SHARED:
        job = api_and_train(backend, size)
        _part_ok(job, size, "train")
        assert job.returncodes == [0] * size, job.stdout + job.stderr
    else:
        _all_ok(run_job(backend, size, str(RANKS / "train.py"), timeout=180), size)


def test_a_dead_peer_fails_pending_handles() -> None:
    # The timeout is far away: only noticing the death can end the wait in time.
    job = run_job("tcp", 3, str(RANKS / "peer_death.py"),
                  env={"GCURUN_TIMEOUT_SECONDS": "300"}, timeout=120)
    assert job.returncodes == [0, 17, 0], job.stdout + job.stderr
    for rank in (0, 2):
        raised = job.lines(f"rank {rank} raised HorovodInternalError (PeerFailureError)")
        assert len(raised) == 1, job.stdout + job.stderr
        assert "rank 1" in raised[0]
