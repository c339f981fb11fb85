"""Horovod 0.28.1's own test_torch.py against gcurun.runtime.torch: the whole file in one
job, as Horovod's CI runs it, on both backends and at 2, 3 and 4 ranks.

The suite and its runner (``run-horovod.sh``) live beside the repository, in
``../shared/conformance`` from its root (``GCURUN_CONFORMANCE_DIR`` points elsewhere), so
a clean clone skips these tests; ``test_horovod_style.py`` runs checks of the same
contract from the repository alone. A run takes minutes, so they run only when selected:

    pytest -m conformance tests/torch/test_conformance.py

Every test must pass or be skipped, except Horovod's own failures on this PyTorch
(``docs/compat.md``): the optimizer tests that build every ``torch.optim`` optimizer,
which fail on Muon (PyTorch 2.9 and later) as they do for Horovod.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch==2.13.0)")

from tests.helpers import ROOT  # noqa: E402
from tests.runtime.jobs import MPIRUN  # noqa: E402

pytestmark = [pytest.mark.conformance, pytest.mark.integration, pytest.mark.torch]

SUITE = Path(os.environ.get("GCURUN_CONFORMANCE_DIR") or ROOT.parent / "shared" / "conformance")
TESTS_IN_FILE = 115
# Horovod's own failures on this PyTorch: these tests build every torch.optim optimizer,
# and Muon (PyTorch 2.9+) refuses the models' 1-D parameters.
HOROVODS_OWN = {"test_broadcast_state", "test_broadcast_state_options",
                "test_force_allreduce"} if hasattr(torch.optim, "Muon") else set()
SUMMARY = re.compile(r"^\[(\d+)\] =* ?(.*\d+ passed.*?) in [\d.]+s")
FAILED = re.compile(r"^\[(\d+)\] FAILED \S+::(test_\w+)")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _selected(request: pytest.FixtureRequest) -> bool:
    return "conformance" in (request.config.getoption("markexpr") or "")


@pytest.mark.parametrize(("backend", "size"), [
    pytest.param("tcp", 2, id="tcp-2"),
    pytest.param("mpi", 2, id="mpi-2"),
    pytest.param("tcp", 3, id="tcp-3"),
    pytest.param("tcp", 4, id="tcp-4"),
])
def test_horovods_test_torch_in_one_job(backend: str, size: int,
                                         request: pytest.FixtureRequest) -> None:
    if not _selected(request):
        pytest.skip("runs Horovod's whole test_torch.py (minutes); select it with "
                    "`pytest -m conformance`")
    runner = SUITE / "run-horovod.sh"
    if not runner.is_file():
        pytest.skip(f"Horovod's suite is not at {SUITE} (no run-horovod.sh there); set "
                    "GCURUN_CONFORMANCE_DIR to the folder that holds it")
    if backend == "mpi" and MPIRUN is None:
        pytest.skip("mpirun is not on PATH")
    pytest.importorskip("mock", reason="Horovod's test utilities import mock; pip install mock")
    # The runner starts `gcurun` and `python3` from PATH: this interpreter's.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}"
                                 f"{os.environ.get('PATH', '')}"}
    assert shutil.which("gcurun", path=env["PATH"]), "gcurun is not installed beside python"
    args = ["bash", str(runner), "torch", "--np", str(size)] + (["--mpi"] if backend == "mpi"
                                                                  else []) + ["--color=no"]
    done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=1200)
    out = ANSI.sub("", done.stdout + done.stderr)
    summaries = {int(m[1]): m[2] for m in map(SUMMARY.match, out.splitlines()) if m}
    assert sorted(summaries) == list(range(size)), f"not every rank finished:\n{out[-8000:]}"
    failed: dict[int, set[str]] = {r: set() for r in range(size)}
    for m in filter(None, map(FAILED.match, out.splitlines())):
        failed[int(m[1])].add(m[2])
    for rank, summary in summaries.items():
        counts = {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", summary)}
        assert "error" not in counts and "errors" not in counts, summary
        assert failed[rank] <= HOROVODS_OWN, f"rank {rank}: {summary}\n{out[-8000:]}"
        assert counts.get("failed", 0) == len(failed[rank]), summary
        ran = counts.get("passed", 0) + counts.get("failed", 0) + counts.get("skipped", 0)
        assert ran == TESTS_IN_FILE, summary
        assert counts["passed"] >= TESTS_IN_FILE - 10 - len(HOROVODS_OWN), summary
