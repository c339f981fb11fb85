"""Rank script: a known job under GCURUN_TIMELINE_FILENAME: a group of two small allreduces and a
large one (fused in one batch), an allgather and a broadcast, twice. With ``hang`` it then keeps
running collectives until it is killed."""

from __future__ import annotations

import sys
import time

import numpy as np

import gcurun.runtime as hvd


def step(rank: int) -> None:
    # A group is negotiated as a whole, so its tensors run in one fused batch.
    fused = hvd.grouped_allreduce_async([np.ones(10) * rank, np.ones(20), np.ones(300000)],
                                        name="tl.fused")
    hvd.allgather(np.ones((rank + 1, 2)), name="tl.gather")
    hvd.broadcast(np.arange(3), 0, name="tl.bcast")
    hvd.synchronize(fused)


def main() -> None:
    hvd.init()
    rank = hvd.rank()
    for _ in range(2):
        step(rank)
    if len(sys.argv) > 1 and sys.argv[1] == "hang":
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            step(rank)
    print(f"rank {rank} timeline job done", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
