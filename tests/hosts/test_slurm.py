"""Slurm's variables -> allocation and step records. The environments below are what
Slurm 22.05 set on the test cluster (tests/cluster/slurm.py), trimmed to SLURM_*."""

from __future__ import annotations

import pytest

from gcurun.errors import HostSpecError, UsageError
from gcurun.hosts.api import HostSpec
from gcurun.hosts.slurm import (
    SlurmAllocation,
    SlurmStep,
    check_mpi_world,
    in_allocation,
    launched_size,
    parse_slurm_environment,
    parse_tasks_per_node,
)

# `salloc -N2 -n3 CMD`: CMD runs on the submit host, outside any step.
SALLOC = {
    "SLURM_CLUSTER_NAME": "gcurun", "SLURM_JOBID": "12", "SLURM_JOB_ID": "12",
    "SLURM_JOB_CPUS_PER_NODE": "2,1", "SLURM_JOB_NAME": "interactive",
    "SLURM_JOB_NODELIST": "h[1-2]", "SLURM_JOB_NUM_NODES": "2",
    "SLURM_JOB_PARTITION": "debug", "SLURM_NNODES": "2", "SLURM_NODELIST": "h[1-2]",
    "SLURM_NODE_ALIASES": "(null)", "SLURM_NPROCS": "3", "SLURM_NTASKS": "3",
    "SLURM_SUBMIT_DIR": "/tmp", "SLURM_SUBMIT_HOST": "vm", "SLURM_TASKS_PER_NODE": "2,1",
}

# The script of `sbatch -N3 -n5`: task-like ids, but no step.
SBATCH = {
    "SLURM_CPUS_ON_NODE": "2", "SLURM_GTIDS": "0", "SLURM_JOBID": "14",
    "SLURM_JOB_CPUS_PER_NODE": "2(x2),1", "SLURM_JOB_ID": "14",
    "SLURM_JOB_NODELIST": "h[1-3]", "SLURM_JOB_NUM_NODES": "3", "SLURM_LOCALID": "0",
    "SLURM_NNODES": "3", "SLURM_NODEID": "0", "SLURM_NODELIST": "h[1-3]",
    "SLURM_NPROCS": "5", "SLURM_NTASKS": "5", "SLURM_PROCID": "0",
    "SLURM_TASKS_PER_NODE": "2(x2),1", "SLURM_TASK_PID": "2570",
}

# Task 2 of `srun` inside `salloc -N2 -n3`. (srun writes the step's counts over
# SLURM_NTASKS and SLURM_TASKS_PER_NODE; here the step fills the allocation.)
STEP_TASK = {
    "SLURM_CPUS_ON_NODE": "1", "SLURM_JOBID": "13", "SLURM_JOB_CPUS_PER_NODE": "2,1",
    "SLURM_JOB_ID": "13", "SLURM_JOB_NODELIST": "h[1-2]", "SLURM_JOB_NUM_NODES": "2",
    "SLURM_LAUNCH_NODE_IPADDR": "10.213.138.1", "SLURM_LOCALID": "0", "SLURM_NNODES": "2",
    "SLURM_NODEID": "1", "SLURM_NODELIST": "h[1-2]", "SLURM_NPROCS": "3",
    "SLURM_NTASKS": "3", "SLURM_PROCID": "2", "SLURM_STEPID": "0", "SLURM_STEP_ID": "0",
    "SLURM_STEP_NODELIST": "h[1-2]", "SLURM_STEP_NUM_NODES": "2",
    "SLURM_STEP_NUM_TASKS": "3", "SLURM_STEP_TASKS_PER_NODE": "2,1",
    "SLURM_TASKS_PER_NODE": "2,1", "SLURM_TASK_PID": "2520",
}


@pytest.mark.parametrize(("text", "counts"), [
    ("1", (1,)),
    ("2,1", (2, 1)),
    ("2(x3),1", (2, 2, 2, 1)),
    ("4,2(x2)", (4, 2, 2)),
    ("1(x3)", (1, 1, 1)),
    ("8(x1)", (8,)),
    (" 2(x2) , 1 ", (2, 2, 1)),
    ("0,2", (0, 2)),
])
def test_parse_tasks_per_node(text: str, counts: tuple[int, ...]) -> None:
    assert parse_tasks_per_node(text) == counts


