"""Waiting benchmark: what a rank that waits for a slow one costs in CPU, and what the
8-byte allreduce costs in time.

    mpirun -np 2 python benchmarks/waiting.py                  # mpi, then tcp
    gcurun -np 2 python benchmarks/waiting.py                  # tcp
    mpirun -np 2 python benchmarks/waiting.py --backends mpi --seconds 10

In each scenario rank 0 sleeps ``--seconds`` before its call while every other rank
makes the call at once and waits for it: a barrier, a synchronous 8-byte allreduce, the
synchronize of an asynchronous one, and join. In the idle scenario every rank sleeps and
only the engines run. The table shows the CPU time (all threads of the process) per
second of the scenario, in percent of a core: of the waiting ranks (the most of them)
and of rank 0. The last line is the 8-byte allreduce (in place, one name, as a training
script calls it): the slowest rank's mean per call, median and best of the rounds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from engine import start  # noqa: E402  (benchmarks/engine.py: init on a backend)

import gcurun.runtime as hvd  # noqa: E402

SCENARIOS = ("idle", "barrier", "allreduce", "synchronize", "join")


def scenario(name: str, seconds: float) -> Callable[[], None]:
    """This rank's part of scenario ``name``: rank 0 sleeps first, the others wait."""
    tiny = np.ones(2, np.float32)

    def call() -> None:
        if name == "barrier":
            hvd.barrier()
        elif name == "allreduce":
            hvd.allreduce_(tiny, op=hvd.Sum, name="waiting.allreduce")
        elif name == "synchronize":
            hvd.synchronize(hvd.allreduce_async_(tiny, op=hvd.Sum, name="waiting.async"))
        elif name == "join":
            hvd.join()

    def run() -> None:
        if name == "idle" or hvd.rank() == 0:
            time.sleep(seconds)
        if name != "idle":
            call()

    return run


def cpu_percent(name: str, seconds: float) -> tuple[float, float]:
    """(the most CPU of a waiting rank, rank 0's), in percent of a core."""
    run = scenario(name, seconds)
    hvd.barrier()
    wall, cpu = time.monotonic(), time.process_time()
    run()
    share = (time.process_time() - cpu) / max(time.monotonic() - wall, 1e-9) * 100
    shares = hvd.allgather(np.array([share]), name=f"waiting.cpu.{name}")
    others = shares[1:] if len(shares) > 1 else shares
    return float(others.max()), float(shares[0])


def latency(calls: int, rounds: int) -> tuple[float, float]:
    """The 8-byte allreduce's time per call in microseconds: (median, best) over rounds of
    the slowest rank's mean."""
    tiny = np.zeros(2, np.float32)
    means = []
    for round_ in range(rounds + 1):
        hvd.barrier()
        start_ = time.perf_counter()
        for _ in range(calls):
            hvd.allreduce_(tiny, op=hvd.Sum, name="waiting.latency")
        mean = (time.perf_counter() - start_) / calls
        slowest = hvd.allreduce(np.array([mean]), op=hvd.Max, name="waiting.slowest")
        if round_:          # the first round warms up
            means.append(float(slowest[0]) * 1e6)
    return statistics.median(means), min(means)


def measure(backend: str, args: argparse.Namespace) -> tuple[list[str], int, int]:
    """The rows of ``backend``, this rank and the number of ranks."""
    start(backend)
    try:
        rank, size = hvd.rank(), hvd.size()
        rows = [f"  {name:<12} {backend:>7}   {waiter:>17.1f}   {rank0:>9.1f}"
                for name in SCENARIOS
                for waiter, rank0 in [cpu_percent(name, args.seconds)]]
        median, best = latency(args.calls, args.rounds)
        rows.append(f"  {'8 B allreduce':<13}{backend:>7}   {median:>8.1f} us median, "
                    f"{best:.1f} us best")
        return rows, rank, size
    finally:
        hvd.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default=None,
                        help="comma-separated: mpi,tcp (default: both under mpirun, "
                             "else tcp)")
    parser.add_argument("--seconds", type=float, default=2.0,
                        help="how long rank 0 keeps the others waiting (default 2)")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if args.seconds <= 0 or args.calls <= 0 or args.rounds <= 0:
        parser.error(f"--seconds {args.seconds}, --calls {args.calls} and --rounds "
                     f"{args.rounds} must be positive")
    under_mpirun = any(key in os.environ for key in ("OMPI_COMM_WORLD_RANK", "PMI_RANK"))
    backends = (args.backends or ("mpi,tcp" if under_mpirun else "tcp")).split(",")
    unknown = [b for b in backends if b not in ("mpi", "tcp")]
    if unknown:
        parser.error(f"--backends {args.backends}: unknown {unknown}; use mpi and/or tcp")
    if "mpi" in backends and not under_mpirun:
        parser.error("--backends mpi needs mpirun: mpirun -np 2 python "
                     "benchmarks/waiting.py")
    rows: list[str] = []
    rank = size = 0
    for backend in backends:
        more, rank, size = measure(backend, args)
        rows += more
    if rank == 0:
        print(f"# gcurun waiting: {size} ranks; rank 0 sleeps {args.seconds:g} s before "
              "each call, the others wait in it")
        print("# CPU = CPU time of the process (every thread) per second, % of one core")
        print(f"# {'scenario':<12} {'backend':>7}   {'waiting ranks CPU':>17}   "
              f"{'rank 0 CPU':>9}")
        print("\n".join(rows), flush=True)


if __name__ == "__main__":
    main()
