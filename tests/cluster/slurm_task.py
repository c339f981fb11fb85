"""A task of a Slurm job that reports what it sees as one JSON line: where it runs, Slurm's
variables, gcurun's reading of them (gcurun.hosts.slurm) and, with REPORT_MPI set, its
MPI world.

With GO_FILE set it then waits (at most 60 s) for that file to exist; EXIT_RANK and
EXIT_CODE make the task whose SLURM_PROCID is EXIT_RANK exit with EXIT_CODE at once.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import sys
import time

from gcurun.errors import HostSpecError
from gcurun.hosts.slurm import parse_slurm_environment


def parsed() -> object:
    try:
        found = parse_slurm_environment(os.environ)
    except HostSpecError as exc:
        return {"error": str(exc)}
    return dataclasses.asdict(found) if found else None


report: dict[str, object] = {
    "hostname": socket.gethostname(),
    "netns": os.stat("/proc/self/ns/net").st_ino,
    "pid": os.getpid(),
    "pgid": os.getpgid(0),
    "slurm": {k: v for k, v in os.environ.items() if k.startswith("SLURM_")},
    "devices": {k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
                                               "GPU_DEVICE_ORDINAL")},
    "parsed": parsed(),
}
if os.environ.get("REPORT_MPI"):
    from mpi4py import MPI

    report["mpi"] = [MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()]
print(json.dumps(report), flush=True)
if os.environ.get("EXIT_RANK") == os.environ.get("SLURM_PROCID", "none"):
    sys.exit(int(os.environ.get("EXIT_CODE", "1")))
go = os.environ.get("GO_FILE")
if go:
    deadline = time.monotonic() + 60
    while not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.05)
