"""gcurun's DistributedOptimizer against torch's DistributedDataParallel (gloo backend):
the same model, the same ranks, in the same run.

    python benchmarks/torch_ddp.py                    # starts 2 ranks itself (tcp backend)
    gcurun -np 2 python benchmarks/torch_ddp.py
    mpirun -np 2 python benchmarks/torch_ddp.py       # gcurun's mpi backend

Each rank trains two copies of one model (same weights, same synthetic batch): one with
``gcurun.runtime.torch.DistributedOptimizer``, one wrapped in DDP over a gloo process
group. The two take turns, ``--rounds`` times, so the machine's noise hits both alike;
a round times ``--steps`` training steps after ``--warmup`` untimed ones, and its step
time is the slowest rank's mean. A third copy trains on each rank alone, without any
communication: the floor both are measured against. Rank 0 prints every round and the
medians.

Options: --model mlp|resnet18-narrow|resnet18  --batch-size 64  --steps 20  --warmup 5
         --rounds 5  --threads 1 (torch threads per rank)  --np 2 (when starting ranks)
         --phases (where each variant's steps went, as benchmarks/cluster_training.py's
         --phases: CPU per step, gcurun's ring passes, transfers, reductions and engine
         cycles)
"""

from __future__ import annotations

import argparse
import copy
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LAUNCHER_VARIABLES = ("GCURUN_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMIX_RANK")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="mlp",
                        choices=["mlp", "resnet18-narrow", "resnet18"])
    parser.add_argument("--batch-size", type=int, default=64, help="per rank")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--np", type=int, default=2, help="ranks to start (without a "
                        "launcher)")
    parser.add_argument("--phases", action="store_true",
                        help="also say where each variant's steps went")
    return parser.parse_args(argv)


# -- starting the ranks when no launcher did -------------------------------------------


def spawn(args: argparse.Namespace, argv: list[str]) -> int:
    """Start ``--np`` ranks of this script the way gcurun's launcher does: a rendezvous
    served from here, the rank variables, torch's MASTER_ADDR/MASTER_PORT."""
    sys.path.insert(0, str(ROOT))
    from gcurun.rendezvous.server import RendezvousServer, new_secret

    secret = new_secret()
    with RendezvousServer("127.0.0.1", 0, secret=secret, size=args.np) as server:
        host, port = server.address
        master_port = _free_port()
        procs = []
        for rank in range(args.np):
            env = {k: v for k, v in os.environ.items()
                   if not k.startswith(("GCURUN_", "OMPI_", "PMIX_", "PMI_"))}
            env.update({
                "GCURUN_RANK": str(rank), "GCURUN_SIZE": str(args.np),
                "GCURUN_LOCAL_RANK": str(rank), "GCURUN_LOCAL_SIZE": str(args.np),
                "GCURUN_CROSS_RANK": "0", "GCURUN_CROSS_SIZE": "1",
                "GCURUN_RENDEZVOUS": f"{host}:{port}", "GCURUN_SECRET": secret.hex(),
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(master_port),
                "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                            env.get("PYTHONPATH")])),
            })
            procs.append(subprocess.Popen([sys.executable, __file__, *argv], env=env))
        codes = [proc.wait() for proc in procs]
    return next((code for code in codes if code), 0)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# -- one rank ------------------------------------------------------------------------------


def sgd_step(model: Any, optimizer: Any, data: Any, target: Any) -> Callable[[], None]:
    """One training step of ``model`` on the fixed batch, as ``run()``."""
    import torch.nn.functional as F

    def run() -> None:
        optimizer.zero_grad()
        F.cross_entropy(model(data), target).backward()
        optimizer.step()
    return run


