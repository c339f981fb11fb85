"""Rank script: rank 0 submits a tensor the others hold back.

``warn``: the others wait until rank 0's stall inspector has warned (rank 0 tells them
with a marker file in ``argv[2]``), then submit; twice, the second time with the tensor
cached. ``shutdown``: the others never submit; the stall inspector shuts the job down."""

from __future__ import annotations

import logging
import sys
import threading
import time
from pathlib import Path

import numpy as np

import gcurun.runtime as hvd
from gcurun.runtime.frontend import state

warned = threading.Event()


class Watch(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        print(message, file=sys.stderr, flush=True)
        if "stall inspector" in message:
            warned.set()


def wait_file(path: Path) -> None:
    deadline = time.monotonic() + 30
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)


def main() -> None:
    mode, markers = sys.argv[1], Path(sys.argv[2])
    logging.getLogger("gcurun.runtime.engine").addHandler(Watch())
    hvd.init()
    rank = hvd.rank()
    if mode == "warn":
        for step in range(2):
            if rank == 0:
                handle = hvd.allreduce_async(np.ones(4), name="late.tensor", op=hvd.Sum)
                assert warned.wait(30), "no stall warning within 30 s"
                warned.clear()
                (markers / f"step{step}").touch()
                got = hvd.synchronize(handle)
            else:
                wait_file(markers / f"step{step}")
                got = hvd.allreduce(np.ones(4), name="late.tensor", op=hvd.Sum)
            assert got.tolist() == [hvd.size()] * 4, got
        print(f"rank {rank} stall warned twice", flush=True)
    else:
        if rank == 0:
            try:
                hvd.synchronize(hvd.allreduce_async(np.ones(4), name="never.tensor"))
                print("rank 0 was not stopped", flush=True)
            except hvd.CollectiveTimeout as exc:
                print(f"rank 0 raised: {exc}".replace("\n", " "), flush=True)
            (markers / "stopped").touch()
        else:
            wait_file(markers / "stopped")
            # This rank's engine learns of the shutdown in the same cycle as rank 0's,
            # but may finish that cycle later: an op submitted before then fails with
            # the shutdown itself. Wait until this engine has stopped.
            engine = state.current_state().engine      # type: ignore[union-attr]
            deadline = time.monotonic() + 30
            while engine.running:
                assert time.monotonic() < deadline, "the engine did not stop"
                time.sleep(0.01)
            try:
                hvd.allreduce(np.ones(4), name="after")
                print(f"rank {rank} ran an op after the shutdown", flush=True)
            except hvd.PeerFailureError as exc:
                print(f"rank {rank} refused: {exc}".replace("\n", " "), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
