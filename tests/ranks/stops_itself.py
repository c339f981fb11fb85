"""Rank script: rank ``argv[1]`` stops itself with SIGSTOP after a first allreduce (as a
debugger or a stopped terminal job would); the others call a second one, which times out
(GCURUN_TIMEOUT_SECONDS) and ends them with the runtime's error, uncaught. Rank
``argv[2]``, when given, waits half as long before its collective times out."""

from __future__ import annotations

import os
import signal
import sys

import numpy as np

import gcurun.runtime as hvd

if len(sys.argv) > 2 and os.environ.get("GCURUN_RANK") == sys.argv[2]:
    os.environ["GCURUN_TIMEOUT_SECONDS"] = str(float(os.environ["GCURUN_TIMEOUT_SECONDS"]) / 2)
hvd.init()
hvd.allreduce(np.ones(4), name="warmup")
if hvd.rank() == int(sys.argv[1]):
    os.kill(os.getpid(), signal.SIGSTOP)
hvd.allreduce(np.ones(4), name="after.stop")
