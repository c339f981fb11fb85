"""Where a job's hosts come from when nobody names them: the allocation of the batch
system (or operator) gcurun runs under, found from the variables and files it sets.

When no layer gives hosts (``-H``, ``--hostfile``, a profile, ``GCURUN_HOSTS`` or
``GCURUN_HOSTFILE``), the sources of :data:`SOURCES` are asked in order and the first
that recognises its environment gives the hosts, the task count, and its label for
``Settings.sources`` (what ``--dry-run`` shows in its "from" column):

=============  =======================================================  ====================
source         recognised by                                            hosts read from
=============  =======================================================  ====================
slurm          ``SLURM_JOB_ID``                                         ``SLURM_JOB_NODELIST``
gridengine     ``PE_HOSTFILE`` and ``JOB_ID``                           ``$PE_HOSTFILE``
lsf            ``LSB_JOBID``                                            ``$LSB_DJOB_HOSTFILE``,
                                                                        ``LSB_MCPU_HOSTS``
mpi-operator   ``K_MPI_JOB_ROLE=launcher`` or a hostfile variable       ``/etc/mpi/hostfile``
=============  =======================================================  ====================

Each source's parsing is pure (``gcurun.hosts.slurm``, ``gridengine``, ``lsf``,
``mpi_operator``); the files are read here through an injected reader.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gcurun.errors import HostSpecError
from gcurun.hosts.api import HostSpec

ReadText = Callable[[str], str]
Which = Callable[[str], "str | None"]


@dataclass(frozen=True)
class Allocation:
    """The hosts a batch system or operator gave the job gcurun runs in.

    ``source`` names the system (``slurm``, ``gridengine``, ``lsf``, ``mpi-operator``);
    ``origin`` the variable or file the hosts were read from (empty for Slurm, whose
    label stays ``slurm``). ``num_tasks`` is the job's task (slot) count, None when the
    source cannot know it. ``discovery_script`` is a host discovery script the source
    provides for elastic jobs, ``slots_per_host`` the slots its script's bare host names
    get, and ``host_key_policy`` the host-key policy its hosts need (the MPI Operator's
    pods get new host keys for every job).
    """

    source: str
    origin: str
    job_id: str | None
    hosts: tuple[HostSpec, ...]
    num_tasks: int | None
    discovery_script: str | None = None
    slots_per_host: int | None = None
    host_key_policy: str | None = None

    @property
    def label(self) -> str:
        """The source recorded for the settings it gives: ``gridengine:PE_HOSTFILE``."""
        return f"{self.source}:{self.origin}" if self.origin else self.source


def read_text(path: str) -> str:
    """The text of a file a batch system wrote, at most 8 MiB. Raises OSError."""
    from gcurun.hosts.hostfile import MAX_HOSTFILE_BYTES, TooLarge, read_limited

    try:
        return read_limited(path, MAX_HOSTFILE_BYTES).decode(errors="replace")
    except TooLarge:
        raise OSError(f"larger than {MAX_HOSTFILE_BYTES >> 20} MiB") from None


def _read(path: str, named_by: str, read: ReadText, fix: str) -> str:
    try:
        return read(path)
    except OSError as exc:
        why = exc.strerror or str(exc)
        raise HostSpecError(f"{named_by} '{path}' cannot be read: {why}; {fix}") from None


def slurm_allocation(env: Mapping[str, str], read: ReadText,
                     which: Which) -> Allocation | None:
    from gcurun.hosts.slurm import SLURM_SOURCE, parse_slurm_environment

    allocation = parse_slurm_environment(env)
    if allocation is None:
        return None
    return Allocation(SLURM_SOURCE, "", allocation.job_id, allocation.host_specs(),
                      allocation.num_tasks)


def gridengine_allocation(env: Mapping[str, str], read: ReadText,
                          which: Which) -> Allocation | None:
    from gcurun.hosts.gridengine import GRIDENGINE_SOURCE, in_pe_job, parse_gridengine

    if not in_pe_job(env):
        return None
    path = env["PE_HOSTFILE"].strip()
    text = _read(path, "PE_HOSTFILE", read,
                 "run gcurun on the job's master host, where Grid Engine writes it")
    job = parse_gridengine(env, text)
    return Allocation(GRIDENGINE_SOURCE, "PE_HOSTFILE", job.job_id, job.hosts,
                      job.num_slots)


def lsf_allocation(env: Mapping[str, str], read: ReadText,
                   which: Which) -> Allocation | None:
    from gcurun.hosts.lsf import LSF_SOURCE, in_lsf_job, parse_lsf

    if not in_lsf_job(env):
        return None
    path = env.get("LSB_DJOB_HOSTFILE", "").strip()
    text = _read(path, "LSB_DJOB_HOSTFILE", read,
                 "run gcurun on the job's first execution host") if path else None
    job = parse_lsf(env, text, jsrun=which("jsrun") is not None)
    return Allocation(LSF_SOURCE, job.origin, job.job_id, job.hosts, job.num_slots)


def mpi_operator_allocation(env: Mapping[str, str], read: ReadText,
                            which: Which) -> Allocation | None:
    from gcurun.hosts.mpi_operator import (
        MPI_OPERATOR_SOURCE,
        hostfile_path,
        in_launcher_pod,
        parse_operator,
    )

    if not in_launcher_pod(env):
        return None
    path, named_by = hostfile_path(env)
    text = _read(path, named_by, read, "the MPI Operator mounts it in the launcher pod; "
                 "run gcurun in the launcher's container")
    launcher = parse_operator(env, text)
    script = launcher.discovery_script if os.access(launcher.discovery_script, os.X_OK) \
        else None
    return Allocation(MPI_OPERATOR_SOURCE, launcher.hostfile, None, launcher.hosts,
                      launcher.num_slots, discovery_script=script,
                      slots_per_host=launcher.slots_per_worker,
                      host_key_policy="accept-new")


# The order gcurun looks in; the first source that recognises its environment wins.
SOURCES: tuple[tuple[str, Callable[[Mapping[str, str], ReadText, Which],
                                   Allocation | None]], ...] = (
    ("slurm", slurm_allocation),
    ("gridengine", gridengine_allocation),
    ("lsf", lsf_allocation),
    ("mpi-operator", mpi_operator_allocation),
)


def find_allocation(env: Mapping[str, str], read: ReadText = read_text,
                    which: Which = shutil.which) -> Allocation | None:
    """The allocation of the first source of :data:`SOURCES` that recognises ``env``;
    None outside every one. Raises HostSpecError, naming the variable or file, when the
    recognised source's variables or files are missing or malformed."""
    for _name, find in SOURCES:
        found = find(env, read, which)
        if found is not None:
            return found
    return None
