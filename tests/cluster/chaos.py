"""Chaos rounds: a job (local, over SSH on namespace hosts, or under mpirun across them),
one process of it killed at a random moment, then the verdict.

A round picks a launcher, a victim (a rank, the bootstrap of a rank's host, or gcurun
itself), a signal (SIGINT, SIGTERM, SIGKILL) and a moment (while the ranks start, or a
random delay after all are ready). Afterwards nothing of the job may be left on any host,
gcurun must exit with the documented code, and its root-cause line must name the right
rank:

| victim | exit code | root cause |
| --- | --- | --- |
| rank R, signal N | 128+N | ``rank R on HOST was killed by SIGNAME`` |
| the bootstrap of HOST (gcurun's, or mpirun's daemon prted) | 255 | the first rank of HOST |
| gcurun, SIGINT / SIGTERM | 130 / 143 | ``interrupted by SIGNAME; stopped every rank`` |
| gcurun, SIGKILL | killed (-9) | none: it is dead; only the survivors count |
| the link of HOST cut (static SSH job) | 255 | ``no word from HOST for S s`` |

A round may also meet a hostile condition, which must change nothing of the above:

- full disk: ``--output-dir`` on a 64 KiB tmpfs and ranks that print without pause; the
  launcher must warn that a log ran out of space and carry on;
- blocked console: gcurun's stdout is a pipe nobody reads, and ranks print without pause;
- crowded rendezvous: 70 idle connections to the launcher's rendezvous before the ranks
  join it (they call ``init()`` before they are ready);
- cut link: the victim is a host's link (``ip link set ... down``), in a static SSH job;
  its ranks must be gone with the link still down.

The launcher's peak memory is sampled in every round and reported in the tally.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path

import psutil

from tests.cluster.netns import link_down, link_up
from tests.helpers import ROOT, gcurun_cmd

RANK = str(Path(__file__).resolve().parent / "chaos_rank.py")
KINDS = ("local", "ssh", "mpi")
VICTIMS = ("rank", "bootstrap", "launcher")
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)
GRACE = 2.0
EXIT_DEADLINE = 90.0      # gcurun must have exited this long after the signal
SURVIVOR_DEADLINE = 30.0  # and every process of the job be gone this long after that
LAYOUTS = {"local": (("localhost", 3),), "ssh": (("h1", 2), ("h2", 2)),
           "mpi": (("h1", 2), ("h2", 2))}
CONDITIONS = ("full-disk", "blocked-console", "crowded-rendezvous", "cut-link")
HOSTILE_SHARE = 0.5       # of the randomised rounds, this share meets a hostile condition
FULL_DISK = "64k"         # the tmpfs that holds --output-dir in a full-disk round
IDLE_CLIENTS = 70         # connections a crowded-rendezvous round holds open
INIT_DELAY = 1.0          # ranks of that round wait this long before joining, so the crowd
                          # is there first
LIVENESS_DEADLINE = 60.0  # a cut host's ranks must be gone this long after the cut
LOST_HOST_LINE = "no word from {host} for"


@dataclass(frozen=True)
class Round:
    index: int
    kind: str
    victim: str
    signum: int
    rank: int            # the victim rank, or a rank of the victim host
    during_start: bool   # strike while the ranks start, not after all are ready
    delay: float
    condition: str | None = None   # one of CONDITIONS, or None

    def describe(self) -> str:
        when = "while the ranks start" if self.during_start else f"{self.delay:.2f} s after " \
            "all were ready"
        if self.victim == "link":
            what = f"the link of rank {self.rank}'s host cut"
        else:
            who = {"rank": f"rank {self.rank}", "launcher": "gcurun",
                   "bootstrap": f"the bootstrap of rank {self.rank}'s host"}[self.victim]
            what = f"{signal.Signals(self.signum).name} to {who}"
        hostile = f" ({self.condition})" if self.condition and self.condition != "cut-link" \
            else ""
        return f"round {self.index}: {self.kind} job{hostile}, {what} {when}"


def plan_round(rng: random.Random, index: int) -> Round:
    kind = rng.choice(KINDS)
    size = sum(n for _, n in LAYOUTS[kind])
    return Round(index, kind, rng.choice(VICTIMS), rng.choice(SIGNALS),
                 rng.randrange(size), rng.random() < 0.25, round(rng.uniform(0, 1.5), 2))


def make_hostile(r: Round, condition: str, rng: random.Random) -> Round:
    """``r`` under ``condition``: the kind and victim are bent where the condition needs
    them (a cut link strikes a static SSH job's host; a crowd needs gcurun's rendezvous,
    which jobs under mpirun do not use)."""
    if condition == "cut-link":
        size = sum(n for _, n in LAYOUTS["ssh"])
        return replace(r, kind="ssh", victim="link", signum=0, rank=rng.randrange(size),
                       during_start=False, condition=condition)
    if condition == "crowded-rendezvous" and r.kind == "mpi":
        r = replace(r, kind=rng.choice(("local", "ssh")))
        r = replace(r, rank=r.rank % sum(n for _, n in LAYOUTS[r.kind]))
    return replace(r, condition=condition)


def plan_rounds(seed: int, count: int, hostile_share: float = 0.0) -> list[Round]:
    """``count`` rounds from ``seed``; a share of them meets a hostile condition, drawn
    from a stream of its own so a seed's plain rounds stay what they were."""
    rng, hostile = random.Random(seed), random.Random(f"{seed} hostile")
    rounds = []
    for index in range(count):
        r = plan_round(rng, index)
        if hostile.random() < hostile_share:
            r = make_hostile(r, hostile.choice(CONDITIONS), hostile)
        rounds.append(r)
    return rounds


