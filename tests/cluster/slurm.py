"""A real Slurm on namespace hosts, for pytest and by hand.

Every daemon lives inside the hosts of a namespace cluster (netns-cluster.sh): munged and
slurmctld on h1, one slurmd per host, each in its host's network and UTS namespaces, so
its NodeName is the host's own hostname and its NodeAddr its bridge address. The clients
(srun, salloc, sbatch, squeue, ...) run on this machine, outside the hosts, as on a login
node; they reach slurmctld over the bridge and slurmd reaches them back the same way.
Nothing listens beyond the bridge and the hosts' loopback.

Config, key, spool, state, pid and log files sit in ``slurm/`` under the cluster's
directory. :func:`stop_slurm` cancels the jobs and stops the daemons; tearing the
namespace cluster down afterwards kills whatever is left in its hosts (stray steps, daemons
of a run that died) and removes the directory, so a crashed test run is reaped like any
other namespace cluster.

Two facts of running several slurmd on one machine shape the config: they share /tmp, so
``TmpFS`` is per node (Slurm's PMIx plugin makes its client directories there, and two
nodes of one step would collide in /tmp); and they share the CPUs, so the nodes declare
their CPUs (``SlurmdParameters=config_overrides``) rather than counting them.

By hand, as root::

    python -m tests.cluster.slurm up [HOSTS]     # prints: export SLURM_CONF=...
    python -m tests.cluster.slurm down NAME
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.cluster import netns
from tests.cluster.netns import NetnsCluster, NetnsHost

CLUSTER_NAME = "gcurun"
CPUS_PER_NODE = 2
GPUS_PER_NODE = 2
FAKE_DEVICES = ("/dev/null", "/dev/zero")
"""The device files of the fake GPUs: Slurm wants a character device for each and never
opens them here (no cgroup device limits); a GPU's number is its position in the list."""
START_SECONDS = 30
STOP_SECONDS = 30
COMMAND_SECONDS = 30

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("srun", "salloc", "sbatch", "scontrol", "sinfo", "squeue", "scancel")


@dataclass(frozen=True)
class SlurmCluster:
    """A running Slurm: its config, its nodes (namespace hosts) and its controller."""

    dir: Path
    conf: Path
    controller: NetnsHost
    nodes: tuple[NetnsHost, ...]
    netns: NetnsCluster

    @property
    def node_names(self) -> tuple[str, ...]:
        return tuple(n.name for n in self.nodes)

    def env(self, **extra: str) -> dict[str, str]:
        """This process's environment with SLURM_CONF pointing at this cluster and no
        variables of an enclosing allocation."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env["SLURM_CONF"] = str(self.conf)
        env.update(extra)
        return env

    def run(self, argv: Sequence[str], timeout: float = COMMAND_SECONDS,
            env: dict[str, str] | None = None,
            **kwargs: object) -> subprocess.CompletedProcess[str]:
        """Run a client command (``srun ...``) against this cluster, output captured."""
        return subprocess.run(list(argv), env=env or self.env(), capture_output=True,
                              text=True, timeout=timeout, check=False, **kwargs)  # type: ignore[call-overload]

    def jobs(self) -> list[str]:
        """Ids of the jobs Slurm still knows as pending, running or completing."""
        done = self.run(["squeue", "-h", "-o", "%i"])
        if done.returncode != 0:
            raise RuntimeError(f"squeue failed: {done.stderr.strip()}")
        return done.stdout.split()

    @property
    def hosts_file(self) -> Path:
        """An /etc/hosts naming every node: the nodes see it as theirs."""
        return self.dir / "hosts"

    def login_command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run where the node names resolve as they do on the nodes (a mount
        namespace of its own with :attr:`hosts_file` as /etc/hosts), as on a cluster's
        login node."""
        return ["unshare", "--mount", "--", "sh", "-c",
                'mount --bind "$1" /etc/hosts && shift && exec "$@"', "sh",
                str(self.hosts_file), *argv]

    def node_states(self) -> dict[str, str]:
        done = self.run(["sinfo", "-h", "-N", "-o", "%N %T"])
        if done.returncode != 0:
            raise RuntimeError(f"sinfo failed: {done.stderr.strip()}")
        return dict(line.split() for line in done.stdout.splitlines() if line.strip())

    def log(self, name: str) -> str:
        """A daemon's log: ``slurmctld``, ``munged`` or a node name for its slurmd."""
        stem = name if name in ("slurmctld", "munged") else f"slurmd-{name}"
        path = self.dir / "log" / f"{stem}.log"
        return path.read_text(errors="replace") if path.exists() else ""


def unavailable_reason() -> str | None:
    """Why a Slurm cluster cannot be built here, or None when it can."""
    reason = netns.unavailable_reason()
    if reason:
        return reason
    for tool in DAEMONS + CLIENTS:
        if _which(tool) is None:
            package = "munge" if tool == "munged" else "slurm-wlm"
            return f"'{tool}' not found; install {package} (tests/setup-and-run.sh does)"
    return None


