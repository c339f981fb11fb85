"""Rank script: objects that cannot be pickled, through ``argv[1]``'s binding (numpy,
torch or tensorflow): rank 1 broadcasts one, then offers one to an allgather; every rank
must raise (none may wait for bytes that never come), then go on to a usual broadcast."""

from __future__ import annotations

import sys
import threading
from typing import Any


def binding(kind: str) -> Any:
    if kind == "torch":
        import gcurun.runtime.torch as hvd
    elif kind == "tensorflow":
        import gcurun.runtime.tensorflow as hvd
    else:
        import gcurun.runtime as hvd
    return hvd


def main() -> None:
    hvd = binding(sys.argv[1])
    hvd.init()
    rank = hvd.rank()
    lock = threading.Lock()
    for what, call in [
        ("broadcast_object", lambda: hvd.broadcast_object(lock if rank == 1 else None,
                                                          root_rank=1, name="state")),
        ("allgather_object", lambda: hvd.allgather_object(lock if rank == 1 else rank,
                                                          name="facts")),
    ]:
        try:
            call()
            print(f"rank {rank} {what} returned", flush=True)
        except Exception as exc:
            print(f"rank {rank} {what} raised {type(exc).__name__}: {exc}".replace("\n", " "),
                  flush=True)
    print(f"rank {rank} then got {hvd.broadcast_object({'step': 3}, root_rank=0)}", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