def hostile_rounds(seed: int) -> list[Round]:
    """One round of each hostile condition, for the default suite."""
    rng = random.Random(seed)
    return [make_hostile(plan_round(rng, index), condition, rng)
            for index, condition in enumerate(CONDITIONS)]


def host_of(kind: str, rank: int) -> str:
    first = 0
    for host, count in LAYOUTS[kind]:
        if rank < first + count:
            return host
        first += count
    raise ValueError(rank)


def first_rank_of(kind: str, host: str) -> int:
    first = 0
    for name, count in LAYOUTS[kind]:
        if name == host:
            return first
        first += count
    raise ValueError(host)


@dataclass
class Verdict:
    round: Round
    exit_code: int | None
    expected_code: int
    expected_line: str | None
    stderr: str
    survivors: list[str] = field(default_factory=list)
    peak_rss: int = 0          # the launcher's, in bytes
    problems: list[str] = field(default_factory=list)   # the condition's own checks

    @property
    def right_code(self) -> bool:
        return self.exit_code == self.expected_code

    @property
    def right_cause(self) -> bool:
        return self.expected_line is None or self.expected_line in self.stderr

    @property
    def ok(self) -> bool:
        return self.right_code and self.right_cause and not self.survivors and \
            not self.problems


def expectation(r: Round) -> tuple[int, str | None]:
    if r.victim == "link":
        return 255, LOST_HOST_LINE.format(host=host_of(r.kind, r.rank))
    name = signal.Signals(r.signum).name
    if r.victim == "launcher":
        if r.signum == signal.SIGKILL:
            return -signal.SIGKILL, None
        return 128 + r.signum, f"gcurun: interrupted by {name}; stopped every rank"
    host = "localhost" if r.kind == "local" else host_of(r.kind, r.rank)
    if r.victim == "rank":
        return 128 + r.signum, (f"gcurun: job failed: rank {r.rank} on {host} was killed by "
                                f"{name} (root cause)")
    first = first_rank_of(r.kind, host if r.kind != "local" else "localhost")
    return 255, f"gcurun: job failed: rank {first} on {host} exited with code 255 (root cause)"


def job_processes(token: str) -> list[psutil.Process]:
    """Live processes of a job, on every namespace host (they share this pid namespace):
    its token is in their environment (gcurun passes it on) or on their command line."""
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        if p.pid == os.getpid() or p.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            if token in " ".join(p.info["cmdline"] or ()) or \
                    p.environ().get("CHAOS_TOKEN") == token:
                found.append(p)
        except psutil.Error:
            continue
    return found


def helpers_on(cluster) -> list[psutil.Process]:
    """gcurun bootstraps and guards, and mpirun's daemons, on the cluster's hosts."""
    inodes = {h.net_namespace_inode() for h in cluster.hosts}
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        if p.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            line = " ".join(p.info["cmdline"] or ())
            if ("gcurun.launch.remote.bootstrap" in line or "prted" in line) and \
                    os.stat(f"/proc/{p.pid}/ns/net").st_ino in inodes:
                found.append(p)
        except OSError:
            continue
    return found


