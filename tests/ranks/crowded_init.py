"""A rank whose init() meets a crowded rendezvous: rank 0 first opens COUNT idle
connections to GCURUN_RENDEZVOUS (they never authenticate) and holds them through its
own init(); the other ranks start their init() once the crowd is there (DIR/crowded).
Each rank then prints one line with the Sum allreduce of its rank + 1.

Usage: crowded_init.py DIR COUNT"""

import os
import socket
import sys
import time

import numpy as np

directory, count = sys.argv[1], int(sys.argv[2])
flag = os.path.join(directory, "crowded")
crowd = []
if os.environ["GCURUN_RANK"] == "0":
    host, _, port = os.environ["GCURUN_RENDEZVOUS"].rpartition(":")
    crowd = [socket.create_connection((host, int(port)), timeout=10) for _ in range(count)]
    open(flag, "w").close()
else:
    deadline = time.monotonic() + 60
    while not os.path.exists(flag):
        if time.monotonic() > deadline:
            sys.exit("the crowd did not gather within 60 s")
        time.sleep(0.05)

import gcurun.runtime as hvd  # noqa: E402 - imported once the crowd is there

hvd.init()
total = hvd.allreduce(np.array([hvd.rank() + 1.0]), op=hvd.Sum, name="sum")
print(f"rank {hvd.rank()} sum {total[0]:g}", flush=True)
hvd.shutdown()
for sock in crowd:
    sock.close()
