"""gcurun in an MPI Operator launcher pod, the operator's contract played on namespace
hosts: h1 is the launcher, h2 and h3 the workers. As the operator does for an MPIJob, the
launcher gets K_MPI_JOB_ROLE=launcher, OMPI_MCA_orte_default_hostfile=/etc/mpi/hostfile
with the workers' service names (resolved by its /etc/hosts), and the job's key pair at
sshAuthMountPath (~/.ssh, the private key named id_rsa) with no known_hosts.

The files reach /etc/mpi and /etc/hosts of the launcher process only, through an overlay
over /etc in a mount namespace of its own (the overlay's upper folder is the test's):
`ip netns exec NS` binds /etc/netns/NS/NAME only over entries /etc already has, and this
machine has no /etc/mpi, which must not be made. gcurun is given no host: it finds the
workers, says so in --dry-run, and runs an allreduce on them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cluster.netns import NetnsCluster
from tests.helpers import ROOT

pytestmark = [pytest.mark.cluster, pytest.mark.integration, pytest.mark.long,
              pytest.mark.timeout(600)]

RANK = ROOT / "tests" / "ranks" / "collective_check.py"
JOB_SECONDS = 300


@pytest.fixture
def launcher_pod(netns_cluster: NetnsCluster, tmp_path: Path):
    """h1 made an MPIJob launcher: its /etc/mpi and /etc/hosts, and a home whose .ssh
    holds the operator's key pair. Yields (netns name, environment, worker names)."""
    launcher, workers = netns_cluster.hosts[0], netns_cluster.hosts[1:]
    names = [f"pi-worker-{i}.pi.default.svc" for i in range(len(workers))]
    etc = tmp_path / "etc"
    (etc / "mpi").mkdir(parents=True)
    (tmp_path / "overlay-work").mkdir()
    (etc / "mpi" / "hostfile").write_text("".join(f"{n} slots=1\n" for n in names))
    script = etc / "mpi" / "discover_hosts.sh"
    script.write_text("#!/bin/sh\n" + "".join(f"echo {n}\n" for n in names))
    script.chmod(0o555)
    (etc / "hosts").write_text(
        f"127.0.0.1 localhost\n{launcher.address} {launcher.name} pi-launcher\n"
        + "".join(f"{w.address} {n}\n" for w, n in zip(workers, names, strict=True)))
    ssh = tmp_path / "home" / ".ssh"
    ssh.mkdir(parents=True, mode=0o700)
    shutil.copy(netns_cluster.identity_file, ssh / "id_rsa")
    shutil.copy(f"{netns_cluster.identity_file}.pub", ssh / "id_rsa.pub")
    (ssh / "id_rsa").chmod(0o600)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GCURUN_", "SLURM_"))}
    env.update(HOME=str(tmp_path / "home"), PYTHONPATH=str(ROOT),
               K_MPI_JOB_ROLE="launcher", OMPI_MCA_orte_keep_fqdn_hostnames="true",
               OMPI_MCA_orte_default_hostfile="/etc/mpi/hostfile",
               OMPI_MCA_plm_rsh_args="-o ConnectionAttempts=10",
               OMPI_MCA_orte_set_default_slots="1")
    overlay = (f"mount -t overlay gcurun-pod-etc -o lowerdir=/etc,upperdir={etc},"
               f"workdir={tmp_path / 'overlay-work'} /etc")
    yield [launcher.netns, overlay], env, names


def _in_launcher(pod: list[str], env: dict[str, str], *argv: str) -> subprocess.CompletedProcess:
    netns, overlay = pod
    return subprocess.run(["ip", "netns", "exec", netns, "unshare", "--mount",
                           "--propagation", "private", "sh", "-c",
                           f'{overlay} && exec "$0" "$@"', sys.executable, "-m", "gcurun",
                           *argv], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=JOB_SECONDS, stdin=subprocess.DEVNULL)


def test_the_launcher_finds_the_workers_and_runs_on_them(launcher_pod):
    pod, env, names = launcher_pod
    dry = _in_launcher(pod, env, "--dry-run", "--color", "never", "true")
    assert dry.returncode == 0, dry.stderr
    rows = {line.split()[0]: line.split()[1:] for line in dry.stdout.splitlines()
            if line.strip()}
    assert rows["hosts"] == [",".join(f"{n}:1" for n in names),
                             "mpi-operator:/etc/mpi/hostfile"]
    assert rows["np"] == ["2", "mpi-operator:/etc/mpi/hostfile"]
    assert rows["ssh.host_key_policy"] == ["accept-new", "mpi-operator"]

    # a busy machine starts the workers' bootstraps slowly
    run = _in_launcher(pod, env, "--ssh-timeout", "120", sys.executable, str(RANK))
    assert run.returncode == 0, run.stdout + run.stderr
    results = [json.loads(line[line.index("{"):]) for line in run.stdout.splitlines()
               if '"checksum"' in line]
    assert sorted(r["rank"] for r in results) == [0, 1]
    assert {r["checksum"] for r in results} == {3 * 500500}
    # The ranks ran on the workers (their own hostnames), not on the launcher.
    assert sorted(results[0]["hosts"]) == ["h2", "h3"]
    # accept-new recorded the workers' host keys where the operator left none.
    known = (Path(env["HOME"]) / ".ssh" / "known_hosts").read_text()
    assert all(name in known for name in names)
