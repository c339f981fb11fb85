"""The launcher at scale: how long ``--dry-run`` takes for thousands of ranks, and how
soon a signal stops a start of thousands of local ranks.

    python benchmarks/launch_scale.py [--repeat 3] [--hosts 1000] [--slots 8]
                                      [--big 100000] [--start 20000]

Dry runs: a plan of HOSTS x SLOTS ranks on as many hosts (``-H node[0001-HOSTS]:SLOTS``)
and one of BIG ranks on this host, each as the table and as JSON (written to /dev/null),
wall time of a whole ``gcurun --dry-run`` from a cold process. Interrupt: ``gcurun -np
START --oversubscribe`` of ranks that note they began, SIGINT as soon as the first ten
have, then the time from the signal to gcurun's exit and how many ranks had begun.
Medians of REPEAT runs.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GCURUN = [sys.executable, "-m", "gcurun"]


def environment() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def dry_run_seconds(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([*GCURUN, "--dry-run", *args, "true"], check=True, cwd=ROOT,
                   env=environment(), stdout=subprocess.DEVNULL, timeout=600)
    return time.perf_counter() - start


def interrupt_start(ranks: int, first: int = 10) -> tuple[float, int, int]:
    """(seconds from SIGINT to exit, ranks that had begun, gcurun's exit code)."""
    with tempfile.TemporaryDirectory() as tmp:
        began = Path(tmp) / "began"
        proc = subprocess.Popen(
            [*GCURUN, "-np", str(ranks), "--oversubscribe", "sh", "-c",
             f"echo $GCURUN_RANK >> {began}"], cwd=ROOT, env=environment(),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 300
            while not (began.exists() and len(began.read_bytes().split()) >= first):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the job ended or stalled before its ranks began")
                time.sleep(0.01)
            sent = time.perf_counter()
            proc.send_signal(signal.SIGINT)
            code = proc.wait(600)
            took = time.perf_counter() - sent
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        return took, len(began.read_bytes().split()), code


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--big", type=int, default=100000)
    parser.add_argument("--start", type=int, default=20000)
    args = parser.parse_args()
    spread = ["-H", f"node[{1:0{len(str(args.hosts))}d}-{args.hosts}]:{args.slots}"]
    one = ["-np", str(args.big), "--oversubscribe"]
    print("| dry run | ranks | median s | best s |")
    print("| --- | --- | --- | --- |")
    for name, plan, size in ((f"{args.hosts} hosts x {args.slots}", spread,
                              args.hosts * args.slots), ("one host", one, args.big)):
        for form, extra in (("table", []), ("JSON", ["--json"])):
            times = [dry_run_seconds([*extra, *plan]) for _ in range(args.repeat)]
            print(f"| {name}, {form} | {size} | {statistics.median(times):.2f} | "
                  f"{min(times):.2f} |", flush=True)
    print()
    print("| SIGINT during a start of | median s to exit | worst s | ranks begun (median) "
          "| exit code |")
    print("| --- | --- | --- | --- | --- |")
    runs = [interrupt_start(args.start) for _ in range(args.repeat)]
    print(f"| {args.start} local ranks | {statistics.median(r[0] for r in runs):.2f} | "
          f"{max(r[0] for r in runs):.2f} | {int(statistics.median(r[1] for r in runs))} | "
          f"{','.join(sorted({str(r[2]) for r in runs}))} |")


if __name__ == "__main__":
    main()