def runs_ranks(daemon: psutil.Process) -> bool:
    """Whether this prted is the one whose children are ranks (prted forks itself once)."""
    try:
        return any("prted" not in " ".join(c.cmdline()) for c in daemon.children())
    except psutil.Error:
        return False


def describe_processes(procs: list[psutil.Process]) -> list[str]:
    out = []
    for p in procs:
        try:
            out.append(f"{p.pid} {p.name()} {' '.join(p.cmdline())[:120]}")
        except psutil.Error:
            continue
    return out


class Runner:
    """Runs rounds against one namespace cluster, in a scratch directory.

    mpirun's daemons on the hosts keep their session folders under ``daemons``: a daemon
    killed by a round cannot remove its folder, which would stay in the machine's /tmp
    (the hosts share it). The folder's path is short, as PMIx's socket paths under it
    must be (at most 107 bytes); :func:`run_rounds` removes it."""

    def __init__(self, cluster, scratch: Path) -> None:
        self.cluster = cluster
        self.scratch = scratch
        self.daemons = Path(tempfile.mkdtemp(prefix="chaos-"))

    def command(self, r: Round, directory: Path) -> list[str]:
        hosts = ",".join(f"{h}:{n}" for h, n in LAYOUTS[r.kind])
        args = ["-H", hosts, "--grace-seconds", str(GRACE), "-x", "CHAOS_TOKEN"]
        if r.kind != "local":
            args += ["--ssh-config", str(self.cluster.ssh_config)]
        if r.kind == "mpi":
            args += ["--mpi", "--network-interface", f"{self.cluster.subnet_prefix}.0/24",
                     "--mpi-args", f"--prtemca prte_remote_tmpdir_base {self.daemons}"]
        if r.condition in ("full-disk", "blocked-console"):
            args += ["-x", "CHAOS_CHATTY"]
        if r.condition == "full-disk":
            args += ["--output-dir", str(directory / "logs")]
        if r.condition == "crowded-rendezvous":
            args += ["-x", "CHAOS_INIT"]
        return gcurun_cmd(*args, sys.executable, RANK, str(directory))

    def environment(self, r: Round, token: str) -> dict[str, str]:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "CHAOS_TOKEN": token}
        if r.condition in ("full-disk", "blocked-console"):
            env["CHAOS_CHATTY"] = "1"
        if r.condition == "crowded-rendezvous":
            env["CHAOS_INIT"] = str(INIT_DELAY)
        return env

    def run(self, r: Round) -> Verdict:
        token = uuid.uuid4().hex
        directory = self.scratch / f"round-{r.index}"
        directory.mkdir()
        problems: list[str] = []
        with self._condition(r, directory) as cond:
            size = sum(n for _, n in LAYOUTS[r.kind])
            # A blocked console: gcurun's stdout is a pipe this side never reads.
            stdout = subprocess.PIPE if r.condition == "blocked-console" else \
                subprocess.DEVNULL
            proc = subprocess.Popen(
                self.command(r, directory), cwd=ROOT, text=True,
                env=self.environment(r, token), stdout=stdout, stderr=subprocess.PIPE)
            err: list[str] = []
            reader = threading.Thread(target=lambda: err.extend(proc.stderr or ()),
                                      daemon=True)
            reader.start()
            memory = PeakMemory(proc.pid)
            code: int | None = None
            try:
                try:
                    if r.condition == "crowded-rendezvous":
                        cond.crowd(proc)
                    self._wait_for_moment(r, directory, size, proc)
                except AssertionError as exc:   # the round never came to its strike
                    problems.append(str(exc))
                else:
                    self._strike(r, directory, proc, cond)
                try:
                    code = proc.wait(EXIT_DEADLINE)
                except subprocess.TimeoutExpired:
                    code = None
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                memory.stop()
                reader.join(10)
                if proc.stdout is not None:
                    proc.stdout.close()
            survivors = self._survivors(token, LIVENESS_DEADLINE if r.victim == "link"
                                        else SURVIVOR_DEADLINE)
            problems += cond.check("".join(err))
        expected_code, line = expectation(r)
        return Verdict(r, code, expected_code, line, "".join(err), survivors, memory.peak,
                       problems)

    def _condition(self, r: Round, directory: Path) -> Condition:
        if r.condition == "full-disk":
            return FullDisk(directory / "logs")
        if r.condition == "crowded-rendezvous":
            return Crowd()
        if r.condition == "cut-link":
            return CutLink(self.cluster)
        return Condition()

    def _wait_for_moment(self, r: Round, directory: Path, size: int,
                         proc: subprocess.Popen[str]) -> None:
        wanted = 1 if r.during_start else size
        deadline = time.monotonic() + 120
        while len(list(directory.glob("rank-*.json"))) < wanted:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{r.describe()}: the job ended or stalled before "
                                     f"{wanted} ranks were ready")
            time.sleep(0.02)
        if r.victim in ("rank", "bootstrap", "link"):
            # the victim itself must exist: its rank file (or its host's first rank's)
            rank = r.rank if r.victim == "rank" else first_rank_of(
                r.kind, "localhost" if r.kind == "local" else host_of(r.kind, r.rank))
            while not (directory / f"rank-{rank}.json").exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"{r.describe()}: rank {rank} never started")
                time.sleep(0.02)
        if not r.during_start:
            time.sleep(r.delay)

    def _strike(self, r: Round, directory: Path, proc: subprocess.Popen[str],
                cond: Condition) -> None:
        if r.victim == "link":
            cond.cut(host_of(r.kind, r.rank))
            return
        if r.victim == "launcher":
            os.kill(proc.pid, r.signum)
            return
        if r.victim == "rank":
            record = json.loads((directory / f"rank-{r.rank}.json").read_text())
            os.kill(record["pid"], r.signum)
            return
        os.kill(self._bootstrap(r, proc), r.signum)

    def _bootstrap(self, r: Round, proc: subprocess.Popen[str]) -> int:
        """The pid of the victim host's bootstrap: gcurun's own (the local one is a child
        of gcurun; remote ones run in their host's namespace), or mpirun's prted."""
        if r.kind == "local":
            for child in psutil.Process(proc.pid).children():
                if "gcurun.launch.remote.bootstrap" in " ".join(child.cmdline()) and \
                        child.name() != "gcurun-guard":
                    return child.pid
            raise AssertionError(f"{r.describe()}: gcurun runs no bootstrap")
        inode = self.cluster.host(host_of(r.kind, r.rank)).net_namespace_inode()
        pattern = "prted" if r.kind == "mpi" else "gcurun.launch.remote.bootstrap"
        for p in psutil.process_iter(["cmdline", "name"]):
            try:
                line = " ".join(p.info["cmdline"] or ())
                if pattern in line and p.info["name"] != "gcurun-guard" and \
                        not line.startswith("/usr/bin/ssh") and \
                        os.stat(f"/proc/{p.pid}/ns/net").st_ino == inode and \
                        (r.kind != "mpi" or runs_ranks(p)):
                    return p.pid
            except (OSError, psutil.Error):
                continue
        raise AssertionError(f"{r.describe()}: no bootstrap found on its host")

    def _survivors(self, token: str, within: float) -> list[str]:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            left = job_processes(token) + helpers_on(self.cluster)
            if not left:
                return []
            time.sleep(0.1)
        return describe_processes(job_processes(token) + helpers_on(self.cluster))


