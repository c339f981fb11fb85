"""Namespace test hosts for pytest: a thin wrapper around netns-cluster.sh.

The script does the work (and can be run by hand); this module decides whether it can run
here, starts a cluster, reads its description and tears it down.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
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
    link_rate_bits: int | None = None   # the tbf rate on every host's link; None: unshaped
    docker0: str | None = None          # every host's docker0 address, if it has one

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


def start_cluster(count: int, setenv: Mapping[str, str] | None = None, *,
                  rate: str | None = None, docker0: bool = False) -> NetnsCluster:
    """Build ``count`` hosts h1..hN. ``rate`` (tc's form: ``2gbit``, ``500mbit``) shapes
    both ends of every host's link; ``docker0`` gives every host a second interface that
    reaches no other host. Raises RuntimeError with the script's message."""
    args = [str(SCRIPT), "up", str(count)]
    for key, value in (setenv or {}).items():
        args += ["--setenv", f"{key}={value}"]
    if rate is not None:
        args += ["--rate", rate]
    if docker0:
        args.append("--docker0")
    done = subprocess.run(args, capture_output=True, text=True, timeout=SCRIPT_SECONDS)
    if done.returncode != 0:
        raise RuntimeError(f"netns-cluster.sh up failed: {done.stderr.strip()}")
    directory = Path(done.stdout.strip().splitlines()[-1])
    (directory / OWNER_FILE).write_text(str(os.getpid()))
    return load_cluster(directory)


def load_cluster(directory: Path) -> NetnsCluster:
    info = json.loads((directory / "cluster.json").read_text())
    rate = directory / "link_rate"
    return NetnsCluster(
        name=info["name"], dir=directory, ssh_config=Path(info["ssh_config"]),
        known_hosts=Path(info["known_hosts"]), identity_file=Path(info["identity_file"]),
        gateway=info["gateway"],
        hosts=tuple(NetnsHost(h["name"], h["address"], h["netns"]) for h in info["hosts"]),
        link_rate_bits=int(rate.read_text()) if rate.exists() else None,
        docker0=info.get("docker0"))


def shape_cluster(cluster: NetnsCluster, rate: str | None) -> NetnsCluster:
    """Shape every host's link at ``rate`` (``2gbit``), or unshape it (None); the cluster
    as it is now. Raises RuntimeError with the script's message."""
    done = subprocess.run([str(SCRIPT), "shape", cluster.name, rate or "off"],
                          capture_output=True, text=True, timeout=SCRIPT_SECONDS)
    if done.returncode != 0:
        raise RuntimeError(f"netns-cluster.sh shape failed: {done.stderr.strip()}")
    return load_cluster(cluster.dir)


# A TCP stream between two hosts: the receiver prints its port, then, when the sender has
# closed, the payload rate in bits per second after the first WARMUP seconds (slow start).
_RECEIVER = """
import socket, sys, time
WARMUP = float(sys.argv[2])
s = socket.create_server((sys.argv[1], 0))
s.settimeout(float(sys.argv[3]))
print(s.getsockname()[1], flush=True)
c, _ = s.accept()
c.settimeout(float(sys.argv[3]))
buf = bytearray(1 << 20)
first = start = None
total = 0
while True:
    n = c.recv_into(buf)
    now = time.perf_counter()
    if not n:
        break
    first = first or now
    if start is None and now - first >= WARMUP:
        start, total = now, 0
    total += n
print(total * 8 / (now - start) if start and now > start else 0.0, flush=True)
"""
_SENDER = """
import socket, sys, time
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[4]))
data = bytes(1 << 20)
end = time.perf_counter() + float(sys.argv[3])
while time.perf_counter() < end:
    c.sendall(data)
c.close()
"""


def measure_link_rate(cluster: NetnsCluster, source: str, target: str,
                      seconds: float = 2.0, warmup: float = 0.5) -> float:
    """The payload rate of one TCP stream from host ``source`` to host ``target``, in bits
    per second, over ``seconds`` after ``warmup`` seconds of slow start. Raises
    RuntimeError when either end fails."""
    src, dst = cluster.host(source), cluster.host(target)
    deadline = seconds + warmup + 30
    receiver = subprocess.Popen(
        ["ip", "netns", "exec", dst.netns, sys.executable, "-c", _RECEIVER, dst.address,
         str(warmup), str(deadline)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert receiver.stdout is not None
        ready, _, _ = select.select([receiver.stdout], [], [], 30)
        port = receiver.stdout.readline().strip() if ready else ""
        if not port.isdigit():
            raise RuntimeError(f"the receiver on {target} did not start: "
                               f"{receiver.communicate(timeout=10)[1].strip()}")
        sender = subprocess.run(
            ["ip", "netns", "exec", src.netns, sys.executable, "-c", _SENDER, dst.address,
             port, str(seconds + warmup), str(deadline)],
            capture_output=True, text=True, timeout=deadline)
        if sender.returncode != 0:
            raise RuntimeError(f"the sender on {source} failed: {sender.stderr.strip()}")
        out, err = receiver.communicate(timeout=30)
        if receiver.returncode != 0:
            raise RuntimeError(f"the receiver on {target} failed: {err.strip()}")
        return float(out.strip())
    finally:
        if receiver.poll() is None:
            receiver.kill()
            receiver.wait(timeout=10)


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


def host_link(cluster: NetnsCluster, host: str) -> str:
    """The bridge's end of ``host``'s link (its veth in this machine's namespace)."""
    return f"{cluster.name}v{int(host.removeprefix('h'))}"


def link_down(cluster: NetnsCluster, host: str) -> None:
    """Cut ``host``'s link as a pulled cable does: nothing more passes, and nothing (no
    FIN, no RST) tells either side. Raises RuntimeError with ip's message."""
    _ip_link(host_link(cluster, host), "down")


def link_up(cluster: NetnsCluster, host: str) -> None:
    _ip_link(host_link(cluster, host), "up")


def _ip_link(device: str, state: str) -> None:
    done = subprocess.run(["ip", "link", "set", device, state], capture_output=True,
                          text=True, timeout=SCRIPT_SECONDS)
    if done.returncode != 0:
        raise RuntimeError(f"ip link set {device} {state} failed: {done.stderr.strip()}")


def processes_in(host: NetnsHost, *marks: str) -> list[int]:
    """Pids of live processes inside ``host`` (its network namespace; the hosts share
    this machine's pid namespace) whose command line holds one of ``marks``."""
    inode = host.net_namespace_inode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}/ns/net").st_ino != inode:
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{entry}/stat", "rb") as f:
                zombie = f.read().rsplit(b")", 1)[-1].split()[0] == b"Z"
        except OSError:
            continue
        if not zombie and any(m in cmdline for m in marks):
            found.append(int(entry))
    return found
