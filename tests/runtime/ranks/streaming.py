"""Rank script: large allreduces between ranks whose bytes go by socket (run with
GCURUN_SHM=0 GCURUN_CMA=0), so the ring reduces each chunk as it arrives while the next
is in flight: the ring of two's halves, many chunks, in place again and again, a fused
group, every op kind. Prints one summary line per rank.

With the argument ``mpi`` (under mpirun), the mpi transport streams as it does on
several hosts (its answer to "several hosts?" forced to yes on this one)."""

from __future__ import annotations

import sys

import numpy as np

import gcurun.runtime as hvd
from gcurun.runtime.transport.tcp import TCPTransport
from tests.runtime.checks import Checks

STREAMED = [0]      # exchanges left in flight


def counted(start):
    def start_sendrecv_parts(*args, **kwargs):
        flight = start(*args, **kwargs)
        STREAMED[0] += flight is not None
        return flight

    return start_sendrecv_parts


def as_if_on_several_hosts() -> None:
    from gcurun.runtime.transport.mpi import MPITransport

    opened = MPITransport.__init__

    def init(self, *args, **kwargs):
        opened(self, *args, **kwargs)
        self._across_hosts = True

    MPITransport.__init__ = init
    MPITransport.start_sendrecv_parts = counted(MPITransport.start_sendrecv_parts)


def main() -> None:
    if sys.argv[1:] == ["mpi"]:
        as_if_on_several_hosts()
    else:
        TCPTransport.start_sendrecv_parts = counted(TCPTransport.start_sendrecv_parts)
    hvd.init()
    checks = Checks(hvd)
    r, p = hvd.rank(), hvd.size()
    f64, f32, i32 = np.dtype(np.float64), np.dtype(np.float32), np.dtype(np.int32)
    # 2.4 MB: the ring of two's halves (one chunk each); 12 MB and 3.3 MB: many chunks.
    for n, dtype in ((300_001, f64), (1_500_003, f64), (830_017, f32), (830_017, i32)):
        for salt in range(2):
            def make(k: int, m: int, d: np.dtype, s: int = salt) -> np.ndarray:
                return checks.values(k, m, d, s)

            name = f"stream.{n}.{dtype}"
            got = hvd.allreduce(make(r, n, dtype), op=hvd.Sum, name=name + ".sum")
            checks.equal(got, checks.reduced(make, n, dtype, np.add), f"{name} sum {salt}")
            got = hvd.allreduce(make(r, n, dtype), op=hvd.Max, name=name + ".max")
            checks.equal(got, checks.reduced(make, n, dtype, np.maximum), f"{name} max")
            x = make(r, n, dtype)
            for call in range(3):       # the same tensor in place, again and again
                x[...] = make(r, n, dtype, call)
                hvd.allreduce_(x, op=hvd.Min, name=name + ".min")
                checks.equal(x, checks.reduced(lambda k, m, d, c=call: make(k, m, d, c), n,
                                               dtype, np.minimum), f"{name} min in place")
            if dtype.kind == "f":
                got = hvd.allreduce(make(r, n, dtype), name=name + ".average",
                                    postscale_factor=2.0)
                want = checks.reduced(make, n, dtype, np.add).astype(dtype) / p * 2.0
                checks.ok(np.allclose(got, want), f"{name} average, postscaled")
    sizes = [7, 200_003, 0, 450_001, 64, 1_000_000]   # fused: one batch of pieces
    tensors = [checks.values(r, m, f64, m % 5) for m in sizes]
    got = hvd.grouped_allreduce(tensors, op=hvd.Sum, name="stream.group")
    for m, tensor in zip(sizes, got, strict=True):
        checks.equal(tensor, checks.reduced(lambda k, mm, d, s=m % 5: checks.values(
            k, mm, d, s), m, f64, np.add), f"group piece of {m}")
    hvd.shutdown()
    print(f"rank {r} of {p} ok: {checks.count} checks, {STREAMED[0]} streamed", flush=True)


if __name__ == "__main__":
    main()
