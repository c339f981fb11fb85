"""Rank script: DistributedOptimizer training at any rank count, checked against a 1-rank
run on the full batch that every rank computes itself, without communication.

Each case: every rank builds the model from a different seed, broadcast_parameters makes
rank 0's weights everyone's, and a copy of them trains on the whole global batch in plain
torch (the reference). After a few steps the ranks' parameters must be identical to one
another and equal, to a tolerance, to the reference. Prints one summary line per rank.
"""

from __future__ import annotations

import copy
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import gcurun.runtime.torch as hvd  # noqa: E402
from tests.helpers import Tally  # noqa: E402

BATCH = 8          # global batch of one backward pass
STEPS = 4


class Net(nn.Module):
    """An MLP with an optional embedding (sparse or dense gradients) and a branch that
    only some ranks use."""

    def __init__(self, sparse: bool = False):
        super().__init__()
        self.embed = nn.Embedding(20, 6, sparse=sparse)
        self.branch = nn.Linear(6, 6)
        self.hidden = nn.Linear(6, 16)
        self.out = nn.Linear(16, 3)

    def forward(self, tokens: torch.Tensor, use_branch: bool = False) -> torch.Tensor:
        x = self.embed(tokens).mean(dim=1)
        if use_branch:
            x = x + self.branch(x)
        return self.out(torch.tanh(self.hidden(x)))


def batches(step: int, micro: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * step + micro)
    return torch.randint(0, 20, (BATCH, 5), generator=g), torch.randint(0, 3, (BATCH,),
                                                                          generator=g)


def shard(t: torch.Tensor, rank: int, size: int) -> torch.Tensor:
    per = t.shape[0] // size
    return t[rank * per:(rank + 1) * per]


