"""Train a small CNN to tell four kinds of shapes apart, data-parallel over the ranks.

    gcurun -np 2 python examples/pytorch_train.py
    mpirun -np 2 python examples/pytorch_train.py
    python examples/pytorch_train.py                        # one process

The script follows Horovod's PyTorch recipe step by step, and its import line is the only
thing that differs from a script written for ``horovod.torch``: initialize, pin the
device by local rank, shard the data with DistributedSampler, scale the learning rate by
the number of ranks, wrap the optimizer in DistributedOptimizer, broadcast the initial
parameters and optimizer state from rank 0, write checkpoints on rank 0 only.

The dataset is generated, deterministically, from a seed: 28x28 grey images of a disk, a
ring, a square or a cross at a random place and size, with noise. ``--batch-size`` is per
rank, so 2 ranks at 32 see the same global batch of 64 as 1 rank at 64 (pass
``--lr`` accordingly, it is multiplied by the number of ranks); their losses then follow
each other step for step.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import torch
import torch.nn.functional as F
import torch.utils.data.distributed
from torch import nn, optim

import gcurun.runtime.torch as hvd

CLASSES = ("disk", "ring", "square", "cross")


def make_shapes(count: int, seed: int) -> torch.utils.data.TensorDataset:
    """``count`` labelled images; the same seed always gives the same dataset."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, len(CLASSES), count)
    cy, cx = rng.uniform(9, 19, (2, count, 1, 1))
    radius = rng.uniform(4, 8, (count, 1, 1))
    y, x = np.mgrid[0:28, 0:28].astype(np.float64)
    dy, dx = y[None] - cy, x[None] - cx
    distance = np.sqrt(dy ** 2 + dx ** 2)
    masks = np.stack([
        distance <= radius,
        (distance <= radius) & (distance >= radius - 1.8),
        np.maximum(np.abs(dy), np.abs(dx)) <= radius * 0.8,
        ((np.abs(dx) <= 1.3) | (np.abs(dy) <= 1.3)) & (np.maximum(np.abs(dy), np.abs(dx))
                                                       <= radius),
    ])
    picked = masks[labels, np.arange(count)]
    brightness = rng.uniform(0.6, 1.0, (count, 1, 1))
    images = picked * brightness + rng.normal(0.0, 0.25, picked.shape)
    return torch.utils.data.TensorDataset(
        torch.from_numpy(images.astype(np.float32)).unsqueeze(1),
        torch.from_numpy(labels.astype(np.int64)))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, kernel_size=3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, kernel_size=3, padding=1)
        self.fc1 = nn.Linear(32 * 7 * 7, 64)
        self.fc2 = nn.Linear(64, len(CLASSES))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return F.log_softmax(self.fc2(x), dim=1)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--test-batch-size", type=int, default=500)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.02, help="before scaling by ranks")
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--train-size", type=int, default=8192)
    parser.add_argument("--test-size", type=int, default=2048)
    parser.add_argument("--max-steps", type=int, default=0,
                        help="stop each epoch after this many steps (0: the whole epoch)")
    parser.add_argument("--log-interval", type=int, default=10)
    parser.add_argument("--fp16-allreduce", action="store_true")
    parser.add_argument("--use-adasum", action="store_true")
    parser.add_argument("--checkpoint-dir", default="",
                        help="write a checkpoint per epoch here (rank 0) and resume from it")
    return parser.parse_args()


def metric_average(value: float, name: str) -> float:
    return hvd.allreduce(torch.tensor(value), name=name).item()


def train(epoch: int, model: nn.Module, optimizer: optim.Optimizer,
          loader: torch.utils.data.DataLoader, sampler: torch.utils.data.Sampler,
          args: argparse.Namespace) -> None:
    model.train()
    sampler.set_epoch(epoch)
    for step, (data, target) in enumerate(loader):
        if args.max_steps and step >= args.max_steps:
            break
        optimizer.zero_grad()
        loss = F.nll_loss(model(data), target)
        loss.backward()
        optimizer.step()
        if step % args.log_interval == 0:
            # The mean over the ranks: the loss of the global batch.
            average = metric_average(loss.item(), "train_loss")
            if hvd.rank() == 0:
                print(f"epoch {epoch} step {step:4d} loss {average:.6f}", flush=True)


def test(model: nn.Module, loader: torch.utils.data.DataLoader,
         sampler: torch.utils.data.Sampler) -> None:
    model.eval()
    loss, correct = 0.0, 0.0
    with torch.no_grad():
        for data, target in loader:
            output = model(data)
            loss += F.nll_loss(output, target, reduction="sum").item()
            correct += (output.argmax(dim=1) == target).sum().item()
    seen = len(sampler)
    loss = metric_average(loss / seen, "test_loss")
    accuracy = metric_average(correct / seen, "test_accuracy")
    if hvd.rank() == 0:
        print(f"test loss {loss:.4f} accuracy {100 * accuracy:.1f}%", flush=True)


def main() -> None:
    args = parse_args()
    hvd.init()
    torch.manual_seed(args.seed)
    if torch.cuda.is_available():
        torch.cuda.set_device(hvd.local_rank())        # one device per rank
    torch.set_num_threads(1)                           # the ranks share the host's cores

    train_dataset = make_shapes(args.train_size, args.seed)
    test_dataset = make_shapes(args.test_size, args.seed + 1)
    train_sampler = torch.utils.data.distributed.DistributedSampler(
        train_dataset, num_replicas=hvd.size(), rank=hvd.rank(), seed=args.seed)
    train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=args.batch_size,
                                               sampler=train_sampler)
    test_sampler = torch.utils.data.distributed.DistributedSampler(
        test_dataset, num_replicas=hvd.size(), rank=hvd.rank(), shuffle=False)
    test_loader = torch.utils.data.DataLoader(test_dataset, batch_size=args.test_batch_size,
                                              sampler=test_sampler)

    model = Net()
    # Adasum needs no scaling: it does not average the gradients.
    lr_scaler = 1 if args.use_adasum else hvd.size()
    optimizer = optim.SGD(model.parameters(), lr=args.lr * lr_scaler, momentum=args.momentum)

    resume_from_epoch = 0
    checkpoint = os.path.join(args.checkpoint_dir, "checkpoint-{epoch}.pt")
    if args.checkpoint_dir and hvd.rank() == 0:
        for epoch in range(args.epochs, 0, -1):
            if os.path.exists(checkpoint.format(epoch=epoch)):
                resume_from_epoch = epoch
                break
    resume_from_epoch = hvd.broadcast_object(resume_from_epoch, root_rank=0,
                                             name="resume_from_epoch")
    if resume_from_epoch and hvd.rank() == 0:
        state = torch.load(checkpoint.format(epoch=resume_from_epoch))
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])

    # Every rank starts from rank 0's parameters and optimizer state.
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression,
                                         op=hvd.Adasum if args.use_adasum else hvd.Average)

    for epoch in range(resume_from_epoch, args.epochs):
        train(epoch, model, optimizer, train_loader, train_sampler, args)
        test(model, test_loader, test_sampler)
        if args.checkpoint_dir and hvd.rank() == 0:
            os.makedirs(args.checkpoint_dir, exist_ok=True)
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()},
                       checkpoint.format(epoch=epoch + 1))
    hvd.shutdown()


if __name__ == "__main__":
    main()
