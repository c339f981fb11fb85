"""A rank of the chaos test: starts a child (so stopping the job must reach the ranks'
own children), writes DIR/rank-N.json with its pid, its child's and its host, says it is
ready, then sleeps until it is stopped."""

import json
import os
import socket
import subprocess
import sys
import time

directory, rank = sys.argv[1], os.environ["GCURUN_RANK"]
child = subprocess.Popen(["sleep", "300"])
record = {"pid": os.getpid(), "child": child.pid, "host": socket.gethostname()}
with open(os.path.join(directory, f".rank-{rank}.tmp"), "w") as f:
    json.dump(record, f)
os.rename(os.path.join(directory, f".rank-{rank}.tmp"),
          os.path.join(directory, f"rank-{rank}.json"))
print(f"rank {rank} ready", flush=True)
time.sleep(300)
