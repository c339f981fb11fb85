"""What one large gcurun allreduce over MPI costs besides the ring's data movement.

    mpirun -np 2 python benchmarks/allreduce_overhead.py                 # 4 MiB
    mpirun -np 2 python benchmarks/allreduce_overhead.py --bytes 8388608

Six ways of summing one float32 buffer in place on 2 ranks, taking turns (in an order
shuffled every round) for several rounds of 30 calls; each keeps its best round (a
round's time is the slowest rank's mean per call):

  gcurun     the engine's synchronous allreduce, as benchmarks/allreduce.py times it: the
             quick cycle's negotiation exchange, then the reduction routine (on prepared
             exchanges: the buffer is reduced in place again and again);
  exch+ring  the negotiation exchange, then the reduction routine, called bare;
  ring       the reduction routine alone, over gcurun's MPI transport;
  prepared   the ring's two exchanges alone, as MPI persistent requests, and the add;
  mpi4py     the same ring written directly in mpi4py: Sendrecv, numpy.add, Sendrecv;
  native     the MPI library's MPI_Allreduce.

``prepared`` and ``mpi4py`` move each half in one message: where a half is larger than
the ring's chunk (GCURUN_CHUNK_BYTES, 2 MiB), gcurun's ring moves it in chunks instead.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

import numpy as np
from mpi4py import MPI

from gcurun.runtime import algorithms as alg
from gcurun.runtime.api import ReduceOp
from gcurun.runtime.bench import open_job, turns
from gcurun.runtime.dtypes import aligned_empty
from gcurun.runtime.settings import read_runtime_env
from gcurun.runtime.transport.prepared import prepared_sendrecv

CALLS = 30


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bytes", type=int, default=4 << 20)
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args(argv)
    job = open_job(read_runtime_env(), ["mpi"])
    communicator = job.communicators["mpi"]
    transport = job.transports["mpi"]
    comm = MPI.COMM_WORLD
    if comm.Get_size() != 2:
        raise SystemExit("allreduce_overhead: run it with 2 ranks (mpirun -np 2)")
    count = args.bytes // 4
    buf = aligned_empty(count, np.float32)
    reducer = alg.Reducer(transport, job.chunk_bytes)
    chunk = reducer.scratch.chunk_len(buf.dtype)
    tmp = aligned_empty(max(chunk, count), np.float32)
    peer = 1 - comm.Get_rank()
    mine, theirs, mine_len = alg.pair_halves(count, comm.Get_rank())
    exchange = communicator.engine.controller.exchange
    pieces = alg.Pieces([(buf, buf)])

    def ring() -> None:
        reducer.allreduce(pieces, np.add)

    def exchange_and_ring() -> None:
        exchange()
        ring()

    incoming = tmp[:mine_len]                 # the peer's copy of our half
    near, far = buf[mine], buf[theirs]
    there = prepared_sendrecv(transport, far, peer, incoming, peer)
    back = prepared_sendrecv(transport, near, peer, far, peer)

    def prepared_ring() -> None:
        there()
        np.add(near, incoming, near)
        back()

    def mpi4py_ring() -> None:
        comm.Sendrecv(buf[theirs], peer, 7, incoming, peer, 7)
        np.add(buf[mine], incoming, out=buf[mine])
        comm.Sendrecv(buf[mine], peer, 7, buf[theirs], peer, 7)

    variants: dict[str, Callable[[], object]] = {
        "gcurun": lambda: communicator.allreduce(buf, ReduceOp.SUM, name="overhead",
                                                 inplace=True),
        "exch+ring": exchange_and_ring,
        "ring": ring,
        "prepared": prepared_ring,
        "mpi4py": mpi4py_ring,
        "native": lambda: comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM),
    }
    best = dict.fromkeys(variants, float("inf"))
    for fn in variants.values():
        buf[:] = 1
        for _ in range(CALLS):
            fn()
    for order in turns(list(variants), args.rounds, seed=args.bytes):
        for name in order:
            fn = variants[name]
            buf[:] = 1          # sums of ones stay exact and finite
            comm.Barrier()
            began = time.perf_counter()
            for _ in range(CALLS):
                fn()
            mine_s = (time.perf_counter() - began) / CALLS
            best[name] = min(best[name], comm.allreduce(mine_s, op=MPI.MAX))
    for close in job.closers:
        close()
    if comm.Get_rank() == 0:
        native = best["native"]
        print(f"# {args.bytes} bytes, 2 ranks, float32 sum in place, best of {args.rounds} "
              f"rounds of {CALLS} calls")
        print(f"# {'variant':<10} {'time(us)':>9} {'- native':>9} {'busbw/native':>13}")
        for name, seconds in best.items():
            print(f"  {name:<10} {seconds * 1e6:>9.1f} {(seconds - native) * 1e6:>9.1f} "
                  f"{native / seconds:>13.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
