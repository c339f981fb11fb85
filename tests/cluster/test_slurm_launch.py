"""gcurun in a real Slurm (tests/cluster/slurm.py): hosts and slots read from an
allocation, ``--slurm`` jobs on two nodes (tcp and mpi backends), a failing rank, Ctrl-C,
nothing left behind, and the guard against one-rank MPI worlds under plain srun.

gcurun runs where salloc runs it, on this machine as on a login node, with the nodes'
names resolving as they do on the nodes (``login_command``); sbatch runs its script on
the first node."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import psutil
import pytest

from tests.cluster.slurm import SlurmCluster, has_pmix
from tests.helpers import rank_reports, skip_without, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.integration, pytest.mark.slurm]

RANK = str(Path(__file__).resolve().parent / "slurm_rank.py")
GCURUN = [sys.executable, "-m", "gcurun"]
SECONDS = 90


def in_allocation(slurm: SlurmCluster, alloc: list[str], args: list[str],
                  **env: str) -> subprocess.CompletedProcess[str]:
    """``salloc ALLOC gcurun ARGS`` with the node names resolving; output captured."""
    return slurm.run(["salloc", *alloc, *slurm.login_command([*GCURUN, *args])],
                     env=slurm.env(**env), timeout=SECONDS)


def with_token(token: str) -> list[psutil.Process]:
    """Live processes, on every node (they share our pid namespace), whose environment
    holds TEST_TOKEN=token: srun hands its environment to every task."""
    found = []
    for p in psutil.process_iter(["status"]):
        if p.info["status"] == psutil.STATUS_ZOMBIE or p.pid == os.getpid():
            continue
        try:
            if p.environ().get("TEST_TOKEN") == token:
                found.append(p)
        except psutil.Error:
            continue
    return found


def test_salloc_gives_gcurun_its_hosts_slots_and_np(slurm_jobs):
    done = in_allocation(slurm_jobs, ["-N2", "-n3"], ["--dry-run", "--json", "true"])
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert [(h["name"], h["slots"]) for h in plan["hosts"]] == [("h1", 2), ("h2", 1)]
    assert plan["size"] == 3 and plan["launcher"] == "ssh"
    assert (plan["sources"]["hosts"], plan["sources"]["np"]) == ("slurm", "slurm")


def test_an_sbatch_script_gives_gcurun_its_hosts_and_srun_refuses_a_gcurun(slurm_jobs,
                                                                          tmp_path):
    out = tmp_path / "batch.out"
    done = slurm_jobs.run(["sbatch", "--wait", "-N3", "-n5", "-o", str(out), "--wrap",
                           f"{sys.executable} -m gcurun --dry-run --json true"], timeout=SECONDS)
    assert done.returncode == 0, done.stderr + out.read_text()
    plan = json.loads(out.read_text())
    assert [(h["name"], h["slots"]) for h in plan["hosts"]] == [("h1", 2), ("h2", 2),
                                                                 ("h3", 1)]
    assert plan["size"] == 5 and plan["sources"]["hosts"] == "slurm"
    # gcurun run by srun is a task of a step, which cannot know the allocation's layout.
    done = slurm_jobs.run(["srun", "-N1", "-n1", *GCURUN, "--dry-run", "true"])
    assert done.returncode == 2
    assert "inside a Slurm step (SLURM_STEP_ID is set)" in done.stderr


def check_job(done: subprocess.CompletedProcess[str], backend: str) -> dict[int, dict]:
    assert done.returncode == 0, done.stdout + done.stderr
    reports = rank_reports(done.stdout)
    assert sorted(reports) == [0, 1, 2, 3]
    for rank, r in reports.items():
        assert (r["rank"], r["size"], r["backend"], r["sum"]) == (rank, 4, backend, 10.0)
        assert (r["hostname"], r["local_rank"], r["local_size"]) == \
            (["h1", "h1", "h2", "h2"][rank], rank % 2, 2)
        assert r["env"]["SLURM_PROCID"] == str(rank)     # srun placed rank N as task N
        assert r["env"]["TOPS_VISIBLE_DEVICES"] == "0,1"     # the node's, as local/SSH
        assert r["env"]["GCURUN_DEVICE"] == str(rank % 2)
        assert r["env"]["SLURM_JOB_NAME"] == "interactive"
        assert r["env"]["PADDLE_CURRENT_ENDPOINT"].startswith(r["hostname"] + ":")
    return reports


def test_slurm_job_on_two_nodes_with_the_tcp_backend(slurm_jobs):
    done = in_allocation(slurm_jobs, ["-N2", "-n4"], ["--slurm", "--bind-to", "core",
                                                      sys.executable, RANK])
    reports = check_job(done, "tcp")
    # The plan bound the ranks (srun did not: --cpu-bind=none): one core each.
    assert [len(r["cpus"]) for r in reports.values()] == [1, 1, 1, 1]
    assert reports[0]["cpus"] != reports[1]["cpus"]
    assert [r["env"]["OMP_NUM_THREADS"] for r in reports.values()] == ["1"] * 4


@pytest.mark.mpi
def test_slurm_job_on_two_nodes_with_the_mpi_backend(slurm_jobs):
    if not has_pmix(slurm_jobs):
        pytest.skip("this Slurm has no --mpi=pmix; install libpmix-dev before slurmd starts")
    done = in_allocation(slurm_jobs, ["-N2", "-n4"], ["--slurm", sys.executable, RANK],
                         GCURUN_BACKEND="mpi")
    check_job(done, "mpi")


def test_a_failing_rank_is_the_root_cause_and_its_code_the_exit_code(slurm_jobs, tmp_path):
    token = uuid.uuid4().hex
    done = in_allocation(slurm_jobs, ["-N2", "-n3"], ["--slurm", sys.executable, RANK],
                         GO_FILE=str(tmp_path / "never"), EXIT_RANK="2", EXIT_CODE="3",
                         TEST_TOKEN=token)
    assert done.returncode == 3, done.stdout + done.stderr
    assert ("gcurun: job failed: rank 2 on h2 exited with code 3 (root cause); every other "
            "rank was stopped") in done.stderr
    assert "    rank 2 fails on purpose" in done.stderr
    assert "gcurun: exit code 3" in done.stderr
    wait_for("no process of the job left on any node", lambda: not with_token(token),
             timeout=15)


class Running:
    """salloc running gcurun in the background, its output collected line by line."""

    def __init__(self, slurm: SlurmCluster, alloc: list[str], args: list[str],
                 **env: str) -> None:
        self.token = uuid.uuid4().hex
        self.out: list[str] = []
        self.err: list[str] = []
        self.proc = subprocess.Popen(
            ["salloc", *alloc, *slurm.login_command([*GCURUN, *args])],
            env=slurm.env(TEST_TOKEN=self.token, **env), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        self._readers = [threading.Thread(target=self._read, args=pair, daemon=True)
                         for pair in ((self.proc.stdout, self.out),
                                      (self.proc.stderr, self.err))]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _read(stream, sink: list[str]) -> None:  # type: ignore[no-untyped-def]
        for line in stream:
            sink.append(line)

    def gcurun(self) -> psutil.Process:
        """gcurun itself: the process under salloc that runs ``python -m gcurun``."""
        for child in psutil.Process(self.proc.pid).children(recursive=True):
            try:
                if child.cmdline()[1:3] == ["-m", "gcurun"]:
                    return child
            except psutil.Error:
                continue
        raise AssertionError("gcurun is not running under salloc")

    def wait(self, timeout: float = SECONDS) -> int:
        code = self.proc.wait(timeout=timeout)
        for reader in self._readers:
            reader.join(timeout)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def running(slurm_jobs):
    started: list[Running] = []

    def start(alloc: list[str], args: list[str], **env: str) -> Running:
        started.append(Running(slurm_jobs, alloc, args, **env))
        return started[-1]

    yield start
    for job in started:
        job.kill()


def test_ctrl_c_cancels_the_step_gracefully_and_leaves_nothing(running, tmp_path):
    job = running(["-N2", "-n3"], ["--slurm", "--grace-seconds", "5", sys.executable, RANK],
                  GO_FILE=str(tmp_path / "never"))
    wait_for("every rank to report", lambda: len(rank_reports("".join(job.out))) == 3,
             timeout=60)
    job.gcurun().send_signal(signal.SIGINT)
    assert job.wait() == 130, "".join(job.out + job.err)
    out, err = "".join(job.out), "".join(job.err)
    assert "gcurun: interrupted by SIGINT; stopped every rank" in err
    # The step's tasks were told first (scancel --signal=TERM), not killed outright.
    for rank in range(3):
        assert f"[{rank}] rank {rank} got SIGTERM" in out, out
    wait_for("no process of the job left on any node", lambda: not with_token(job.token),
             timeout=15)


def test_plain_srun_of_a_multi_task_step_stops_one_rank_worlds(slurm_jobs, tmp_path):
    # Without --mpi=pmix each task would be an MPI world of its own and train alone.
    # (Open MPI's one-rank worlds leave their session folders under TMPDIR, even after a
    # clean exit: under the test's folder, not the machine's /tmp.)
    done = slurm_jobs.run(["srun", "-N2", "-n2", "--label", sys.executable, "-c",
                           "import gcurun.runtime as h; h.init(); print('alone', h.size())"],
                          timeout=SECONDS, env=slurm_jobs.env(TMPDIR=str(tmp_path)))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "alone" not in done.stdout
    for task in (0, 1):
        assert (f"{task}: gcurun.errors.UsageError: srun (step 0, SLURM_STEP_NUM_TASKS=2) "
                "started 2 ranks, but MPI's world here has 1 rank") in done.stderr, done.stderr


CONTRACT_RANK = str(Path(__file__).resolve().parents[1] / "frameworks" / "contract_rank.py")


@pytest.mark.parametrize("framework", [
    pytest.param("paddle", marks=pytest.mark.paddle),
    pytest.param("jax", marks=pytest.mark.jax),
])
def test_paddle_and_jax_find_their_job_in_a_slurm_job(slurm_jobs, framework):
    skip_without(framework, "pip install " + {"paddle": "paddlepaddle", "jax": "jax"}[framework])
    # Paddle reads the plan's PADDLE_* variables; JAX its coordinator from gcurun and its
    # process count and id from the step's Slurm variables, which match the plan.
    done = in_allocation(slurm_jobs, ["-N2", "-n2"],
                         ["--slurm", "--accelerator", "none", "-x", "JAX_PLATFORMS=cpu",
                          sys.executable, CONTRACT_RANK, framework])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    got = rank_reports(done.stdout)
    assert [(got[r]["rank"], got[r]["size"], got[r]["sum"]) for r in (0, 1)] == \
        [(0, 2, 3.0), (1, 2, 3.0)]


def test_gcurun_run_in_a_slurm_job(slurm_jobs):
    # gcurun.run takes the launcher from the settings like the command: here from
    # GCURUN_LAUNCHER; its function service is reached as the rendezvous is.
    script = ("import gcurun, socket\n"
              "print(gcurun.run(lambda: socket.gethostname()))\n")
    done = slurm_jobs.run(["salloc", "-N2", "-n3", *slurm_jobs.login_command(
        [sys.executable, "-c", script])], env=slurm_jobs.env(GCURUN_LAUNCHER="slurm"),
        timeout=SECONDS)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "['h1', 'h1', 'h2']"


@pytest.mark.parametrize(("gres", "devices"), [
    ("--gres=gpu:2", [("0,1", "0"), ("0,1", "1")]),   # the node's list, own at local rank
    ("--gpus-per-task=1", [("0", "0"), ("1", "1")]),  # one device per task
])
def test_devices_slurms_gres_gave_win_over_the_plans(slurm_jobs, gres, devices):
    # The plan would give devices 5 and 6; the step's GRES (2 fake GPUs per node) wins.
    done = in_allocation(slurm_jobs, ["-N1", "-n2", gres],
                         ["--slurm", "--accelerator", "cuda", "--devices", "5,6",
                          sys.executable, "-c", "import os; print('{\"dev\": \"%s\", "
                          "\"own\": \"%s\"}' % (os.environ['CUDA_VISIBLE_DEVICES'], "
                          "os.environ['GCURUN_DEVICE']))"])
    assert done.returncode == 0, done.stderr
    got = rank_reports(done.stdout)
    assert [(got[r]["dev"], got[r]["own"]) for r in (0, 1)] == devices


@pytest.mark.parametrize(("mode", "custom"), [("all", "c"), ("listed", None)])
def test_srun_tasks_get_the_launchers_environment_as_the_mode_says(slurm_jobs, mode, custom):
    report = str(Path(__file__).resolve().parents[1] / "ranks" / "env_report.py")
    done = in_allocation(slurm_jobs, ["-N2", "-n2"], [
        "--slurm", "--env-forward", mode, "-x", "ENVFWD_LISTED", sys.executable, report,
        "ENVFWD_CUSTOM", "ENVFWD_LISTED", "DISPLAY", "HOME"],
        ENVFWD_CUSTOM="c", ENVFWD_LISTED="l", DISPLAY=":99", HOROVOD_STALL_CHECK_DISABLE="1")
    assert done.returncode == 0, done.stdout + done.stderr
    reports = rank_reports(done.stdout)
    assert sorted(reports) == [0, 1]
    for r in reports.values():
        assert (r["env"]["ENVFWD_CUSTOM"], r["env"]["ENVFWD_LISTED"], r["env"]["DISPLAY"],
                r["stall_check_warning_seconds"]) == (custom, "l", None, 0.0)
