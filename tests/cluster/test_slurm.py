"""A real Slurm on namespace hosts (tests/cluster/slurm.py): its nodes, what its variables
say and how gcurun.hosts.slurm reads them, and the srun behaviour gcurun builds on: one-rank
MPI worlds without PMIx, Ctrl-C, --kill-on-bad-exit, GRES devices. docs/slurm.md tells
users the same facts."""

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
from tests.helpers import skip_without, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.integration, pytest.mark.slurm]

TASK = str(Path(__file__).resolve().parent / "slurm_task.py")
CONTRACT_RANK = Path(__file__).resolve().parents[1] / "frameworks" / "contract_rank.py"


def reports(directory: Path) -> list[dict]:
    """The reports of slurm_task.py in ``directory``, one file per task (srun's
    ``-o DIR/%t.out``: tasks on one node would interleave their long lines on one
    stream), ordered by SLURM_PROCID."""
    found = [json.loads(line) for path in directory.glob("*.out")
             for line in path.read_text().splitlines() if line.startswith("{")]
    return sorted(found, key=lambda r: int(r["slurm"].get("SLURM_PROCID", 0)))


def srun_tasks(slurm: SlurmCluster, out: Path, *args: str, **env: str) -> list[dict]:
    """Run ``srun ARGS -o OUT/%t.out slurm_task.py`` (ARGS may start with ``salloc ...``
    options up to its own ``srun``) and return the tasks' reports; fail on a non-zero
    exit."""
    out.mkdir(exist_ok=True)
    argv = [*args, "-o", f"{out}/%t.out", sys.executable, TASK]
    done = slurm.run(argv, env=slurm.env(**env), timeout=60)
    assert done.returncode == 0, done.stderr
    return reports(out)


def with_token(token: str) -> list[psutil.Process]:
    """Live processes, on every node (they share our pid namespace), whose environment
    holds TEST_TOKEN=token: srun passes the caller's environment to every task."""
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