@pytest.mark.parametrize(("text", "message"), [
    ("", "SLURM_TASKS_PER_NODE='': item 1 is empty; Slurm writes counts per host as "
         "2(x3),1 (2 on each of 3 hosts, then 1). Slurm sets this variable; run inside "
         "salloc or sbatch, or unset the SLURM_* variables that did not come from Slurm"),
    ("2(x3", "SLURM_TASKS_PER_NODE='2(x3': item 1 '2(x3' is not a count;"),
    ("2,,1", "SLURM_TASKS_PER_NODE='2,,1': item 2 is empty;"),
    ("2(3)", "SLURM_TASKS_PER_NODE='2(3)': item 1 '2(3)' is not a count;"),
    ("-1", "SLURM_TASKS_PER_NODE='-1': item 1 '-1' is not a count;"),
    ("2x3", "SLURM_TASKS_PER_NODE='2x3': item 1 '2x3' is not a count;"),
    ("2(x0)", "SLURM_TASKS_PER_NODE='2(x0)': '2(x0)' repeats a count 0 times; "
              "a repeat is (x1) or more."),
    ("\u0662", "item 1 '\u0662' is not a count"),  # a digit, but not 0-9
])
def test_bad_tasks_per_node_is_quoted(text: str, message: str) -> None:
    with pytest.raises(HostSpecError) as caught:
        parse_tasks_per_node(text)
    assert message in str(caught.value)
    assert isinstance(caught.value, UsageError)


def test_the_variable_is_named() -> None:
    with pytest.raises(HostSpecError, match=r"^SLURM_JOB_CPUS_PER_NODE='x'"):
        parse_tasks_per_node("x", "SLURM_JOB_CPUS_PER_NODE")


def test_outside_slurm() -> None:
    assert not in_allocation({})
    assert parse_slurm_environment({"SLURM_CONF": "/etc/slurm/slurm.conf"}) is None
    assert parse_slurm_environment({"SLURM_JOB_ID": ""}) is None


def test_salloc() -> None:
    got = parse_slurm_environment(SALLOC)
    assert got == SlurmAllocation(job_id="12", hosts=("h1", "h2"), cpus_per_node=(2, 1),
                                  tasks_per_node=(2, 1), num_tasks=3, step=None)
    assert got is not None and not got.in_step
    assert got.host_specs() == (HostSpec("h1", 2), HostSpec("h2", 1))


def test_sbatch_script_is_not_a_step() -> None:
    got = parse_slurm_environment(SBATCH)
    assert got is not None and got.step is None
    assert got.hosts == ("h1", "h2", "h3")
    assert got.tasks_per_node == (2, 2, 1) and got.num_tasks == 5
    assert got.host_specs() == (HostSpec("h1", 2), HostSpec("h2", 2), HostSpec("h3", 1))


def test_task_of_a_step() -> None:
    got = parse_slurm_environment(STEP_TASK)
    assert got is not None and got.in_step
    assert got.step == SlurmStep(step_id="0", hosts=("h1", "h2"), tasks_per_node=(2, 1),
                                 num_tasks=3, rank=2, local_rank=0, node_index=1)
    assert got.step.local_size == 1
    # srun replaced the allocation's task counts with the step's: not reported as the
    # allocation's.
    assert got.tasks_per_node is None and got.num_tasks is None
    assert got.cpus_per_node == (2, 1)
    with pytest.raises(HostSpecError, match="inside a Slurm step .* run gcurun in the "
                                            "allocation itself"):
        got.host_specs()


