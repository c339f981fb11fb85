"""The Kubernetes MPI Operator's launcher pod, read from what the operator puts there.

The operator (kubeflow/mpi-operator, API ``kubeflow.org/v2beta1``,
``pkg/controller/mpi_job_controller.go``) gives the launcher pod of an MPIJob:

* ``K_MPI_JOB_ROLE=launcher`` (``worker`` in the worker pods);
* a ConfigMap mounted at ``/etc/mpi``: ``hostfile``, one worker a line, written
  ``NAME.JOB.NAMESPACE.svc slots=N`` for Open MPI and ``NAME.JOB.NAMESPACE.svc:N`` for
  Intel MPI and MPICH (N = ``slotsPerWorker``), and ``discover_hosts.sh``, a script that
  echoes the running workers' names, one a line, for elastic jobs;
* the hostfile's path in the variable each MPI reads: ``OMPI_MCA_orte_default_hostfile``
  (Open MPI), ``I_MPI_HYDRA_HOST_FILE`` (Intel MPI), ``HYDRA_HOST_FILE`` (MPICH); the
  slots per worker in ``OMPI_MCA_orte_set_default_slots`` or ``I_MPI_PERHOST``;
* an SSH key pair (the private key as ``id_rsa``, the public one as ``id_rsa.pub`` and
  ``authorized_keys``) mounted at the job's ``sshAuthMountPath`` (``/root/.ssh`` by
  default), the same in every pod, and no known_hosts: every pod's host key is new.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from gcurun.errors import HostSpecError
from gcurun.hosts.api import HostSpec

MPI_OPERATOR_SOURCE = "mpi-operator"
CONFIG_DIRECTORY = "/etc/mpi"
DEFAULT_HOSTFILE = CONFIG_DIRECTORY + "/hostfile"
DISCOVERY_SCRIPT_NAME = "discover_hosts.sh"
HOSTFILE_VARIABLES = ("OMPI_MCA_orte_default_hostfile", "I_MPI_HYDRA_HOST_FILE",
                      "HYDRA_HOST_FILE")
SLOTS_VARIABLES = ("OMPI_MCA_orte_set_default_slots", "I_MPI_PERHOST")
ROLE_VARIABLE = "K_MPI_JOB_ROLE"
_DIGITS = re.compile(r"[0-9]+")


@dataclass(frozen=True)
class OperatorLauncher:
    """An MPIJob's launcher pod: the workers (from the hostfile), the hostfile's path
    and where it was named, the slots per worker, and the discovery script's path."""

    hosts: tuple[HostSpec, ...]
    hostfile: str
    named_by: str
    slots_per_worker: int | None
    discovery_script: str

    @property
    def num_slots(self) -> int:
        return sum(host.slots for host in self.hosts)


def in_launcher_pod(env: Mapping[str, str]) -> bool:
    """Whether ``env`` is that of an MPIJob's launcher: the operator's role variable says
    so, or (an image whose entrypoint dropped it) one of the hostfile variables is set
    and the role is not ``worker``."""
    role = env.get(ROLE_VARIABLE, "").strip()
    if role == "launcher":
        return True
    return role != "worker" and any(env.get(name, "").strip() for name in HOSTFILE_VARIABLES)


def hostfile_path(env: Mapping[str, str]) -> tuple[str, str]:
    """The hostfile the operator gave and how a message names it: the first hostfile
    variable set, else ``/etc/mpi/hostfile``, where the operator mounts it."""
    for name in HOSTFILE_VARIABLES:
        if env.get(name, "").strip():
            return env[name].strip(), name
    return DEFAULT_HOSTFILE, "the MPI Operator's hostfile"


def slots_per_worker(env: Mapping[str, str]) -> int | None:
    """``slotsPerWorker`` as the operator exported it, or None. Raises HostSpecError for
    a value that is not a whole number 1 or more."""
    for name in SLOTS_VARIABLES:
        text = env.get(name, "").strip()
        if text:
            if not _DIGITS.fullmatch(text) or int(text) < 1:
                raise HostSpecError(f"{name}='{env[name]}': expected the MPIJob's "
                                    "slotsPerWorker, a whole number 1 or more; fix the "
                                    f"MPIJob or unset {name}")
            return int(text)
    return None


def parse_operator(env: Mapping[str, str], hostfile_text: str) -> OperatorLauncher:
    """The launcher ``env`` describes, given its hostfile's text (either form the
    operator writes). Raises HostSpecError for a malformed hostfile or slot count."""
    from gcurun.hosts.hostfile import parse_hostfile

    path, named_by = hostfile_path(env)
    hosts = parse_hostfile(hostfile_text, path)
    directory = path.rpartition("/")[0] or "."
    return OperatorLauncher(hosts, path, named_by, slots_per_worker(env),
                            f"{directory}/{DISCOVERY_SCRIPT_NAME}")
