"""A rank that reports where it runs and what it was given, as one JSON line.

With GO_FILE set it then waits (at most 60 s) for that file to exist before exiting, so a
test can look at the running job; EXIT_CODE makes it exit with that code.
"""

import json
import os
import socket
import sys
import time

NAMES = ("GCURUN_RANK", "GCURUN_SIZE", "GCURUN_LOCAL_RANK", "GCURUN_LOCAL_SIZE",
         "GCURUN_CROSS_RANK", "GCURUN_CROSS_SIZE", "GCURUN_HOSTNAME", "HOROVOD_RANK",
         "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TEST_TOKEN",
         "GCURUN_SECRET", "HOME")

report = {
    "env": {n: os.environ.get(n) for n in NAMES},
    "hostname": socket.gethostname(),
    "netns": os.stat("/proc/self/ns/net").st_ino,
    "cwd": os.getcwd(),
    "pid": os.getpid(),
    "pgid": os.getpgid(0),
    "sid": os.getsid(0),
    "affinity": sorted(os.sched_getaffinity(0)),
}
print(json.dumps(report), flush=True)
go = os.environ.get("GO_FILE")
if go:
    deadline = time.monotonic() + 60
    while not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.05)
sys.exit(int(os.environ.get("EXIT_CODE", "0")))
