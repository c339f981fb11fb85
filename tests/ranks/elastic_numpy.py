"""An elastic rank script for the tests: numpy "training" of a vector, committed every
step; prints one JSON line per step from rank 0 and its final state hash on every rank.

Arguments: STEPS [--kill-at STEP:WORKER] [--fail-at STEP:WORKER] [--sleep S]
[--fail-on-host HOST:N] [--hang-on-host HOST:STEP] [--tag TEXT]
A worker named by --kill-at SIGKILLs itself at that step (of its first life), one named
by --fail-at raises at that step; every worker on HOST (its host name) raises after N
steps of its own (a flapping host); a worker on HOST of --hang-on-host sleeps for an
hour at STEP, outside any collective (a long computation: only its host's bootstrap
can end it when the launcher is cut off); --tag is ignored (it marks the processes of a test).
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
parser.add_argument("--fail-on-host", default="")
parser.add_argument("--hang-on-host", default="")
parser.add_argument("--tag", default="")
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


flap_host, _, flap_steps = args.fail_on_host.partition(":")
own_steps = 0


@elastic.run
def train(state: elastic.ObjectState) -> None:
    global own_steps
    while state.step < args.steps:
        kill, fail = plan(args.kill_at), plan(args.fail_at)
        if flap_host == os.uname().nodename and own_steps >= int(flap_steps):
            raise RuntimeError(f"worker {worker} on {flap_host} fails after {own_steps} steps")
        hang_host, _, hang_step = args.hang_on_host.partition(":")
        if hang_host == os.uname().nodename and state.step == int(hang_step):
            print(json.dumps({"hangs": worker}), flush=True)
            time.sleep(3600)
        if kill and kill == (state.step, worker):
            os.kill(os.getpid(), signal.SIGKILL)
        if fail and fail == (state.step, worker):
            raise RuntimeError(f"worker {worker} fails at step {state.step}")
        grad = hvd.allreduce(np.full(4, 1.0), op=hvd.Average, name="grad")
        state.weights = state.weights + grad
        state.step += 1
        own_steps += 1
        if hvd.rank() == 0:
            print(json.dumps({"step": state.step, "size": hvd.size()}), flush=True)
        time.sleep(args.sleep)
        state.commit()


train(state)
digest = hashlib.sha256(np.ascontiguousarray(state.weights).tobytes()).hexdigest()[:16]
print(json.dumps({"done": True, "worker": worker, "rank": hvd.rank(), "size": hvd.size(),
                  "step": state.step, "hash": digest}), flush=True)
sys.exit(0)
