"""Engine benchmark: ResNet-50's gradients through gcurun's background engine.

    gcurun -np 2 python benchmarks/engine.py                 # the backend gcurun picks
    mpirun -np 2 python benchmarks/engine.py                 # mpi backend
    mpirun -np 2 python benchmarks/engine.py --backend tcp   # tcp backend, rendezvous
                                                             # served by rank 0
    python benchmarks/engine.py --hosts 2,4 --rate 2gbit     # across namespace hosts
                                                             # (as root; see below)

Each rank holds ResNet-50's 161 gradient tensors (torchvision's layer shapes, 25.6 M
float32 parameters) and times three ways of averaging them, in place:

  fused    every tensor (a numpy array of its own) submitted with allreduce_async_ in
           this rank's own order (rank 0 forwards, rank 1 backwards, others shuffled),
           then all synchronized: the engine negotiates, fuses and reduces them;
  single   one allreduce_ of a single buffer of the same total size;
  unfused  161 synchronous allreduce_ calls in a row: each is negotiated and reduced
           alone, so nothing can be fused;
  views    as fused, but the tensors are views of one buffer: what separate
           allocations (small pages, scattered memory) cost, apart from the engine.

The variants take turns for several rounds; a round's time is the slowest rank's mean
per step, and the table shows the median and best round of each.

``--hosts 2,4`` runs it across hosts instead: it builds namespace hosts whose links are
shaped to ``--rate`` (tests/cluster/netns-cluster.sh, as benchmarks/cluster_allreduce.py
does; ``--cluster DIR`` takes hosts built already), starts this script under ``gcurun
-H h1:P,...`` (P = ``--per-host``) for each host count in turn, ``--repeat`` times, and
prints every run's line and the medians over the runs: there the link, not this
machine's memory, decides what a step costs, and the goal is fused <= 1.15 x single in
every run. ``--json FILE`` keeps every round of every run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import gcurun.runtime as hvd  # noqa: E402
from benchmarks import engine_hosts  # noqa: E402


def resnet50_shapes() -> list[tuple[int, ...]]:
    """The parameter shapes of torchvision's ResNet-50, in definition order."""
    shapes: list[tuple[int, ...]] = [(64, 3, 7, 7), (64,), (64,)]
    inplanes = 64
    for width, blocks in ((64, 3), (128, 4), (256, 6), (512, 3)):
        out = width * 4
        for block in range(blocks):
            shapes += [(width, inplanes, 1, 1), (width,), (width,),
                       (width, width, 3, 3), (width,), (width,),
                       (out, width, 1, 1), (out,), (out,)]
            if block == 0:
                shapes += [(out, inplanes, 1, 1), (out,), (out,)]
            inplanes = out
    return shapes + [(1000, 2048), (1000,)]


class Gradients(NamedTuple):
    """One rank's copies of ResNet-50's gradients, and the order it submits them in."""

    grads: list[np.ndarray]         # one array each
    flat: np.ndarray                # all of them in one buffer
    views: list[np.ndarray]         # the same tensors as views of one other buffer
    order: list[int]                # rank 0 forwards, rank 1 backwards, others shuffled
    names: list[str]


def gradients(rank: int) -> Gradients:
    shapes = resnet50_shapes()
    rng = np.random.default_rng(rank)
    grads = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    flat = np.concatenate([g.reshape(-1) for g in grads])
    order = list(range(len(grads)))
    if rank == 1:
        order.reverse()
    elif rank > 1:
        rng.shuffle(order)
    # The views share one allocation, on huge pages like `flat`: the difference to
    # `grads` is what separate allocations cost, not the engine.
    backing = np.empty_like(flat)
    views, offset = [], 0
    for grad in grads:
        views.append(backing[offset:offset + grad.size].reshape(grad.shape))
        views[-1][...] = grad
        offset += grad.size
    return Gradients(grads, flat, views, order, [f"resnet50.{i}" for i in range(len(grads))])


def submit_all(tensors: list[np.ndarray], order: list[int], names: list[str]) -> None:
    """Average ``tensors`` in place: every one submitted async in ``order``, then all
    synchronized (the engine negotiates, fuses and reduces them)."""
    handles = [hvd.allreduce_async_(tensors[i], name=names[i]) for i in order]
    for handle in handles:
        hvd.synchronize(handle)


