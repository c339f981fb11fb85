"""The allreduce benchmark behind ``benchmarks/allreduce.py`` (and ``gcurun bench
allreduce``): an nccl-tests-style table of gcurun's allreduce on each available backend
(as a script calls it: the engine's synchronous path) and, under an MPI launcher, of the
MPI library's own MPI_Allreduce, all measured in one run.

Every variant reduces the same float32 buffer in place with Sum. For each size the
variants take turns, several rounds in an order shuffled every round, and each keeps its
best round: the machine's noise hits all of them alike. A round's time is the slowest
rank's mean over its iterations. With ``--repeat`` the whole sweep runs several times,
far apart in time, and each variant keeps its best over all of them (a shared machine
has slow spells lasting seconds).

Under mpirun both backends run side by side in one process, each with its own engine:
the tcp one through a rendezvous that rank 0 serves for the occasion.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gcurun.runtime.api import ReduceOp
from gcurun.runtime.dtypes import aligned_empty
from gcurun.runtime.engine.background import start_engine
from gcurun.runtime.frontend.collectives import Collectives
from gcurun.runtime.settings import RuntimeEnv, read_runtime_env
from gcurun.runtime.transport.opening import open_transport

KIB, MIB = 1 << 10, 1 << 20


@dataclass(frozen=True)
class Row:
    nbytes: int
    seconds: dict[str, float]          # variant -> seconds per allreduce


@dataclass
class Job:
    """What the benchmark runs on: the synchronous collectives of an engine by backend,
    and MPI when launched by it."""

    rank: int
    size: int
    hosts: int
    communicators: dict[str, Collectives]
    transports: dict[str, Any]
    chunk_bytes: int
    mpi_comm: Any = None
    closers: tuple[Callable[[], None], ...] = ()


def default_sizes(smallest: int = 4 * KIB, largest: int = 256 * MIB) -> list[int]:
    sizes, n = [8], smallest
    while n <= largest:
        sizes.append(n)
        n *= 2
    return sizes


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="allreduce", description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="mpi,tcp",
                        help="gcurun backends to measure, comma-separated (default mpi,tcp; "
                             "those not available are skipped)")
    parser.add_argument("--min-bytes", type=int, default=4 * KIB)
    parser.add_argument("--max-bytes", type=int, default=256 * MIB)
    parser.add_argument("--rounds", type=int, default=5,
                        help="turns each variant takes per size; the best counts")
    parser.add_argument("--seconds", type=float, default=0.05,
                        help="time one round of one variant aims at")
    parser.add_argument("--repeat", type=int, default=1,
                        help="passes over every size, far apart in time; each variant "
                             "keeps its best")
    return parser.parse_args(list(argv))


def run(argv: Sequence[str]) -> str:
    """Run the benchmark on every rank; rank 0 returns the table, the others ''."""
    args = parse_args(argv)
    env = read_runtime_env()
    job = open_job(env, [b.strip() for b in args.backends.split(",") if b.strip()])
    try:
        sizes = default_sizes(args.min_bytes, args.max_bytes)
        # One buffer for every size, as nccl-tests does: allocated once, its huge pages
        # are not at the mercy of what later allocations find left.
        pool = aligned_empty(max(sizes) // 4 + 1, np.float32)
        # Whole passes over the sizes, so that the repeats of one size are far apart in
        # time and a noisy spell of the machine spoils at most one of them.
        passes = [[measure_size(job, pool, n, args.rounds, args.seconds, index)
                   for n in sizes] for index in range(max(1, args.repeat))]
        rows = [best_row([one[i] for one in passes]) for i in range(len(sizes))]
        _barrier(job)       # every rank is done before any leaves
    finally:
        for close in job.closers:
            close()
    return format_table(job, rows) if job.rank == 0 else ""


def open_job(env: RuntimeEnv, backends: Sequence[str]) -> Job:
    mpi_comm = None
    if env.under_mpi_launcher or env.backend == "mpi":
        from mpi4py import MPI

        mpi_comm = MPI.COMM_WORLD
    communicators: dict[str, Collectives] = {}
    closers: list[Callable[[], None]] = []
    if "mpi" in backends and mpi_comm is not None:
        opened = open_transport("mpi", env, range(mpi_comm.Get_size()), mpi_comm.Get_rank(),
                                hostname=_hostname(env), comm=mpi_comm)
        communicators["mpi"] = _engine(opened.transport, env, closers, opened.close)
    if "tcp" in backends and (env.rendezvous is not None or mpi_comm is not None):
        transport_, closer = _tcp_transport(env, mpi_comm)
        communicators["tcp"] = _engine(transport_, env, closers, closer)
    if not communicators:
        raise RuntimeError(f"none of the backends {', '.join(backends)} can run here; start "
                           "the benchmark under mpirun or gcurun")
    first = next(iter(communicators.values()))
    hostnames = first.allgather_object(_hostname(env))
    transports = {name: comm.engine.t for name, comm in communicators.items()}
    return Job(first.rank, first.size, len(set(hostnames)), communicators, transports,
               env.chunk_bytes, mpi_comm, tuple(closers))


def _engine(transport: Any, env: RuntimeEnv, closers: list[Callable[[], None]],
            close: Callable[[], None]) -> Collectives:
    closers.append(close)
    # Every call here is synchronous on every rank: no idle cycles, which would run beside
    # the other variants' rounds.
    engine = start_engine(transport, env, env.chunk_bytes, idle_cycles=False)
    closers.insert(0, engine.stop)
    return Collectives(engine)


def _hostname(env: RuntimeEnv) -> str:
    import socket

    return env.facts.hostname if env.facts and env.facts.hostname else socket.gethostname()


def _tcp_transport(env: RuntimeEnv, mpi_comm: Any) -> tuple[Any, Callable[[], None]]:
    """The tcp transport: through gcurun's rendezvous, or under mpirun through one that
    rank 0 serves for the occasion."""
    if env.rendezvous is not None and env.secret is not None and env.facts is not None:
        rank, size = env.facts.rank, env.facts.size
        opened = open_transport("tcp", env, range(size), rank, hostname=_hostname(env),
                                rendezvous=(env.rendezvous, env.secret))
    else:
        rank, size = mpi_comm.Get_rank(), mpi_comm.Get_size()
        opened = open_transport("tcp", env, range(size), rank, hostname=_hostname(env),
                                allgather=mpi_comm.allgather)
    return opened.transport, opened.close


def measure_size(job: Job, pool: np.ndarray, nbytes: int, rounds: int,
                 seconds: float, pass_index: int = 0) -> Row:
    if nbytes <= 64 * KIB:
        # Short calls: more, shorter rounds, so that some of them miss the machine's noise.
        rounds, seconds = rounds * 4, seconds / 4
    count = max(1, nbytes // 4)
    buf = pool[:count]      # every variant reduces this very buffer
    buf[...] = 0            # sums stay finite however many iterations
    variants: dict[str, Callable[[], Any]] = {}
    for name, comm in job.communicators.items():
        variants[f"ring({name})"] = _ring(comm, buf)
    if job.mpi_comm is not None:
        variants["native"] = _native(job.mpi_comm, buf)
    iterations = {name: _iterations(job, fn, seconds) for name, fn in variants.items()}
    best = {name: float("inf") for name in variants}
    for order in turns(list(variants), rounds, seed=pass_index << 40 | nbytes):
        for name in order:
            best[name] = min(best[name], _timed(job, variants[name], iterations[name]))
    return Row(count * 4, best)


def turns(names: Sequence[str], rounds: int, seed: int) -> list[list[str]]:
    """The order of the variants in each round: shuffled anew every round, the same on
    every rank (each variant is a collective). In a fixed order one variant would always
    run right after the same other one, and what that one leaves behind in the caches
    and the MPI library is not the same for all."""
    rng = random.Random(seed)
    orders = []
    for _ in range(rounds):
        order = list(names)
        rng.shuffle(order)
        orders.append(order)
    return orders


def best_row(rows: Sequence[Row]) -> Row:
    """One row whose every time is the best of ``rows``' times."""
    return Row(rows[0].nbytes, {name: min(row.seconds[name] for row in rows)
                                for name in rows[0].seconds})