def _which(tool: str) -> str | None:
    return shutil.which(tool) or next(
        (p for p in (f"/usr/sbin/{tool}", f"/sbin/{tool}") if os.access(p, os.X_OK)), None)


def has_pmix(cluster: SlurmCluster) -> bool:
    """Whether this Slurm's srun offers ``--mpi=pmix`` (its plugin needs libpmix-dev)."""
    done = cluster.run(["srun", "--mpi=list"])
    return "pmix" in done.stdout + done.stderr


def write_config(directory: Path, controller: NetnsHost,
                 nodes: Sequence[NetnsHost]) -> Path:
    """Write slurm.conf and gres.conf for ``nodes`` under ``directory``; return slurm.conf."""
    d = directory
    lines = [
        f"ClusterName={CLUSTER_NAME}",
        f"SlurmctldHost={controller.name}({controller.address})",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={d}/munge/munge.socket",
        f"StateSaveLocation={d}/state",
        f"SlurmdSpoolDir={d}/spool/%n",
        f"TmpFS={d}/tmp/%n",
        f"SlurmctldPidFile={d}/run/slurmctld.pid",
        f"SlurmdPidFile={d}/run/slurmd-%n.pid",
        f"SlurmctldLogFile={d}/log/slurmctld.log",
        f"SlurmdLogFile={d}/log/slurmd-%n.log",
        "SlurmdParameters=config_overrides",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SwitchType=switch/none",
        "MpiDefault=none",
        "SchedulerType=sched/builtin",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "AccountingStorageType=accounting_storage/none",
        "JobAcctGatherType=jobacct_gather/none",
        "JobCompType=jobcomp/none",
        "GresTypes=gpu",
        "ReturnToService=2",
        "KillWait=5",
        "InactiveLimit=0",
        "MinJobAge=5",
        "SlurmctldTimeout=30",
        "SlurmdTimeout=30",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
    ]
    for node in nodes:
        lines.append(f"NodeName={node.name} NodeAddr={node.address} CPUs={CPUS_PER_NODE} "
                     f"Gres=gpu:{GPUS_PER_NODE} State=UNKNOWN")
    lines.append("PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
    conf = d / "slurm.conf"
    conf.write_text("\n".join(lines) + "\n")
    gres = ["AutoDetect=off"]
    for node in nodes:
        files = d / "dev" / node.name
        files.mkdir(parents=True, exist_ok=True)
        for i, target in zip(range(GPUS_PER_NODE), FAKE_DEVICES, strict=True):
            (files / f"gpu{i}").symlink_to(target)
        gres.append(f"NodeName={node.name} Name=gpu File={files}/gpu[0-{GPUS_PER_NODE - 1}]")
    (d / "gres.conf").write_text("\n".join(gres) + "\n")
    return conf


def start_slurm(cluster: NetnsCluster, hosts: int | None = None) -> SlurmCluster:
    """Start munged and slurmctld on the first host and a slurmd on each of the first
    ``hosts`` hosts (all by default); return once every node is idle.

    Raises RuntimeError with the daemons' own words when something does not come up; what
    did start is stopped again first.
    """
    nodes = cluster.hosts[:hosts] if hosts else cluster.hosts
    directory = cluster.dir / "slurm"
    for sub in ("munge", "state", "run", "log", *(f"spool/{n.name}" for n in nodes),
                *(f"tmp/{n.name}" for n in nodes)):
        (directory / sub).mkdir(parents=True, exist_ok=True)
    # munged refuses a socket or key in a directory that others cannot search or can write.
    for path in (cluster.dir, directory, directory / "munge"):
        path.chmod(0o755)
    conf = write_config(directory, nodes[0], nodes)
    write_hosts_file(directory / "hosts", nodes)
    slurm = SlurmCluster(dir=directory, conf=conf, controller=nodes[0], nodes=tuple(nodes),
                         netns=cluster)
    try:
        _start_munged(slurm)
        _in_host(slurm, slurm.controller, ["slurmctld", "-f", str(conf)])
        _wait(slurm, "slurmctld to answer", lambda: slurm.run(
            ["scontrol", "ping"], timeout=10).stdout.count("UP") > 0, "slurmctld")
        for node in nodes:
            _in_host(slurm, node, ["slurmd", "-f", str(conf), "-N", node.name])
        _wait(slurm, f"nodes {','.join(slurm.node_names)} to be idle",
              lambda: set(slurm.node_states().values()) == {"idle"}
              and len(slurm.node_states()) == len(nodes), "slurmctld")
    except BaseException:
        stop_slurm(slurm)
        raise
    return slurm


def _start_munged(slurm: SlurmCluster) -> None:
    munge = slurm.dir / "munge"
    key = munge / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    _in_host(slurm, slurm.controller, [
        "munged", f"--key-file={key}", f"--socket={munge}/munge.socket",
        f"--pid-file={slurm.dir}/run/munged.pid", f"--log-file={slurm.dir}/log/munged.log",
        f"--seed-file={munge}/munged.seed"])


def _in_host(slurm: SlurmCluster, host: NetnsHost, argv: list[str]) -> None:
    """Run a daemon (which forks into the background) inside ``host``: its network
    namespace, a UTS namespace named like the host, and a mount namespace whose /etc/hosts
    names every node, as a cluster's name service would. (Not ``ip netns exec``: its
    fresh /sys has no cgroup filesystem, and slurmd will not start without one.)"""
    program = _which(argv[0]) or argv[0]
    script = 'mount --bind "$1" /etc/hosts && hostname "$2" && shift 2 && exec "$@"'
    done = subprocess.run(
        ["nsenter", f"--net=/run/netns/{host.netns}", "unshare", "--uts", "--mount", "--",
         "sh", "-c", script, "sh", str(slurm.hosts_file), host.name, program, *argv[1:]],
        env=slurm.env(), capture_output=True, text=True, timeout=START_SECONDS)
    if done.returncode != 0:
        raise RuntimeError(f"{argv[0]} on {host.name} did not start (exit "
                           f"{done.returncode}): {done.stderr.strip()}\n"
                           f"{_log_tail(slurm, argv[0], host)}")


def write_hosts_file(path: Path, nodes: Sequence[NetnsHost]) -> None:
    """This machine's /etc/hosts with a line for each node added."""
    lines = [Path("/etc/hosts").read_text().rstrip("\n"), "# Slurm test nodes"]
    lines += [f"{node.address} {node.name}" for node in nodes]
    path.write_text("\n".join(lines) + "\n")


def _log_tail(slurm: SlurmCluster, daemon: str, host: NetnsHost | None = None) -> str:
    name = host.name if daemon == "slurmd" and host else daemon
    text = slurm.log(name)
    if not text:
        return f"(the {daemon} log is empty or was not written)"
    return f"last lines of the {name} log:\n" + "\n".join(text.splitlines()[-15:])


def _wait(slurm: SlurmCluster, what: str, ready: object, log: str) -> None:
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        try:
            if ready():  # type: ignore[operator]
                return
        except (RuntimeError, subprocess.TimeoutExpired):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"timed out after {START_SECONDS} s waiting for {what}\n"
                       f"{_log_tail(slurm, log)}")


