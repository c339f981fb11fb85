"""``benchmarks/engine.py --hosts``: ResNet-50's gradients through the engine across
namespace hosts on shaped links, fused beside one buffer and beside one call each.

For each host count (``--hosts 2,4``), ``--repeat`` times, one job of ``--per-host``
ranks per host runs engine.py's rounds (every variant in turn, as on one host); rank 0
writes its times to a file this driver reads. Each run gets a line (medians over its
rounds); then the runs' medians and their spread. Needs root, ip, tc, unshare and sshd.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ENGINE = Path(__file__).resolve().with_name("engine.py")
VARIANTS = ("fused", "single", "unfused", "views")
FUSED_GOAL = 1.15        # fused <= 1.15 x single, in every run
JOB_SECONDS = 900        # one job's deadline


class HostsError(Exception):
    """The run cannot go on: a job failed or a deadline passed."""


def parse_hosts(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        counts = []
    if not counts or any(n < 2 for n in counts):
        raise argparse.ArgumentTypeError(f"--hosts {text!r}: write host counts of at least "
                                         "2, separated by commas: 2,4")
    return counts


def add_options(parser: argparse.ArgumentParser) -> None:
    """engine.py's options for runs across hosts."""
    parser.add_argument("--hosts", type=parse_hosts, default=None,
                        help="run across namespace hosts: host counts, e.g. 2,4")
    parser.add_argument("--per-host", type=int, default=1, help="ranks per host (default 1)")
    parser.add_argument("--rate", default=None,
                        help="tc rate of every host's link (default 2gbit; with --cluster, "
                             "the cluster's own)")
    parser.add_argument("--cluster", type=Path, default=None,
                        help="state directory of namespace hosts built already")
    parser.add_argument("--repeat", type=int, default=3, help="runs per host count")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    parser.add_argument("--json-out", type=Path, default=None, help=argparse.SUPPRESS)


def job_argv(cluster: Any, hosts: int, per_host: int, rounds: int, steps: int,
             out: Path) -> list[str]:
    spec = ",".join(f"h{i + 1}:{per_host}" for i in range(hosts))
    return [sys.executable, "-m", "gcurun", "-np", str(hosts * per_host), "-H", spec,
            "--ssh-config", str(cluster.ssh_config), "-x", f"PYTHONPATH={ROOT}",
            sys.executable, str(ENGINE), "--rounds", str(rounds), "--steps", str(steps),
            "--json-out", str(out)]


