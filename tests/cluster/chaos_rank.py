"""A rank of the chaos test: starts a child (so stopping the job must reach the ranks'
own children), writes DIR/rank-N.json with its pid, its child's and its host, says it is
ready, then sleeps until it is stopped.

Two variables make it harder on the launcher: CHAOS_INIT=SECONDS waits that long, then joins
the job's runtime (the rendezvous, for gcurun's own launchers) before it is ready;
CHAOS_CHATTY=1 prints 4 KiB lines as fast as its output is taken once it is ready (a
blocked console or a full log disk then meets a steady flood)."""

import json
import os
import socket
import subprocess
import sys
import threading
import time

directory, rank = sys.argv[1], os.environ["GCURUN_RANK"]
child = subprocess.Popen(["sleep", "300"])
if os.environ.get("CHAOS_INIT"):
    time.sleep(float(os.environ["CHAOS_INIT"]))
    import gcurun.runtime as hvd

    hvd.init()
record = {"pid": os.getpid(), "child": child.pid, "host": socket.gethostname()}
with open(os.path.join(directory, f".rank-{rank}.tmp"), "w") as f:
    json.dump(record, f)
os.rename(os.path.join(directory, f".rank-{rank}.tmp"),
          os.path.join(directory, f"rank-{rank}.json"))
print(f"rank {rank} ready", flush=True)


def chatter() -> None:
    line = f"rank {rank} says " + "x" * 4096
    while True:
        print(line, flush=True)


if os.environ.get("CHAOS_CHATTY"):
    threading.Thread(target=chatter, daemon=True).start()
time.sleep(300)
