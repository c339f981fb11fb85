"""Start rank scripts as real processes: ``tcp`` jobs behind a RendezvousServer of the test
process (the launcher's part, played here), ``mpi`` jobs under mpirun, ``local`` alone."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gcurun.rendezvous.server import RendezvousServer, new_secret
from tests.helpers import ROOT

RANK_SCRIPTS = Path(__file__).resolve().parent / "ranks"
MPIRUN = shutil.which("mpirun")


@dataclass
class JobResult:
    returncodes: list[int]
    stdout: str
    stderr: str
    aborts: list[str] = field(default_factory=list)

    def lines(self, prefix: str) -> list[str]:
        return [line for line in self.stdout.splitlines() if line.startswith(prefix)]


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment without any launcher's variables, plus ``extra``."""
    prefixes = ("GCURUN_", "HOROVOD_", "OMPI_", "PMIX_", "PMI_", "SLURM_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
    env["PYTHONPATH"] = str(ROOT)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def rank_env(rank: int, size: int, hosts: Sequence[str]) -> dict[str, str]:
    host = hosts[rank]
    same = [r for r in range(size) if hosts[r] == host]
    names = sorted(set(hosts), key=hosts.index)
    return {
        "GCURUN_RANK": str(rank), "GCURUN_SIZE": str(size),
        "GCURUN_LOCAL_RANK": str(same.index(rank)), "GCURUN_LOCAL_SIZE": str(len(same)),
        "GCURUN_CROSS_RANK": str(names.index(host)), "GCURUN_CROSS_SIZE": str(len(names)),
        "GCURUN_HOSTNAME": host,
    }


def run_tcp(size: int, script: str, *args: str, env: dict[str, str] | None = None,
            timeout: float = 120.0, hosts: Sequence[str] | None = None,
            while_running: Callable[[RendezvousServer, list[subprocess.Popen]], None]
            | None = None) -> JobResult:
    """``size`` processes of ``script`` with the environment gcurun's launcher gives."""
    secret = new_secret()
    aborts: list[str] = []
    hosts = list(hosts or ["localhost"] * size)
    with RendezvousServer("127.0.0.1", 0, secret=secret, size=size,
                          on_abort=aborts.append) as server:
        host, port = server.address
        procs = []
        for rank in range(size):
            rank_vars = {**rank_env(rank, size, hosts), "GCURUN_RENDEZVOUS": f"{host}:{port}",
                         "GCURUN_SECRET": secret.hex(), **(env or {})}
            procs.append(subprocess.Popen(
                [sys.executable, str(RANK_SCRIPTS / script), *args], env=clean_env(rank_vars),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        try:
            if while_running is not None:
                while_running(server, procs)
            outputs = [_communicate(p, timeout) for p in procs]
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    return JobResult([p.returncode for p in procs], "".join(o for o, _ in outputs),
                     "".join(e for _, e in outputs), aborts)


def _communicate(proc: subprocess.Popen, timeout: float) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"a rank did not finish within {timeout:.0f} s:\n{out}\n{err}") \
            from None


def run_mpi(size: int, script: str, *args: str, env: dict[str, str] | None = None,
            timeout: float = 120.0) -> JobResult:
    """``script`` under mpirun; one return code, the job's."""
    assert MPIRUN is not None
    command = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", str(size),
               sys.executable, str(RANK_SCRIPTS / script), *args]
    started = time.monotonic()
    try:
        done = subprocess.run(command, env=clean_env(env), capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"mpirun did not finish within {timeout:.0f} s "
                             f"(after {time.monotonic() - started:.0f} s):\n"
                             f"{exc.stdout}\n{exc.stderr}") from None
    return JobResult([done.returncode], done.stdout, done.stderr)


def run_local(script: str, *args: str, env: dict[str, str] | None = None,
              timeout: float = 120.0) -> JobResult:
    done = subprocess.run([sys.executable, str(RANK_SCRIPTS / script), *args],
                          env=clean_env(env), capture_output=True, text=True, timeout=timeout)
    return JobResult([done.returncode], done.stdout, done.stderr)


def run_job(backend: str, size: int, script: str, *args: str,
            env: dict[str, str] | None = None, timeout: float = 120.0) -> JobResult:
    if backend == "tcp":
        return run_tcp(size, script, *args, env=env, timeout=timeout)
    if backend == "mpi":
        return run_mpi(size, script, *args, env=env, timeout=timeout)
    assert size == 1
    return run_local(script, *args, env=env, timeout=timeout)