class Step:
    """An srun running in the background, its output collected line by line."""

    def __init__(self, slurm: SlurmCluster, args: list[str], out: Path,
                 env: dict[str, str]):
        self.token = uuid.uuid4().hex
        self.out: list[str] = []
        self.err: list[str] = []
        self.dir = out
        out.mkdir()
        self.proc = subprocess.Popen(
            ["srun", *args, "-o", f"{out}/%t.out", sys.executable, TASK],
            env=slurm.env(TEST_TOKEN=self.token, **env),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self._readers = [threading.Thread(target=self._read, args=(s, sink), daemon=True)
                         for s, sink in ((self.proc.stdout, self.out),
                                         (self.proc.stderr, self.err))]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _read(stream, sink: list[str]) -> None:  # type: ignore[no-untyped-def]
        for line in stream:
            sink.append(line)

    def started(self) -> int:
        """How many tasks have written their whole report."""
        return sum(1 for path in self.dir.glob("*.out") if path.read_text().endswith("}\n"))

    def wait(self, timeout: float = 30) -> int:
        code = self.proc.wait(timeout=timeout)
        for reader in self._readers:
            reader.join(timeout)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def step_factory(slurm_jobs: SlurmCluster, tmp_path: Path):
    steps: list[Step] = []

    def start(args: list[str], **env: str) -> Step:
        steps.append(Step(slurm_jobs, args, tmp_path / f"step{len(steps)}", env))
        return steps[-1]

    yield start
    for step in steps:
        step.kill()


def test_every_node_is_a_namespace_host(slurm_jobs, tmp_path):
    got = srun_tasks(slurm_jobs, tmp_path, "srun", "-N3", "-n3")
    assert [r["hostname"] for r in got] == ["h1", "h2", "h3"]
    for r in got:
        assert r["netns"] == slurm_jobs.netns.host(r["hostname"]).net_namespace_inode()
    assert len({r["netns"] for r in got} | {os.stat("/proc/self/ns/net").st_ino}) == 4
    # The job srun made is "completing" on its nodes for a moment after srun returns.
    wait_for("the three nodes to be idle again", lambda: slurm_jobs.node_states() ==
             {"h1": "idle", "h2": "idle", "h3": "idle"}, timeout=30)


def test_salloc_is_read_as_an_allocation_outside_any_step(slurm_jobs, tmp_path):
    done = slurm_jobs.run(["salloc", "-N2", "-n3", sys.executable, TASK])
    assert done.returncode == 0, done.stderr
    (got,) = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert got["hostname"] not in ("h1", "h2")  # salloc runs its command where it is
    assert got["slurm"]["SLURM_JOB_NODELIST"] == "h[1-2]"
    assert got["slurm"]["SLURM_TASKS_PER_NODE"] == "2,1"
    assert "SLURM_STEP_ID" not in got["slurm"]
    assert got["parsed"] == {"job_id": got["slurm"]["SLURM_JOB_ID"], "hosts": ["h1", "h2"],
                             "cpus_per_node": [2, 1], "tasks_per_node": [2, 1],
                             "num_tasks": 3, "step": None}


def test_an_sbatch_script_is_no_step(slurm_jobs, tmp_path):
    out = tmp_path / "batch.out"  # reports() reads it
    done = slurm_jobs.run(["sbatch", "--wait", "-N3", "-n5", "-o", str(out), "--wrap",
                           f"{sys.executable} {TASK}"], timeout=60)
    assert done.returncode == 0, done.stderr
    (got,) = reports(tmp_path)
    assert got["hostname"] == "h1"  # the script runs on the first node
    assert got["slurm"]["SLURM_PROCID"] == "0" and "SLURM_STEP_ID" not in got["slurm"]
    assert got["slurm"]["SLURM_TASKS_PER_NODE"] == "2(x2),1"
    assert got["parsed"]["tasks_per_node"] == [2, 2, 1]
    assert got["parsed"]["num_tasks"] == 5 and got["parsed"]["step"] is None


def test_tasks_of_a_step_see_the_step(slurm_jobs, tmp_path):
    # A step smaller than its allocation: srun writes the step's counts over
    # SLURM_NTASKS and SLURM_TASKS_PER_NODE; the nodelist stays the allocation's.
    got = srun_tasks(slurm_jobs, tmp_path, "salloc", "-N3", "-n5", "srun", "-N2", "-n3")
    assert [r["hostname"] for r in got] == ["h1", "h1", "h2"]
    for rank, r in enumerate(got):
        assert r["slurm"]["SLURM_TASKS_PER_NODE"] == "2,1"
        assert r["slurm"]["SLURM_NTASKS"] == "3"
        assert r["parsed"]["hosts"] == ["h1", "h2", "h3"]
        assert r["parsed"]["tasks_per_node"] is None
        step = r["parsed"]["step"]
        assert step["hosts"] == ["h1", "h2"] and step["tasks_per_node"] == [2, 1]
        assert (step["rank"], step["local_rank"], step["node_index"]) == \
            (rank, [0, 1, 0][rank], [0, 0, 1][rank])
    # The tasks of a step on one node share one process group.
    assert got[0]["pgid"] == got[1]["pgid"] == got[0]["pid"]


@pytest.mark.mpi
def test_plain_srun_gives_one_rank_mpi_worlds_and_pmix_one_world(slurm_jobs, tmp_path):
    # Open MPI's processes started by srun keep session folders under TMPDIR and leave
    # some behind: under the test's folder, not the machine's /tmp.
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    plain = srun_tasks(slurm_jobs, tmp_path / "plain", "srun", "-N2", "-n2", REPORT_MPI="1",
                       TMPDIR=str(tmpdir))
    assert [r["mpi"] for r in plain] == [[0, 1], [0, 1]]
    if not has_pmix(slurm_jobs):
        pytest.skip("this Slurm has no --mpi=pmix; install libpmix-dev before slurmd starts")
    pmix = srun_tasks(slurm_jobs, tmp_path / "pmix", "srun", "--mpi=pmix", "-N2", "-n2",
                      REPORT_MPI="1", TMPDIR=str(tmpdir))
    assert [r["mpi"] for r in pmix] == [[0, 2], [1, 2]]


def test_two_interrupts_cancel_the_step(step_factory, tmp_path):
    step = step_factory(["-N2", "-n2"], GO_FILE=str(tmp_path / "never"))
    wait_for("both tasks to start", lambda: step.started() == 2)
    step.proc.send_signal(signal.SIGINT)
    wait_for("srun to report the interrupt",
             lambda: any("one more within 1 sec" in line for line in step.err))
    assert step.proc.poll() is None  # one interrupt only reports
    step.proc.send_signal(signal.SIGINT)
    assert step.wait() != 0
    assert any("sending Ctrl-C" in line for line in step.err), "".join(step.err)
    wait_for("no task left", lambda: not with_token(step.token), timeout=15)


def test_kill_on_bad_exit_stops_the_other_tasks(step_factory, tmp_path):
    step = step_factory(["-K", "-N2", "-n2"], GO_FILE=str(tmp_path / "never"),
                        EXIT_RANK="1", EXIT_CODE="3")
    code = step.wait()
    err = "".join(step.err)
    assert "task 1: Exited with exit code 3" in err, err
    # srun exits with its highest task status: the SIGTERM of task 0, not the 3 of
    # the task that failed first.
    assert code == 128 + signal.SIGTERM, err
    wait_for("no task left", lambda: not with_token(step.token), timeout=15)


def test_without_kill_on_bad_exit_the_others_run_on(step_factory, tmp_path):
    go = tmp_path / "go"
    step = step_factory(["-N2", "-n2"], GO_FILE=str(go), EXIT_RANK="1", EXIT_CODE="3")
    wait_for("task 1's failure", lambda: any("exit code 3" in line for line in step.err))
    assert len(with_token(step.token)) >= 2  # srun and task 0
    go.touch()
    assert step.wait() == 3
    wait_for("no task left", lambda: not with_token(step.token), timeout=15)


def test_gres_gpus_set_the_device_variables(slurm_jobs, tmp_path):
    per_task = srun_tasks(slurm_jobs, tmp_path / "per-task", "srun", "-N1", "-n2",
                          "--gpus-per-task=1")
    assert [r["devices"]["CUDA_VISIBLE_DEVICES"] for r in per_task] == ["0", "1"]
    shared = srun_tasks(slurm_jobs, tmp_path / "shared", "srun", "-N1", "-n2", "--gres=gpu:2")
    for r in shared:
        assert r["devices"] == {"CUDA_VISIBLE_DEVICES": "0,1", "ROCR_VISIBLE_DEVICES": "0,1",
                                "GPU_DEVICE_ORDINAL": "0,1"}
        assert r["slurm"]["SLURM_STEP_GPUS"] == "0,1"
    (r,) = srun_tasks(slurm_jobs, tmp_path / "plain", "srun", "-N1", "-n1")
    assert r["devices"]["CUDA_VISIBLE_DEVICES"] is None


def test_node_names_resolve_on_the_nodes_and_through_login_command(slurm_jobs):
    done = slurm_jobs.run(["srun", "-N1", "-w", "h3", "getent", "hosts", "h1"])
    assert done.returncode == 0 and done.stdout.split() == \
        [slurm_jobs.netns.host("h1").address, "h1"], done.stderr
    login = slurm_jobs.run(slurm_jobs.login_command(["getent", "hosts", "h2"]))
    assert login.stdout.split() == [slurm_jobs.netns.host("h2").address, "h2"], login.stderr


@pytest.mark.jax
def test_jax_finds_its_job_in_an_srun_step_by_itself(slurm_jobs, tmp_path):
    skip_without("jax", "pip install jax")
    out = tmp_path / "out"
    out.mkdir()
    # No coordinator, count or id given: JAX reads SLURM_STEP_NODELIST's first host,
    # SLURM_NTASKS, SLURM_PROCID and SLURM_LOCALID, and picks a port from SLURM_JOB_ID.
    done = slurm_jobs.run(["srun", "-N2", "-n2", "-o", f"{out}/%t.out", sys.executable,
                           str(CONTRACT_RANK), "jax"], timeout=120,
                          env=slurm_jobs.env(JAX_PLATFORMS="cpu"))
    assert done.returncode == 0, done.stderr
    got = [json.loads(p.read_text().strip().splitlines()[-1])
           for p in sorted(out.glob("*.out"))]
    assert [(r["rank"], r["size"], r["sum"]) for r in got] == [(0, 2, 3.0), (1, 2, 3.0)]
