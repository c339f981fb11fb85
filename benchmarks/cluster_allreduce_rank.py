"""One rank of ``benchmarks/cluster_allreduce.py``: it joins its variant's job, connects to
the benchmark's control socket and runs the turns it is sent, one at a time.

    python cluster_allreduce_rank.py gcurun-tcp|gcurun-tcp-flat|gcurun-tcp-2level|
                                     gcurun-mpi|mpirun|gloo

Started by the benchmark in a job of its own per variant (never by hand): ``gcurun -H``
(the gcurun-tcp variants, gloo), ``gcurun --mpi`` (gcurun-mpi) or ``mpirun`` (mpirun);
gcurun-tcp-flat and gcurun-tcp-2level are gcurun-tcp told to take the flat ring or the
two-level allreduce (``--no-hierarchical-allreduce``, ``--hierarchical-allreduce``;
gcurun-tcp decides itself). The control
socket's address and the run's id come in the environment.

A turn is one warm-up call, then ``calls`` timed calls of an in-place float64 Sum on one
buffer. Rank r starts with ``(r + 1 + i % 3) * 2**-1000`` at index i, so after k calls
every element must be ``n**(k-1) * (n(n+1)/2 + n(i % 3)) * 2**-1000``: the values stay
normal, exact (for n a power of two) and distinct per call, so the check after the
timed calls covers every one of them, and a variant that skips or garbles a call fails
the run instead of winning it.
"""

from __future__ import annotations

import json
import math
import os
import socket
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import numpy as np

CONTROL_VAR = "CLUSTER_BENCH_CONTROL"      # host:port of the benchmark's control socket
RUN_VAR = "CLUSTER_BENCH_RUN"              # the run's id, sent back in the hello
IDLE_VAR = "CLUSTER_BENCH_IDLE_SECONDS"    # longest wait for the next command
VARIANTS = ("gcurun-tcp", "gcurun-mpi", "mpirun", "gloo", "gcurun-tcp-flat",
            "gcurun-tcp-2level")
TCP_VARIANTS = ("gcurun-tcp", "gcurun-tcp-flat", "gcurun-tcp-2level")
EXPONENT = -1000        # the pattern's scale: room for about 2000 doublings above it
CONNECT_SECONDS = 60.0


# -- the pattern and its check (pure; the benchmark's tests call them) ------------------

def fill(buf: np.ndarray, rank: int) -> None:
    """Rank ``rank``'s starting values, written into the float64 array ``buf``."""
    unit = math.ldexp(1.0, EXPONENT)
    buf[...] = (rank + 1) * unit
    buf[1::3] += unit
    buf[2::3] += 2 * unit


def expected(size: int, calls: int) -> tuple[float, float, float]:
    """Every element's value after ``calls`` in-place Sums over ``size`` ranks, for
    indices 0, 1 and 2 modulo 3 (correctly rounded: Python divides big ints exactly)."""
    base, scale, unit = size * (size + 1) // 2, size ** (calls - 1), 2 ** -EXPONENT
    first, second, third = ((base + size * m) * scale / unit for m in range(3))
    return first, second, third


def max_calls(size: int) -> int:
    """The most calls in one turn before the values would leave float64's range (with
    room to spare below 2**1000)."""
    if size < 2:
        return 1_000_000
    top = math.log2(size * (size + 1) / 2 + 2 * size)
    return int((-EXPONENT * 2 - 10 - top) / math.log2(size)) + 1


def check(buf: np.ndarray, size: int, calls: int) -> str | None:
    """None when ``buf`` holds the result of ``calls`` in-place Sums of the pattern over
    ``size`` ranks; else what is wrong, with the first wrong index."""
    for m, value in enumerate(expected(size, calls)):
        part = buf[m::3]
        bad = np.flatnonzero(~np.isclose(part, value, rtol=1e-9, atol=0.0))
        if bad.size:
            index = int(bad[0]) * 3 + m
            return (f"element {index} is {float(buf[index])!r}, expected {value!r} "
                    f"({bad.size} of {part.size} elements at index {m} mod 3 wrong)")
    return None


# -- the variants -------------------------------------------------------------------

class Gcurun:
    """gcurun's runtime as a script uses it. It is shut down between turns: an idle
    engine keeps cycling (a collective every few ms), which would take the cores from
    the variant whose turn it is."""

    def __init__(self, backend: str):
        import gcurun.runtime as hvd

        self.hvd, self.backend = hvd, backend
        self.rank = int(os.environ["GCURUN_RANK"])
        self.size = int(os.environ["GCURUN_SIZE"])

    def open(self) -> None:
        self.hvd.init()
        if self.hvd.backend() != self.backend:
            raise RuntimeError(f"gcurun chose the {self.hvd.backend()} backend, not "
                               f"{self.backend}")

    def allreduce(self, buf: np.ndarray) -> None:
        self.hvd.allreduce_(buf, op=self.hvd.Sum, name="bench")

    def barrier(self) -> None:
        self.hvd.barrier()

    def close(self) -> None:
        self.hvd.shutdown()

    def finish(self) -> None:
        pass


