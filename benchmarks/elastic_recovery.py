"""How long an elastic job takes to resume training after one of its hosts dies.

    python benchmarks/elastic_recovery.py [--cases killed,cut] [--rounds 3]
        [--state-mb 16] [--liveness 3] [--steps 80] [--at-step 20]
        [--step-seconds 0.05] [--commit-every 1] [--json FILE]

Needs root, ip, unshare and sshd: it builds three namespace hosts with
tests/cluster/netns-cluster.sh (torn down at the end) and, per round, runs
benchmarks/elastic_recovery_rank.py on them, one worker each (``gcurun --min-np 2
-H h1:1,h2:1,h3:1 --liveness-timeout LIVENESS``). At step ``--at-step`` host h3 dies:

    killed   every process of the job on h3 gets SIGKILL (the host's kernel still
             answers: the others see the connections close)
    cut      h3's link is set down (ip link set ... down): nothing more passes and
             nothing says so; the kernel's liveness settings notice after about
             LIVENESS seconds, and h3's bootstrap fences itself

The clock starts at the death (the hosts share this machine's clock) and reads:

    detect     the launcher's driver records the failure (its event log)
    formed     generation 2 formed: rank 0's reset callback ran
    broadcast  rank 0's state broadcast (``state.sync()``, STATE_MB of numpy)
    resumed    rank 0 finished its first step of generation 2
    redone     steps done again: those after the last commit before the death

Each case runs ``--rounds`` times; the table shows the median and the range of each.
The job must finish on 2 hosts with no process left on h3, or the round fails the run.
Progress goes to stderr.
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
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RANK = ROOT / "benchmarks" / "elastic_recovery_rank.py"
CASES = ("killed", "cut")
JOB_SECONDS = 300.0
FENCE_SLACK = 5.0        # the bootstrap fences itself this long after the liveness timeout
COLUMNS = ("detect", "formed", "broadcast", "resumed", "redone")


class BenchmarkError(Exception):
    pass


@dataclass(frozen=True)
class Recovery:
    """One host's death, in seconds from it (``redone`` in steps)."""

    case: str
    detect: float
    formed: float
    broadcast: float
    resumed: float
    redone: int


def progress(message: str) -> None:
    print(f"elastic_recovery: {message}", file=sys.stderr, flush=True)


def parse_cases(text: str) -> list[str]:
    cases = [c.strip() for c in text.split(",") if c.strip()]
    bad = [c for c in cases if c not in CASES]
    if bad or not cases:
        raise argparse.ArgumentTypeError(
            f"'{text}': cases are {' and '.join(CASES)}, comma-separated (killed,cut)")
    return cases


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", type=parse_cases, default=list(CASES))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--state-mb", type=float, default=16.0,
                        help="size of the state rank 0 broadcasts after a reset")
    parser.add_argument("--liveness", type=float, default=3.0,
                        help="--liveness-timeout of the job, in seconds")
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--at-step", type=int, default=20, help="h3 dies after this step")
    parser.add_argument("--step-seconds", type=float, default=0.05)
    parser.add_argument("--commit-every", type=int, default=1)
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    args = parser.parse_args(argv)
    if args.rounds < 1 or not 0 < args.at_step < args.steps or args.commit_every < 1:
        parser.error(f"--rounds {args.rounds} --at-step {args.at_step} --steps "
                     f"{args.steps} --commit-every {args.commit_every}: give at least one "
                     "round, a step before the last, and a commit every N >= 1 steps")
    return args


# -- reading a round ----------------------------------------------------------------

