"""Rank script: a few collectives, then every rank shuts down and leaves. Prints why each
rank's engine stopped: a clean exit ends in a shutdown, no failure (and aborts nothing at
the rendezvous)."""

from __future__ import annotations

import numpy as np

import gcurun.runtime as hvd
from gcurun.runtime.frontend import state


def main() -> None:
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    for step in range(3):
        got = hvd.allreduce(np.full(4, float(rank)), op=hvd.Sum, name="clean.sum")
        assert got.tolist() == [size * (size - 1) / 2] * 4, (step, got)
    hvd.barrier()
    engine = state.current_state().engine      # type: ignore[union-attr]
    hvd.shutdown()
    # Why the engine stopped: a shutdown is the only reason there should be.
    print(f"rank {rank} of {size} left: {engine._failure}", flush=True)


if __name__ == "__main__":
    main()