class NativeMPI:
    """Open MPI's own MPI_Allreduce through mpi4py."""

    def __init__(self) -> None:
        from mpi4py import MPI

        self.mpi, self.comm = MPI, MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()

    def open(self) -> None:
        pass

    def allreduce(self, buf: np.ndarray) -> None:
        self.comm.Allreduce(self.mpi.IN_PLACE, [buf, self.mpi.DOUBLE], op=self.mpi.SUM)

    def barrier(self) -> None:
        self.comm.Barrier()

    def close(self) -> None:
        pass

    def finish(self) -> None:
        pass


class Gloo:
    """torch.distributed on gloo, its process group set up once from the variables the
    launcher sets (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)."""

    def __init__(self, timeout: float) -> None:
        import torch
        import torch.distributed as dist

        self.torch, self.dist = torch, dist
        dist.init_process_group("gloo", timeout=timedelta(seconds=timeout))
        self.rank, self.size = dist.get_rank(), dist.get_world_size()
        self._tensors: dict[int, Any] = {}

    def open(self) -> None:
        pass

    def allreduce(self, buf: np.ndarray) -> None:
        tensor = self._tensors.get(id(buf))
        if tensor is None:      # shares buf's memory: the sum lands in buf
            tensor = self._tensors[id(buf)] = self.torch.from_numpy(buf)
        self.dist.all_reduce(tensor, op=self.dist.ReduceOp.SUM)

    def barrier(self) -> None:
        self.dist.barrier()

    def close(self) -> None:
        self._tensors.clear()

    def finish(self) -> None:
        self.dist.destroy_process_group()


def make_variant(name: str, timeout: float) -> Any:
    makers: dict[str, Callable[[], Any]] = {
        "gcurun-mpi": lambda: Gcurun("mpi"), "mpirun": NativeMPI, "gloo": lambda: Gloo(timeout),
        **{name: lambda: Gcurun("tcp") for name in TCP_VARIANTS}}
    if name not in makers:
        raise SystemExit(f"unknown variant {name!r}; pick one of {', '.join(VARIANTS)}")
    return makers[name]()


# -- a turn and the control loop ------------------------------------------------------

def turn(variant: Any, nbytes: int, calls: int) -> dict[str, Any]:
    """One turn: {"seconds": mean seconds per timed call on this rank, "error": None or
    what was wrong with the result}."""
    variant.open()
    try:
        buf = np.empty(max(1, nbytes // 8), np.float64)
        fill(buf, variant.rank)
        variant.allreduce(buf)
        wrong = check(buf, variant.size, 1)
        if wrong:
            return {"seconds": None, "error": f"warm-up call: {wrong}"}
        fill(buf, variant.rank)
        variant.barrier()
        start = time.perf_counter()
        for _ in range(calls):
            variant.allreduce(buf)
        seconds = (time.perf_counter() - start) / calls
        wrong = check(buf, variant.size, calls)
        return {"seconds": seconds,
                "error": f"after {calls} timed calls: {wrong}" if wrong else None}
    finally:
        variant.close()


class Control:
    """The rank's end of the control socket: JSON lines each way."""

    def __init__(self, address: str, idle_seconds: float):
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=CONNECT_SECONDS)
        self.sock.settimeout(idle_seconds)
        self.reader = self.sock.makefile("r", encoding="utf-8")

    def send(self, message: dict[str, Any]) -> None:
        self.sock.sendall((json.dumps(message) + "\n").encode())

    def receive(self) -> dict[str, Any] | None:
        """The next command; None when the benchmark has closed the socket."""
        line = self.reader.readline()
        return json.loads(line) if line else None


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        raise SystemExit(f"usage: cluster_allreduce_rank.py {'|'.join(VARIANTS)}")
    idle = float(os.environ.get(IDLE_VAR, "3600"))
    variant = make_variant(argv[0], idle)
    control = Control(os.environ[CONTROL_VAR], idle)
    control.send({"run": os.environ[RUN_VAR], "variant": argv[0], "rank": variant.rank,
                  "size": variant.size, "host": socket.gethostname()})
    while True:
        command = control.receive()
        if command is None or command["cmd"] == "quit":
            break
        try:
            result = turn(variant, int(command["nbytes"]), int(command["calls"]))
        except Exception as exc:    # the benchmark reports it and stops every job
            control.send({"seconds": None, "error": f"{type(exc).__name__}: {exc}"})
            raise
        control.send(result)
    variant.finish()
    return 0 if command is not None else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
