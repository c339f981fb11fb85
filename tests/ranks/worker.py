"""A rank for launcher tests: records who it is, then behaves as told.

    worker.py DIR [--fail-rank R --code C | --signal-rank R --signal N] [--grandchild]
               [--linger SECONDS]

Each rank writes DIR/rank-<N>.json (its pid, environment, grandchild pid, CPU affinity).
The failing rank waits until every rank has written its file, then exits or kills itself;
the others linger (default 60 s) so the launcher has to stop them.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("--fail-rank", type=int)
    p.add_argument("--code", type=int, default=1)
    p.add_argument("--signal-rank", type=int)
    p.add_argument("--signal", type=int, default=signal.SIGKILL)
    p.add_argument("--grandchild", action="store_true")
    p.add_argument("--linger", type=float, default=60.0)
    args = p.parse_args()
    rank, size = int(os.environ["GCURUN_RANK"]), int(os.environ["GCURUN_SIZE"])
    child = None
    if args.grandchild:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    record = {
        "pid": os.getpid(),
        "grandchild": child.pid if child else None,
        "env": dict(os.environ),
        "affinity": sorted(os.sched_getaffinity(0)),
        "cwd": os.getcwd(),
    }
    tmp = os.path.join(args.dir, f".rank-{rank}.tmp")
    with open(tmp, "w") as f:
        json.dump(record, f)
    os.rename(tmp, os.path.join(args.dir, f"rank-{rank}.json"))
    print(f"rank {rank} of {size} ready", flush=True)
    if rank in (args.fail_rank, args.signal_rank):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if all(os.path.exists(os.path.join(args.dir, f"rank-{r}.json"))
                   for r in range(size)):
                break
            time.sleep(0.02)
        print(f"rank {rank} failing on purpose", file=sys.stderr, flush=True)
        if rank == args.signal_rank:
            os.kill(os.getpid(), args.signal)
        return args.code
    if args.fail_rank is not None or args.signal_rank is not None or args.linger:
        time.sleep(args.linger)
    return 0


if __name__ == "__main__":
    sys.exit(main())
