"""Namespace test hosts for pytest: a thin wrapper around netns-cluster.sh.

The script does the work (and can be run by hand); this module decides whether it can run
here, starts a cluster, reads its description and tears it down.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

SCRIPT = Path(__file__).with_name("netns-cluster.sh")
BASE = Path(os.environ.get("GCURUN_NETNS_BASE", "/tmp/gcurun-netns"))
OWNER_FILE = "owner.pid"
SCRIPT_SECONDS = 60


@dataclass(frozen=True)
class NetnsHost:
    name: str
    address: str
    netns: str

    def net_namespace_inode(self) -> int:
        """The inode of this host's network namespace (compare /proc/PID/ns/net)."""
        return os.stat(f"/run/netns/{self.netns}").st_ino


@dataclass(frozen=True)
class NetnsCluster:
    name: str
    dir: Path
    ssh_config: Path
    known_hosts: Path
    identity_file: Path
    gateway: str
    hosts: tuple[NetnsHost, ...]

    def host(self, name: str) -> NetnsHost:
        return next(h for h in self.hosts if h.name == name)

    @property
    def subnet_prefix(self) -> str:
        """``10.213.X`` of this cluster's bridge."""
        return self.gateway.rsplit(".", 1)[0]


def unavailable_reason() -> str | None:
    """Why namespace hosts cannot be built here, or None when they can."""
    if os.geteuid() != 0:
        return "namespace hosts need root (network namespaces, sshd); run the tests as root"
    for tool, package in (("ip", "iproute2"), ("unshare", "util-linux"),
                          ("ssh-keygen", "openssh-client"), ("flock", "util-linux")):
        if shutil.which(tool) is None:
            return f"'{tool}' not found; install {package}"
    if shutil.which("sshd") is None and not os.access("/usr/sbin/sshd", os.X_OK):
        return "'sshd' not found; install openssh-server"
    probe = subprocess.run(["unshare", "--net", "--uts", "true"], capture_output=True,
                           text=True, timeout=10)
    if probe.returncode != 0:
        return ("this machine does not allow new network namespaces "
                f"({probe.stderr.strip() or probe.returncode}); run on a host or a "
                "privileged container")
    return None


def start_cluster(count: int, setenv: Mapping[str, str] | None = None) -> NetnsCluster:
    """Build ``count`` hosts h1..hN. Raises RuntimeError with the script's message."""
    args = [str(SCRIPT), "up", str(count)]
    for key, value in (setenv or {}).items():
        args += ["--setenv", f"{key}={value}"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=SCRIPT_SECONDS)
    if done.returncode != 0:
        raise RuntimeError(f"netns-cluster.sh up failed: {done.stderr.strip()}")
    directory = Path(done.stdout.strip().splitlines()[-1])
    (directory / OWNER_FILE).write_text(str(os.getpid()))
    return load_cluster(directory)


def load_cluster(directory: Path) -> NetnsCluster:
    info = json.loads((directory / "cluster.json").read_text())
    return NetnsCluster(
        name=info["name"], dir=directory, ssh_config=Path(info["ssh_config"]),
        known_hosts=Path(info["known_hosts"]), identity_file=Path(info["identity_file"]),
        gateway=info["gateway"],
        hosts=tuple(NetnsHost(h["name"], h["address"], h["netns"]) for h in info["hosts"]))


def stop_cluster(name: str) -> None:
    subprocess.run([str(SCRIPT), "down", name], capture_output=True, text=True,
                   timeout=SCRIPT_SECONDS)


def reap_stale_clusters() -> list[str]:
    """Tear down clusters whose test run died without cleaning up (its pid is gone)."""
    reaped = []
    for owner in BASE.glob(f"*/{OWNER_FILE}"):
        try:
            pid = int(owner.read_text())
            os.kill(pid, 0)
        except ProcessLookupError:
            stop_cluster(owner.parent.name)
            reaped.append(owner.parent.name)
        except (ValueError, OSError):
            continue
    return reaped


def stop_on_signals(name: str) -> None:
    """Tear the cluster down when pytest is told to stop by SIGTERM or SIGHUP too."""
    for signum in (signal.SIGTERM, signal.SIGHUP):
        previous = signal.getsignal(signum)

        def handler(sig: int, frame: object, previous: object = previous) -> None:
            stop_cluster(name)
            if callable(previous):
                previous(sig, frame)
            else:
                raise SystemExit(128 + sig)

        signal.signal(signum, handler)
