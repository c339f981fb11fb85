"""gcurun.runtime.torch on real rank processes: the collectives and DistributedOptimizer
training at 1 and 2 ranks on both backends."""

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


@pytest.mark.parametrize(("backend", "size"), JOBS)
def test_every_collective_on_tensors(backend: str, size: int) -> None:
    job = run_job(backend, size, str(RANKS / "api.py"), timeout=180)
    _all_ok(job, size)


# Training on mpi is the same rank code as on tcp; the mpi transport is in the collectives'
# test by default, and training on it in -m long.
TRAINING = [*JOBS[:2], pytest.param("mpi", 2, id="mpi-2",
                                    marks=[pytest.mark.mpi, needs_mpi, pytest.mark.long])]


@pytest.mark.parametrize(("backend", "size"), TRAINING)
def test_training_matches_one_rank_on_the_full_batch(backend: str, size: int) -> None:
    job = run_job(backend, size, str(RANKS / "train.py"), timeout=180)
    _all_ok(job, size)


def test_a_dead_peer_fails_pending_handles() -> None:
    # The timeout is far away: only noticing the death can end the wait in time.
    job = run_job("tcp", 3, str(RANKS / "peer_death.py"),
                  env={"GCURUN_TIMEOUT_SECONDS": "300"}, timeout=120)
    assert job.returncodes == [0, 17, 0], job.stdout + job.stderr
    for rank in (0, 2):
        raised = job.lines(f"rank {rank} raised HorovodInternalError (PeerFailureError)")
        assert len(raised) == 1, job.stdout + job.stderr
        assert "rank 1" in raised[0]
