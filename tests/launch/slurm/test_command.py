"""The srun step of a plan and srun's output read back: pure pieces, no Slurm needed
(tests/cluster/test_slurm_launch.py runs them on a real Slurm)."""

from __future__ import annotations

import shlex
import signal

import pytest

from gcurun.config.api import RuntimeSettings, Settings
from gcurun.errors import LaunchError, UsageError
from gcurun.hosts.api import HostSpec
from gcurun.launch.api import Binding, ExitEvent
from gcurun.launch.planning.plan import build_plan
from gcurun.launch.remote.mpi_shim import RankBinding, rank_binding, shim_environment
from gcurun.launch.slurm.command import (
    SrunFailure,
    build_srun_command,
    parse_labelled_line,
    parse_srun_failure,
)
from gcurun.launch.slurm.prepare import check_allocation, probe_argv, uses_pmix
from gcurun.launch.slurm.rank_group import encoded_bindings, exit_events

HOSTS = (HostSpec("h1", slots=2), HostSpec("h2", slots=2))
SALLOC = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "h[1-3]",
          "SLURM_JOB_CPUS_PER_NODE": "2(x3)", "SLURM_TASKS_PER_NODE": "2(x3)",
          "SLURM_JOB_NAME": "train"}


def plan(hosts=HOSTS, **kw):
    return build_plan(hosts, ["python", "train.py"], launcher="slurm", master_addr="h1",
                      master_port=29555, workdir="/srv/job",
                      job_env={"FOO": "bar", "API_TOKEN": "s3cret"}, **kw)


def command(the_plan=None, settings=None, **kw):
    return build_srun_command(the_plan or plan(np=3), settings or Settings(),
                              python="/usr/bin/python3",
                              step_name="gcurun-abc", **kw)


def test_srun_places_every_rank_where_the_plan_put_it():
    cmd = command(secrets={"GCURUN_SECRET": "00ff"}, job_name="train")
    assert shlex.join(cmd.argv) == (
        "srun --job-name=gcurun-abc --ntasks=3 --nodes=2 --nodelist=h1,h1,h2 "
        "--distribution=arbitrary --kill-on-bad-exit=1 --label --chdir=/srv/job "
        "/usr/bin/python3 -m gcurun.launch.remote.mpi_shim -- python train.py")
    # The job's variables, the shim's layout and the secrets go into srun's environment,
    # which srun hands every task; nothing of them is on the command line.
    assert cmd.env["FOO"] == "bar" and cmd.env["API_TOKEN"] == "s3cret"
    assert cmd.env["GCURUN_SECRET"] == "00ff" and "00ff" not in " ".join(cmd.argv)
    assert (cmd.env["GCURUN_MPI_HOSTS"], cmd.env["GCURUN_MPI_SLOTS"]) == ("h1,h2", "2,1")
    assert cmd.env["GCURUN_DEVICE_VAR"] == "TOPS_VISIBLE_DEVICES"
    assert cmd.env["GCURUN_GRES_DEVICES"] == "1"
    assert cmd.env["GCURUN_SLURM_JOB_NAME"] == "train"
    assert "GCURUN_RANK" not in cmd.env and "TOPS_VISIBLE_DEVICES" not in cmd.env
    # The accelerator's variable is kept out of the tasks, so only Slurm's GRES sets it.
    assert "TOPS_VISIBLE_DEVICES" in cmd.unset and "SLURM_NTASKS_PER_NODE" in cmd.unset


def test_binding_overcommit_and_pmix_options():
    settings = Settings(bind_to="core", oversubscribe=True,
                        runtime=RuntimeSettings(backend="mpi"))
    cmd = command(settings=settings, pmix=uses_pmix(settings), bindings="0;1;0")
    assert cmd.argv[9:12] == ("--cpu-bind=none", "--overcommit", "--mpi=pmix")
    assert cmd.env["GCURUN_BINDINGS"] == "0;1;0"
    assert not uses_pmix(Settings())


def test_ranks_running_different_commands_cannot_share_a_step():
    p = plan()
    ranks = (p.ranks[0], p.ranks[1].__class__(**{**p.ranks[1].__dict__, "argv": ("x",)}))
    with pytest.raises(LaunchError, match="srun starts one command everywhere"):
        command(p.__class__(**{**p.__dict__, "ranks": ranks}))


