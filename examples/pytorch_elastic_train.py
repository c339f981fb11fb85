"""Elastic training with PyTorch: the job survives losing a host and grows when one is
added (Horovod Elastic's API; only the import differs from a Horovod script).

    gcurun --min-np 2 -H h1:1,h2:1,h3:1 python examples/pytorch_elastic_train.py
    gcurun --min-np 2 --host-discovery-script ./hosts.sh python examples/pytorch_elastic_train.py

A small MLP learns a fixed linear map from synthetic data. ``TorchState`` holds the
model, the optimizer, the ``ElasticSampler`` and the epoch; it is committed every
``--batches-per-commit`` batches. When a peer is lost, the survivors restore the last
commit, re-form in their own processes and go on; a new worker receives the state by
broadcast from rank 0. With ``--json-log`` rank 0 prints one JSON line per step
(generation, size, epoch, batch, loss, time) and every rank prints the hash of its
parameters at the end, which must be the same on every rank.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time

import torch
import torch.nn.functional as F
from torch import nn, optim

import gcurun.runtime.torch as hvd

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--samples", type=int, default=2048, help="dataset size")
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--hidden", type=int, default=256, help="width of the MLP")
parser.add_argument("--lr", type=float, default=0.01)
parser.add_argument("--batches-per-commit", type=int, default=1)
parser.add_argument("--step-sleep", type=float, default=0.0,
                    help="seconds to sleep per step (to slow a demo down)")
parser.add_argument("--json-log", action="store_true")
args = parser.parse_args()

hvd.init()
torch.manual_seed(1234)

features = torch.randn(args.samples, 32, generator=torch.Generator().manual_seed(0))
truth = torch.randn(32, 4, generator=torch.Generator().manual_seed(1))
targets = features @ truth
dataset = torch.utils.data.TensorDataset(features, targets)

model = nn.Sequential(nn.Linear(32, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 4))
optimizer = optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=0)
loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)


def generation() -> int:
    from gcurun.runtime.elastic.membership import last_assignment

    found = last_assignment()
    return int(found["generation"]) if found else 0


def log(**fields: object) -> None:
    if args.json_log:
        print(json.dumps({"t": round(time.time(), 3), **fields}), flush=True)


def on_reset() -> None:
    # The learning rate follows the new number of ranks.
    for group in optimizer.param_groups:
        group["lr"] = args.lr * hvd.size()
    log(reset=True, rank=hvd.rank(), size=hvd.size(), generation=generation())


@hvd.elastic.run
def train(state: hvd.elastic.TorchState) -> None:
    # Horovod's pattern: the loop variables live in the state, so a restore or a sync
    # puts the loops back where the last commit was.
    for state.epoch in range(state.epoch, args.epochs):  # noqa: B020
        for state.batch, (x, y) in enumerate(loader, start=state.batch):  # noqa: B020
            optimizer.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            sampler.record_batch(state.batch, args.batch_size)
            if hvd.rank() == 0:
                log(generation=generation(), size=hvd.size(), epoch=state.epoch,
                    batch=state.batch, loss=round(loss.item(), 6))
            if args.step_sleep:
                time.sleep(args.step_sleep)
            if state.batch % args.batches_per_commit == 0:
                state.commit()
        state.batch = 0
        sampler.set_epoch(state.epoch + 1)
        state.commit()


state = hvd.elastic.TorchState(model=model, optimizer=optimizer, sampler=sampler, epoch=0,
                               batch=0)
state.register_reset_callbacks([on_reset])
train(state)

digest = hashlib.sha256()
for tensor in model.state_dict().values():
    digest.update(tensor.detach().numpy().tobytes())
log(done=True, rank=hvd.rank(), size=hvd.size(), generation=generation(),
    hash=digest.hexdigest()[:16])
if hvd.rank() == 0:
    print(f"finished {args.epochs} epochs on {hvd.size()} ranks", flush=True)
