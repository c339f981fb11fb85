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
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import psutil

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


@dataclass(frozen=True)
class Round:
    index: int
    kind: str
    victim: str
    signum: int
    rank: int            # the victim rank, or a rank of the victim host
    during_start: bool   # strike while the ranks start, not after all are ready
    delay: float

    def describe(self) -> str:
        when = "while the ranks start" if self.during_start else f"{self.delay:.2f} s after " \
            "all were ready"
        who = {"rank": f"rank {self.rank}", "launcher": "gcurun",
               "bootstrap": f"the bootstrap of rank {self.rank}'s host"}[self.victim]
        return (f"round {self.index}: {self.kind} job, {signal.Signals(self.signum).name} "
                f"to {who} {when}")


def plan_round(rng: random.Random, index: int) -> Round:
    kind = rng.choice(KINDS)
    size = sum(n for _, n in LAYOUTS[kind])
    return Round(index, kind, rng.choice(VICTIMS), rng.choice(SIGNALS),
                 rng.randrange(size), rng.random() < 0.25, round(rng.uniform(0, 1.5), 2))


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

    @property
    def right_code(self) -> bool:
        return self.exit_code == self.expected_code

    @property
    def right_cause(self) -> bool:
        return self.expected_line is None or self.expected_line in self.stderr

    @property
    def ok(self) -> bool:
        return self.right_code and self.right_cause and not self.survivors


def expectation(r: Round) -> tuple[int, str | None]:
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
    """Runs rounds against one namespace cluster, in a scratch directory."""

    def __init__(self, cluster, scratch: Path) -> None:
        self.cluster = cluster
        self.scratch = scratch

    def command(self, r: Round, directory: Path) -> list[str]:
        hosts = ",".join(f"{h}:{n}" for h, n in LAYOUTS[r.kind])
        args = ["-H", hosts, "--grace-seconds", str(GRACE), "-x", "CHAOS_TOKEN"]
        if r.kind != "local":
            args += ["--ssh-config", str(self.cluster.ssh_config)]
        if r.kind == "mpi":
            args += ["--mpi", "--network-interface", f"{self.cluster.subnet_prefix}.0/24"]
        return gcurun_cmd(*args, sys.executable, RANK, str(directory))

    def run(self, r: Round) -> Verdict:
        token = uuid.uuid4().hex
        directory = self.scratch / f"round-{r.index}"
        directory.mkdir()
        size = sum(n for _, n in LAYOUTS[r.kind])
        proc = subprocess.Popen(
            self.command(r, directory), cwd=ROOT, text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT), "CHAOS_TOKEN": token},
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        err: list[str] = []
        reader = threading.Thread(target=lambda: err.extend(proc.stderr or ()), daemon=True)
        reader.start()
        code: int | None = None
        try:
            self._wait_for_moment(r, directory, size, proc)
            self._strike(r, directory, proc)
            try:
                code = proc.wait(EXIT_DEADLINE)
            except subprocess.TimeoutExpired:
                code = None
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            reader.join(10)
        survivors = self._survivors(token)
        expected_code, line = expectation(r)
        return Verdict(r, code, expected_code, line, "".join(err), survivors)

    def _wait_for_moment(self, r: Round, directory: Path, size: int,
                         proc: subprocess.Popen[str]) -> None:
        wanted = 1 if r.during_start else size
        deadline = time.monotonic() + 120
        while len(list(directory.glob("rank-*.json"))) < wanted:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{r.describe()}: the job ended or stalled before "
                                     f"{wanted} ranks were ready")
            time.sleep(0.02)
        if r.victim == "rank" or r.victim == "bootstrap":
            # the victim itself must exist: its rank file (or its host's first rank's)
            rank = r.rank if r.victim == "rank" else first_rank_of(
                r.kind, "localhost" if r.kind == "local" else host_of(r.kind, r.rank))
            while not (directory / f"rank-{rank}.json").exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"{r.describe()}: rank {rank} never started")
                time.sleep(0.02)
        if not r.during_start:
            time.sleep(r.delay)

    def _strike(self, r: Round, directory: Path, proc: subprocess.Popen[str]) -> None:
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

    def _survivors(self, token: str) -> list[str]:
        deadline = time.monotonic() + SURVIVOR_DEADLINE
        while time.monotonic() < deadline:
            left = job_processes(token) + helpers_on(self.cluster)
            if not left:
                return []
            time.sleep(0.1)
        return describe_processes(job_processes(token) + helpers_on(self.cluster))


def run_rounds(cluster, scratch: Path, seed: int, count: int) -> list[Verdict]:
    rng = random.Random(seed)
    runner = Runner(cluster, scratch)
    verdicts = []
    for index in range(count):
        r = plan_round(rng, index)
        verdict = runner.run(r)
        print(f"{r.describe()}: exit {verdict.exit_code} (expected {verdict.expected_code}), "
              f"{len(verdict.survivors)} survivors"
              + ("" if verdict.right_cause else ", root cause line missing"), flush=True)
        verdicts.append(verdict)
    return verdicts


def tally(verdicts: list[Verdict]) -> str:
    survivors = sum(1 for v in verdicts if v.survivors)
    wrong = sum(1 for v in verdicts if not v.right_code or not v.right_cause)
    return f"{len(verdicts)} rounds, {survivors} survivors, {wrong} wrong codes"
