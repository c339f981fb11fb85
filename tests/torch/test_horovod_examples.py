"""Horovod 0.28.1's PyTorch benchmark example, unedited (``horovod_examples/``), under
``gcurun --horovod-alias on``: started by ``bash run.sh`` as many jobs start it, on gcurun's
own launcher and under mpirun. Without the opt-in its ``import horovod.torch`` fails."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch==2.13.0)")

from tests.helpers import ROOT, run_gcurun  # noqa: E402
from tests.runtime.jobs import MPIRUN  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.torch]
EXAMPLES = Path(__file__).resolve().parent / "horovod_examples"
SMALL = ("--model", "tiny", "--batch-size", "2", "--num-warmup-batches", "1",
         "--num-batches-per-iter", "1", "--num-iters", "2", "--no-cuda")
BACKENDS = [pytest.param((), id="tcp"),
            pytest.param(("--mpi",), id="mpi", marks=[
                pytest.mark.mpi, pytest.mark.long,  # the torch binding on mpi: test_jobs.py
                pytest.mark.skipif(MPIRUN is None, reason="mpirun is not on PATH")])]


def run_benchmark(tmp_path: Path, *flags: str):
    script = tmp_path / "run.sh"
    script.write_text(f'exec "{sys.executable}" '
                      f'"{EXAMPLES / "pytorch_synthetic_benchmark.py"}" "$@"\n')
    # The stand-in torchvision reaches the ranks as any user's PYTHONPATH does.
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT), str(EXAMPLES / "stubs")])}
    return run_gcurun("-np", "2", *flags, "bash", str(script), *SMALL, env=env, timeout=300)


@pytest.mark.parametrize("flags", BACKENDS)
def test_horovods_pytorch_benchmark_runs_unedited(flags: tuple[str, ...],
                                                  tmp_path: Path) -> None:
    done = run_benchmark(tmp_path, *flags, "--horovod-alias", "on")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "[0] Number of CPUs: 2" in lines
    assert any(line.startswith("[0] Total img/sec on 2 CPU(s): ") for line in lines), lines


def test_without_the_opt_in_horovod_is_not_there(tmp_path: Path) -> None:
    done = run_benchmark(tmp_path)
    assert done.returncode == 1
    assert "ModuleNotFoundError: No module named 'horovod'" in done.stderr
