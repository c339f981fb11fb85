"""Rank script: Horovod-style checks of gcurun.runtime.torch, written for this project
(no file of Horovod's), in the manner of Horovod's own test_torch.py: every check runs
in one job, one after the other, each between ``init()`` and a ``barrier()`` and
``shutdown()`` (the teardown of Horovod's tests), so that a check that leaves the ranks
out of step fails the ones after it. They cover the contract Horovod's suite holds
gcurun to: errors raised on every rank so that every rank goes on, duplicate names
refused at once on the rank that repeats one, float16 scale factors, integer averages,
join, the gradients of the gathers and scatters, the callable sparse handle, the
timeline calls, mpi_ops' names, the optimizer's warning and broadcast_optimizer_state.

Usage: horovod_style.py TIMELINE_DIR. Prints one summary line per rank.
"""

from __future__ import annotations

import json
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import gcurun.runtime.torch as hvd  # noqa: E402
from tests.helpers import Tally  # noqa: E402


class Checks(Tally):
    def __init__(self, rank: int, size: int, timeline_dir: Path):
        super().__init__(rank, size)
        self.timeline_dir = timeline_dir

    def raises(self, errors: type | tuple[type, ...], call: Callable[[], object],
               what: str) -> None:
        try:
            call()
        except errors:
            self.count += 1
            return
        self.ok(False, f"{what}: no error raised")

    # -- names Horovod scripts import ----------------------------------------------------

    def mpi_ops_names(self) -> None:
        from gcurun.runtime.torch import mpi_ops

        for name in ("rank", "size", "local_rank", "init", "shutdown", "is_initialized",
                     "start_timeline", "stop_timeline", "HorovodAllreduce",
                     "HorovodGroupedAllreduce", "HorovodAllgather", "HorovodGroupedAllgather",
                     "HorovodBroadcast", "HorovodAlltoall", "HorovodReducescatter",
                     "HorovodGroupedReducescatter"):
            self.ok(hasattr(mpi_ops, name), f"mpi_ops.{name}")
        self.ok(mpi_ops.rank() == self.rank, "mpi_ops.rank()")
        x = torch.full((3,), float(self.rank + 1), requires_grad=True)
        y = mpi_ops.HorovodAllreduce.apply(x, None, "apply", hvd.Sum, 1.0, 1.0,
                                           hvd.global_process_set)
        self.ok(torch.equal(y.detach(), torch.full((3,), float(self.total()))),
                "HorovodAllreduce.apply with Horovod's arguments")
        y.sum().backward()
        self.ok(torch.equal(x.grad, torch.full((3,), float(self.size))), "its gradient")

    def total(self) -> int:
        return sum(range(1, self.size + 1))

    # -- errors ----------------------------------------------------------------------------

    def duplicate_names(self) -> None:
        # Horovod's rule: a name still pending on a rank is refused there at once (a
        # ValueError); the op already pending goes on.
        t = torch.ones(4, 3)
        starts = {"allreduce": lambda: hvd.allreduce_async(t, name="dup"),
                  "allgather": lambda: hvd.allgather_async(t, name="dup"),
                  "broadcast": lambda: hvd.broadcast_async(t, 0, name="dup"),
                  "reducescatter": lambda: hvd.reducescatter_async(t, name="dup")}
        for kind, start in starts.items():
            handles = []
            for turn in (0, 1):
                if (self.rank == 0) == (turn == 0):
                    handles.append(start())
                    self.raises(ValueError, start, f"a second {kind} named 'dup'")
                hvd.barrier()
            for handle in handles:
                hvd.synchronize(handle)

    def errors_on_every_rank(self) -> None:
        r = self.rank
        self.raises(RuntimeError, lambda: hvd.allreduce(torch.ones(2 + r)),
                    "allreduce of different shapes")
        self.raises(RuntimeError, lambda: hvd.allgather(torch.ones(3, 1 + r)),
                    "allgather of different trailing dimensions")
        self.raises(RuntimeError, lambda: hvd.broadcast(
            torch.ones(3, dtype=torch.int32 if r else torch.float32), 0),
            "broadcast of different dtypes")
        got = hvd.allreduce(torch.ones(2), op=hvd.Sum, name="after.errors")
        self.ok(torch.equal(got, torch.full((2,), float(self.size))), "every rank goes on")

    # -- values --------------------------------------------------------------------------

    def float16_scale_factors(self) -> None:
        # Horovod scales float16 in float32 math: half(float(x) * float(factor)).
        gen = torch.Generator().manual_seed(1234)
        x = torch.randint(-100, 100, (self.size * 4, 17), generator=gen).half()
        factor = 0.1915194503788923
        scaled = (x.float() * torch.tensor(factor, dtype=torch.float64).float()).half()
        want = scaled.float() * self.size
        got = hvd.allreduce(x, op=hvd.Sum, prescale_factor=factor)
        self.ok(self.close(got.float(), want), "allreduce prescale_factor on float16")
        got = hvd.allreduce(x, op=hvd.Sum, postscale_factor=factor)
        post = ((x.float() * self.size) * torch.tensor(factor).float()).half().float()
        self.ok(self.close(got.float(), post), "allreduce postscale_factor on float16")
        rows = slice(self.rank * 4, self.rank * 4 + 4)
        got = hvd.reducescatter(x, op=hvd.Sum, prescale_factor=factor)
        self.ok(self.close(got.float(), want[rows]), "reducescatter prescale_factor")
        got = hvd.grouped_reducescatter([x, x], op=hvd.Sum, prescale_factor=factor)
        self.ok(all(self.close(g.float(), want[rows]) for g in got),
                "grouped_reducescatter prescale_factor")

    def close(self, got: torch.Tensor, want: torch.Tensor) -> bool:
        """Exact for up to two ranks (Horovod's threshold 0); float16 sums of more ranks
        round in an order of the algorithm's choosing."""
        if self.size <= 2:
            return torch.equal(got, want)
        return torch.allclose(got, want, rtol=1e-2, atol=0.1)

    def integer_averages(self) -> None:
        # Horovod rounds toward zero: -3 / 2 is -1.
        x = torch.tensor([-3, 3, -5, 7], dtype=torch.int32) if self.rank == 0 else \
            torch.zeros(4, dtype=torch.int32)
        want = torch.tensor([-3, 3, -5, 7], dtype=torch.int32).div(self.size,
                                                                   rounding_mode="trunc")
        self.ok(torch.equal(hvd.allreduce(x, op=hvd.Average), want), "integer average")

    # -- join ------------------------------------------------------------------------------

    def join(self) -> None:
        r, p = self.rank, self.size
        if r == 0:
            last = hvd.join()
        else:
            x = torch.tensor([-3 * r, 5], dtype=torch.int64)
            got = hvd.allreduce(x, op=hvd.Average, name="join.avg")
            # The joined rank adds zeros; the average divides by every rank.
            total = torch.tensor([-3 * sum(range(1, p)), 5 * (p - 1)], dtype=torch.int64)
            self.ok(torch.equal(got, total.div(p, rounding_mode="trunc")),
                    "an average with a joined rank")
            self.raises(RuntimeError, lambda: hvd.allgather(torch.ones(2, 1)),
                        "allgather while a rank has joined")
            self.raises(RuntimeError, lambda: hvd.broadcast(torch.ones(2), 1, name="jb"),
                        "broadcast while a rank has joined")
            last = hvd.join()
        self.ok(last != 0 if p > 1 else last == 0, f"join() returns the last rank ({last})")
        self.ok(hvd.allgather_object(last) == [last] * p, "every rank names the same one")

    # -- gradients -----------------------------------------------------------------------

    def gradients(self) -> None:
        p = self.size
        for op, scale in ((hvd.Sum, p), (hvd.Average, 1)):
            # Horovod's convention: the gathered gradient, times the ranks for Sum.
            x = torch.ones(p * 2, 3, requires_grad=True)
            hvd.reducescatter(x, op=op).backward(torch.ones(2, 3))
            self.ok(torch.equal(x.grad, torch.full((p * 2, 3), float(scale))),
                    f"reducescatter gradient, op {op}")
            xs = [torch.ones(p * 2, requires_grad=True) for _ in range(3)]
            for out in hvd.grouped_reducescatter(xs, op=op):
                out.backward(torch.ones(2))
            self.ok(all(torch.equal(t.grad, torch.full((p * 2,), float(scale))) for t in xs),
                    f"grouped_reducescatter gradient, op {op}")
        rows = [2 + k for k in range(p)]
        xs = [torch.zeros(rows[self.rank], 4, requires_grad=True) for _ in range(3)]
        grad = torch.cat([torch.full((n, 4), float(k)) for k, n in enumerate(rows)])
        for out in hvd.grouped_allgather(xs):
            out.backward(grad)
        self.ok(all(torch.equal(t.grad, torch.full((rows[self.rank], 4), float(self.rank)))
                    for t in xs), "grouped_allgather gradient: this rank's rows, averaged")

    # -- handles, timeline -----------------------------------------------------------------

    def sparse_handle(self) -> None:
        dense = torch.zeros(6, 2)
        dense[self.rank % 6, 0] = float(self.rank + 1)
        handle = hvd.sparse_allreduce_async(dense.to_sparse(), name="sparse", op=hvd.Sum)
        got = handle().to_dense()            # Horovod's handle is a function
        self.ok(torch.equal(got, hvd.allreduce(dense, op=hvd.Sum)), "sparse handle()")

    def timeline(self) -> None:
        path = self.timeline_dir / "timeline.json"
        hvd.start_timeline(str(path), mark_cycles=True)
        hvd.allreduce(torch.ones(3), name="in.timeline")
        hvd.stop_timeline()
        hvd.barrier()
        if self.rank == 0:
            text = path.read_text()
            trace = json.loads(text)
            names = {e["name"] for e in trace}
            self.ok("allreduce.in.timeline" in text, "Horovod's tensor name in the trace")
            self.ok({"NEGOTIATE_ALLREDUCE", "ALLREDUCE", "CYCLE_START"} <= names,
                    f"negotiation, op and cycle marks: {sorted(names)}")
            self.ok("start_time_since_epoch_in_micros" in text, "the trace's start")
            self.ok([p.name for p in self.timeline_dir.iterdir()] == ["timeline.json"],
                    "rank 0 alone writes it")

    # -- the optimizer ---------------------------------------------------------------------

    def optimizer(self) -> None:
        model = torch.nn.Linear(2, 1)
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                       named_parameters=model.named_parameters())
        model(torch.ones(1, 2)).sum().backward()
        opt.synchronize()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            opt.step()
        self.ok(any("optimizer.step() called without optimizer.skip_synchronize()"
                    in str(w.message) for w in caught), "Horovod's warning text")

    def optimizer_state(self) -> None:
        frozen = torch.nn.Parameter(torch.ones(2), requires_grad=False)
        trained = torch.nn.Parameter(torch.full((3,), float(self.rank)))
        inner = torch.optim.SGD([frozen, trained], lr=0.1, momentum=0.9, weight_decay=0.1)
        opt = hvd.DistributedOptimizer(inner, named_parameters=[("frozen", frozen),
                                                                 ("trained", trained)])
        hvd.broadcast_optimizer_state(opt, root_rank=0)
        self.ok(frozen.grad is None, "a frozen parameter gets no gradient")
        self.ok(trained.grad is not None and not trained.grad.any(),
                "a trainable one gets a zero gradient, as in Horovod")
        self.ok(torch.equal(trained.detach(), torch.full((3,), float(self.rank))),
                "and no step moved it")

    def run_all(self, checks: list[str]) -> int:
        for name in checks:
            hvd.init()
            getattr(self, name)()
            hvd.barrier()                   # Horovod's tearDown
            hvd.shutdown()
        return self.count


CHECKS = ["mpi_ops_names", "duplicate_names", "errors_on_every_rank", "float16_scale_factors",
          "integer_averages", "join", "gradients", "sparse_handle", "timeline", "optimizer",
          "optimizer_state"]


def main() -> None:
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    hvd.shutdown()
    count = Checks(rank, size, Path(sys.argv[1])).run_all(CHECKS)
    print(f"rank {rank} of {size} ok: {count} checks", flush=True)


if __name__ == "__main__":
    main()