def analyse(case: str, records: Sequence[dict[str, Any]], events: Sequence[dict[str, Any]],
            death: float) -> Recovery:
    """The recovery after ``death`` (a ``time.time()``) from rank 0's records and the
    driver's event log. Raises BenchmarkError when the job did not resume."""
    detected = [e["wall"] for e in events if e["wall"] >= death and e["event"] in (
        "worker_exited", "blacklist", "reforming", "late_failure")]
    reset = next((r for r in records if r["ev"] == "reset" and r["t"] >= death), None)
    if not detected or reset is None:
        raise BenchmarkError(f"{case}: the job never re-formed after the death "
                             f"(driver events after it: {len(detected)})")
    sync = next((r for r in records if r["ev"] == "sync" and r["t0"] >= reset["t"]), None)
    after = [r for r in records if r["ev"] == "step" and r["t"] >= reset["t"]]
    if sync is None or not after:
        raise BenchmarkError(f"{case}: the job re-formed but never stepped again")
    before = [r["step"] for r in records if r["ev"] == "step" and r["t"] < reset["t"]]
    return Recovery(case, detect=min(detected) - death, formed=reset["t"] - death,
                    broadcast=sync["t1"] - sync["t0"], resumed=after[0]["t"] - death,
                    redone=max(0, max(before, default=0) - (after[0]["step"] - 1)))


def summarize(results: Sequence[Recovery]) -> dict[str, dict[str, tuple[float, float, float]]]:
    """Per case and column: (median, min, max)."""
    table: dict[str, dict[str, tuple[float, float, float]]] = {}
    for case in dict.fromkeys(r.case for r in results):
        rows = [r for r in results if r.case == case]
        table[case] = {c: (statistics.median(float(getattr(r, c)) for r in rows),
                           min(float(getattr(r, c)) for r in rows),
                           max(float(getattr(r, c)) for r in rows)) for c in COLUMNS}
    return table