@pytest.mark.parametrize(("hosts", "np"), [(HOSTS, 4), (HOSTS, 3),
                                           ((HostSpec("h2", slots=1), HostSpec("h1", slots=3)),
                                            4)])
def test_the_shim_rebuilds_each_ranks_plan_environment_from_slurms_variables(hosts, np):
    # srun with an arbitrary distribution: task N is rank N, on the plan's host; Slurm
    # numbers nodes in its own order (sorted), which the shim does not need.
    the_plan = plan(hosts, np=np)
    cmd = command(the_plan)
    nodes = sorted({r.host for r in the_plan.ranks})
    per_node = [len(the_plan.ranks_on(n)) for n in nodes]
    for r in the_plan.ranks:
        task = {**cmd.env, "SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0",
                "SLURM_PROCID": str(r.rank), "SLURM_LOCALID": str(r.local_rank),
                "SLURM_NODEID": str(nodes.index(r.host)),
                "SLURM_STEP_NODELIST": ",".join(nodes),
                "SLURM_STEP_TASKS_PER_NODE": ",".join(map(str, per_node)),
                "SLURM_STEP_NUM_TASKS": str(the_plan.size), "SLURM_NTASKS": str(np)}
        got = shim_environment(task, hostname=r.host)
        assert {**cmd.env, **got} == {**r.env, **cmd.env}, f"rank {r.rank}"


def test_the_shim_gives_the_tasks_the_allocations_job_name_back():
    # srun's --job-name names gcurun's step; tasks see it as SLURM_JOB_NAME.
    cmd = command(job_name="train")
    task = {**cmd.env, "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0",
            "SLURM_STEP_TASKS_PER_NODE": "2,1", "SLURM_STEP_NUM_TASKS": "3",
            "SLURM_JOB_NAME": "gcurun-abc"}
    assert shim_environment(task, "h1")["SLURM_JOB_NAME"] == "train"


def test_bindings_travel_per_rank_to_the_shim():
    bound = plan(np=3)
    ranks = tuple(r.__class__(**{**r.__dict__, "binding": b}) for r, b in zip(
        bound.ranks, (Binding((0, 1), 0, True), None, Binding((4, 5, 6, 8), 1, False)),
        strict=True))
    bound = bound.__class__(**{**bound.__dict__, "ranks": ranks})
    text = encoded_bindings(bound)
    assert text == "0-1/0/m;;4-6,8/1"
    env = {"GCURUN_BINDINGS": text}
    assert [rank_binding(env, r) for r in range(3)] == [
        RankBinding((0, 1), 0, True), None, RankBinding((4, 5, 6, 8), 1, False)]
    assert encoded_bindings(plan()) is None


@pytest.mark.parametrize(("line", "task", "text"), [
    (b"0: hello\n", 0, b"hello\n"),
    (b" 7: padded: label\n", 7, b"padded: label\n"),
    (b"12: \n", 12, b"\n"),
    (b"srun: error: h2: task 1: Exited with exit code 3\n", None,
     b"srun: error: h2: task 1: Exited with exit code 3\n"),
    (b"0: slurmstepd-h1: error: *** STEP 5.0 ON h1 CANCELLED AT 2026 ***\n", None,
     b"slurmstepd-h1: error: *** STEP 5.0 ON h1 CANCELLED AT 2026 ***\n"),
    (b"no label\n", None, b"no label\n"),
])
def test_labelled_lines(line, task, text):
    assert parse_labelled_line(line) == (task, text)


# What srun 22.05 printed on the test cluster (docs/slurm.md).
KILLED_AFTER_EXIT = """srun: error: h2: task 1: Exited with exit code 3
srun: launch/slurm: _step_signal: Terminating StepId=2.0
srun: error: h1: task 0: Terminated
srun: Force Terminated StepId=2.0
"""


@pytest.mark.parametrize(("text", "failure"), [
    (KILLED_AFTER_EXIT, SrunFailure(1, "h2", exit_code=3)),
    ("srun: error: h1: task 1: Segmentation fault\nsrun: error: h1: task 0: Terminated\n",
     SrunFailure(1, "h1", signal=int(signal.SIGSEGV))),
    ("srun: error: h1: task 3: Segmentation fault (core dumped)\n",
     SrunFailure(3, "h1", signal=int(signal.SIGSEGV))),
    ("srun: error: h2: tasks 2-3: Exited with exit code 3\n",
     SrunFailure(2, "h2", exit_code=3)),
    ("srun: error: h1: task 0: Killed\n", SrunFailure(0, "h1", signal=int(signal.SIGKILL))),
    ("srun: error: Unable to create step for job 9: Requested node configuration is not "
     "available\n", None),
])
def test_the_first_failing_task_is_read_from_sruns_messages(text, failure):
    assert parse_srun_failure(text) == failure


