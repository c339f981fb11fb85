"""Train the shapes classifier of pytorch_train.py on a Ray cluster, one rank per Ray actor.

    python examples/ray_train.py                         # a local Ray of --num-workers CPUs
    python examples/ray_train.py --address auto          # an existing Ray cluster
    python examples/ray_train.py --api ray-train         # through Ray Train instead

The training function is Horovod's recipe, as in pytorch_train.py (whose dataset and model
it imports): ``hvd.init()`` inside the function joins the job, the data is sharded by
rank, the optimizer is wrapped in DistributedOptimizer and rank 0's parameters are
broadcast. ``RayExecutor`` places the ranks with a placement group (PACK: as few nodes
as possible), gives each its rank environment, and returns what each rank returned.
With ``--api ray-train`` the same function is Ray Train's ``train_loop_per_worker``:
``DataParallelTrainer`` with gcurun's backend (``gcurun.ray.train.GcurunConfig``) starts
the workers, and ``hvd.init()`` inside joins them as one job; each rank sends its result
back through a Ray queue. Every rank returns the sum of its final parameters: they are
equal when the ranks trained as one model.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

import ray
import ray.cloudpickle

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pytorch_train  # noqa: E402  (beside this file)

from gcurun.ray import RayExecutor  # noqa: E402

# The workers get pytorch_train's code with the function, wherever they run.
ray.cloudpickle.register_pickle_by_value(pytorch_train)


def train(epochs: int, batch_size: int, lr: float, train_size: int, test_size: int,
          max_steps: int, seed: int) -> dict[str, Any]:
    """One rank's training; its last training loss (averaged over the ranks), its test
    accuracy (averaged too) and the sum of its parameters."""
    import torch
    import torch.nn.functional as F
    from torch import optim

    import gcurun.runtime.torch as hvd

    hvd.init()
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    train_set = pytorch_train.make_shapes(train_size, seed)
    test_set = pytorch_train.make_shapes(test_size, seed + 1)
    sampler = torch.utils.data.distributed.DistributedSampler(
        train_set, num_replicas=hvd.size(), rank=hvd.rank(), seed=seed)
    loader = torch.utils.data.DataLoader(train_set, batch_size=batch_size, sampler=sampler)
    model = pytorch_train.Net()
    optimizer = optim.SGD(model.parameters(), lr=lr * hvd.size(), momentum=0.9)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    loss = torch.tensor(0.0)
    for epoch in range(epochs):
        model.train()
        sampler.set_epoch(epoch)
        for step, (data, target) in enumerate(loader):
            if max_steps and step >= max_steps:
                break
            optimizer.zero_grad()
            loss = F.nll_loss(model(data), target)
            loss.backward()
            optimizer.step()
    model.eval()
    with torch.no_grad():
        shard = torch.arange(hvd.rank(), test_size, hvd.size())
        images, labels = test_set.tensors
        correct = (model(images[shard]).argmax(dim=1) == labels[shard]).float().mean()
    result = {"rank": hvd.rank(), "local_rank": hvd.local_rank(), "size": hvd.size(),
              "loss": hvd.allreduce(loss.detach(), name="loss").item(),
              "accuracy": hvd.allreduce(correct, name="accuracy").item(),
              "parameter_sum": float(sum(p.detach().double().sum() for p in model.parameters()))}
    hvd.shutdown()
    return result


def run_with_executor(args: argparse.Namespace,
                      options: dict[str, Any]) -> list[dict[str, Any]]:
    """Each rank's result, the ranks started by gcurun's RayExecutor."""
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=args.timeout),
                           num_workers=args.num_workers, cpus_per_worker=args.cpus_per_worker,
                           use_gpu=args.use_gpu)
    try:
        executor.start()
        return executor.run(train, kwargs=options)
    finally:
        executor.shutdown()


def _train_loop(config: dict[str, Any]) -> None:
    """Ray Train's loop: ``train`` with the run's options; the result to the queue."""
    options = dict(config)
    results = options.pop("results")
    results.put(train(**options))


def run_with_ray_train(args: argparse.Namespace,
                       options: dict[str, Any]) -> list[dict[str, Any]]:
    """Each rank's result, the ranks started by Ray Train with gcurun's backend."""
    import tempfile

    from ray.train import RunConfig, ScalingConfig
    from ray.util.queue import Queue

    from gcurun.ray.train import DataParallelTrainer, GcurunConfig

    results = Queue(actor_options={"num_cpus": 0})
    try:
        with tempfile.TemporaryDirectory(prefix="ray-train-") as storage:
            DataParallelTrainer(
                _train_loop, train_loop_config={**options, "results": results},
                backend_config=GcurunConfig(timeout_s=args.timeout),
                scaling_config=ScalingConfig(
                    num_workers=args.num_workers, use_gpu=args.use_gpu,
                    resources_per_worker={"CPU": args.cpus_per_worker}),
                run_config=RunConfig(name="gcurun-ray-train", storage_path=storage)).fit()
        found = [results.get(timeout=args.timeout) for _ in range(args.num_workers)]
    finally:
        results.shutdown()
    return sorted(found, key=lambda result: result["rank"])


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--api", choices=("executor", "ray-train"), default="executor",
                        help="RayExecutor, or Ray Train's DataParallelTrainer")
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--cpus-per-worker", type=float, default=1)
    parser.add_argument("--use-gpu", action="store_true")
    parser.add_argument("--address", default=None,
                        help="a Ray cluster to join (default: start a local one)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=0.02, help="before scaling by ranks")
    parser.add_argument("--train-size", type=int, default=4096)
    parser.add_argument("--test-size", type=int, default=1024)
    parser.add_argument("--max-steps", type=int, default=0,
                        help="stop each epoch after this many steps (0: the whole epoch)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--timeout", type=float, default=120, help="start/rendezvous, s")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Run the job on the Ray this process is connected to (else start or join one per
    ``--address``); print and return each rank's result."""
    args = parse_args(argv)
    started_ray = not ray.is_initialized()
    if started_ray:
        if args.address:
            ray.init(address=args.address)
        else:
            ray.init(num_cpus=int(args.num_workers * args.cpus_per_worker + 0.999),
                     include_dashboard=False)
    options = {"epochs": args.epochs, "batch_size": args.batch_size, "lr": args.lr,
               "train_size": args.train_size, "test_size": args.test_size,
               "max_steps": args.max_steps, "seed": args.seed}
    try:
        run = run_with_ray_train if args.api == "ray-train" else run_with_executor
        results = run(args, options)
    finally:
        if started_ray:
            ray.shutdown()
    for result in results:
        print(f"rank {result['rank']} (local rank {result['local_rank']}): loss "
              f"{result['loss']:.4f} accuracy {100 * result['accuracy']:.1f}% parameter sum "
              f"{result['parameter_sum']:.6f}", flush=True)
    return results


if __name__ == "__main__":
    main()