class PeakMemory:
    """Samples a process's resident memory in a thread until stopped; ``peak`` in bytes."""

    def __init__(self, pid: int, every: float = 0.05) -> None:
        self.peak = 0
        self._done = threading.Event()
        self._process = psutil.Process(pid)
        self._thread = threading.Thread(target=self._sample, args=(every,), daemon=True)
        self._thread.start()

    def _sample(self, every: float) -> None:
        while not self._done.is_set():
            try:
                self.peak = max(self.peak, self._process.memory_info().rss)
            except psutil.Error:
                return
            self._done.wait(every)

    def stop(self) -> None:
        self._done.set()
        self._thread.join(5)


class Condition:
    """No hostile condition: a context manager whose ``check`` finds nothing wrong."""

    def __enter__(self) -> Condition:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def crowd(self, proc: subprocess.Popen[str]) -> None:
        raise NotImplementedError

    def cut(self, host: str) -> None:
        raise NotImplementedError

    def check(self, stderr: str) -> list[str]:
        return []


class FullDisk(Condition):
    """``--output-dir`` on a tmpfs of FULL_DISK: the ranks' chatter fills it at once."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs

    def __enter__(self) -> FullDisk:
        self.logs.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={FULL_DISK}", "tmpfs",
                        str(self.logs)], check=True, capture_output=True, timeout=30)
        return self

    def __exit__(self, *exc: object) -> None:
        subprocess.run(["umount", "-l", str(self.logs)], capture_output=True, timeout=30)

    def check(self, stderr: str) -> list[str]:
        if "No space left on device" not in stderr:
            return ["the launcher never warned that a log ran out of space"]
        return []


class Crowd(Condition):
    """IDLE_CLIENTS connections to the launcher's rendezvous, opened as soon as it listens
    and held (saying nothing) until the round ends."""

    def __init__(self) -> None:
        self.sockets: list[socket.socket] = []
        self.refused = 0

    def crowd(self, proc: subprocess.Popen[str]) -> None:
        addresses = self._listening(proc)
        for index in range(IDLE_CLIENTS):
            host, port = addresses[index % len(addresses)]
            try:
                self.sockets.append(socket.create_connection((host, port), timeout=5))
            except OSError:
                self.refused += 1

    @staticmethod
    def _listening(proc: subprocess.Popen[str]) -> list[tuple[str, int]]:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise AssertionError("gcurun ended before its rendezvous listened")
            try:
                found = [(c.laddr.ip, c.laddr.port) for c in
                         psutil.Process(proc.pid).net_connections("inet")
                         if c.status == psutil.CONN_LISTEN]
            except psutil.Error:
                found = []
            if found:
                return [("127.0.0.1" if ip in ("0.0.0.0", "::") else ip, port)
                        for ip, port in found]
            time.sleep(0.01)
        raise AssertionError("gcurun's rendezvous never listened")

    def __exit__(self, *exc: object) -> None:
        for sock in self.sockets:
            sock.close()

    def check(self, stderr: str) -> list[str]:
        if not self.sockets:
            return [f"no idle connection could be opened ({self.refused} refused)"]
        return []


class CutLink(Condition):
    """Cuts a host's link at the strike; the link comes back when the round ends, after
    the survivors were counted (so fencing had to work with the link down)."""

    def __init__(self, cluster) -> None:
        self.cluster = cluster
        self.host: str | None = None

    def cut(self, host: str) -> None:
        self.host = host
        link_down(self.cluster, host)

    def __exit__(self, *exc: object) -> None:
        if self.host is not None:
            link_up(self.cluster, self.host)


def run_rounds(cluster, scratch: Path, rounds: list[Round]) -> list[Verdict]:
    runner = Runner(cluster, scratch)
    verdicts = []
    try:
        for r in rounds:
            verdict = runner.run(r)
            print(f"{r.describe()}: exit {verdict.exit_code} (expected "
                  f"{verdict.expected_code}), {len(verdict.survivors)} survivors, launcher "
                  f"peak {verdict.peak_rss / 2**20:.0f} MB"
                  + ("" if verdict.right_cause else ", root cause line missing")
                  + "".join(f", {p}" for p in verdict.problems), flush=True)
            verdicts.append(verdict)
    finally:
        shutil.rmtree(runner.daemons, ignore_errors=True)
    return verdicts


def tally(verdicts: list[Verdict]) -> str:
    survivors = sum(1 for v in verdicts if v.survivors)
    wrong = sum(1 for v in verdicts if not v.right_code or not v.right_cause)
    problems = sum(1 for v in verdicts if v.problems)
    hostile = [v for v in verdicts if v.round.condition]
    peak = max((v.peak_rss for v in verdicts), default=0) / 2**20
    blocked = max((v.peak_rss for v in verdicts if v.round.condition == "blocked-console"),
                  default=None)
    return (f"{len(verdicts)} rounds ({len(hostile)} hostile), {survivors} survivors, "
            f"{wrong} wrong codes, {problems} failed condition checks, launcher peak "
            f"memory {peak:.0f} MB"
            + (f" ({blocked / 2**20:.0f} MB with a blocked console)" if blocked else ""))
