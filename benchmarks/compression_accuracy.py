"""What ``Compression.fp16`` costs in accuracy: the torch MLP trained with and without it.

    gcurun -np 2 python benchmarks/compression_accuracy.py [--steps 200] [--batch-size 64]
        [--train 8192] [--test 2048] [--lr 0.05] [--seed 0] [--threads 1] [--json FILE]

The task is synthetic and learnable: inputs are 16 normal factors ``z`` mixed into 1,024
features by a fixed random matrix, each labelled by a fixed random linear teacher (the
largest of 10 scores ``z @ W``); a held-out set is drawn and labelled the same way. The
model is the MLP of benchmarks/torch_ddp.py (``mlp`` of
examples/pytorch_synthetic_benchmark.py) with a 10-class head. Every rank draws the same
data from ``--seed`` and trains on its own slice of each global batch, twice: with
gcurun.runtime.torch.DistributedOptimizer under ``Compression.none`` and under
``Compression.fp16`` (gradients sent as float16), from the same initial weights on the
same batches. Rank 0 prints each run's final training loss (over the whole training set)
and held-out accuracy, and the largest difference between the two runs' parameters at the
end. With one rank nothing is sent, so nothing is compressed: run it under a launcher
with two ranks or more.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
INPUTS, CLASSES, FACTORS = 1024, 10, 16
COMPRESSIONS = ("none", "fp16")


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="training steps")
    parser.add_argument("--batch-size", type=int, default=64, help="per rank")
    parser.add_argument("--train", type=int, default=8192, help="training samples")
    parser.add_argument("--test", type=int, default=2048, help="held-out samples")
    parser.add_argument("--lr", type=float, default=0.05, help="SGD's (momentum 0.9)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    parser.add_argument("--json", type=Path, default=None, help="rank 0 writes results here")
    args = parser.parse_args(list(argv))
    if min(args.steps, args.batch_size, args.train, args.test, args.threads) < 1:
        parser.error("--steps, --batch-size, --train, --test and --threads must be at "
                     "least 1")
    return args


@dataclass(frozen=True)
class Task:
    """Inputs and the teacher's labels: a training set and a held-out set."""

    x_train: Any
    y_train: Any
    x_test: Any
    y_test: Any


@dataclass(frozen=True)
class Outcome:
    """One training run's end: loss over the whole training set, held-out accuracy."""

    compression: str
    train_loss: float
    test_accuracy: float


def teacher_task(seed: int, train: int, test: int) -> Task:
    """The same task for the same seed, on every rank."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    mixing = torch.randn(FACTORS, INPUTS, generator=generator) / FACTORS ** 0.5
    teacher = torch.randn(FACTORS, CLASSES, generator=generator)
    z = torch.randn(train + test, FACTORS, generator=generator)
    x, y = z @ mixing, (z @ teacher).argmax(dim=1)
    return Task(x[:train], y[:train], x[train:], y[train:])


def batches(seed: int, train: int, global_batch: int, steps: int) -> list[Any]:
    """Each step's global batch (indices into the training set), epoch by epoch in an
    order drawn from ``seed``: the same for both runs and on every rank."""
    import torch

    generator = torch.Generator().manual_seed(seed + 1)
    order = torch.cat([torch.randperm(train, generator=generator)
                       for _ in range(-(-steps * global_batch // train))])
    return [order[i * global_batch:(i + 1) * global_batch] for i in range(steps)]


def train(hvd: Any, compression: str, task: Task, args: argparse.Namespace) -> tuple[Any, Outcome]:
    """One run: the model at the end and its outcome."""
    import torch
    import torch.nn.functional as F

    sys.path.insert(0, str(ROOT / "examples"))
    from pytorch_synthetic_benchmark import mlp

    torch.manual_seed(args.seed)
    model = mlp(INPUTS, CLASSES)
    optimizer = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9),
        named_parameters=[(f"{compression}.{n}", p) for n, p in model.named_parameters()],
        compression=getattr(hvd.Compression, compression))
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    rank, size = hvd.rank(), hvd.size()
    for indices in batches(args.seed, len(task.y_train), args.batch_size * size, args.steps):
        mine = indices[rank::size]
        optimizer.zero_grad()
        F.cross_entropy(model(task.x_train[mine]), task.y_train[mine]).backward()
        optimizer.step()
    # Each rank scores its slice of both sets; the sums are added over the ranks.
    with torch.no_grad():
        loss = F.cross_entropy(model(task.x_train[rank::size]), task.y_train[rank::size],
                               reduction="sum")
        right = (model(task.x_test[rank::size]).argmax(dim=1) ==
                 task.y_test[rank::size]).sum()
    sums = hvd.allreduce(torch.stack([loss, right.to(loss.dtype)]).double(), op=hvd.Sum,
                         name=f"{compression}.score")
    return model, Outcome(compression, float(sums[0]) / len(task.y_train),
                          float(sums[1]) / len(task.y_test))


def largest_difference(a: Any, b: Any) -> tuple[float, str, float]:
    """The largest absolute difference between two models' parameters, the parameter's
    name, and the largest magnitude of any of ``a``'s parameters (the scale)."""
    import torch

    with torch.no_grad():
        pairs = zip(a.named_parameters(), b.parameters(), strict=True)
        diff, name = max((float((p - q).abs().max()), n) for (n, p), q in pairs)
        scale = max(float(p.abs().max()) for p in a.parameters())
    return diff, name, scale


def report(outcomes: Sequence[Outcome], difference: tuple[float, str, float], size: int,
           params: int, args: argparse.Namespace) -> str:
    diff, name, scale = difference
    lines = [
        f"# compression accuracy: the MLP ({params / 1e6:.1f} M parameters, {CLASSES} "
        f"classes), {size} rank(s), {args.steps} steps of {args.batch_size} samples per "
        f"rank, SGD lr {args.lr:g} momentum 0.9; a linear teacher's labels of 16 factors, "
        f"{args.train} training and {args.test} held-out samples, seed {args.seed}",
        "",
        "| compression | final training loss | held-out accuracy |",
        "| --- | --- | --- |",
        *(f"| {o.compression} | {o.train_loss:.4f} | {o.test_accuracy:.4f} |"
          for o in outcomes),
        "",
        f"# largest parameter difference, none vs fp16: {diff:.3g} (in {name}; the largest "
        f"parameter is {scale:.3g})",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    import torch

    import gcurun.runtime.torch as hvd

    hvd.init()
    torch.set_num_threads(args.threads)
    task = teacher_task(args.seed, args.train, args.test)
    models, outcomes = {}, []
    for compression in COMPRESSIONS:
        models[compression], outcome = train(hvd, compression, task, args)
        outcomes.append(outcome)
    difference = largest_difference(models["none"], models["fp16"])
    if hvd.rank() == 0:
        params = sum(p.numel() for p in models["none"].parameters())
        print(report(outcomes, difference, hvd.size(), params, args), flush=True)
        if args.json is not None:
            args.json.write_text(json.dumps({
                "size": hvd.size(), "params": params, "steps": args.steps,
                "outcomes": [asdict(o) for o in outcomes],
                "largest_difference": {"value": difference[0], "parameter": difference[1],
                                       "largest_parameter": difference[2]}}) + "\n")
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main(sys.argv[1:]))
