"""Rank script (under mpirun): the engine's synchronous allreduce on both transports (an
engine each, as benchmarks/allreduce.py runs them), called again and again with small
and large tensors. A name's calls take quick cycles from its second on. Prints one line
per rank: the checks passed on each backend, the large names that took quick cycles,
and whether a tensor called in place again and again kept its exchanges prepared. Two
ranks then swap buffers by a prepared exchange on one side and a plain one on the
other."""

from __future__ import annotations

from functools import partial

import numpy as np

from gcurun.runtime.bench import open_job
from gcurun.runtime.settings import read_runtime_env
from gcurun.runtime.transport.prepared import prepared_sendrecv, release_sendrecv
from tests.runtime.adapter import EngineAPI
from tests.runtime.checks import Checks


def prepared_against_plain(transport: object, rank: int) -> int:
    """Two ranks swap fixed buffers again and again, rank 0 by a prepared exchange and
    rank 1 by plain sendrecv: small ones (through the rings on tcp, up to 64 KiB) and
    large ones (announced by descriptors on tcp): whichever way a side takes, the other understands
    it. Returns the exchanges checked."""
    peer, checked = 1 - rank, 0
    for nbytes in (256, 40 << 10, 80 << 10, 1 << 20):
        send, recv = np.empty(nbytes, np.uint8), np.empty(nbytes, np.uint8)
        swap = prepared_sendrecv(transport, send, peer, recv, peer) if rank == 0 else \
            partial(transport.sendrecv, send, peer, recv, peer)  # type: ignore[attr-defined]
        for call in range(20):
            send[...] = (np.arange(nbytes) + 7 * rank + call) % 251
            swap()
            assert np.array_equal(recv, (np.arange(nbytes) + 7 * peer + call) % 251), \
                (type(transport).__name__, nbytes, call)
            checked += 1
        if rank == 0:
            release_sendrecv(transport, swap)
    return checked


def main() -> None:
    job = open_job(read_runtime_env(), ["mpi", "tcp"])
    done = []
    for backend, comm in job.communicators.items():
        checks = Checks(EngineAPI(comm))
        checks.repeated()
        count = checks.repeated_large()
        quick = ",".join(sorted(name for name in comm._quick if name.startswith("big.")))
        reducer = comm.engine.executor.reducer
        held = "one tensor held" if reducer.held is not None else "none held"
        if job.size == 2:
            count += prepared_against_plain(job.transports[backend], job.rank)
        done.append(f"{backend} {count} checks, quick [{quick}], {held}")
    for close in job.closers:
        close()
    print(f"rank {job.rank} of {job.size} communicators ok: {'; '.join(done)}", flush=True)


if __name__ == "__main__":
    main()