def run_rank(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    import gcurun.runtime as runtime
    import gcurun.runtime.torch as hvd

    sys.path.insert(0, str(ROOT))
    from benchmarks.cluster_training_rank import gathered, with_phases

    sys.path.insert(0, str(ROOT / "examples"))
    from pytorch_synthetic_benchmark import MODELS, synthetic_batch

    hvd.init()
    torch.set_num_threads(args.threads)
    _init_gloo(hvd, dist)
    torch.manual_seed(0)
    base = MODELS[args.model]()
    data, target = synthetic_batch(args.model, args.batch_size, 32)

    ours = copy.deepcopy(base)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(ours.parameters(), lr=0.01, momentum=0.9),
                                   named_parameters=ours.named_parameters())
    hvd.broadcast_parameters(ours.state_dict(), root_rank=0)
    ddp = torch.nn.parallel.DistributedDataParallel(copy.deepcopy(base))
    ddp_opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    alone = copy.deepcopy(base)
    alone_opt = torch.optim.SGD(alone.parameters(), lr=0.01, momentum=0.9)

    def step(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> Callable[[], None]:
        return sgd_step(model, optimizer, data, target)

    variants = {"gcurun": step(ours, opt), "ddp": step(ddp, ddp_opt),
                "no communication": step(alone, alone_opt)}
    phases, timed = with_phases(args, variants,
                                lambda run: _timed(hvd, run, args.warmup, args.steps))
    times: dict[str, list[float]] = {name: [] for name in variants}
    for round_ in range(args.rounds):
        order = list(variants)[round_ % 3:] + list(variants)[:round_ % 3]
        for name in order:
            times[name].append(timed(variants[name]))
        if hvd.rank() == 0:
            print(f"round {round_}: " + "  ".join(f"{n} {times[n][-1] * 1e3:.1f} ms/step"
                                                  for n in variants), flush=True)
    records = gathered(runtime, phases)
    if hvd.rank() == 0:
        params = sum(p.numel() for p in base.parameters())
        print(report(args, hvd.size(), runtime.backend(), params, times), flush=True)
        if records is not None:
            print(phase_report(args.model, params, times, records), flush=True)
    dist.destroy_process_group()
    hvd.shutdown()


def _init_gloo(hvd, dist) -> None:  # noqa: ANN001
    """A gloo process group over the same ranks: at MASTER_ADDR/MASTER_PORT when the
    launcher set them, else at a port rank 0 picks and tells the others."""
    address = os.environ.get("MASTER_ADDR")
    port = os.environ.get("MASTER_PORT")
    if not address or not port:
        offer = ("127.0.0.1", _free_port()) if hvd.rank() == 0 else None
        address, port = hvd.broadcast_object(offer, root_rank=0, name="gloo.address")
    dist.init_process_group("gloo", init_method=f"tcp://{address}:{port}",
                            rank=hvd.rank(), world_size=hvd.size())


def _timed(hvd, run: Callable[[], None], warmup: int, steps: int) -> float:  # noqa: ANN001
    """Seconds per step of the slowest rank, after ``warmup`` untimed steps."""
    import torch

    for _ in range(warmup):
        run()
    hvd.barrier()
    start = time.perf_counter()
    for _ in range(steps):
        run()
    mine = (time.perf_counter() - start) / steps
    return float(hvd.allreduce(torch.tensor([mine], dtype=torch.float64), op=hvd.Max,
                               name="bench.time")[0])


def report(args: argparse.Namespace, size: int, backend: str, params: int,
           times: dict[str, list[float]]) -> str:
    median = {name: statistics.median(values) for name, values in times.items()}
    best = {name: min(values) for name, values in times.items()}
    lines = [
        f"# {args.model}: {params / 1e6:.1f} M parameters ({params * 4 / 1e6:.1f} MB of "
        f"float32 gradients per step), batch {args.batch_size} per rank, {size} ranks, "
        f"{args.threads} torch thread(s) per rank; gcurun backend {backend}",
        f"# {args.rounds} rounds of {args.steps} timed steps after {args.warmup} warm-up "
        "steps; a round's time is the slowest rank's mean",
        "",
        "# no communication: the same training step on each rank alone (the floor)",
        "",
        "| variant | median ms/step | best ms/step | median / DDP | over the floor (ms) |",
        "| --- | --- | --- | --- | --- |",
    ]
    floor = median["no communication"]
    for name in times:
        lines.append(f"| {name} | {median[name] * 1e3:.1f} | {best[name] * 1e3:.1f} | "
                     f"{median[name] / median['ddp']:.2f} | "
                     f"{(median[name] - floor) * 1e3:.1f} |")
    return "\n".join(lines)


def phase_report(model: str, params: int, times: dict[str, list[float]],
                 records: list[Any]) -> str:
    """``--phases``: the table of benchmarks/cluster_training.py's ``--phases`` for one
    host's ranks."""
    from benchmarks.cluster_allreduce import Layout
    from benchmarks.cluster_training import LayoutResult, ModelResult, format_phases

    result = LayoutResult(Layout(1, len(records)), cores=os.cpu_count() or 1, rate_bits=0)
    result.models[model] = ModelResult(model, params, times, records)
    return "\n" + format_phases(result)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if not any(os.environ.get(name) for name in LAUNCHER_VARIABLES):
        return spawn(args, argv)
    run_rank(args)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