class Trainer(Tally):
    def __init__(self) -> None:
        super().__init__(hvd.rank(), hvd.size())

    def same_everywhere(self, model: nn.Module, what: str) -> None:
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        gathered = hvd.allgather(flat.unsqueeze(0))
        self.ok(all(torch.equal(row, flat) for row in gathered),
                f"{what}: parameters identical on every rank")

    def close(self, model: nn.Module, ref: nn.Module, tol: float, what: str) -> None:
        diff = max((a.detach() - b.detach()).abs().max().item()
                   for a, b in zip(model.parameters(), ref.parameters(), strict=True))
        moved = max((a.detach() - b.detach()).abs().max().item()
                    for a, b in zip(ref.parameters(), self.start.parameters(), strict=True))
        self.ok(moved > 10 * tol, f"{what}: training moved the parameters ({moved})")
        self.ok(diff <= tol, f"{what}: {diff} from the 1-rank full-batch run (tol {tol})")

    def setup(self, sparse: bool = False) -> tuple[nn.Module, nn.Module]:
        torch.manual_seed(100 + self.rank)            # different weights on every rank
        model = Net(sparse)
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        self.start = copy.deepcopy(model)
        return model, copy.deepcopy(model)

    def train(self, name: str, make: Callable[[Any], torch.optim.Optimizer],
              wrap: dict[str, Any] | Callable[[nn.Module], dict[str, Any]] | None = None,
              passes: int = 1, tol: float = 1e-5, sparse: bool = False,
              branch_ranks: tuple[int, ...] = (), clip: float | None = None,
              summed: bool = False) -> None:
        model, ref = self.setup(sparse)
        options = wrap(model) if callable(wrap) else wrap or {}
        opt = hvd.DistributedOptimizer(make(model.parameters()),
                                       named_parameters=model.named_parameters(),
                                       backward_passes_per_step=passes, **options)
        hvd.broadcast_optimizer_state(opt, root_rank=0)
        ref_opt = make(ref.parameters())
        hvd.broadcast_optimizer_state(ref_opt, root_rank=0)     # the same start
        for step in range(STEPS):
            opt.zero_grad()
            ref_opt.zero_grad()
            for micro in range(passes):
                tokens, labels = batches(step, micro)
                use = self.rank in branch_ranks
                mine = F.cross_entropy(model(shard(tokens, self.rank, self.size), use),
                                       shard(labels, self.rank, self.size))
                mine.backward()
                # The reference: the mean over the shards of every rank's loss.
                total = sum(F.cross_entropy(ref(shard(tokens, r, self.size), r in branch_ranks),
                                            shard(labels, r, self.size))
                            for r in range(self.size))
                (total if summed else total / self.size).backward()
            if clip is None:
                opt.step()
            else:
                opt.synchronize()
                nn.utils.clip_grad_norm_(model.parameters(), clip)
                with opt.skip_synchronize():
                    opt.step()
                nn.utils.clip_grad_norm_(ref.parameters(), clip)
            ref_opt.step()
        self.same_everywhere(model, name)
        self.close(model, ref, tol, name)

    # -- cases ---------------------------------------------------------------------------

    def cases(self) -> None:
        sgd = lambda params: torch.optim.SGD(params, lr=0.5, momentum=0.9,  # noqa: E731
                                             weight_decay=1e-3)
        adam = lambda params: torch.optim.Adam(params, lr=0.05)  # noqa: E731
        self.train("SGD with momentum", sgd)
        self.train("Adam", adam)
        self.train("fp16 compression", sgd, {"compression": hvd.Compression.fp16}, tol=2e-3)
        self.train("backward_passes_per_step=2", sgd, passes=2)
        self.train("groups=2", adam, {"groups": 2})
        self.train("explicit groups", sgd,
                   lambda m: {"groups": [[m.out.weight, m.out.bias], [m.embed.weight]]})
        self.train("gradient_predivide_factor", sgd, {"gradient_predivide_factor": 4.0})
        self.train("op=Sum", sgd, {"op": hvd.Sum}, summed=True)
        self.train("sparse gradients (gathered)", lambda p: torch.optim.SGD(p, lr=0.5),
                   sparse=True)
        self.train("sparse_as_dense", lambda p: torch.optim.SGD(p, lr=0.5),
                   {"sparse_as_dense": True}, sparse=True)
        self.train("a parameter only rank 0 uses", sgd, branch_ranks=(0,))
        self.train("clipping between synchronize and step", sgd, clip=0.05)
        self.adasum()
        everyone = hvd.add_process_set(list(range(self.size)))
        # A set's communicator runs ops when called: step() reduces all gradients at once.
        self.train("on a process set", sgd, {"process_set": everyone}, branch_ranks=(0,))
        self.train("sparse on a process set", lambda p: torch.optim.SGD(p, lr=0.5),
                   {"process_set": everyone}, sparse=True)
        hvd.remove_process_set(everyone)
        self.misuse()
        self.optimizer_state()
        self.overlap()
        self.fp16_memory()
        self.sync_batch_norm()

    def sync_batch_norm(self) -> None:
        """SyncBatchNorm on shards trains like BatchNorm on the full batch."""
        def build(norm: nn.Module) -> nn.Module:
            return nn.Sequential(nn.Conv2d(2, 4, 3), norm, nn.ReLU(), nn.Flatten(),
                                 nn.Linear(64, 3))

        torch.manual_seed(7 + self.rank)
        model = build(hvd.SyncBatchNorm(4))
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        ref = build(nn.BatchNorm2d(4))
        ref.load_state_dict(model.state_dict())
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.2),
                                       named_parameters=model.named_parameters())
        ref_opt = torch.optim.SGD(ref.parameters(), lr=0.2)
        g = torch.Generator().manual_seed(5)
        for _ in range(STEPS):
            data, labels = torch.randn(BATCH, 2, 6, 6, generator=g) * 3 + 1, \
                torch.randint(0, 3, (BATCH,), generator=g)
            for net, optimizer, x, y in (
                    (model, opt, shard(data, self.rank, self.size),
                     shard(labels, self.rank, self.size)), (ref, ref_opt, data, labels)):
                optimizer.zero_grad()
                F.cross_entropy(net(x), y).backward()
                optimizer.step()
        self.same_everywhere(model, "SyncBatchNorm")
        for (key, mine), theirs in zip(model.state_dict().items(), ref.state_dict().values(),
                                       strict=True):
            self.ok(torch.allclose(mine.double(), theirs.double(), atol=1e-5),
                    f"SyncBatchNorm {key} follows BatchNorm on the full batch")
        model.eval()
        ref.eval()
        probe = torch.randn(3, 2, 6, 6, generator=g)
        self.ok(torch.allclose(model(probe), ref(probe), atol=1e-5), "SyncBatchNorm in eval")

    def overlap(self) -> None:
        """Backward has not finished when the allreduce of a gradient it produced early
        completes: a hook on the embedding's output (whose gradient comes last) waits
        until the output layer's gradient has been reduced, then lets backward go on."""
        if self.size == 1:
            return
        model, _ = self.setup()
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                       named_parameters=model.named_parameters())
        seen: list[bool] = []

        def wait_for_out_layer(grad: torch.Tensor) -> None:
            handle = opt._handles.get(model.out.weight, (None,))[0]   # started by its hook
            deadline = time.monotonic() + 30
            while handle is not None and not hvd.poll(handle) and time.monotonic() < deadline:
                time.sleep(0.001)
            seen.append(handle is not None and hvd.poll(handle))

        tokens, labels = batches(0, 0)
        embedded = model.embed(shard(tokens, self.rank, self.size))
        embedded.register_hook(wait_for_out_layer)
        x = torch.tanh(model.hidden(embedded.mean(dim=1)))
        F.cross_entropy(model.out(x), shard(labels, self.rank, self.size)).backward()
        self.ok(seen == [True], "a gradient's allreduce completes while backward still runs")
        opt.step()
        self.same_everywhere(model, "after the overlapped step")

    def fp16_memory(self) -> None:
        """Compression.fp16 casts each gradient into the float16 memory it sent the step
        before (none allocated after the first step), and the gradients it hands the
        optimizer are float32, the average of what every rank sent (to float16's
        rounding: the ring rounds each partial sum)."""
        if self.size == 1:
            return
        model, _ = self.setup()
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                       named_parameters=model.named_parameters(),
                                       compression=hvd.Compression.fp16)
        sent: list[dict[str, torch.Tensor]] = []     # (held: no address is reused)
        for step in range(3):
            opt.zero_grad()
            tokens, labels = batches(step, 0)
            F.cross_entropy(model(shard(tokens, self.rank, self.size)),
                            shard(labels, self.rank, self.size)).backward()
            mine = {n: p.grad.to(torch.float16) for n, p in model.named_parameters()
                    if p.grad is not None}                  # (not the unused branch)
            everyone = {n: hvd.allgather(g.unsqueeze(0), name=f"fp16 memory {n} {step}")
                        for n, g in mine.items()}
            opt.synchronize()
            wanted = {n: g.to(torch.float32).mean(0) for n, g in everyone.items()}
            got = {n: p.grad for n, p in model.named_parameters() if n in mine}
            self.ok(all(got[n].dtype == torch.float32 for n in got), "fp16: float32 grads")
            self.ok(all(torch.allclose(got[n], wanted[n], rtol=4e-3, atol=1e-4) for n in got),
                    f"fp16 step {step}: the average of what the ranks sent")
            sent.append({n: opt._spares[p] for n, p in model.named_parameters() if n in mine})
            with opt.skip_synchronize():
                opt.step()
        self.ok(len(sent[0]) == len(mine) and all(
            later[n] is first for n, first in sent[0].items() for later in sent[1:]),
                "fp16 sends every step from the memory of the first")

    def adasum(self) -> None:
        """op=Adasum: the gradients combine by the Adasum rule; every rank applies the
        same update (no single-process equivalent to compare with)."""
        model, _ = self.setup()
        start = [p.detach().clone() for p in model.parameters()]
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5),
                                       named_parameters=model.named_parameters(),
                                       op=hvd.Adasum)
        for step in range(STEPS):
            opt.zero_grad()
            tokens, labels = batches(step, 0)
            F.cross_entropy(model(shard(tokens, self.rank, self.size)),
                            shard(labels, self.rank, self.size)).backward()
            opt.step()
        self.same_everywhere(model, "op=Adasum")
        self.ok(any(not torch.equal(a, b.detach()) for a, b in
                    zip(start, model.parameters(), strict=True)), "op=Adasum trains")

    def misuse(self) -> None:
        model, _ = self.setup()
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                       named_parameters=model.named_parameters())
        tokens, labels = batches(0, 0)
        F.cross_entropy(model(shard(tokens, self.rank, self.size)),
                        shard(labels, self.rank, self.size)).backward()
        pending = self.size > 1
        try:
            opt.zero_grad()
            self.ok(not pending, "zero_grad with nothing pending is allowed at size 1")
        except AssertionError as exc:
            self.ok(pending and "before optimizer.step()" in str(exc),
                    "zero_grad while allreduces are pending is refused")
        if pending:
            try:
                F.cross_entropy(model(shard(tokens, self.rank, self.size)),
                                shard(labels, self.rank, self.size)).backward()
            except AssertionError as exc:
                self.ok("backward_passes_per_step" in str(exc),
                        "a second backward before step() is refused")
            else:
                self.ok(False, "a second backward before step() raised nothing")
        opt.step()
        opt.zero_grad()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            opt.synchronize()
            opt.step()
        self.ok(any("skip_synchronize" in str(w.message) for w in caught),
                "step() after synchronize() warns")
        for bad in ([model.hidden.weight], [("x", model.out.weight), ("x", model.out.bias)]):
            try:
                hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=bad)
            except ValueError:
                self.ok(True, "bad named_parameters are refused")
            else:
                self.ok(False, f"named_parameters={bad!r} raised nothing")

    def optimizer_state(self) -> None:
        model, _ = self.setup()
        opt = torch.optim.Adam(model.parameters(), lr=0.01 * (self.rank + 1))
        if self.rank == 0:          # only rank 0 has trained: its state is the one to keep
            for step in range(3):
                opt.zero_grad()
                tokens, labels = batches(step, 7)
                F.cross_entropy(model(tokens), labels).backward()
                opt.step()
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
        hvd.broadcast_optimizer_state(opt, root_rank=0)
        self.ok(opt.param_groups[0]["lr"] == 0.01, "the root's learning rate everywhere")
        with_state = 0
        for p in model.parameters():
            state = opt.state.get(p) or {}
            keys = hvd.allgather_object(sorted(state))
            self.ok(all(k == keys[0] for k in keys), "the same state entries on every rank")
            with_state += bool(state)
            for key in state:
                value = state[key].reshape(1, -1)
                self.ok(bool(value.abs().sum() > 0), f"optimizer state {key} is the root's")
                gathered = hvd.allgather(value)
                self.ok(all(torch.equal(row, value[0]) for row in gathered),
                        f"optimizer state {key} identical on every rank")
        # The branch was never used: its parameters have no state (on the root either).
        self.ok(with_state == len(list(model.parameters())) - 2, "state of the used ones")
        fresh = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        before = [p.detach().clone() for p in model.parameters()]
        hvd.broadcast_optimizer_state(fresh, root_rank=0)
        self.ok(all(torch.equal(a, b.detach()) for a, b in
                    zip(before, model.parameters(), strict=True)),
                "creating the state of a fresh optimizer leaves the parameters alone")


def run() -> int:
    """Every case, in a job already joined; the number of checks passed."""
    trainer = Trainer()
    trainer.cases()
    return trainer.count


def main() -> None:
    hvd.init()
    count = run()
    print(f"rank {hvd.rank()} of {hvd.size()} ok: {count} checks", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
