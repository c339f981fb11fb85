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


def test_the_launcher_imports_the_rendezvous_without_numpy() -> None:
    code = ("import sys; from gcurun.rendezvous.server import RendezvousServer, new_secret; "
            "print('numpy' in sys.modules, len(new_secret()))")
    done = subprocess.run([sys.executable, "-c", code], env=clean_env(), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "32"]


def test_every_public_name_resolves() -> None:
    import gcurun.runtime as hvd
    from gcurun.runtime import _HOME_OF

    assert sorted(hvd.__all__) == sorted(_HOME_OF)
    for name in hvd.__all__:
        assert getattr(hvd, name) is not None
    assert "allreduce" in dir(hvd)