def test_exits_name_the_first_failure_not_sruns_highest_status():
    events = exit_events([0, 1, 2], 143, KILLED_AFTER_EXIT)
    assert events[0] == ExitEvent(1, exit_code=3,
                                  error_text="srun reported it as the first task to fail")
    assert [(e.rank, e.signal) for e in events[1:]] == [(0, signal.SIGTERM),
                                                         (2, signal.SIGTERM)]
    assert exit_events([0, 1], 0, "") == [ExitEvent(0, 0), ExitEvent(1, 0)]
    assert exit_events([0], -9, "") == [ExitEvent(0, None, 9)]


def test_an_srun_that_failed_without_a_task_reports_its_own_words():
    events = exit_events([0, 1], 1, "srun: error: Unable to create step for job 9: "
                                    "Requested node configuration is not available\n")
    assert events[0].rank == 0 and events[0].exit_code == 1
    assert events[0].error_text == (
        "srun exited with code 1: srun: error: Unable to create step for job 9: Requested "
        "node configuration is not available")
    assert events[1] == ExitEvent(1, 1, error_text="srun ended the step")


def test_a_slurm_plan_must_run_inside_its_allocation():
    assert check_allocation(plan(), SALLOC).job_id == "7"
    with pytest.raises(UsageError, match="--slurm starts the ranks with srun inside a Slurm "
                                         "allocation, but SLURM_JOB_ID is not set"):
        check_allocation(plan(), {})
    step = {**SALLOC, "SLURM_STEP_ID": "0", "SLURM_STEP_NODELIST": "h1",
            "SLURM_STEP_TASKS_PER_NODE": "1", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
            "SLURM_NODEID": "0"}
    with pytest.raises(UsageError, match=r"--slurm inside an srun step \(SLURM_STEP_ID is "
                                         r"set\)"):
        check_allocation(plan(), step)
    with pytest.raises(UsageError) as info:
        check_allocation(plan((HostSpec("h1"), HostSpec("h9"))), SALLOC)
    assert str(info.value) == ("host 'h9' is not a node of this Slurm allocation (h[1-3]); "
                               "leave out -H to use the allocation's nodes, or name only "
                               "those")


def test_the_topology_probe_runs_one_task_per_node():
    argv = probe_argv(["h2", "h1"], "/usr/bin/python3", "print(1)")
    assert argv[2:6] == ["--ntasks=2", "--nodes=2", "--nodelist=h2,h1",
                         "--distribution=arbitrary"]
    assert argv[-4:] == ["/usr/bin/python3", "-c", "print(1)", "/sys"]


LAUNCHER = {"PATH": "/venv/bin", "MY_SETTING": "v", "HOROVOD_CYCLE_TIME": "7",
            "HOSTNAME": "launcher", "DISPLAY": ":0", "HOME": "/home/u"}


def forwarding(mode):
    from gcurun.launch.planning.forwarding import plan_forwarding

    return plan_forwarding(LAUNCHER, mode, login=True)


def test_srun_propagates_its_environment_less_this_hosts_variables():
    cmd = command(plan(np=3, forwarding=forwarding("all")))
    assert not any(a.startswith("--export") for a in cmd.argv)
    assert {"HOSTNAME", "DISPLAY"} <= set(cmd.unset) and "HOME" not in cmd.unset
    assert "MY_SETTING" not in cmd.unset


def test_listed_names_what_srun_exports():
    cmd = command(plan(np=3, forwarding=forwarding("listed")), secrets={"GCURUN_SECRET": "0f"})
    export = next(a for a in cmd.argv if a.startswith("--export="))
    names = export.removeprefix("--export=").split(",")
    assert names[:3] == ["PATH", "PYTHONPATH", "HOROVOD_CYCLE_TIME"]
    assert {"FOO", "API_TOKEN", "GCURUN_SECRET", "GCURUN_MPI_HOSTS"} <= set(names)
    assert "MY_SETTING" not in names and "0f" not in export
    assert cmd.argv.index(export) < cmd.argv.index("/usr/bin/python3")
