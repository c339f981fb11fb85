"""Rank script: run, announce readiness with a marker file, wait for the test to throw
garbage and wrong-secret handshakes at every rank's listeners (signalled by a 'go' file),
then run collectives again: the job must not notice."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

import gcurun.runtime as hvd


def main() -> None:
    markers = Path(sys.argv[1])
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    first = hvd.allreduce(np.ones(100000), op=hvd.Sum, name="before")
    (markers / f"rank-{rank}.ready").touch()
    deadline = time.monotonic() + 60
    while not (markers / "go").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    second = hvd.allreduce(np.ones(100000), op=hvd.Sum, name="after")
    assert (first == size).all() and (second == size).all()
    gathered = hvd.allgather(np.array([rank]), name="after.allgather")
    assert gathered.tolist() == list(range(size))
    hvd.shutdown()
    print(f"rank {rank} ok after the intruders", flush=True)


if __name__ == "__main__":
    main()
