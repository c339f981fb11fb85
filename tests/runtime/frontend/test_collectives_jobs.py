"""The synchronous collectives on real rank processes, where a rank's own failure must
reach every rank: objects that cannot be pickled (numpy, torch and TensorFlow bindings;
tcp and mpi backends)."""

from __future__ import annotations

import pytest

from tests.runtime.jobs import MPIRUN, run_job

pytestmark = pytest.mark.integration
needs_mpi = pytest.mark.skipif(MPIRUN is None, reason="mpirun is not on PATH")

OBJECT_JOBS = [
    pytest.param("tcp", 3, "numpy", id="tcp-3-numpy"),
    pytest.param("mpi", 2, "numpy", id="mpi-2-numpy", marks=[pytest.mark.mpi, needs_mpi]),
    pytest.param("tcp", 2, "torch", id="tcp-2-torch"),
    pytest.param("tcp", 2, "tensorflow", id="tcp-2-tensorflow",
                 marks=pytest.mark.long),  # the torch binding's by default
]


@pytest.mark.parametrize(("backend", "size", "binding"), OBJECT_JOBS)
def test_an_object_that_cannot_be_pickled_fails_on_every_rank(backend: str, size: int,
                                                             binding: str) -> None:
    job = run_job(backend, size, "unpicklable.py", binding,
                  env={"GCURUN_TIMEOUT_SECONDS": "5", "TF_CPP_MIN_LOG_LEVEL": "3"},
                  timeout=120)
    assert job.returncodes == [0] * len(job.returncodes), job.stdout + job.stderr
    error = "TypeError: cannot pickle '_thread.lock' object"
    for rank in range(size):
        assert job.lines(f"rank {rank} broadcast_object raised ArgumentError: "
                         f"broadcast_object 'state': rank 1 (the root) could not pickle its "
                         f"object: {error}"), job.stdout + job.stderr
        assert job.lines(f"rank {rank} allgather_object raised ArgumentError: "
                         f"allgather_object 'facts': a rank could not pickle its object "
                         f"(rank 1: {error})"), job.stdout + job.stderr
        assert job.lines(f"rank {rank} then got {{'step': 3}}"), job.stdout
