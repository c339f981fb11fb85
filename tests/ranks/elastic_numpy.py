"""An elastic rank script for the tests: numpy "training" of a vector, committed every
step; prints one JSON line per step from rank 0 and its final state hash on every rank.

Arguments: STEPS [--kill-at STEP:WORKER] [--fail-at STEP:WORKER] [--sleep S]
A worker named by --kill-at SIGKILLs itself at that step (of its first life), one named
by --fail-at raises at that step.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
import time

import numpy as np

import gcurun.runtime as hvd
from gcurun.runtime import elastic

parser = argparse.ArgumentParser()
parser.add_argument("steps", type=int)
parser.add_argument("--kill-at", default="")
parser.add_argument("--fail-at", default="")
parser.add_argument("--sleep", type=float, default=0.05)
parser.add_argument("--reset-log", action="store_true")
args = parser.parse_args()

hvd.init()
worker = int(os.environ["GCURUN_ELASTIC_WORKER"])


def plan(text: str) -> tuple[int, int] | None:
    if not text:
        return None
    step, who = text.split(":")
    return int(step), int(who)


state = elastic.ObjectState(step=0, weights=np.zeros(4))


def on_reset() -> None:
    if args.reset_log:
        print(json.dumps({"reset": True, "worker": worker, "size": hvd.size()}), flush=True)


state.register_reset_callbacks([on_reset])


@elastic.run
def train(state: elastic.ObjectState) -> None:
    while state.step < args.steps:
        kill, fail = plan(args.kill_at), plan(args.fail_at)
        if kill and kill == (state.step, worker):
            os.kill(os.getpid(), signal.SIGKILL)
        if fail and fail == (state.step, worker):
            raise RuntimeError(f"worker {worker} fails at step {state.step}")
        grad = hvd.allreduce(np.full(4, 1.0), op=hvd.Average, name="grad")
        state.weights = state.weights + grad
        state.step += 1
        if hvd.rank() == 0:
            print(json.dumps({"step": state.step, "size": hvd.size()}), flush=True)
        time.sleep(args.sleep)
        state.commit()


train(state)
digest = hashlib.sha256(np.ascontiguousarray(state.weights).tobytes()).hexdigest()[:16]
print(json.dumps({"done": True, "worker": worker, "rank": hvd.rank(), "size": hvd.size(),
                  "step": state.step, "hash": digest}), flush=True)
sys.exit(0)
