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

    for name in hvd.__all__:
        assert getattr(hvd, name) is not None
    assert {"allreduce", "add_process_set", "remove_process_set", "ProcessSet",
            "global_process_set"} <= set(hvd.__all__)


def test_the_public_names_and_signatures_of_before_stay() -> None:
    """What a binding written against ``gcurun.runtime`` uses is still there, with the
    same parameters (process_set= comes last, with a default)."""
    import inspect

    import gcurun.runtime as hvd

    before = {
        "allreduce": ["tensor", "average", "name", "op", "prescale_factor",
                      "postscale_factor"],
        "allreduce_async_": ["tensor", "average", "name", "op", "prescale_factor",
                             "postscale_factor"],
        "broadcast": ["tensor", "root_rank", "name"],
        "alltoall": ["tensor", "splits", "name"],
        "reducescatter": ["tensor", "name", "op", "prescale_factor", "postscale_factor"],
        "grouped_allreduce": ["tensors", "average", "name", "op", "prescale_factor",
                              "postscale_factor"],
        "broadcast_object": ["obj", "root_rank", "name"],
        "synchronize": ["handle"], "poll": ["handle"], "init": ["comm"], "shutdown": [],
    }
    for name, params in before.items():
        got = list(inspect.signature(getattr(hvd, name)).parameters)
        assert got[:len(params)] == params, name
        assert got[len(params):] in ([], ["process_set"]), name
