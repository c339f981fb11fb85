"""The launcher's memory and its answer to SIGTERM while its console does not keep up.

    python benchmarks/blocked_console.py [--ranks 2] [--mb 200] [--seconds 40]
        [--patience 60] [--cases blocked,slow] [--code DIR] [--json FILE]

Runs ``gcurun -np RANKS python tests/ranks/chatty.py`` (each rank writes MB megabytes of
1 KiB lines as fast as it can, then waits) with gcurun's stdout a pipe that is

    blocked  never read (a stopped pager, a full pipe)
    slow     read 64 KiB every 0.1 s (about 640 KB/s)

For ``--seconds`` (or until every rank has written everything, whichever comes first) it
samples gcurun's resident memory, then sends gcurun SIGTERM and times how long gcurun
takes to exit (SIGKILL after ``--patience`` seconds), and counts the ranks left alive a
moment later. ``--code DIR`` runs the gcurun of another checkout (its PYTHONPATH), for a
before-and-after table. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
CHATTY = REPO / "tests" / "ranks" / "chatty.py"


def status_kb(pid: int, field: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def slow_reader(stream: Any, stop: threading.Event) -> None:
    while not stop.is_set():
        if not stream.read1(65536):
            return
        stop.wait(0.1)


def run_case(case: str, args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="gcurun-console-"))
    env = {**os.environ, "PYTHONPATH": str(args.code)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gcurun", "-np", str(args.ranks), "--grace-seconds", "3",
         sys.executable, str(CHATTY), str(work), "--bytes", str(args.mb * 1024 * 1024),
         "--linger", "3600"],
        cwd=str(args.code), env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    stop = threading.Event()
    if case == "slow":
        threading.Thread(target=slow_reader, args=(proc.stdout, stop), daemon=True).start()
    start = time.monotonic()
    peak = 0
    written = False
    while time.monotonic() - start < args.seconds and proc.poll() is None:
        peak = max(peak, status_kb(proc.pid, "VmRSS"))
        if all((work / f"rank-{r}.done").exists() for r in range(args.ranks)):
            written = True
            break
        time.sleep(0.1)
    peak = max(peak, status_kb(proc.pid, "VmHWM"))
    ranks = [int(p.read_text()) for p in work.glob("rank-*.pid")]
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        code: int | None = proc.wait(args.patience)
        took: float | None = time.monotonic() - sent
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        code, took = None, None
    stop.set()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(alive(p) for p in ranks):
        time.sleep(0.1)
    return {"case": case, "ranks": args.ranks, "mb": args.mb, "written": written,
            "seconds": round(time.monotonic() - start, 1), "peak_mb": round(peak / 1024),
            "sigterm_exit_s": None if took is None else round(took, 2), "exit_code": code,
            "ranks_left": sum(alive(p) for p in ranks)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--mb", type=int, default=200)
    p.add_argument("--seconds", type=float, default=40.0)
    p.add_argument("--patience", type=float, default=60.0)
    p.add_argument("--cases", default="blocked,slow")
    p.add_argument("--code", type=Path, default=REPO)
    p.add_argument("--json")
    args = p.parse_args()
    rows = []
    for case in args.cases.split(","):
        print(f"{case}: running", file=sys.stderr, flush=True)
        rows.append(run_case(case, args))
    print(f"{'console':<8} {'ranks x MB':>10} {'all written':>11} {'peak RSS MB':>11} "
          f"{'SIGTERM -> exit':>15} {'exit':>5} {'ranks left':>10}")
    for r in rows:
        took = f"{r['sigterm_exit_s']:.2f} s" if r["sigterm_exit_s"] is not None else \
            f"> {args.patience:g} s"
        print(f"{r['case']:<8} {r['ranks']:>4} x {r['mb']:<3}  "
              f"{'yes' if r['written'] else 'no':>11} {r['peak_mb']:>11} {took:>15} "
              f"{'-' if r['exit_code'] is None else r['exit_code']:>5} {r['ranks_left']:>10}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
