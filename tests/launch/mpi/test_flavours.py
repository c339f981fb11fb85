"""`gcurun --mpi` with MPICH and Intel MPI (Hydra) on this host: the mpi backend's
allreduce through mpi4py, the flavour's rank variables, a failing rank stopping the job,
Ctrl-C and binding, with nothing left behind."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import pytest

from tests.helpers import (
    RANKS,
    ROOT,
    all_pids,
    gcurun_cmd,
    read_ranks,
    run_gcurun,
    survivors,
    wait_for,
)
from tests.launch.mpi.flavours import Flavour, each_flavour
from tests.launch.mpi.test_jobs import job_processes

pytestmark = [pytest.mark.integration, pytest.mark.mpi, each_flavour]

WORKER = str(RANKS / "worker.py")
COLLECTIVE = str(RANKS / "collective_check.py")


def test_allreduce_through_mpi4py(flavour: Flavour):
    res = run_gcurun("--mpi", "--mpirun", flavour.mpirun(), "-np", "2", sys.executable,
                     COLLECTIVE)
    assert res.returncode == 0, res.stderr
    lines = sorted(res.stdout.splitlines())
    assert [line[:4] for line in lines] == ["[0] ", "[1] "], res.stdout
    reports = [json.loads(line[4:]) for line in lines]
    expected = sum(range(1001)) * 3     # ranks 0 and 1 send data * 1 and data * 2
    assert [(r["backend"], r["rank"], r["size"], r["local_rank"], r["checksum"])
            for r in reports] == [("mpi", 0, 2, 0, expected), ("mpi", 1, 2, 1, expected)]


def test_a_failing_rank_stops_the_job_and_nothing_survives(flavour: Flavour, tmp_path):
    # Hydra itself would wait for the other ranks (60 s here) and name no rank.
    res = run_gcurun("--mpi", "--mpirun", flavour.mpirun(), "-np", "3", "--grace-seconds",
                     "2", "-x", "FORWARDED=by -genv", sys.executable, WORKER, str(tmp_path),
                     "--fail-rank", "1", "--code", "3", "--grandchild")
    assert res.returncode == 3, res.stderr
    assert "gcurun: job failed: rank 1 on localhost exited with code 3 (root cause); " \
        "every other rank was stopped" in res.stderr
    assert "gcurun-rank-exit" not in res.stderr + res.stdout
    records = read_ranks(tmp_path, 3)
    for rank, rec in enumerate(records):     # the flavour's variables, gcurun's from them
        env = rec["env"]
        assert (env["PMI_RANK"], env["PMI_SIZE"], env["MPI_LOCALRANKID"],
                env["MPI_LOCALNRANKS"]) == (str(rank), "3", str(rank), "3")
        assert (env["GCURUN_RANK"], env["GCURUN_SIZE"], env["LOCAL_RANK"],
                env["GCURUN_LOCAL_SIZE"]) == (str(rank), "3", str(rank), "3")
        assert env["FORWARDED"] == "by -genv"
    assert job_processes(str(tmp_path)) == []
    assert survivors(all_pids(records), timeout=0) == []


@pytest.mark.long
def test_ctrl_c_stops_every_rank(flavour: Flavour, tmp_path):
    proc = subprocess.Popen(
        gcurun_cmd("--mpi", "--mpirun", flavour.mpirun(), "-np", "2", "--grace-seconds", "2",
                   sys.executable, WORKER, str(tmp_path), "--grandchild", "--linger", "120"),
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        wait_for("both ranks", lambda: all((tmp_path / f"rank-{r}.json").exists()
                                           for r in range(2)), timeout=60)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "gcurun: interrupted by SIGINT; stopped every rank" in err
    assert job_processes(str(tmp_path)) == []
    assert survivors(all_pids(read_ranks(tmp_path, 2)), timeout=0) == []


@pytest.mark.long
def test_bind_to_core_gives_each_rank_its_own_core(flavour: Flavour, tmp_path):
    res = run_gcurun("--mpi", "--mpirun", flavour.mpirun(), "-np", "2", "--bind-to", "core",
                     sys.executable, WORKER, str(tmp_path), "--linger", "0")
    assert res.returncode == 0, res.stderr
    affinities = [tuple(r["affinity"]) for r in read_ranks(tmp_path, 2)]
    assert all(len(a) == 1 for a in affinities) and len(set(affinities)) == 2, affinities


def test_check_names_the_flavour_and_version(flavour: Flavour):
    mpirun = flavour.mpirun()
    res = run_gcurun("check", "--mpirun", mpirun, env={"COLUMNS": "300"})
    assert res.returncode == 0, res.stderr
    row = next(" ".join(line.split()) for line in res.stdout.splitlines()
               if line.startswith("mpi flavour"))
    library = os.path.join(os.path.dirname(os.path.dirname(mpirun)), "lib", "libmpi.so.12")
    version = {"mpich": r"5\.\d+\.\d+", "intel": r"20\d\d\.\d+\.\d+"}[flavour.kind]
    assert re.fullmatch(rf"mpi flavour {flavour.kind} {version} \({re.escape(mpirun)}; ranks "
                        rf"get MPI4PY_LIBMPI={re.escape(library)}\)", row), row
