"""An MPIJob for a gcurun job: the launcher pod runs ``gcurun -np N COMMAND`` (the hosts
come from the operator's hostfile, :mod:`gcurun.hosts.mpi_operator`), the worker pods run
sshd, each asking for its slots' accelerators (``enflame.com/gcu: 8``). Pure: settings
in, a mapping out; the CLI writes it as YAML.

The fields follow the MPIJob CRD, ``kubeflow.org/v2beta1`` (kubeflow/mpi-operator,
``manifests/base/kubeflow.org_mpijobs.yaml``): ``slotsPerWorker``, ``sshAuthMountPath``,
``mpiReplicaSpecs`` (``Launcher``, ``Worker``), and ``runPolicy`` with
``cleanPodPolicy`` and ``schedulingPolicy`` (gang scheduling: ``minAvailable`` pods,
``queue``, ``priorityClass``; used when the operator runs with Volcano or the
scheduler-plugins coscheduler).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from gcurun.config.api import Settings
from gcurun.errors import UsageError

API_VERSION = "kubeflow.org/v2beta1"
SSH_AUTH_MOUNT_PATH = "/root/.ssh"
# The extended resource each accelerator's Kubernetes device plugin advertises.
ACCELERATOR_RESOURCES: dict[str, str | None] = {
    "gcu": "enflame.com/gcu",
    "cuda": "nvidia.com/gpu",
    "rocm": "amd.com/gpu",
    "ascend": "huawei.com/Ascend910",
    "mlu": "cambricon.com/mlu",
    "none": None,
}
CleanPodPolicy = Literal["Running", "All", "None"]
# Pod names are NAME-worker-N and NAME-launcher, DNS-1123 labels of at most 63 characters.
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
MAX_NAME = 40


@dataclass(frozen=True)
class ManifestOptions:
    """What the MPIJob needs beyond the profile."""

    image: str
    command: tuple[str, ...]
    name: str = "gcurun-job"
    namespace: str | None = None
    workers: int | None = None            # None: one per profile host
    slots_per_worker: int | None = None   # None: the profile hosts' slots
    clean_pod_policy: CleanPodPolicy = "Running"
    queue: str | None = None
    priority_class: str | None = None
    worker_cpu: str | None = None
    worker_memory: str | None = None


def check_name(name: str) -> str:
    """``name`` if it can name an MPIJob; raises UsageError quoting it otherwise."""
    if not _NAME.fullmatch(name) or len(name) > MAX_NAME:
        raise UsageError(f"--name '{name}': an MPIJob's name becomes its pods' host names "
                         f"(NAME-worker-0), so it is lower-case letters, digits and '-', "
                         f"starting and ending with a letter or digit, at most {MAX_NAME} "
                         "characters; choose another name")
    return name


def job_shape(settings: Settings, options: ManifestOptions) -> tuple[int, int, int]:
    """(workers, slots per worker, ranks) from the options, else the profile's hosts (all
    with the same slots: an MPIJob gives every worker the same), else its ``np`` on one
    worker. Raises UsageError for hosts with different slots or too few slots."""
    hosts = settings.hosts or ()
    slots = {host.slots for host in hosts}
    if options.slots_per_worker is not None:
        per_worker = options.slots_per_worker
    elif len(slots) > 1:
        raise UsageError("the profile's hosts have " + ", ".join(
            f"{h.display}:{h.slots}" for h in hosts) + " slots, but an MPIJob gives every "
            "worker the same slotsPerWorker; give --slots-per-worker N")
    elif slots:
        per_worker = slots.pop()
    else:
        per_worker = settings.np or len(settings.devices or ()) or 1
    workers = options.workers or len(hosts) or 1
    ranks = settings.np or workers * per_worker
    if ranks > workers * per_worker:
        raise UsageError(f"np {ranks} needs more than {workers} worker(s) x {per_worker} "
                         "slot(s); give --workers or --slots-per-worker, or a smaller np")
    return workers, per_worker, ranks


def build_mpijob(settings: Settings, options: ManifestOptions,
                 runtime_env: Mapping[str, str]) -> dict[str, Any]:
    """The MPIJob running ``options.command`` under gcurun with ``settings`` (a profile's).
    ``runtime_env`` are the ``GCURUN_*`` variables carrying the profile's runtime knobs
    (:func:`gcurun.config.resolve.runtime_environment`). Raises UsageError."""
    check_name(options.name)
    if not options.command:
        raise UsageError("gcurun k8s manifest needs the training command after the "
                         "options: gcurun k8s manifest --profile P.yaml --image I -- "
                         "python train.py")
    workers, per_worker, ranks = job_shape(settings, options)
    env = {**settings.env, **runtime_env, "GCURUN_ACCELERATOR": settings.accelerator}
    metadata: dict[str, Any] = {"name": options.name}
    if options.namespace:
        metadata["namespace"] = options.namespace
    return {
        "apiVersion": API_VERSION,
        "kind": "MPIJob",
        "metadata": metadata,
        "spec": {
            "slotsPerWorker": per_worker,
            "sshAuthMountPath": SSH_AUTH_MOUNT_PATH,
            "mpiImplementation": "OpenMPI",
            "runPolicy": _run_policy(options, workers),
            "mpiReplicaSpecs": {
                "Launcher": _replica(1, "OnFailure", _container(
                    "launcher", options.image,
                    ["gcurun", "-np", str(ranks), *options.command], env, {})),
                # sshd gives its sessions none of the container's variables: the
                # launcher's gcurun forwards them to every rank.
                "Worker": _replica(workers, None, _container(
                    "worker", options.image, ["/usr/sbin/sshd", "-De"], {},
                    _worker_resources(settings, options, per_worker))),
            },
        },
    }


def _run_policy(options: ManifestOptions, workers: int) -> dict[str, Any]:
    scheduling: dict[str, Any] = {"minAvailable": workers + 1}  # the launcher and workers
    if options.queue:
        scheduling["queue"] = options.queue
    if options.priority_class:
        scheduling["priorityClass"] = options.priority_class
    return {"cleanPodPolicy": options.clean_pod_policy, "schedulingPolicy": scheduling}


def _worker_resources(settings: Settings, options: ManifestOptions,
                      per_worker: int) -> dict[str, Any]:
    limits: dict[str, Any] = {}
    resource = ACCELERATOR_RESOURCES.get(settings.accelerator)
    if resource:
        limits[resource] = per_worker
    if options.worker_cpu:
        limits["cpu"] = options.worker_cpu
    if options.worker_memory:
        limits["memory"] = options.worker_memory
    return {"limits": limits} if limits else {}


def _container(name: str, image: str, command: Sequence[str], env: Mapping[str, str],
               resources: Mapping[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = {"name": name, "image": image, "args": list(command)}
    if env:
        container["env"] = [{"name": key, "value": value} for key, value in env.items()]
    if resources:
        container["resources"] = dict(resources)
    return container


def _replica(replicas: int, restart: str | None, container: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {"replicas": replicas,
                            "template": {"spec": {"containers": [container]}}}
    if restart:
        spec["restartPolicy"] = restart
    return spec