def cancel_all(slurm: SlurmCluster, seconds: float = STOP_SECONDS) -> None:
    """Cancel every job and wait (at most ``seconds``) until Slurm has none left."""
    deadline = time.monotonic() + seconds
    try:
        jobs = slurm.jobs()
        if jobs:
            slurm.run(["scancel", "--full", *jobs])
        while slurm.jobs() and time.monotonic() < deadline:
            time.sleep(0.2)
    except (RuntimeError, subprocess.TimeoutExpired):
        pass


def stop_slurm(slurm: SlurmCluster) -> None:
    """Cancel every job, then stop slurmd, slurmctld and munged, each within a deadline.
    What does not stop in time is left to the namespace cluster's teardown, which kills
    every process of its hosts."""
    deadline = time.monotonic() + STOP_SECONDS
    cancel_all(slurm)
    pids = [_pid(slurm.dir / "run" / f"slurmd-{n.name}.pid") for n in slurm.nodes]
    pids += [_pid(slurm.dir / "run" / f"{d}.pid") for d in ("slurmctld", "munged")]
    for pid in pids:
        if pid:
            _signal(pid, 15)
    while any(p and _alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)


def _pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a daemon that exited but was not reaped yet counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except OSError:
        return False


def _main(argv: list[str]) -> int:
    if argv[:1] == ["up"]:
        reason = unavailable_reason()
        if reason:
            print(f"slurm: {reason}", file=sys.stderr)
            return 1
        count = int(argv[1]) if len(argv) > 1 else 2
        cluster = netns.start_cluster(count)
        (cluster.dir / netns.OWNER_FILE).unlink()  # kept until `down`, not reaped
        try:
            slurm = start_slurm(cluster)
        except BaseException:
            netns.stop_cluster(cluster.name)
            raise
        print(f"# Slurm on {','.join(slurm.node_names)}; remove with: "
              f"python -m tests.cluster.slurm down {cluster.name}")
        print(f"export SLURM_CONF={slurm.conf}")
        return 0
    if argv[:1] == ["down"] and len(argv) == 2:
        cluster = netns.load_cluster(netns.BASE / argv[1])
        stop_slurm(SlurmCluster(dir=cluster.dir / "slurm", conf=cluster.dir / "slurm" /
                                "slurm.conf", controller=cluster.hosts[0],
                                nodes=cluster.hosts, netns=cluster))
        netns.stop_cluster(cluster.name)
        return 0
    print(__doc__.split("By hand, as root::")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
