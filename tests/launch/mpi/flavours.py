"""MPICH and Intel MPI for the tests of ``gcurun --mpi`` with each flavour.

Each is found through a variable naming the prefix it was installed under
(``pip install --prefix DIR mpich`` / ``impi-rt``; tests/setup-and-run.sh does it):

    GCURUN_TEST_MPICH_PREFIX   DIR/bin/mpiexec   (MPICH's Hydra)
    GCURUN_TEST_IMPI_PREFIX    DIR/bin/mpirun    (Intel MPI's mpirun, which runs mpiexec.hydra)

A flavour whose variable is unset or whose program is missing is skipped, saying which.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class Flavour:
    kind: str           # what gcurun calls it: mpich, intel
    variable: str
    program: str        # under the prefix

    def mpirun(self) -> str:
        """The flavour's mpirun; skips the test when it is not there."""
        prefix = os.environ.get(self.variable)
        if not prefix:
            pytest.skip(f"{self.variable} is not set; install {self.kind} with pip install "
                        f"--prefix DIR {'mpich' if self.kind == 'mpich' else 'impi-rt'} "
                        f"and set {self.variable}=DIR")
        path = os.path.join(prefix, self.program)
        if not os.access(path, os.X_OK):
            pytest.skip(f"{self.variable}={prefix}: no {self.program} there")
        return path


FLAVOURS = (Flavour("mpich", "GCURUN_TEST_MPICH_PREFIX", "bin/mpiexec"),
            Flavour("intel", "GCURUN_TEST_IMPI_PREFIX", "bin/mpirun"))
# Every test of a module with this mark runs once per flavour (argument ``flavour``).
each_flavour = pytest.mark.parametrize("flavour", FLAVOURS, ids=[f.kind for f in FLAVOURS])