def format_table(results: Sequence[Recovery], args: argparse.Namespace) -> str:
    lines = [f"elastic recovery: 3 namespace hosts, one worker each, h3 dies at step "
             f"{args.at_step}; state {args.state_mb:g} MB, --liveness-timeout "
             f"{args.liveness:g}, commit every {args.commit_every} step(s); "
             f"{len(results)} rounds; median (min-max)",
             "",
             "| case | detect (s) | formed (s) | broadcast (s) | resumed (s) | steps redone |",
             "| --- | --- | --- | --- | --- | --- |"]
    for case, cols in summarize(results).items():
        cells = []
        for c in COLUMNS:
            med, low, high = cols[c]
            cells.append(f"{med:.0f} ({low:.0f}-{high:.0f})" if c == "redone"
                         else f"{med:.2f} ({low:.2f}-{high:.2f})")
        lines.append(f"| {case} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# -- running a round ----------------------------------------------------------------

class Job:
    """One gcurun run; rank 0's JSON lines collected as they come."""

    def __init__(self, cluster: Any, args: argparse.Namespace, out_dir: Path) -> None:
        self.out_dir = out_dir
        self.records: list[dict[str, Any]] = []
        self.step = threading.Event()
        self.at_step = args.at_step
        cmd = [sys.executable, "-m", "gcurun", "--min-np", "2", "-H", "h1:1,h2:1,h3:1",
               "--ssh-config", str(cluster.ssh_config), "--liveness-timeout",
               f"{args.liveness:g}", "--output-dir", str(out_dir), sys.executable,
               str(RANK), str(args.steps), f"{args.state_mb:g}", f"{args.step_seconds:g}",
               str(args.commit_every)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, cwd=ROOT,
                                     env={**os.environ, "PYTHONPATH": str(ROOT)})
        self.stderr = ""
        self._readers = [threading.Thread(target=self._read, daemon=True),
                         threading.Thread(target=self._read_stderr, daemon=True)]
        for reader in self._readers:
            reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            _, _, body = line.partition("] ")
            if body.startswith("{"):
                record = json.loads(body)
                self.records.append(record)
                if record["ev"] == "step" and record["step"] >= self.at_step:
                    self.step.set()

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        self.stderr = self.proc.stderr.read()

    def finish(self) -> int:
        try:
            code = self.proc.wait(JOB_SECONDS)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(30)
            raise BenchmarkError(f"the job ran past {JOB_SECONDS:g} s") from None
        for reader in self._readers:
            reader.join(30)
        return code

    def events(self) -> list[dict[str, Any]]:
        text = (self.out_dir / "latest" / "elastic-events.jsonl").read_text()
        return [json.loads(line) for line in text.splitlines()]


def strike(cluster: Any, case: str) -> float:
    """Kill h3 as ``case`` says; the moment, as time.time()."""
    from tests.cluster.netns import link_down, processes_in

    if case == "cut":
        death = time.time()
        link_down(cluster, "h3")
        return death
    victims = processes_in(cluster.host("h3"), str(RANK), "gcurun.launch.remote.bootstrap")
    if not victims:
        raise BenchmarkError("killed: no process of the job found on h3")
    death = time.time()
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return death


def wait_h3_clear(cluster: Any, seconds: float) -> None:
    from tests.cluster.netns import processes_in

    deadline = time.monotonic() + seconds
    while processes_in(cluster.host("h3"), str(RANK), "gcurun.launch.remote.bootstrap"):
        if time.monotonic() > deadline:
            raise BenchmarkError(f"processes of the job left on h3 after {seconds:g} s")
        time.sleep(0.2)


def run_round(cluster: Any, args: argparse.Namespace, case: str, logs: Path) -> Recovery:
    from tests.cluster.netns import link_up

    job = Job(cluster, args, logs)
    cut = False
    try:
        if not job.step.wait(JOB_SECONDS):
            raise BenchmarkError(f"the job never reached step {args.at_step}: {job.stderr}")
        death = strike(cluster, case)
        cut = case == "cut"
        code = job.finish()
        if code != 0:
            raise BenchmarkError(f"{case}: the job failed ({code}): {job.stderr[-2000:]}")
        done = [r for r in job.records if r["ev"] == "done"]
        if not done or done[-1]["size"] != 2 or done[-1]["step"] != args.steps:
            raise BenchmarkError(f"{case}: the job did not finish on 2 hosts: {done}")
        wait_h3_clear(cluster, args.liveness + FENCE_SLACK + 30)
        return analyse(case, job.records, job.events(), death)
    finally:
        if cut:
            link_up(cluster, "h3")
        if job.proc.poll() is None:
            job.proc.kill()
            job.proc.wait(30)


def run(args: argparse.Namespace) -> list[Recovery]:
    from tests.cluster.netns import (
        reap_stale_clusters,
        start_cluster,
        stop_cluster,
        unavailable_reason,
    )

    reason = unavailable_reason()
    if reason:
        raise BenchmarkError(f"cannot build namespace hosts: {reason}")
    reap_stale_clusters()
    progress("building 3 namespace hosts")
    cluster = start_cluster(3, setenv={"PYTHONPATH": str(ROOT)})
    results = []
    try:
        with tempfile.TemporaryDirectory(prefix="elastic-recovery-") as tmp:
            for n in range(args.rounds):
                for case in args.cases:
                    logs = Path(tmp) / f"{case}-{n}"
                    result = run_round(cluster, args, case, logs)
                    progress(f"round {n + 1}/{args.rounds}, {case}: resumed after "
                             f"{result.resumed:.2f} s (detect {result.detect:.2f}, formed "
                             f"{result.formed:.2f}, broadcast {result.broadcast:.3f}, "
                             f"{result.redone} steps redone)")
                    results.append(result)
    finally:
        stop_cluster(cluster.name)
    return results


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    try:
        results = run(args)
    except BenchmarkError as exc:
        print(f"elastic_recovery: error: {exc}", file=sys.stderr)
        return 1
    print(format_table(results, args))
    if args.json is not None:
        args.json.write_text(json.dumps({"args": {k: v for k, v in vars(args).items()
                                                  if k != "json"},
                                         "results": [asdict(r) for r in results]},
                                        indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
