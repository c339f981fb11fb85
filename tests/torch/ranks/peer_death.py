"""Rank script: rank 1 dies (os._exit, no shutdown) while the others have allreduces in
flight; their synchronize must raise HorovodInternalError (a PeerFailureError), not
hang."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import gcurun.runtime.torch as hvd  # noqa: E402


def main() -> None:
    hvd.init()
    rank = hvd.rank()
    hvd.allreduce(torch.ones(10), name="warmup")
    if rank == 1:
        os._exit(17)
    handles = [hvd.allreduce_async_(torch.ones(1 << 16), name=f"step.{i}") for i in range(50)]
    try:
        for handle in handles:
            hvd.synchronize(handle)
    except hvd.HorovodInternalError as exc:
        kind = "PeerFailureError" if isinstance(exc, hvd.PeerFailureError) else type(exc)
        print(f"rank {rank} raised HorovodInternalError ({kind}): {exc}".replace("\n", " "),
              flush=True)
        hvd.shutdown()
        return
    print(f"rank {rank} was never told rank 1 died", flush=True)
    sys.exit(1)


if __name__ == "__main__":
    main()
