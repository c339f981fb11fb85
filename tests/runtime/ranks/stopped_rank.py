"""Rank script: rank ``argv[2]`` stops itself with SIGSTOP after a first allreduce; the
others run one more. Every rank prints what the runtime logged, one line each, and the
waiting ranks print what their allreduce raised, then mark it in ``argv[1]``; the last
of them to do so kills the stopped rank (the test's only way to end it). Rank ``argv[3]``,
when given, waits half as long as the others before its collective times out."""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np

import gcurun.runtime as hvd


class Echo(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage().replace("\n", " | ")
        print(f"rank {os.environ.get('GCURUN_RANK', os.environ.get('OMPI_COMM_WORLD_RANK'))} "
              f"logged: {text}", flush=True)


def main() -> None:
    markers, stopped = Path(sys.argv[1]), int(sys.argv[2])
    logging.getLogger("gcurun.runtime").addHandler(Echo())
    if len(sys.argv) > 3 and os.environ.get("GCURUN_RANK") == sys.argv[3]:
        os.environ["GCURUN_TIMEOUT_SECONDS"] = str(
            float(os.environ["GCURUN_TIMEOUT_SECONDS"]) / 2)
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    hvd.allreduce(np.ones(4), name="warmup")
    if rank == stopped:
        (markers / "stopped.pid").write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGSTOP)
        time.sleep(60)      # killed while stopped, or here
        return
    deadline = time.monotonic() + 60
    while not (markers / "stopped.pid").exists():
        assert time.monotonic() < deadline, "the stopped rank never wrote its pid"
        time.sleep(0.01)
    try:
        hvd.allreduce(np.ones(4), name="after.stop")
        print(f"rank {rank} finished an allreduce rank {stopped} never joined", flush=True)
    except (hvd.CollectiveTimeout, hvd.PeerFailureError) as exc:
        print(f"rank {rank} raised {type(exc).__name__}: {exc}".replace("\n", " "), flush=True)
    (markers / f"rank-{rank}.done").touch()
    others = [markers / f"rank-{r}.done" for r in range(size) if r != stopped]
    while not all(p.exists() for p in others):
        assert time.monotonic() < deadline, "the other ranks did not raise"
        time.sleep(0.01)
    if rank == min(r for r in range(size) if r != stopped):
        os.kill(int((markers / "stopped.pid").read_text()), signal.SIGKILL)
    os._exit(0)     # (the engine would wait for the killed rank's goodbye)


if __name__ == "__main__":
    main()
