"""Rank script (under mpirun): ``sendrecv_parts`` on both transports, around a ring.

Each rank sends a message of known bytes to its right neighbour, cut into pieces its
own way (some empty, each a separate allocation, like a model's tensors), and receives
its left neighbour's message into pieces cut as that neighbour cuts it: small messages
(through the rings or sockets) and large ones (single-copy reads), one piece or more
than one system call takes. The mpi transport then runs again with messages limited to
4 KiB, so that large pieces go as several messages. Prints one line per rank."""

from __future__ import annotations

import numpy as np

from gcurun.runtime import mpi_transport, tcp_transport
from gcurun.runtime.bench import open_job
from gcurun.runtime.env import read_runtime_env

CASES = [(100, 1), (100, 4), (4096, 7), (1 << 20, 1), (1 << 20, 13), ((1 << 20) + 3, 40),
         (3 << 20, 1500)]              # (bytes, pieces)
# More pieces than a descriptor may list: the tcp sender copies them into one buffer.
MANY = (tcp_transport.MAX_EXTENTS + 100) * 2


def cut(buf: np.ndarray, pieces: int, rng: np.random.Generator) -> list[np.ndarray]:
    """``buf`` in ``pieces`` copies of random lengths (some empty), in order."""
    edges = np.sort(rng.integers(0, len(buf) + 1, pieces - 1)) if pieces > 1 else []
    bounds = [0, *[int(e) for e in edges], len(buf)]
    return [buf[a:b].copy() for a, b in zip(bounds, bounds[1:], strict=False)]


def pattern(rank: int, nbytes: int) -> np.ndarray:
    return ((np.arange(nbytes, dtype=np.int64) * 7 + rank * 13) % 251).astype(np.uint8)


def exchange(t: object, rank: int, size: int, index: int, nbytes: int, pieces: int) -> None:
    right, left = (rank + 1) % size, (rank - 1) % size
    sends = cut(pattern(rank, nbytes), pieces, np.random.default_rng([rank, index]))
    # The left neighbour's cut, from its seed: the receiver cuts as its sender does.
    recvs = [np.zeros_like(piece) for piece in
             cut(pattern(left, nbytes), pieces, np.random.default_rng([left, index]))]
    t.sendrecv_parts(sends, right, recvs, left)  # type: ignore[attr-defined]
    got = np.concatenate(recvs)
    assert np.array_equal(got, pattern(left, nbytes)), (type(t).__name__, nbytes, pieces)


def main() -> None:
    job = open_job(read_runtime_env(), ["mpi", "tcp"])
    rank, size = job.rank, job.size
    checked = 0
    for backend, comm in job.communicators.items():
        cases = CASES + ([(MANY, MANY // 2)] if backend == "tcp" else [])
        for index, (nbytes, pieces) in enumerate(cases):
            exchange(comm.transport, rank, size, index, nbytes, pieces)
            checked += 1
    mpi_transport.PIECE_BYTES = 4096
    for index, (nbytes, pieces) in enumerate(CASES):
        exchange(job.communicators["mpi"].transport, rank, size, index, nbytes, pieces)
        checked += 1
    for close in job.closers:
        close()
    print(f"rank {rank} of {size} parts ok: {checked} exchanges", flush=True)


if __name__ == "__main__":
    main()
