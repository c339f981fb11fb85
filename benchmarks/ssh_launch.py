"""Wall time of starting a trivial 8-rank job on 2 SSH hosts: gcurun beside mpirun (its
ssh launcher) and bare OpenSSH, same run, same namespace hosts.

    python benchmarks/ssh_launch.py [--repeat 10] [--ranks-per-host 4]

Needs root, ip, unshare and sshd: it builds two namespace hosts with
tests/cluster/netns-cluster.sh and tears them down at the end. Every rank is the same
interpreter running ``-c pass``, so the figure is the launcher's own cost (connections,
preflight, supervision) plus the ranks' interpreter start-ups. ``ssh`` is the floor: one
OpenSSH client per host starting its ranks from a shell loop, no checks, no supervision.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.launch import print_table, time_all  # noqa: E402
from tests.cluster.netns import start_cluster, stop_cluster, unavailable_reason  # noqa: E402

RANK = [sys.executable, "-c", "pass"]


def commands(cluster, per_host: int) -> dict[str, list[str]]:
    hosts = [h.name for h in cluster.hosts]
    spec = ",".join(f"{h}:{per_host}" for h in hosts)
    np = str(per_host * len(hosts))
    runs = {"gcurun": [sys.executable, "-m", "gcurun", "-np", np, "-H", spec,
                       "--ssh-config", str(cluster.ssh_config), *RANK]}
    mpirun = shutil.which("mpirun")
    if mpirun:
        prefix = str(Path(os.path.realpath(sys.executable)).parent.parent)
        runs["mpirun"] = [
            mpirun, "--allow-run-as-root", "--host", spec, "-np", np, "--bind-to", "none",
            "--mca", "plm_ssh_agent", f"ssh -F {cluster.ssh_config}",
            "--mca", "oob_tcp_if_include", f"{cluster.subnet_prefix}.0/24",
            "--prefix", prefix, *RANK]
    loop = f"for i in $(seq {per_host}); do {' '.join(RANK)} & done; wait"
    clients = " ".join(f"ssh -F {cluster.ssh_config} {h} '{loop}' &" for h in hosts)
    runs["ssh"] = ["bash", "-c", f"{clients} wait"]
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--ranks-per-host", type=int, default=4)
    args = parser.parse_args()
    reason = unavailable_reason()
    if reason:
        sys.exit(f"cannot build namespace hosts: {reason}")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cluster = start_cluster(2, setenv={"PYTHONPATH": str(ROOT)})
    try:
        results = time_all(commands(cluster, args.ranks_per_host), args.repeat, env)
    finally:
        stop_cluster(cluster.name)
    print_table(results)


if __name__ == "__main__":
    main()
