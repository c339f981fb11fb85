"""A rank of a gcurun job for the Slurm tests: joins the job with gcurun's runtime, adds
rank+1 over all ranks, and prints one JSON line of what it sees. Then, with GO_FILE set,
it waits (at most 60 s) for that file; the rank whose GCURUN_RANK is EXIT_RANK exits
with EXIT_CODE instead. SIGTERM makes it say so and exit 143."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time

import numpy as np

import gcurun.runtime as hvd


def on_term(signum: int, _frame: object) -> None:
    print(f"rank {os.environ.get('GCURUN_RANK')} got SIGTERM", flush=True)
    sys.exit(128 + signum)


signal.signal(signal.SIGTERM, on_term)
hvd.init()
total = hvd.allreduce(np.array([hvd.rank() + 1.0]), op=hvd.Sum, name="sum")
names = ("TOPS_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "SLURM_PROCID", "SLURM_JOB_NAME",
         "PADDLE_CURRENT_ENDPOINT", "OMP_NUM_THREADS", "GCURUN_HOSTNAME", "GCURUN_DEVICE")
print(json.dumps({
    "rank": hvd.rank(), "size": hvd.size(), "local_rank": hvd.local_rank(),
    "local_size": hvd.local_size(), "backend": hvd.backend(), "sum": float(total[0]),
    "hostname": socket.gethostname(), "pid": os.getpid(),
    "cpus": sorted(os.sched_getaffinity(0)),
    "env": {name: os.environ.get(name) for name in names},
}), flush=True)
if os.environ.get("EXIT_RANK") == str(hvd.rank()):
    print(f"rank {hvd.rank()} fails on purpose", file=sys.stderr, flush=True)
    sys.exit(int(os.environ.get("EXIT_CODE", "1")))
go = os.environ.get("GO_FILE")
if go:
    deadline = time.monotonic() + 60
    while not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.05)
hvd.shutdown()
