"""A rank of the link-cut test: it joins the job, takes part in one allreduce, then the
job's last rank sleeps outside any collective while every other rank waits for it inside
an allreduce. Each says where it is (one line) before it gets there. The first argument
is a token that only marks the command line."""

import os
import time

import numpy as np

import gcurun.runtime as hvd

hvd.init()
hvd.allreduce(np.ones(4), name="warm-up")
if hvd.rank() == hvd.size() - 1:
    print(f"rank {hvd.rank()} sleeping on {os.uname().nodename}", flush=True)
    time.sleep(3600)
else:
    print(f"rank {hvd.rank()} in a collective on {os.uname().nodename}", flush=True)
    hvd.allreduce(np.ones(4), name="never-complete")
