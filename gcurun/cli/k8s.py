"""``gcurun k8s manifest``: the MPIJob (Kubeflow MPI Operator) that runs a job."""

from __future__ import annotations

import click


@click.group(name="k8s")
def k8s() -> None:
    """Kubernetes: write the MPIJob that runs a gcurun job under the MPI Operator."""


@k8s.command(name="manifest", context_settings={"allow_interspersed_args": False})
@click.option("--profile", "profile", required=True, type=click.Path(dir_okay=False),
              help="The cluster profile to size the job from (hosts, slots, np, "
                   "accelerator, env, runtime knobs).")
@click.option("--image", required=True, help="The training image (gcurun and sshd in it).")
@click.option("--name", default="gcurun-job", show_default=True, help="The MPIJob's name.")
@click.option("--namespace", default=None, help="The MPIJob's namespace.")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Worker pods (default: one per profile host).")
@click.option("--slots-per-worker", type=click.IntRange(min=1), default=None,
              help="Ranks per worker (default: the profile hosts' slots).")
@click.option("--clean-pod-policy", type=click.Choice(["Running", "All", "None"]),
              default="Running", show_default=True,
              help="Which pods the operator deletes when the job ends.")
@click.option("--queue", default=None, help="Gang-scheduling queue (Volcano).")
@click.option("--priority-class", default=None, help="Gang-scheduling priority class.")
@click.option("--worker-cpu", default=None, help="CPU limit of a worker pod (e.g. 32).")
@click.option("--worker-memory", default=None, help="Memory limit of a worker pod (e.g. 256Gi).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write the manifest here instead of standard output.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def manifest(profile: str, image: str, name: str, namespace: str | None,
             workers: int | None, slots_per_worker: int | None, clean_pod_policy: str,
             queue: str | None, priority_class: str | None, worker_cpu: str | None,
             worker_memory: str | None, output: str | None, command: tuple[str, ...]) -> None:
    """Write an MPIJob (kubeflow.org/v2beta1) that runs COMMAND under gcurun: a launcher
    pod running `gcurun -np N COMMAND` (it finds the workers in the operator's hostfile)
    and worker pods running sshd, each asking for its slots' accelerators.

    \b
      gcurun k8s manifest --profile configs/two-nodes-ssh.yaml --image reg/train:1 \\
          -- python train.py > mpijob.yaml
      kubectl apply -f mpijob.yaml
    """
    import yaml

    from gcurun.config.resolve import load_settings, runtime_environment
    from gcurun.k8s.manifest import ManifestOptions, build_mpijob

    # The profile alone: this machine's environment (an allocation, GCURUN_*) is not
    # the cluster's.
    settings = load_settings({}, profile, {})
    options = ManifestOptions(
        image=image, command=tuple(command), name=name, namespace=namespace,
        workers=workers, slots_per_worker=slots_per_worker,
        clean_pod_policy=clean_pod_policy,  # type: ignore[arg-type]
        queue=queue, priority_class=priority_class, worker_cpu=worker_cpu,
        worker_memory=worker_memory)
    job = build_mpijob(settings, options,
                       runtime_environment(settings.runtime, settings.sources))
    text = yaml.safe_dump(job, sort_keys=False)
    if output:
        with open(output, "w", encoding="utf-8") as handle:
            handle.write(text)
    else:
        click.echo(text, nl=False)