def run_job(argv: list[str]) -> dict[str, Any]:
    """One job; rank 0's results. Raises HostsError with the job's output's tail."""
    out = Path(argv[-1])
    try:
        done = subprocess.run(argv, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                              capture_output=True, text=True, timeout=JOB_SECONDS,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise HostsError(f"the job did not end within {JOB_SECONDS} s: "
                         f"{' '.join(argv)}") from None
    if done.returncode != 0 or not out.is_file():
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
        raise HostsError(f"the job ended with code {done.returncode}:\n{tail}")
    return json.loads(out.read_text())


def run_line(hosts: int, ranks: int, result: dict[str, Any]) -> str:
    median = {v: statistics.median(result["times"][v]) for v in VARIANTS}
    ratio = median["fused"] / median["single"]
    return (f"  {hosts:>5} {ranks:>5}" + "".join(f"{median[v] * 1e3:>10.1f}" for v in VARIANTS)
            + f"{ratio:>9.3f}{median['unfused'] / median['fused']:>9.2f}"
            + f"   {'met' if ratio <= FUSED_GOAL else 'NOT met'}"
            + f"{result['load'][0]:>7.2f}-{result['load'][1]:.2f}"
            + "".join(f" {result['batches_per_step'][v]:>4.1f}" for v in VARIANTS))


def header(rate_bits: int, per_host: int, rounds: int, steps: int) -> list[str]:
    return [
        f"# ResNet-50's 161 gradients (25,557,032 float32) averaged across hosts, links "
        f"shaped to {rate_bits / 1e9:g} Gbit/s, {per_host} rank(s) per host, tcp backend",
        f"# each run: {rounds} rounds of {steps} steps per variant, taking turns; ms per "
        "step, the median round (the slowest rank's mean per step)",
        f"# goal: fused <= {FUSED_GOAL} x single in every run; load: this machine's 1-minute "
        "load average when the run began-ended; batches: the engine's batches per step "
        "(ring passes), not counting synchronous calls on its quick path",
        f"# {'hosts':>5} {'ranks':>5}" + "".join(f"{v:>10}" for v in VARIANTS)
        + f"{'f/single':>9}{'unf/f':>9}   goal   load        batches: "
        + " ".join(v[0] for v in VARIANTS),
    ]


def summary(runs: dict[int, list[dict[str, Any]]], per_host: int) -> list[str]:
    lines = ["# over the runs: median (lowest-highest) of each run's median"]
    for hosts, results in runs.items():
        per_variant = {v: [statistics.median(r["times"][v]) for r in results]
                       for v in VARIANTS}
        ratios = [statistics.median(r["times"]["fused"]) /
                  statistics.median(r["times"]["single"]) for r in results]
        parts = [f"{v} {statistics.median(t) * 1e3:.1f} ({min(t) * 1e3:.1f}-"
                 f"{max(t) * 1e3:.1f})" for v, t in per_variant.items()]
        met = sum(ratio <= FUSED_GOAL for ratio in ratios)
        lines.append(f"#   {hosts} hosts x {per_host}: " + ", ".join(parts)
                     + f"; fused/single {statistics.median(ratios):.3f} "
                     f"({min(ratios):.3f}-{max(ratios):.3f}), goal met in {met} of "
                     f"{len(ratios)} runs")
    return lines


def main(args: argparse.Namespace) -> int:
    from benchmarks.cluster_allreduce import BenchmarkError, prepare_cluster
    from tests.cluster.netns import stop_cluster

    def terminated(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)     # (the hosts are taken down on the way out)

    signal.signal(signal.SIGTERM, terminated)
    if args.repeat < 1 or args.per_host < 1:
        raise SystemExit(f"--repeat {args.repeat} and --per-host {args.per_host} must be "
                         "at least 1")
    try:
        cluster, built = prepare_cluster(args, max(args.hosts))
    except BenchmarkError as exc:
        print(f"engine --hosts: error: {exc}", file=sys.stderr)
        return 1
    runs: dict[int, list[dict[str, Any]]] = {n: [] for n in args.hosts}
    try:
        print("\n".join(header(cluster.link_rate_bits, args.per_host, args.rounds,
                               args.steps)), flush=True)
        with tempfile.TemporaryDirectory(prefix="engine-hosts-") as tmp:
            for attempt in range(args.repeat):
                for hosts in args.hosts:
                    out = Path(tmp) / f"{hosts}-{attempt}.json"
                    print(f"engine --hosts: {hosts} hosts, run {attempt + 1} of "
                          f"{args.repeat}", file=sys.stderr, flush=True)
                    load = os.getloadavg()[0]
                    result = run_job(job_argv(cluster, hosts, args.per_host, args.rounds,
                                              args.steps, out))
                    result["load"] = [load, os.getloadavg()[0]]
                    runs[hosts].append(result)
                    print(run_line(hosts, hosts * args.per_host, result), flush=True)
        print("\n".join(summary(runs, args.per_host)))
    except HostsError as exc:
        print(f"engine --hosts: error: {exc}", file=sys.stderr)
        return 1
    finally:
        if built:
            stop_cluster(cluster.name)
    if args.json is not None:
        args.json.write_text(json.dumps({
            "link_rate_bits": cluster.link_rate_bits, "per_host": args.per_host,
            "rounds": args.rounds, "steps": args.steps,
            "runs": [{"hosts": hosts, **result} for hosts, results in runs.items()
                     for result in results]}, indent=1) + "\n")
    return 0


def write_results(path: Path, times: dict[str, list[float]], size: int,
                  backend: str, batches: dict[str, float]) -> None:
    """Rank 0's side: the rounds' times of a job and the batches the engine ran per step
    of each variant, for the driver."""
    path.write_text(json.dumps({"size": size, "backend": backend, "times": times,
                                "batches_per_step": batches, "written": time.time()})
                    + "\n")
