"""Rank script: rank ``argv[1]`` dies (os._exit, no shutdown) after a first allreduce; the
others must raise PeerFailureError naming it, not hang. With ``small`` as ``argv[2]`` the
others run tiny cached allreduces (the engine's quick cycles) instead of large ones."""

from __future__ import annotations

import os
import sys

import numpy as np

import gcurun.runtime as hvd


def main() -> None:
    victim = int(sys.argv[1])
    hvd.init()
    rank = hvd.rank()
    small = sys.argv[2:] == ["small"]
    for _ in range(3 if small else 1):     # cached, then in steady state
        hvd.allreduce(np.ones(2), name="warmup")
    if rank == victim:
        os._exit(17)
    try:
        for step in range(1000):
            if small:
                hvd.allreduce(np.ones(2), name="warmup")
            else:
                hvd.allreduce(np.ones(1 << 18), name=f"step.{step}")
    except hvd.PeerFailureError as exc:
        print(f"rank {rank} raised PeerFailureError: {exc}".replace("\n", " "), flush=True)
        try:
            hvd.allreduce(np.ones(3), name="after")
        except hvd.PeerFailureError as again:
            print(f"rank {rank} refused the next call: {again}".replace("\n", " "), flush=True)
        hvd.shutdown()
        return
    print(f"rank {rank} was never told rank {victim} died", flush=True)
    sys.exit(1)


if __name__ == "__main__":
    main()