def test_step_on_part_of_the_allocation() -> None:
    # `srun -N1 -n1` inside `salloc -N2 -n4`.
    env = {**STEP_TASK, "SLURM_STEP_NODELIST": "h1", "SLURM_STEP_TASKS_PER_NODE": "1",
           "SLURM_STEP_NUM_TASKS": "1", "SLURM_TASKS_PER_NODE": "1", "SLURM_NTASKS": "1",
           "SLURM_PROCID": "0", "SLURM_NODEID": "0", "SLURM_LOCALID": "0",
           "SLURM_JOB_CPUS_PER_NODE": "2(x2)"}
    got = parse_slurm_environment(env)
    assert got is not None and got.step is not None
    assert got.hosts == ("h1", "h2") and got.step.hosts == ("h1",)
    assert got.step.num_tasks == 1


def test_allocation_without_a_task_count() -> None:
    # `salloc -N2` sets no SLURM_NTASKS.
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "node[08-10]",
           "SLURM_TASKS_PER_NODE": "1(x3)", "SLURM_JOB_CPUS_PER_NODE": "4(x3)"}
    got = parse_slurm_environment(env)
    assert got is not None
    assert got.hosts == ("node08", "node09", "node10")
    assert got.num_tasks == 3 and got.cpus_per_node == (4, 4, 4)


def test_hosts_given_no_task_are_left_out() -> None:
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "a,b,c",
           "SLURM_TASKS_PER_NODE": "2,0,1", "SLURM_JOB_CPUS_PER_NODE": "2(x3)"}
    got = parse_slurm_environment(env)
    assert got is not None
    assert got.host_specs() == (HostSpec("a", 2), HostSpec("c", 1))


def test_old_job_id_name_alone() -> None:
    got = parse_slurm_environment({**{k: v for k, v in SALLOC.items() if k != "SLURM_JOB_ID"}})
    assert got is not None and got.job_id == "12"


def without(env: dict[str, str], *names: str) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in names}


@pytest.mark.parametrize(("env", "message"), [
    (without(SALLOC, "SLURM_JOB_NODELIST"),
     "SLURM_JOB_NODELIST is not set but SLURM_JOB_ID is; Slurm sets this variable"),
    ({**SALLOC, "SLURM_JOB_NODELIST": " "}, "SLURM_JOB_NODELIST is empty but SLURM_JOB_ID is"),
    ({**SALLOC, "SLURM_JOB_NODELIST": "h[2-1]"},
     "SLURM_JOB_NODELIST: hostlist 'h[2-1]': range 2-1 runs backwards; write h[1-2]"),
    ({**SALLOC, "SLURM_TASKS_PER_NODE": "2(x2),1"},
     "SLURM_TASKS_PER_NODE='2(x2),1' counts 3 hosts but SLURM_JOB_NODELIST='h[1-2]' "
     "names 2;"),
    ({**SALLOC, "SLURM_JOB_CPUS_PER_NODE": "2"},
     "SLURM_JOB_CPUS_PER_NODE='2' counts 1 host but SLURM_JOB_NODELIST='h[1-2]' names 2"),
    ({**SALLOC, "SLURM_NTASKS": "4"},
     "SLURM_NTASKS='4' but SLURM_TASKS_PER_NODE='2,1' adds up to 3;"),
    ({**SALLOC, "SLURM_NTASKS": "three"}, "SLURM_NTASKS='three' is not a whole number"),
    (without(SALLOC, "SLURM_TASKS_PER_NODE"),
     "SLURM_TASKS_PER_NODE is not set but SLURM_JOB_ID is"),
    (without(STEP_TASK, "SLURM_STEP_NODELIST"),
     "SLURM_STEP_NODELIST is not set but SLURM_STEP_ID is"),
    ({**STEP_TASK, "SLURM_STEP_TASKS_PER_NODE": "3"},
     "SLURM_STEP_TASKS_PER_NODE='3' counts 1 host but SLURM_STEP_NODELIST='h[1-2]' "
     "names 2"),
    ({**STEP_TASK, "SLURM_STEP_NUM_TASKS": "2"},
     "SLURM_STEP_NUM_TASKS='2' but SLURM_STEP_TASKS_PER_NODE='2,1' adds up to 3"),
    ({**STEP_TASK, "SLURM_PROCID": "3"},
     "SLURM_PROCID='3' is past SLURM_STEP_NUM_TASKS (3)"),
    ({**STEP_TASK, "SLURM_NODEID": "2"},
     "SLURM_NODEID='2' is past SLURM_STEP_NODELIST's hosts (2)"),
    ({**STEP_TASK, "SLURM_LOCALID": "1"}, "SLURM_LOCALID='1' is past the tasks on host 1 (1)"),
    (without(STEP_TASK, "SLURM_PROCID"), "SLURM_PROCID is not set but SLURM_STEP_ID is"),
    ({**STEP_TASK, "SLURM_LOCALID": "-1"}, "SLURM_LOCALID='-1' is not a whole number"),
])
def test_bad_environments_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(HostSpecError) as caught:
        parse_slurm_environment(env)
    assert message in str(caught.value)


