"""Horovod's contract on real rank processes, in CI: the checks of
``ranks/horovod_style.py`` (written for this project, in the manner of Horovod's own
test_torch.py) in one job per backend.

Horovod's own suite lives beside the repository, not in it, so a clean clone cannot run
it; these checks cover what that suite holds gcurun to, and ``test_conformance.py`` runs
the suite itself where it is present.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch==2.13.0)")

from tests.runtime.jobs import MPIRUN, run_job  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.torch]
needs_mpi = pytest.mark.skipif(MPIRUN is None, reason="mpirun is not on PATH")
SCRIPT = Path(__file__).resolve().parent / "ranks" / "horovod_style.py"


@pytest.mark.parametrize(("backend", "size"), [
    pytest.param("tcp", 2, id="tcp-2"),
    # Three ranks (test_conformance.py by default) and mpi (test_jobs.py) in -m long.
    pytest.param("tcp", 3, id="tcp-3", marks=pytest.mark.long),
    pytest.param("mpi", 2, id="mpi-2", marks=[pytest.mark.mpi, needs_mpi, pytest.mark.long]),
])
def test_horovod_style_checks_in_one_job(backend: str, size: int, tmp_path: Path) -> None:
    job = run_job(backend, size, str(SCRIPT), str(tmp_path), timeout=240)
    assert job.returncodes == [0] * len(job.returncodes), job.stdout + job.stderr
    for rank in range(size):
        assert len(job.lines(f"rank {rank} of {size} ok")) == 1, job.stdout + job.stderr