def _ring(comm: Collectives, buf: np.ndarray) -> Callable[[], Any]:
    total = ReduceOp.SUM        # bound once, as a script's hvd.Sum is
    return lambda: comm.allreduce(buf, total, name="bench", inplace=True)


def _native(mpi_comm: Any, buf: np.ndarray) -> Callable[[], Any]:
    from mpi4py import MPI

    return lambda: mpi_comm.Allreduce(MPI.IN_PLACE, [buf, MPI.FLOAT], MPI.SUM)


def _slowest(job: Job, value: float) -> float:
    comm = next(iter(job.communicators.values()))
    return float(comm.allreduce(np.array([value]), ReduceOp.MAX, name="bench.time")[0])


def _barrier(job: Job) -> None:
    next(iter(job.communicators.values())).barrier()


def _iterations(job: Job, fn: Callable[[], Any], seconds: float) -> int:
    fn()
    estimate = _timed(job, fn, 2)
    return int(min(20000, max(5, seconds / max(estimate, 1e-7))))


def _timed(job: Job, fn: Callable[[], Any], iterations: int) -> float:
    _barrier(job)
    start = time.perf_counter()
    for _ in range(iterations):
        fn()
    return _slowest(job, (time.perf_counter() - start) / iterations)


def format_table(job: Job, rows: Sequence[Row]) -> str:
    """nccl-tests style: size, count, then time, algbw and busbw per variant, and each
    ring's bus bandwidth as a fraction of native MPI_Allreduce's."""
    names = list(rows[0].seconds)
    rings = [n for n in names if n != "native"]
    factor = 2 * (job.size - 1) / job.size if job.size > 1 else 1.0
    lines = [
        f"# gcurun allreduce: {job.size} ranks on {job.hosts} host(s), float32 sum, in place",
        "# ring(b) = gcurun's ring on backend b; native = the MPI library's MPI_Allreduce",
        "# time = mean per call of the slowest rank, best of the rounds of every pass; "
        f"busbw = algbw x 2(n-1)/n = algbw x {factor:.2f}",
        "#",
    ]
    head = f"#{'size':>11} {'count':>10}  type  "
    sub = f"#{'(B)':>11} {'(elems)':>10}        "
    for name in names:
        head += f"| {name:^27} "
        sub += f"| {'time(us)':>9} {'algbw':>7} {'busbw':>7} "
    ratios = [f"{r}/native" for r in rings] if "native" in names else []
    for ratio in ratios:
        head += f"| {ratio:>16} "
        sub += f"| {'(busbw)':>16} "
    lines += [head, sub]
    for row in rows:
        line = f" {row.nbytes:>11} {row.nbytes // 4:>10}  float "
        for name in names:
            seconds = row.seconds[name]
            algbw = row.nbytes / seconds / 1e9
            line += f"| {seconds * 1e6:>9.1f} {algbw:>7.2f} {algbw * factor:>7.2f} "
        for ring in rings if ratios else []:
            line += f"| {row.seconds['native'] / row.seconds[ring]:>16.2f} "
        lines.append(line)
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    import sys

    sys.stdout.write(run(sys.argv[1:]))
