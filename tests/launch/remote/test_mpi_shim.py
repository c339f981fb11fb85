"""The rank-side shim rebuilds, from MPI launcher variables, the exact environment the
plan gives each rank."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gcurun.config.api import Settings
from gcurun.hosts.api import HostSpec
from gcurun.launch.mpi.command import job_environment, layout_environment
from gcurun.launch.planning.plan import build_plan
from gcurun.launch.remote.mpi_shim import (
    ShimError,
    launcher_identity,
    rank_binding,
    shim_environment,
    slurm_tasks_on_node,
)
from tests.helpers import ROOT

HOSTS = (HostSpec("a", slots=4), HostSpec("b", slots=2, devices=("4", "5")),
         HostSpec("c", slots=3))


def plan_for(hosts=HOSTS, **kw):
    return build_plan(hosts, ["python", "train.py"], master_addr="a", master_port=29555,
                      launcher="mpi", job_env={"FOO": "bar"}, **kw)


def ompi_vars(rank, size, local_rank, local_size):
    return {"OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_SIZE": str(size),
            "OMPI_COMM_WORLD_LOCAL_RANK": str(local_rank),
            "OMPI_COMM_WORLD_LOCAL_SIZE": str(local_size)}


def hydra_vars(rank, size, local_rank, local_size):
    return {"PMI_RANK": str(rank), "PMI_SIZE": str(size), "MPI_LOCALRANKID": str(local_rank),
            "MPI_LOCALNRANKS": str(local_size)}


@pytest.mark.parametrize("isolation", [False, True])
@pytest.mark.parametrize("launcher_vars", [ompi_vars, hydra_vars])
def test_shim_reproduces_the_plan_environment_of_every_rank(launcher_vars, isolation):
    plan = plan_for(devices=("3", "1", "2", "0"), device_isolation=isolation)
    mpirun_env = {**job_environment(plan), **layout_environment(plan, Settings())}
    for r in plan.ranks:
        env = {**mpirun_env, **launcher_vars(r.rank, plan.size, r.local_rank, r.local_size)}
        got = shim_environment(env, hostname="ignored-when-layout-matches")
        assert {**mpirun_env, **got} == {**r.env, **mpirun_env}, f"rank {r.rank}"
        visible = got["TOPS_VISIBLE_DEVICES"].split(",")
        index = 0 if isolation else r.local_rank
        assert visible[index] == got["GCURUN_DEVICE"] == r.device
        assert got["FLAGS_selected_gcus"] == got["JAX_LOCAL_DEVICE_IDS"] == str(index)
    assert [r.env["TOPS_VISIBLE_DEVICES"] for r in plan.ranks] == (
        ["3", "1", "2", "0", "4", "5", "3", "1", "2"] if isolation else
        ["3,1,2,0"] * 4 + ["4,5"] * 2 + ["3,1,2,0"] * 3)


def test_layout_cross_ranks_are_horovods():
    plan = plan_for()
    mpirun_env = layout_environment(plan, Settings())
    env = {**mpirun_env, **ompi_vars(8, 9, 2, 3)}     # c's local rank 2; b has only 2
    got = shim_environment(env, "c")
    assert (got["GCURUN_CROSS_RANK"], got["GCURUN_CROSS_SIZE"], got["GROUP_RANK"]) == \
        ("1", "2", "2")
    assert got["HOROVOD_HOSTNAME"] == "c" and got["TOPS_VISIBLE_DEVICES"] == "0,1,2"
    assert got["GCURUN_DEVICE"] == "2"


def test_without_layout_equal_blocks_are_assumed():
    got = shim_environment({**ompi_vars(5, 8, 1, 4), "MASTER_ADDR": "h0",
                            "MASTER_PORT": "1234"}, "node9")
    assert got["GCURUN_CROSS_RANK"] == "1" and got["GCURUN_CROSS_SIZE"] == "2"
    assert got["GROUP_RANK"] == "1" and got["GCURUN_HOSTNAME"] == "node9"
    assert got["MASTER_ADDR"] == "h0" and got["MASTER_PORT"] == "1234"
    assert "TOPS_VISIBLE_DEVICES" not in got


def test_placement_that_disagrees_with_the_layout_falls_back():
    # mpirun mapped round robin by node: rank 1 is local rank 0 of the second host.
    env = {"GCURUN_MPI_SLOTS": "2,2", "GCURUN_MPI_HOSTS": "a,b", **ompi_vars(1, 4, 0, 2),
           "GCURUN_DEVICE_VAR": "TOPS_VISIBLE_DEVICES", "GCURUN_DEVICES": "0,1;0,1"}
    got = shim_environment(env, "real-b")
    assert got["GCURUN_HOSTNAME"] == "real-b" and got["TOPS_VISIBLE_DEVICES"] == "0,1"
    assert got["GCURUN_DEVICE"] == "0"


def test_unknown_host_with_different_device_lists_is_an_error():
    env = {"GCURUN_MPI_SLOTS": "2,2", **ompi_vars(1, 4, 0, 2),
           "GCURUN_DEVICE_VAR": "TOPS_VISIBLE_DEVICES", "GCURUN_DEVICES": "0,1;2,3"}
    with pytest.raises(ShimError, match="hosts list different devices"):
        shim_environment(env, "x")


def test_a_rank_past_its_hosts_devices_is_an_error():
    env = {**ompi_vars(2, 3, 2, 3), "GCURUN_DEVICE_VAR": "CUDA_VISIBLE_DEVICES",
           "GCURUN_DEVICES": "0,1"}
    with pytest.raises(ShimError, match=r"local rank 2 has no device: its host lists 2 "
                                        r"\(0,1\)"):
        shim_environment(env, "x")


def test_default_devices_follow_the_local_rank():
    env = {**ompi_vars(3, 4, 1, 2), "GCURUN_DEVICE_VAR": "MLU_VISIBLE_DEVICES"}
    got = shim_environment(env, "x")
    assert (got["MLU_VISIBLE_DEVICES"], got["GCURUN_DEVICE"]) == ("0,1", "1")
    got = shim_environment({**env, "GCURUN_DEVICE_ISOLATION": "1"}, "x")
    assert (got["MLU_VISIBLE_DEVICES"], got["GCURUN_DEVICE"]) == ("1", "1")


def test_slurm_identity():
    env = {"SLURM_PROCID": "5", "SLURM_NTASKS": "7", "SLURM_LOCALID": "1",
           "SLURM_NODEID": "2", "SLURM_TASKS_PER_NODE": "2(x3),1"}
    ident = launcher_identity(env)
    assert (ident.rank, ident.size, ident.local_rank, ident.local_size, ident.node_rank) == \
        (5, 7, 1, 2, 2)
    got = shim_environment(env, "n2")
    assert got["GROUP_RANK"] == "2" and got["GCURUN_CROSS_RANK"] == "2"
    assert slurm_tasks_on_node("4,2(x2)", 2) == 2


def test_no_launcher_variables_is_an_error():
    with pytest.raises(ShimError, match="no MPI launcher variables"):
        launcher_identity({})


def test_omp_threads_follow_the_binding_unless_set():
    base = {**ompi_vars(0, 1, 0, 1), "GCURUN_BIND_TO": "numa"}
    assert shim_environment(base, "x", cpu_count=6)["OMP_NUM_THREADS"] == "6"
    assert "OMP_NUM_THREADS" not in shim_environment({**base, "OMP_NUM_THREADS": "2"}, "x", 6)
    assert "OMP_NUM_THREADS" not in shim_environment({**base, "GCURUN_BIND_TO": "none"}, "x", 6)


DUMP = "import json, os; print(json.dumps(dict(os.environ)))"


def run_shim(*cmd, extra=None):
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), **ompi_vars(1, 2, 1, 2),
           "GCURUN_DEVICE_VAR": "TOPS_VISIBLE_DEVICES", "GCURUN_DEVICES": "6,7",
           **(extra or {})}
    return subprocess.run([sys.executable, "-m", "gcurun.launch.remote.mpi_shim", "--", *cmd],
                          capture_output=True, text=True, env=env, timeout=60)


def test_shim_execs_python():
    out = run_shim(sys.executable, "-c", DUMP)
    env = json.loads(out.stdout)
    assert (env["RANK"], env["LOCAL_RANK"], env["TOPS_VISIBLE_DEVICES"]) == ("1", "1", "6,7")
    assert env["GCURUN_DEVICE"] == "7"
    assert env["HOROVOD_SIZE"] == "2"


def test_shim_execs_a_shell_script(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text('echo "rank=$GCURUN_RANK dev=$GCURUN_DEVICE of $TOPS_VISIBLE_DEVICES '
                      'args=$*"\n')
    out = run_shim("bash", str(script), "x", "y")
    assert out.stdout == "rank=1 dev=7 of 6,7 args=x y\n"


def test_shim_reports_errors_and_missing_programs():
    out = run_shim("true", extra={"OMPI_COMM_WORLD_RANK": "one"})
    assert out.returncode == 2
    assert out.stderr == "gcurun mpi shim: OMPI_COMM_WORLD_RANK='one' is not a number\n"
    out = run_shim("no-such-program-xyz")
    assert out.returncode == 127 and "cannot run 'no-such-program-xyz'" in out.stderr


def ignored_signals(status: str) -> set[int]:
    mask = int(next(line for line in status.splitlines() if line.startswith("SigIgn:"))
               .split()[1], 16)
    return {sig for sig in range(1, 65) if mask & (1 << (sig - 1))}


def test_rank_command_starts_with_default_sigpipe():
    import signal

    out = run_shim("cat", "/proc/self/status")
    assert signal.SIGPIPE not in ignored_signals(out.stdout)
    assert signal.SIGXFSZ not in ignored_signals(out.stdout)


# -- under srun (gcurun --slurm) --------------------------------------------------------------

def slurm_task(rank, local_rank, **extra):
    return {"SLURM_PROCID": str(rank), "SLURM_LOCALID": str(local_rank), "SLURM_NODEID": "0",
            "SLURM_STEP_TASKS_PER_NODE": "2", "SLURM_STEP_NUM_TASKS": "2",
            "GCURUN_DEVICE_VAR": "CUDA_VISIBLE_DEVICES", "GCURUN_DEVICES": "0,1",
            "GCURUN_GRES_DEVICES": "1", **extra}


def devices_of(env):
    got = shim_environment(env, "h")
    return got["CUDA_VISIBLE_DEVICES"], got["GCURUN_DEVICE"], got["FLAGS_selected_gpus"]


def test_devices_slurms_gres_set_win_over_the_plans():
    # srun --gres=gpu:2: both tasks of a node see the node's list; each takes its own,
    # at its local rank (or sees it alone under --device-isolation).
    shared = {"CUDA_VISIBLE_DEVICES": "2,3", "SLURM_STEP_GPUS": "2,3"}
    assert [devices_of(slurm_task(r, r, **shared)) for r in (0, 1)] == \
        [("2,3", "2", "0"), ("2,3", "3", "1")]
    assert [devices_of(slurm_task(r, r, GCURUN_DEVICE_ISOLATION="1", **shared))
            for r in (0, 1)] == [("2", "2", "0"), ("3", "3", "0")]
    # srun --gpus-per-task: each task keeps what it got, one device or several.
    assert devices_of(slurm_task(1, 1, CUDA_VISIBLE_DEVICES="1")) == ("1", "1", "0")
    assert devices_of(slurm_task(1, 1, CUDA_VISIBLE_DEVICES="2,3",
                                 SLURM_GPUS_PER_TASK="2")) == ("2,3", "2,3", "0")
    # No GRES: the plan's devices.
    assert devices_of(slurm_task(1, 1)) == ("0,1", "1", "1")
    # Not asked to take Slurm's (mpirun, which passes the launcher's variable on).
    got = shim_environment({**slurm_task(1, 1, CUDA_VISIBLE_DEVICES="7"),
                            "GCURUN_GRES_DEVICES": ""}, "h")
    assert got["CUDA_VISIBLE_DEVICES"] == "0,1"


def test_a_shared_gres_list_shorter_than_the_ranks_is_an_error():
    env = {**slurm_task(1, 1, CUDA_VISIBLE_DEVICES="0,2"), "SLURM_STEP_TASKS_PER_NODE": "3",
           "SLURM_STEP_NUM_TASKS": "3", "SLURM_PROCID": "2", "SLURM_LOCALID": "2"}
    with pytest.raises(ShimError) as info:
        shim_environment(env, "h")
    assert str(info.value) == (
        "local rank 2 has no device: Slurm gave this node's tasks "
        "CUDA_VISIBLE_DEVICES='0,2'; ask srun for a device per task (--gpus-per-task=1) or "
        "start fewer ranks per node")


@pytest.mark.parametrize("entry", ["x", "0-1/a", "0/0/x", "0/0/m/m", "/0"])
def test_bad_binding_entries_are_errors(entry):
    with pytest.raises(ShimError, match=f"GCURUN_BINDINGS entry 0 '{entry}' is not "
                                        r"CPUS\[/NODE\[/m\]\]"):
        rank_binding({"GCURUN_BINDINGS": entry}, 0)
    with pytest.raises(ShimError, match="GCURUN_BINDINGS has 1 entries but this is rank 3"):
        rank_binding({"GCURUN_BINDINGS": "0"}, 3)


def test_a_bound_rank_gets_its_cpus_and_their_count_as_omp_threads():
    base = {**ompi_vars(1, 2, 1, 2), "GCURUN_BIND_TO": "core", "GCURUN_BINDINGS": "0;0"}
    assert shim_environment(base, "x", cpu_count=64)["OMP_NUM_THREADS"] == "1"
    cpu = sorted(os.sched_getaffinity(0))[-1]
    out = run_shim("python3", "-c", "import os; print(sorted(os.sched_getaffinity(0)))",
                   extra={"GCURUN_BIND_TO": "core", "GCURUN_BINDINGS": f"0;{cpu}"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"[{cpu}]"


def test_the_launchers_address_is_the_one_srun_ran_from():
    env = {**slurm_task(0, 0), "GCURUN_RENDEZVOUS": "*:4000", "GCURUN_FUNCTION": "*:4001",
           "GCURUN_SECRET": "00ff",
           "OTHER": "*:5", "SLURM_LAUNCH_NODE_IPADDR": "10.0.0.1"}
    got = shim_environment(env, "h")
    assert (got["GCURUN_RENDEZVOUS"], got["GCURUN_FUNCTION"]) == ("10.0.0.1:4000",
                                                                  "10.0.0.1:4001")
    assert "OTHER" not in got and "GCURUN_SECRET" not in got
    assert shim_environment({**env, "SLURM_LAUNCH_NODE_IPADDR": "fd00::1"},
                            "h")["GCURUN_RENDEZVOUS"] == "[fd00::1]:4000"
    # An address given in full (mpirun, local jobs) stays as it is.
    assert "GCURUN_RENDEZVOUS" not in shim_environment(
        {**slurm_task(0, 0), "GCURUN_RENDEZVOUS": "127.0.0.1:4000"}, "h")
    with pytest.raises(ShimError, match="GCURUN_RENDEZVOUS='\\*:4000' asks for the "
                                        "launcher's address, which srun gives as "
                                        "SLURM_LAUNCH_NODE_IPADDR, but that is not set"):
        shim_environment({**slurm_task(0, 0), "GCURUN_RENDEZVOUS": "*:4000"}, "h")
