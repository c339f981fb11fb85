"""`gcurun` inside a Slurm allocation, through the command line, with Slurm's variables
set by hand: where hosts come from, `--slurm`'s usage errors and the srun command a dry
run shows. tests/cluster/test_slurm_launch.py runs the same on a real Slurm."""

from __future__ import annotations

import json

import pytest

from tests.helpers import run_gcurun

# What `salloc -N2 -n3` gives its command (tests/hosts/test_slurm.py has all of it).
SALLOC = {"SLURM_JOB_ID": "12", "SLURM_JOB_NODELIST": "h[1-2]",
          "SLURM_JOB_CPUS_PER_NODE": "2,1", "SLURM_TASKS_PER_NODE": "2,1",
          "SLURM_NTASKS": "3", "SLURM_JOB_NAME": "interactive"}
STEP = {**SALLOC, "SLURM_STEP_ID": "0", "SLURM_STEP_NODELIST": "h[1-2]",
        "SLURM_STEP_TASKS_PER_NODE": "2,1", "SLURM_STEP_NUM_TASKS": "3",
        "SLURM_PROCID": "2", "SLURM_LOCALID": "0", "SLURM_NODEID": "1"}


def test_dry_run_in_an_allocation_names_slurm_as_the_source():
    res = run_gcurun("--dry-run", "--color", "never", "python", "train.py", env=SALLOC)
    assert res.returncode == 0, res.stderr
    lines = {line.split()[0]: line.split()[1:] for line in res.stdout.splitlines()
             if line.strip()}
    assert lines["np"] == ["3", "slurm"]
    assert lines["hosts"] == ["h1:2,h2:1", "slurm"]
    assert res.stdout.startswith("launcher ssh, 3 ranks on 2 host(s)")


def test_slurm_dry_run_shows_the_srun_command_and_no_secret():
    res = run_gcurun("--slurm", "--dry-run", "--json", "--master-port", "29500",
                     "--bind-to", "core", "python", "train.py", env=SALLOC)
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)
    assert plan["launcher"] == "slurm" and [r["host"] for r in plan["ranks"]] == \
        ["h1", "h1", "h2"]
    argv = plan["srun"]["argv"]
    assert argv[:9] == ["srun", "--job-name=gcurun-XXXXXXXXXXXX", "--ntasks=3", "--nodes=2",
                        "--nodelist=h1,h1,h2", "--distribution=arbitrary",
                        "--kill-on-bad-exit=1", "--label", argv[8]]
    assert argv[9] == "--cpu-bind=none"
    assert argv[-5:] == ["-m", "gcurun.launch.remote.mpi_shim", "--", "python", "train.py"]
    # A dry run reaches no node: the ranks are bound when a run reads their topology.
    assert [r["binding"] for r in plan["ranks"]] == [None, None, None]


def test_report_bindings_of_a_slurm_dry_run_waits_for_the_probe():
    res = run_gcurun("--slurm", "--dry-run", "--bind-to", "core", "--report-bindings",
                     "true", env=SALLOC)
    assert res.returncode == 0, res.stderr
    assert "after the srun probe" in res.stderr


@pytest.mark.parametrize(("args", "env", "message"), [
    (("--slurm", "--mpi"), SALLOC, "--slurm conflicts with --mpi; give one"),
    (("--slurm", "--launcher", "ssh"), SALLOC, "--slurm conflicts with --launcher ssh; give one"),
    (("--mpi", "--launcher", "slurm"), SALLOC, "--mpi conflicts with --launcher slurm; give one"),
    (("--slurm", "-np", "2"), {},
     "--slurm starts the ranks with srun inside a Slurm allocation, but SLURM_JOB_ID is not "
     "set; run gcurun inside one: salloc -N 2 -n 8 gcurun --slurm python train.py, or in "
     "an sbatch script"),
    (("--slurm", "-H", "h1,h9"), SALLOC,
     "host 'h9' is not a node of this Slurm allocation (h[1-2]); leave out -H to use the "
     "allocation's nodes, or name only those"),
    ((), STEP,
     "inside a Slurm step (SLURM_STEP_ID is set) the allocation's tasks per host are not "
     "known: srun set SLURM_TASKS_PER_NODE to the step's; run gcurun in the allocation "
     "itself (salloc or the sbatch script), not under srun, or name the hosts with -H"),
    (("-np", "4"), SALLOC,
     "-np 4 asks for more ranks than the 3 slots of the hosts (h1:2, h2:1); add hosts or "
     "slots, lower -np, or pass --oversubscribe"),
])
def test_usage_errors_exit_2(args, env, message):
    res = run_gcurun(*args, "--dry-run", "true", env=env)
    assert res.returncode == 2, res.stdout
    assert res.stderr == f"gcurun: error: {message}\n"


def test_a_profile_may_name_the_slurm_launcher(tmp_path):
    profile = tmp_path / "p.yaml"
    profile.write_text("launcher: slurm\n")
    res = run_gcurun("--profile", str(profile), "--dry-run", "--json", "true", env=SALLOC)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["launcher"] == "slurm"
