"""Rank script: rank ``argv[2]`` never joins the collective; the others must raise within
GCURUN_TIMEOUT_SECONDS. Every rank waits for the raising ranks' marker files in
``argv[1]`` (with a deadline) before it shuts down."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

import gcurun.runtime as hvd


def main() -> None:
    markers, stalled = Path(sys.argv[1]), int(sys.argv[2])
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    hvd.allreduce(np.ones(4), name="warmup")
    if rank == stalled:
        deadline = time.monotonic() + 60
        others = [markers / f"rank-{r}.done" for r in range(size) if r != stalled]
        while not all(p.exists() for p in others) and time.monotonic() < deadline:
            time.sleep(0.05)
        print(f"rank {rank} stalled until the others gave up", flush=True)
    else:
        started = time.monotonic()
        try:
            hvd.allreduce(np.ones(1000), name="stalled.op")
            print(f"rank {rank} finished a collective rank {stalled} never joined", flush=True)
        except (hvd.CollectiveTimeout, hvd.PeerFailureError) as exc:
            waited = time.monotonic() - started
            print(f"rank {rank} raised {type(exc).__name__} after {waited:.1f} s: {exc}"
                  .replace("\n", " "), flush=True)
        (markers / f"rank-{rank}.done").touch()
        # Shut down only once every other waiting rank has raised too: a shutdown seen
        # first would fail their op for that reason instead of their own timeout.
        deadline = time.monotonic() + 60
        others = [markers / f"rank-{r}.done" for r in range(size) if r != stalled]
        while not all(p.exists() for p in others) and time.monotonic() < deadline:
            time.sleep(0.05)
    hvd.shutdown()


if __name__ == "__main__":
    main()