# -- the size-1 guard ----------------------------------------------------------------------

SRUN_FIX = ("start the tasks with srun --mpi=pmix (srun --mpi=list shows what this cluster "
            "offers; Slurm's PMIx plugin needs libpmix installed before slurmd starts), or "
            "start the job with gcurun --slurm inside the allocation")


def test_a_task_of_a_multi_task_step_in_a_world_of_one_is_stopped() -> None:
    with pytest.raises(UsageError) as caught:
        check_mpi_world(1, STEP_TASK)
    assert str(caught.value) == (
        "srun (step 0, SLURM_STEP_NUM_TASKS=3) started 3 ranks, but MPI's world here has 1 "
        "rank: each rank would run alone and never hear from the others; " + SRUN_FIX)


def test_the_step_is_known_by_its_id_not_by_procid() -> None:
    # An sbatch script has SLURM_PROCID and a task count of 5, but is no step.
    check_mpi_world(1, SBATCH)
    assert launched_size(SBATCH) is None
    # A step's own task count wins over the allocation's; SLURM_NTASKS is the fallback.
    assert launched_size({"SLURM_STEP_ID": "4", "SLURM_NTASKS": "2"})[:2] == \
        (2, "srun (step 4, SLURM_NTASKS=2)")


@pytest.mark.parametrize("env", [
    STEP_TASK,
    {"OMPI_COMM_WORLD_SIZE": "4"},
    {"PMI_SIZE": "2"},
    {"GCURUN_SIZE": "2"},
])
def test_a_world_that_matches_or_is_larger_passes(env: dict[str, str]) -> None:
    check_mpi_world(int(launched_size(env)[0]), env)  # type: ignore[index]
    check_mpi_world(8, env)


@pytest.mark.parametrize("env", [
    {},
    {"SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "1", "SLURM_PROCID": "0"},
    {"GCURUN_SIZE": "1"},
    {"SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "many"},
])
def test_one_launched_rank_or_no_launcher_passes(env: dict[str, str]) -> None:
    check_mpi_world(1, env)


@pytest.mark.parametrize(("env", "start", "fix"), [
    ({"OMPI_COMM_WORLD_SIZE": "4", "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "2"},
     "mpirun (OMPI_COMM_WORLD_SIZE=4) started 4 ranks", "start them with the mpirun of "
     "mpi4py's MPI"),
    ({"PMI_SIZE": "3"}, "mpirun (PMI_SIZE=3) started 3 ranks", "mpi4py's MPI library is "
     "not the one of the mpirun"),
    ({"GCURUN_SIZE": "2", "GCURUN_RANK": "1"}, "gcurun (GCURUN_SIZE=2) started 2 ranks",
     "use gcurun --mpi, or leave GCURUN_BACKEND unset"),
])
def test_other_launchers_name_themselves_and_the_fix(env: dict[str, str], start: str,
                                                     fix: str) -> None:
    # mpirun's ranks under Slurm also see the step of mpirun's daemons: mpirun's own
    # size is the one that counts.
    with pytest.raises(UsageError) as caught:
        check_mpi_world(1, env)
    assert str(caught.value).startswith(start + ", but MPI's world here has 1 rank")
    assert fix in str(caught.value)


def test_the_guard_reads_this_process_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GCURUN_SIZE", "3")
    with pytest.raises(UsageError, match=r"gcurun \(GCURUN_SIZE=3\) started 3 ranks"):
        check_mpi_world(1)
