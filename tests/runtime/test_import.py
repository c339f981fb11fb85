"""``import gcurun.runtime`` stays cheap: mpi4py (which starts MPI) only with the mpi backend."""

from __future__ import annotations

import subprocess
import sys

from tests.runtime.jobs import clean_env


def test_importing_the_runtime_does_not_start_mpi() -> None:
    code = ("import sys, gcurun.runtime as hvd; hvd.init(); "
            "print(hvd.backend(), 'mpi4py' in sys.modules, 'paramiko' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], env=clean_env(), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["local", "False", "False"]
