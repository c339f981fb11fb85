"""The guard against silent one-rank MPI jobs (gcurun.runtime.world_guard)."""

from __future__ import annotations

import pytest

from gcurun.errors import UsageError
from gcurun.runtime.world_guard import check_mpi_world, launched_size
from tests.hosts.test_slurm import SBATCH, STEP_TASK  # Slurm's variables, as captured

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
