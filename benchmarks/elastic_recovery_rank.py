"""The rank script of benchmarks/elastic_recovery.py: numpy "training" of a state of
STATE_MB megabytes, one small allreduce and STEP_SECONDS of "compute" per step, a commit
every COMMIT_EVERY steps. The rank 0 of each generation prints one JSON line per step
and, after a reset, when the generation formed and how long the state broadcast took
(``time.time()``: the namespace hosts share this machine's clock).

Arguments: STEPS STATE_MB STEP_SECONDS COMMIT_EVERY
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

import gcurun.runtime as hvd
from gcurun.runtime import elastic

steps, state_mb = int(sys.argv[1]), float(sys.argv[2])
step_seconds, commit_every = float(sys.argv[3]), int(sys.argv[4])
hvd.init()


def say(**fields: object) -> None:
    if hvd.rank() == 0:
        print(json.dumps(fields), flush=True)


class TimedState(elastic.ObjectState):
    """Reports how long each synchronization (rank 0's broadcast) takes."""

    def sync(self) -> None:
        start = time.time()
        super().sync()
        say(ev="sync", t0=start, t1=time.time(), size=hvd.size())


state = TimedState(step=0, weights=np.zeros(max(1, int(state_mb * (1 << 20) / 8))))
state.register_reset_callbacks([lambda: say(ev="reset", t=time.time(), size=hvd.size())])


@elastic.run
def train(state: TimedState) -> None:
    while state.step < steps:
        grad = hvd.allreduce(np.ones(16), op=hvd.Average, name="grad")
        state.weights[:16] += grad
        state.step += 1
        say(ev="step", step=state.step, t=time.time(), size=hvd.size())
        time.sleep(step_seconds)
        if state.step % commit_every == 0:
            state.commit()


train(state)
say(ev="done", step=state.step, size=hvd.size())
