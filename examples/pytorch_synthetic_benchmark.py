"""Training throughput on synthetic data, measured the way Horovod's PyTorch benchmark does.

    gcurun -np 2 python examples/pytorch_synthetic_benchmark.py
    mpirun -np 2 python examples/pytorch_synthetic_benchmark.py --model mlp

Warm-up batches first, then ``--num-iters`` timed iterations of
``--num-batches-per-iter`` training steps each; every iteration gives images per second
per rank, reported as mean +- 1.96 standard deviations, and the total over the ranks.
The models are defined here (torchvision is not needed): ResNet-18 for 32-pixel images
(``resnet18``, and ``resnet18-narrow`` at half the width, a quarter of the compute), and
an MLP of 9.4 M parameters whose gradients weigh more than its compute (``mlp``).
"""

from __future__ import annotations

import argparse
import timeit

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn, optim

import gcurun.runtime.torch as hvd


class BasicBlock(nn.Module):
    def __init__(self, inputs: int, outputs: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(inputs, outputs, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(outputs)
        self.conv2 = nn.Conv2d(outputs, outputs, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(outputs)
        self.shortcut = nn.Sequential()
        if stride != 1 or inputs != outputs:
            self.shortcut = nn.Sequential(nn.Conv2d(inputs, outputs, 1, stride, bias=False),
                                          nn.BatchNorm2d(outputs))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class ResNet18(nn.Module):
    """ResNet-18 with a 3x3 stem, for 32-pixel images: 11.7 M parameters at the usual
    width of 64, 2.9 M at width 32."""

    def __init__(self, classes: int = 1000, width: int = 64):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False),
                                  nn.BatchNorm2d(width), nn.ReLU())
        layers, inputs = [], width
        for scale, stride in ((1, 1), (2, 2), (4, 2), (8, 2)):
            outputs = width * scale
            layers += [BasicBlock(inputs, outputs, stride), BasicBlock(outputs, outputs, 1)]
            inputs = outputs
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(inputs, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.stem(x))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def mlp(inputs: int = 1024, classes: int = 1000) -> nn.Module:
    """4 layers, 9.4 M parameters: 37.7 MB of float32 gradients per step."""
    return nn.Sequential(nn.Linear(inputs, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(),
                         nn.Linear(2048, 1024), nn.ReLU(), nn.Linear(1024, classes))


MODELS = {"resnet18": ResNet18, "resnet18-narrow": lambda: ResNet18(width=32), "mlp": mlp}


def synthetic_batch(model: str, batch_size: int, image_size: int,
                    classes: int = 1000) -> tuple[torch.Tensor, torch.Tensor]:
    shape = (batch_size, 1024) if model == "mlp" else (batch_size, 3, image_size, image_size)
    return torch.randn(*shape), torch.randint(0, classes, (batch_size,))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="resnet18")
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--num-warmup-batches", type=int, default=10)
    parser.add_argument("--num-batches-per-iter", type=int, default=10)
    parser.add_argument("--num-iters", type=int, default=10)
    parser.add_argument("--fp16-allreduce", action="store_true")
    parser.add_argument("--use-adasum", action="store_true")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    hvd.init()
    torch.manual_seed(42)
    torch.set_num_threads(args.threads)
    if torch.cuda.is_available():
        torch.cuda.set_device(hvd.local_rank())

    model = MODELS[args.model]()
    lr_scaler = 1 if args.use_adasum else hvd.size()
    optimizer = optim.SGD(model.parameters(), lr=0.01 * lr_scaler)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression,
                                         op=hvd.Adasum if args.use_adasum else hvd.Average)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    data, target = synthetic_batch(args.model, args.batch_size, args.image_size)

    def benchmark_step() -> None:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(data), target)
        loss.backward()
        optimizer.step()

    def log(text: str) -> None:
        if hvd.rank() == 0:
            print(text, flush=True)

    params = sum(p.numel() for p in model.parameters())
    log(f"Model: {args.model} ({params / 1e6:.1f} M parameters)")
    log(f"Batch size: {args.batch_size}")
    log(f"Number of CPUs: {hvd.size()}")
    log("Running warmup...")
    timeit.timeit(benchmark_step, number=args.num_warmup_batches)
    log("Running benchmark...")
    img_secs = []
    for iteration in range(args.num_iters):
        seconds = timeit.timeit(benchmark_step, number=args.num_batches_per_iter)
        img_sec = args.batch_size * args.num_batches_per_iter / seconds
        log(f"Iter #{iteration}: {img_sec:.1f} img/sec per CPU")
        img_secs.append(img_sec)
    mean, conf = float(np.mean(img_secs)), 1.96 * float(np.std(img_secs))
    log(f"Img/sec per CPU: {mean:.1f} +-{conf:.1f}")
    log(f"Total img/sec on {hvd.size()} CPU(s): {hvd.size() * mean:.1f} +-"
        f"{hvd.size() * conf:.1f}")
    hvd.shutdown()


if __name__ == "__main__":
    main()
