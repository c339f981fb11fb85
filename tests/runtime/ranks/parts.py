"""Rank script (under mpirun): ``sendrecv_parts`` on both transports, around a ring.

Each rank sends a message of known bytes to its right neighbour, cut into pieces its
own way (some empty, each a separate allocation, like a model's tensors), and receives
its left neighbour's message into pieces cut as that neighbour cuts it: small messages
(through the rings or sockets) and large ones (single-copy reads), one piece or more
than one system call takes. The mpi transport then runs again with messages limited to
4 KiB, so that large pieces, and large single buffers sent by ``sendrecv``, go as
several messages. Last, on tcp, each side of an exchange
moves single buffers or pieces, through the calls that take the quick large exchange
(``SingleCopy.swapper``) between two ranks that read each other, or through the
general path alone: the quick way must understand both shapes and a peer on the
general path. Prints one line per rank, with how many exchanges took the quick way."""

from __future__ import annotations

import numpy as np

from gcurun.runtime.bench import open_job
from gcurun.runtime.settings import read_runtime_env
from gcurun.runtime.transport import mpi as mpi_transport
from gcurun.runtime.transport._tcp_common import MAX_EXTENTS

CASES = [(100, 1), (100, 4), (4096, 7), (1 << 20, 1), (1 << 20, 13), ((1 << 20) + 3, 40),
         (3 << 20, 1500)]              # (bytes, pieces)
# More pieces than a descriptor may list: the tcp sender copies them into one buffer.
MANY = (MAX_EXTENTS + 100) * 2


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


# (even ranks' side, odd ranks' side) of a mixed exchange: (single buffers or pieces,
# whether by the calls that may take the quick way or by the general path alone)
MODES = [(("single", True), ("single", True)), (("pieces", True), ("pieces", True)),
         (("single", True), ("pieces", False)), (("single", False), ("pieces", True))]


def mixed(t: object, rank: int, size: int, index: int, nbytes: int, pieces: int) -> None:
    right, left = (rank + 1) % size, (rank - 1) % size
    rng = np.random.default_rng([rank, index, 1])
    shape, quick = MODES[index % len(MODES)][rank % 2]
    if shape == "single":
        sends, recvs = [pattern(rank, nbytes)], [np.zeros(nbytes, np.uint8)]
    else:
        sends = cut(pattern(rank, nbytes), pieces, rng)
        recvs = cut(np.zeros(nbytes, np.uint8), pieces, rng)
    if not quick:
        t._transfer(sends, right, recvs, left, quick=False)  # type: ignore[attr-defined]
    elif shape == "single":
        t.sendrecv(sends[0], right, recvs[0], left)  # type: ignore[attr-defined]
    else:
        t.sendrecv_parts(sends, right, recvs, left)  # type: ignore[attr-defined]
    assert np.array_equal(np.concatenate(recvs), pattern(left, nbytes)), \
        ("mixed", nbytes, pieces, shape, quick)


def counting(swaps: dict) -> list[int]:
    """Count the exchanges that each quick large exchange of ``swaps`` completed."""
    done = [0]

    def counted(swap):  # type: ignore[no-untyped-def]
        def run(sendbufs, recvbufs, nbytes):  # type: ignore[no-untyped-def]
            completed = swap(sendbufs, recvbufs, nbytes)
            done[0] += completed
            return completed
        return run

    for peer, swap in list(swaps.items()):
        swaps[peer] = counted(swap)
    return done


def settle(job: object) -> None:
    """Leave MPI exchanges only together. A rank whose last exchange is done may still
    owe its peer some progress of the MPI library (Open MPI progresses only inside MPI
    calls, and its single-copy transfers end with a message back to the sender): were
    it to go on to wait on tcp while the peer still waits for that, neither would move."""
    job.transports["mpi"].comm.Barrier()  # type: ignore[attr-defined]


def main() -> None:
    job = open_job(read_runtime_env(), ["mpi", "tcp"])
    rank, size = job.rank, job.size
    checked = 0
    for backend, transport in job.transports.items():
        cases = CASES + ([(MANY, MANY // 2)] if backend == "tcp" else [])
        for index, (nbytes, pieces) in enumerate(cases):
            exchange(transport, rank, size, index, nbytes, pieces)
            checked += 1
        if backend == "mpi":
            settle(job)
    tcp = job.transports["tcp"]
    quick = counting(tcp._swaps)  # type: ignore[attr-defined]
    for index, (nbytes, pieces) in enumerate(CASES):
        mixed(tcp, rank, size, index, nbytes, max(pieces, 3))
        checked += 1
    mpi_transport.PIECE_BYTES = 4096
    mpi = job.transports["mpi"]
    for index, (nbytes, pieces) in enumerate(CASES):
        exchange(mpi, rank, size, index, nbytes, pieces)
        checked += 1
    right, left = (rank + 1) % size, (rank - 1) % size
    for nbytes, _ in CASES:     # single buffers through sendrecv, over the limit too
        got = np.zeros(nbytes, np.uint8)
        mpi.sendrecv(pattern(rank, nbytes), right, got, left)  # type: ignore[attr-defined]
        assert np.array_equal(got, pattern(left, nbytes)), ("single", nbytes)
        checked += 1
    settle(job)
    for close in job.closers:
        close()
    print(f"rank {rank} of {size} parts ok: {checked} exchanges, {quick[0]} quick",
          flush=True)


if __name__ == "__main__":
    main()
