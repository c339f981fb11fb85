"""The guard against silent one-rank MPI jobs.

A launcher that started N ranks whose MPI library cannot join them (plain ``srun``
without ``--mpi=pmix``, or mpi4py built against another MPI than the mpirun that ran it)
leaves each rank in an MPI world of its own: every rank would train alone and never hear
from the others. The runtime's mpi initialisation calls :func:`check_mpi_world` first.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from gcurun.errors import UsageError

_DIGITS = re.compile(r"[0-9]+")

# Variables that tell a rank how many ranks its launcher started: (variable, who set it,
# how to fix a world of one rank). mpirun's come first: ranks that mpirun started under
# Slurm also see the step of mpirun's daemons.
_MPIRUN_SIZES = (
    ("OMPI_COMM_WORLD_SIZE", "mpirun",
     "mpi4py's MPI library is not the one of the mpirun that started the ranks; start "
     "them with the mpirun of mpi4py's MPI (python -c 'import mpi4py; "
     "print(mpi4py.get_config())' names it)"),
    ("PMI_SIZE", "mpirun",
     "mpi4py's MPI library is not the one of the mpirun that started the ranks; start "
     "them with the mpirun of mpi4py's MPI"),
)
_GCURUN_SIZE = (
    ("GCURUN_SIZE", "gcurun",
     "the mpi backend needs ranks that mpirun started: use gcurun --mpi, or leave "
     "GCURUN_BACKEND unset so gcurun's own launcher gives the ranks its tcp backend"),
)
_SRUN_FIX = ("start the tasks with srun --mpi=pmix (srun --mpi=list shows what this "
             "cluster offers; Slurm's PMIx plugin needs libpmix installed before slurmd "
             "starts), or start the job with gcurun --slurm inside the allocation")


def launched_size(env: Mapping[str, str]) -> tuple[int, str, str] | None:
    """How many ranks a launcher says it started, who says so and how to fix a world of
    one rank: mpirun's variables first, then a task of an srun step (SLURM_STEP_ID set:
    SLURM_PROCID alone is set in an sbatch script too), then gcurun's own size. None when
    no launcher says so; unreadable values count as unset."""
    found = _first_size(env, _MPIRUN_SIZES)
    if found is not None:
        return found
    step = env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID")
    if step:
        for name in ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"):
            size = _whole(env.get(name))
            if size is not None:
                return size, f"srun (step {step}, {name}={size})", _SRUN_FIX
    return _first_size(env, _GCURUN_SIZE)


def _first_size(env: Mapping[str, str],
                names: tuple[tuple[str, str, str], ...]) -> tuple[int, str, str] | None:
    for name, who, fix in names:
        size = _whole(env.get(name))
        if size is not None:
            return size, f"{who} ({name}={size})", fix
    return None


def check_mpi_world(world_size: int, env: Mapping[str, str] | None = None) -> None:
    """Stop a rank whose launcher started several ranks but whose MPI world (of
    ``world_size`` ranks) has one: it would train alone, silently. ``env`` is the rank's
    environment (default: this process's). Raises UsageError saying how to start it
    instead; returns when the world matches or no launcher gave a size."""
    launched = launched_size(os.environ if env is None else env)
    if launched is None or world_size != 1 or launched[0] <= 1:
        return
    size, who, fix = launched
    raise UsageError(f"{who} started {size} ranks, but MPI's world here has 1 rank: each "
                     f"rank would run alone and never hear from the others; {fix}")


def _whole(text: str | None) -> int | None:
    if text is None or not _DIGITS.fullmatch(text.strip()):
        return None
    return int(text.strip())

