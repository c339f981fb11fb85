"""An elastic rank script that re-forms the job RESETS times in this same process (each
worker in turn says its peer failed) and reports, after each reset, how many file
descriptors and threads it holds; rank 0 prints them at the end as one JSON line.

Arguments: RESETS
"""

from __future__ import annotations

import json
import os
import sys
import threading

import numpy as np

import gcurun.runtime as hvd
from gcurun.errors import PeerFailureError
from gcurun.runtime import elastic

resets = int(sys.argv[1])
hvd.init()
state = elastic.ObjectState(round=0)
held: list[tuple[int, int]] = []


def on_reset() -> None:
    held.append((len(os.listdir("/proc/self/fd")), threading.active_count()))


state.register_reset_callbacks([on_reset])


@elastic.run
def train(state: elastic.ObjectState) -> None:
    while state.round <= resets:       # the round after the last reset ends together
        hvd.allreduce(np.ones(4), name="sum")
        state.round += 1
        state.commit()
        if state.round <= resets and hvd.rank() == state.round % hvd.size():
            raise PeerFailureError(f"round {state.round}: a test reset")


train(state)
print(json.dumps({"rank": hvd.rank(), "held": held}), flush=True)
