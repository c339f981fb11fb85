"""A rank that uses the runtime the launcher set up and prints one JSON line:
its backend, the Sum allreduce of rank-dependent data, and every rank's host."""

from __future__ import annotations

import json
import socket

import numpy as np

import gcurun.runtime as hvd

hvd.init()
data = np.arange(1001, dtype=np.int64) * (hvd.rank() + 1)
total = hvd.allreduce(data, op=hvd.Sum, name="data")
hosts = hvd.allgather_object(socket.gethostname())
print(json.dumps({"backend": hvd.backend(), "rank": hvd.rank(), "size": hvd.size(),
                  "local_rank": hvd.local_rank(), "cross_rank": hvd.cross_rank(),
                  "checksum": int(total.sum()), "hosts": hosts}), flush=True)
hvd.shutdown()