def start(backend: str | None) -> None:
    """init() on the requested backend; under mpirun, tcp gets a rendezvous from rank 0."""
    if backend == "tcp" and not os.environ.get("GCURUN_RENDEZVOUS"):
        import socket

        from mpi4py import MPI

        from gcurun.rendezvous.server import RendezvousServer, new_secret

        comm = MPI.COMM_WORLD
        rank, size = comm.Get_rank(), comm.Get_size()
        server = None
        if rank == 0:
            secret = new_secret()
            server = RendezvousServer("127.0.0.1", 0, secret=secret, size=size)
            server.start()
            shared = (f"{server.address[0]}:{server.address[1]}", secret.hex())
        else:
            shared = None
        address, secret = comm.bcast(shared, root=0)
        os.environ.update(GCURUN_RENDEZVOUS=address, GCURUN_SECRET=secret,
                          GCURUN_RANK=str(rank), GCURUN_SIZE=str(size),
                          GCURUN_HOSTNAME=socket.gethostname())
        start.server = server  # type: ignore[attr-defined]
    if backend:
        os.environ["GCURUN_BACKEND"] = backend
    hvd.init()


def engine_batches() -> int:
    """How many batches (ring passes, gathers, other ops) the job's engine has run."""
    from gcurun.runtime.frontend.state import current_state

    state = current_state()
    return 0 if state is None else int(state.engine.executor.stats["batches"])


def timed(fn: Callable[[], object], steps: int) -> tuple[float, int]:
    """The slowest rank's mean seconds per step, and the batches this rank's engine ran
    meanwhile (synchronous calls on the engine's quick path are not counted)."""
    hvd.barrier()
    batches = engine_batches()
    began = time.perf_counter()
    for _ in range(steps):
        fn()
    mine = (time.perf_counter() - began) / steps
    batches = engine_batches() - batches
    return float(hvd.allreduce(np.array([mine]), op=hvd.Max, name="bench.time")[0]), batches


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("mpi", "tcp"), default=None)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=3, help="steps per round")
    engine_hosts.add_options(parser)
    args = parser.parse_args(argv)
    if args.hosts is not None:
        sys.exit(engine_hosts.main(args))
    start(args.backend)
    rank, size = hvd.rank(), hvd.size()
    grads, flat, views, order, names = gradients(rank)

    def fused() -> None:
        submit_all(grads, order, names)

    def fused_views() -> None:
        submit_all(views, order, names)

    def single() -> None:
        hvd.allreduce_(flat, name="resnet50.flat")

    def unfused() -> None:
        for grad, name in zip(grads, names, strict=True):
            hvd.allreduce_(grad, name=name)

    variants = {"fused": fused, "single": single, "unfused": unfused, "views": fused_views}
    for fn in variants.values():
        fn()
        fn()
    times: dict[str, list[float]] = {name: [] for name in variants}
    batches = {name: 0 for name in variants}    # ring passes (batches) the engine ran
    for _ in range(args.rounds):
        for name, fn in variants.items():
            seconds, ran = timed(fn, args.steps)
            times[name].append(seconds)
            batches[name] += ran
    if rank == 0:
        print(table(times, size, len(grads), flat.size))
        if args.json_out is not None:
            per_step = {n: b / (args.rounds * args.steps) for n, b in batches.items()}
            engine_hosts.write_results(args.json_out, times, size, hvd.backend(), per_step)
    hvd.shutdown()


def table(times: dict[str, list[float]], size: int, count: int, elements: int) -> str:
    median = {name: statistics.median(t) for name, t in times.items()}
    best = {name: min(t) for name, t in times.items()}
    what = {
        "fused": f"{count} allreduce_async_, own order per rank",
        "single": f"1 allreduce_ of one {elements * 4 / 1e6:.1f} MB buffer",
        "unfused": f"{count} synchronous allreduce_, one by one",
        "views": "fused, the tensors being views of one buffer",
    }
    lines = [
        f"# gcurun engine: ResNet-50 gradients ({count} tensors, {elements:,} float32), "
        f"{size} ranks, backend {hvd.backend()}, average in place",
        f"# {'variant':<8} {'what':<44} {'median ms':>10} {'best ms':>9}",
    ]
    for name in times:
        lines.append(f"  {name:<8} {what[name]:<44} {median[name] * 1e3:>10.2f} "
                     f"{best[name] * 1e3:>9.2f}")
    lines += [
        f"# fused / single   = {median['fused'] / median['single']:.2f} (median), "
        f"{best['fused'] / best['single']:.2f} (best); target <= 1.15",
        f"# unfused / fused  = {median['unfused'] / median['fused']:.2f} (median), "
        f"{best['unfused'] / best['fused']:.2f} (best); target >= 3",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main(sys.argv[1:])
