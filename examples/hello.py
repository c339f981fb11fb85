"""The smallest gcurun job that does something: every rank says who it is, then the ranks
add up their rank numbers with an allreduce.

    gcurun -np 2 python examples/hello.py
"""

import os

import numpy as np

import gcurun.runtime as hvd

hvd.init()
device = os.environ.get("GCURUN_DEVICE", "-")   # its own, whatever the accelerator
total = hvd.allreduce(np.array([hvd.rank()], dtype=np.int64), op=hvd.Sum, name="ranks")
print(f"rank {hvd.rank()} of {hvd.size()} on {hvd.backend()} backend, device {device}: "
      f"sum of ranks = {int(total[0])}")
hvd.shutdown()
