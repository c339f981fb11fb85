"""Rank script: every collective of gcurun.runtime.torch on torch tensors, at any rank
count. Each rank computes every rank's input from (rank, size), so expected values need
no communication. Prints one summary line per rank."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import gcurun.runtime.torch as hvd  # noqa: E402
from tests.helpers import Tally  # noqa: E402

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
          torch.int32, torch.int8, torch.uint8]


class Checks(Tally):
    def __init__(self) -> None:
        super().__init__(hvd.rank(), hvd.size())

    def equal(self, got: torch.Tensor, want: torch.Tensor, what: str) -> None:
        self.ok(isinstance(got, torch.Tensor) and got.dtype == want.dtype
                and got.shape == want.shape and torch.equal(got, want),
                f"{what}: got {got!r} want {want!r}")

    def values(self, rank: int, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """Small integers 1..11: exact in every dtype, sums of a few ranks too."""
        n = 1
        for d in shape:
            n *= d
        i = torch.arange(n)
        return ((i * 7 + rank * 3) % 11 + 1).to(dtype).reshape(shape)

    def total(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        return sum(self.values(k, shape, torch.float64) for k in range(self.size)).to(dtype)

    # -- reductions ----------------------------------------------------------------------

    def allreduce(self) -> None:
        r, p = self.rank, self.size
        for dtype in DTYPES:
            for shape in ((), (0,), (5,), (3, 4), (1000, 3)):
                x = self.values(r, shape, dtype)
                got = hvd.allreduce(x, op=hvd.Sum, name=f"sum.{dtype}.{shape}")
                self.equal(got, self.total(shape, dtype), f"allreduce Sum {dtype} {shape}")
                self.equal(x, self.values(r, shape, dtype), "allreduce leaves its input")
        x = self.values(r, (4, 5), torch.float32)
        self.ok(torch.allclose(hvd.allreduce(x), self.total((4, 5), torch.float32) / p),
                "allreduce averages by default")
        for op, fold in ((hvd.Min, torch.minimum), (hvd.Max, torch.maximum)):
            want = self.values(0, (9,), torch.int32)
            for k in range(1, p):
                want = fold(want, self.values(k, (9,), torch.int32))
            self.equal(hvd.allreduce(self.values(r, (9,), torch.int32), op=op), want,
                       f"allreduce {op}")
        ones = torch.full((3,), 2.0, dtype=torch.float64)
        self.equal(hvd.allreduce(ones, op=hvd.Product), torch.full((3,), 2.0 ** p,
                                                                   dtype=torch.float64),
                   "allreduce Product")
        got = hvd.allreduce(x, op=hvd.Sum, prescale_factor=0.5, postscale_factor=4.0)
        self.ok(torch.allclose(got, self.total((4, 5), torch.float32) * 2), "scale factors")
        self.equal(hvd.allreduce(torch.tensor([r % 2 == 0, False]), op=hvd.Max),
                   torch.tensor([True, False]), "bool allreduce")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            summed = hvd.allreduce(x, average=False)
        self.equal(summed, self.total((4, 5), torch.float32), "deprecated average=False")
        self.inplace()
        self.layouts()
        self.compression()

    def inplace(self) -> None:
        r = self.rank
        x = self.values(r, (64, 8), torch.float32)
        address = x.data_ptr()
        same = hvd.allreduce_(x, op=hvd.Sum)
        self.ok(same is x and x.data_ptr() == address, "allreduce_ returns its tensor")
        self.equal(x, self.total((64, 8), torch.float32), "allreduce_ result")
        # Zero copy: the runtime reduces the tensor's own memory. A tensor whose memory
        # an outside view shares shows the result through that view.
        base = self.values(r, (32,), torch.float64)
        view = base.numpy()
        hvd.allreduce_(base, op=hvd.Sum)
        self.ok(bool((torch.from_numpy(view) == self.total((32,), torch.float64)).all()),
                "allreduce_ works in the tensor's own memory")
        param = torch.nn.Parameter(self.values(r, (6,), torch.float32))
        hvd.allreduce_(param, op=hvd.Sum)
        self.ok(torch.equal(param.detach(), self.total((6,), torch.float32))
                and param.requires_grad, "allreduce_ on a Parameter")

    def layouts(self) -> None:
        r = self.rank
        wide = self.values(r, (6, 10), torch.float32)
        strided = wide[:, ::2]
        self.ok(not strided.is_contiguous(), "a strided view")
        got = hvd.allreduce(strided, op=hvd.Sum)
        self.equal(got, self.total((6, 10), torch.float32)[:, ::2], "non-contiguous allreduce")
        hvd.allreduce_(strided, op=hvd.Sum)
        self.equal(wide[:, ::2], self.total((6, 10), torch.float32)[:, ::2],
                   "non-contiguous allreduce_ writes back through the view")
        self.equal(wide[:, 1::2], self.values(r, (6, 10), torch.float32)[:, 1::2],
                   "non-contiguous allreduce_ leaves the gaps alone")
        half = self.values(r, (7,), torch.bfloat16)
        hvd.allreduce_(half, op=hvd.Sum)
        self.equal(half, self.total((7,), torch.bfloat16), "bfloat16 allreduce_ (staged)")
        z = torch.complex(self.values(r, (3,), torch.float32), torch.ones(3))
        self.equal(hvd.allreduce(z.conj(), op=hvd.Sum),
                   torch.complex(self.total((3,), torch.float32),
                                 -torch.full((3,), float(self.size))),
                   "a lazily conjugated tensor is resolved")

    def compression(self) -> None:
        r = self.rank
        x = self.values(r, (50,), torch.float32) / 8
        got = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16)
        self.ok(got.dtype == torch.float32 and torch.allclose(
            got, self.total((50,), torch.float32) / 8, rtol=1e-3), "fp16 compression")
        ints = self.values(r, (5,), torch.int64)
        self.equal(hvd.allreduce(ints, op=hvd.Sum, compression=hvd.Compression.fp16),
                   self.total((5,), torch.int64), "fp16 compression leaves integers alone")
        self.half_bits()

    def half_bits(self) -> None:
        """Large float16 reductions (torch's kernels in the runtime) are numpy's float16
        arithmetic, the same bits on every rank: random bit patterns (subnormals,
        infinities, NaNs) and a compressed gradient."""
        r, p = self.rank, self.size

        def bits(k: int) -> np.ndarray:
            return np.random.default_rng(k).integers(0, 1 << 16, 100_003, np.uint16)

        with np.errstate(all="ignore"):
            for op, fold in ((hvd.Sum, np.add), (hvd.Product, np.multiply)):
                got = hvd.allreduce(torch.from_numpy(bits(r).view(np.float16)), op=op,
                                    name=f"half bits {op}").numpy().view(np.uint16)
                every = hvd.allgather_object(got.tobytes())
                self.ok(all(b == every[0] for b in every), f"float16 {op}: same bits")
                if p == 2:      # (the operands' order decides only which NaN survives)
                    want = fold(bits(0).view(np.float16), bits(1).view(np.float16))
                    nan = np.isnan(want)
                    self.ok(np.array_equal(np.isnan(got.view(np.float16)), nan)
                            and np.array_equal(got[~nan], want.view(np.uint16)[~nan]),
                            f"float16 {op}: numpy's bits")
            grads = [torch.from_numpy(np.random.default_rng(9 + k).standard_normal(50_001)
                                      .astype(np.float32)) for k in range(p)]
            got = hvd.allreduce(grads[r], compression=hvd.Compression.fp16, name="half avg")
            if p == 2:
                halves = [g.numpy().astype(np.float16) for g in grads]
                want = (np.add(*halves) * np.float32(0.5)).astype(np.float16)
                self.ok(torch.equal(got, torch.from_numpy(want.astype(np.float32))),
                        "fp16 compression: numpy's average")

    def reducescatter(self) -> None:
        r, p = self.rank, self.size
        rows = 2 * p + 1
        got = hvd.reducescatter(self.values(r, (rows, 3), torch.float32), op=hvd.Sum)
        base, extra = divmod(rows, p)
        start = r * base + min(r, extra)
        stop = start + base + (1 if r < extra else 0)
        self.equal(got, self.total((rows, 3), torch.float32)[start:stop], "reducescatter")
        got = hvd.grouped_reducescatter([self.values(r, (rows, 3), torch.float32),
                                         self.values(r, (rows,), torch.int64)], op=hvd.Sum)
        self.equal(got[1], self.total((rows,), torch.int64)[start:stop],
                   "grouped_reducescatter")
        handle = hvd.reducescatter_async(self.values(r, (rows, 3), torch.float64), op=hvd.Sum)
        self.equal(hvd.synchronize(handle), self.total((rows, 3), torch.float64)[start:stop],
                   "reducescatter_async")

    # -- data movement -------------------------------------------------------------------

    def allgather(self) -> None:
        r, p = self.rank, self.size
        for dtype in (torch.float32, torch.int64, torch.bfloat16, torch.bool):
            mine = self.values(r, (r + 1, 3), dtype)
            want = torch.cat([self.values(k, (k + 1, 3), dtype) for k in range(p)])
            self.equal(hvd.allgather(mine), want, f"allgather {dtype}")
        a, b = self.values(r, (2,), torch.int32), self.values(r, (1, 4), torch.float64)
        got = hvd.grouped_allgather([a, b])
        self.equal(got[1], torch.cat([self.values(k, (1, 4), torch.float64)
                                      for k in range(p)]), "grouped_allgather")
        self.equal(hvd.synchronize(hvd.allgather_async(a)),
                   torch.cat([self.values(k, (2,), torch.int32) for k in range(p)]),
                   "allgather_async")

    def broadcast(self) -> None:
        r, p = self.rank, self.size
        for root in range(p):
            mine = self.values(r, (4, 4), torch.float32)
            got = hvd.broadcast(mine, root)
            self.equal(got, self.values(root, (4, 4), torch.float32), f"broadcast root={root}")
            self.equal(mine, self.values(r, (4, 4), torch.float32), "broadcast leaves input")
            same = hvd.broadcast_(mine, root)
            self.ok(same is mine, "broadcast_ returns its tensor")
            self.equal(mine, self.values(root, (4, 4), torch.float32), "broadcast_")
        flag = torch.tensor(r == p - 1)
        self.equal(hvd.broadcast(flag, p - 1), torch.tensor(True), "0-d bool broadcast")
        b16 = self.values(r, (3,), torch.bfloat16)
        hvd.broadcast_(b16, 0)
        self.equal(b16, self.values(0, (3,), torch.bfloat16), "bfloat16 broadcast_")

    def alltoall(self) -> None:
        r, p = self.rank, self.size

        def block(src: int, dst: int, rows: int) -> torch.Tensor:
            return torch.full((rows, 2), float(src * p + dst))

        splits = [(r + j) % 3 for j in range(p)]
        mine = torch.cat([block(r, j, splits[j]) for j in range(p)])
        got, received = hvd.alltoall(mine, splits=torch.tensor(splits, dtype=torch.int32))
        want = torch.cat([block(s, r, (s + r) % 3) for s in range(p)])
        self.equal(got, want, "alltoall with splits")
        self.equal(received, torch.tensor([(s + r) % 3 for s in range(p)], dtype=torch.int32),
                   "alltoall received splits")
        even = torch.arange(2 * p, dtype=torch.int64) + 100 * r
        got = hvd.alltoall(even)
        self.ok(isinstance(got, torch.Tensor), "alltoall without splits returns one tensor")
        self.equal(got, torch.cat([torch.arange(2 * r, 2 * r + 2) + 100 * s for s in range(p)]),
                   "alltoall even split")

    # -- async, grouped, objects -----------------------------------------------------------

    def asynchronous(self) -> None:
        r = self.rank
        tensors = [self.values(r, (100, k + 1), torch.float32) for k in range(5)]
        handles = [hvd.allreduce_async(t, op=hvd.Sum, name=f"async.{k}")
                   for k, t in enumerate(tensors)]
        for k, handle in enumerate(handles):
            hvd.poll(handle)
            self.equal(hvd.synchronize(handle), self.total((100, k + 1), torch.float32),
                       f"allreduce_async {k}")
        handle = hvd.allreduce_async_(tensors[0], op=hvd.Max)
        self.ok(hvd.synchronize(handle) is tensors[0], "allreduce_async_ returns its tensor")
        for bad in (handle, 10 ** 9):
            try:
                hvd.synchronize(bad)
            except ValueError as exc:
                self.ok("unknown" in str(exc), "a spent or foreign handle is refused")
            else:
                self.ok(False, "synchronize of a spent handle raised nothing")
        group = [self.values(r, (3,), torch.float64), self.values(r, (2, 2), torch.int64)]
        got = hvd.grouped_allreduce(group, op=hvd.Sum)
        self.equal(got[1], self.total((2, 2), torch.int64), "grouped_allreduce")
        results = hvd.grouped_allreduce_(group, op=hvd.Sum)
        self.ok(results[0] is group[0], "grouped_allreduce_ returns its tensors")
        self.equal(group[0], self.total((3,), torch.float64), "grouped_allreduce_")
        handle = hvd.grouped_allreduce_async([self.values(r, (2,), torch.float32)], op=hvd.Sum)
        self.equal(hvd.synchronize(handle)[0], self.total((2,), torch.float32),
                   "grouped_allreduce_async")
        handle = hvd.broadcast_async_(tensors[1], 0)
        self.equal(hvd.synchronize(handle), self.values(0, (100, 2), torch.float32),
                   "broadcast_async_")
        out, received = hvd.synchronize(hvd.alltoall_async(torch.ones(self.size, 2)))
        self.equal(received, torch.ones(self.size, dtype=torch.int32), "alltoall_async splits")

    def objects(self) -> None:
        r, p = self.rank, self.size
        obj = {"root": r, "items": list(range(r + 3))} if r == p - 1 else None
        got = hvd.broadcast_object(obj, root_rank=p - 1)
        self.ok(got == {"root": p - 1, "items": list(range(p + 2))}, "broadcast_object")
        self.ok(hvd.allgather_object({"r": r}) == [{"r": k} for k in range(p)],
                "allgather_object")
        tensor = hvd.broadcast_object(torch.full((2,), float(r)), root_rank=0)
        self.equal(tensor, torch.zeros(2), "broadcast_object of a tensor")
        hvd.barrier()
        self.ok(True, "barrier")

    def autograd(self) -> None:
        r, p = self.rank, self.size
        x = torch.full((3,), float(r + 1), requires_grad=True)
        hvd.allreduce(x * (r + 1), op=hvd.Sum).sum().backward()
        # d/dx_r of sum_k (k+1) x_k, the gradient reduced like the forward: Sum over ranks.
        self.equal(x.grad, torch.full((3,), float(p * (r + 1))), "allreduce backward")
        y = torch.ones(r + 1, 2, requires_grad=True)
        (hvd.allgather(y) * 2).sum().backward()
        self.equal(y.grad, torch.full((r + 1, 2), 2.0), "allgather backward")
        z = torch.ones(4, requires_grad=True)
        hvd.broadcast(z, 0).sum().backward()
        self.equal(z.grad, torch.full((4,), 1.0 if r == 0 else 0.0), "broadcast backward")
        w = torch.ones(2 * p, requires_grad=True)
        (hvd.alltoall(w) * (r + 1)).sum().backward()
        self.equal(w.grad, torch.cat([torch.full((2,), float(k + 1)) for k in range(p)]),
                   "alltoall backward")

    def adasum(self) -> None:
        r, p = self.rank, self.size
        # Orthogonal vectors add; identical ones stay as they are.
        unit = torch.zeros(p)
        unit[r] = 1.0
        self.equal(hvd.allreduce(unit, op=hvd.Adasum), torch.ones(p), "Adasum orthogonal")
        same = torch.arange(4, dtype=torch.float64)
        self.equal(hvd.allreduce(same, op=hvd.Adasum), same, "Adasum parallel")

    def process_sets(self) -> None:
        r, p = self.rank, self.size
        evens = hvd.add_process_set([k for k in range(p) if k % 2 == 0])
        odds = hvd.add_process_set([k for k in range(p) if k % 2 == 1]) if p > 1 else None
        mine = evens if r % 2 == 0 else odds
        assert mine is not None
        members = mine.ranks or []
        self.ok(mine.included() and mine.size() == len(members)
                and mine.rank() == members.index(r), "process set queries")
        got = hvd.allreduce(torch.tensor([float(r)]), op=hvd.Sum, process_set=mine)
        self.equal(got, torch.tensor([float(sum(members))]), "allreduce on a process set")
        got = hvd.broadcast(torch.tensor([r]), root_rank=members[-1], process_set=mine)
        self.equal(got, torch.tensor([members[-1]]), "broadcast root is a global rank")
        self.ok(hvd.allgather_object(r, process_set=mine) == members, "allgather_object set")
        hvd.barrier(process_set=mine)
        if p > 1:
            other = odds if mine is evens else evens
            try:
                hvd.allreduce(torch.ones(1), process_set=other)
            except ValueError as exc:
                self.ok("not a member" in str(exc), "ops on a foreign set are refused")
            else:
                self.ok(False, "an op on a foreign set raised nothing")
            try:
                hvd.add_process_set([r])
            except ValueError as exc:
                self.ok("disagree" in str(exc), "disagreeing ranks are refused on every rank")
            else:
                self.ok(False, "add_process_set with disagreeing ranks raised nothing")
        self.ok(hvd.remove_process_set(evens) and not hvd.remove_process_set(evens),
                "remove_process_set")
        if odds is not None:
            hvd.remove_process_set(odds)

    def errors(self) -> None:
        r = self.rank
        if self.size > 1:
            try:
                hvd.allreduce(torch.ones(2 + r), name="mismatch")
            except hvd.HorovodInternalError as exc:
                self.ok(isinstance(exc, hvd.MismatchError) and "shape" in str(exc),
                        "a shape mismatch raises HorovodInternalError on every rank")
            else:
                self.ok(False, "mismatched shapes raised nothing")
            handle = hvd.allreduce_async(torch.ones(3, dtype=torch.float64 if r else
                                                    torch.float32), name="late")
            try:
                hvd.synchronize(handle)
            except hvd.HorovodInternalError as exc:
                self.ok("dtype" in str(exc), "an async op's error comes out of synchronize")
            else:
                self.ok(False, "mismatched dtypes raised nothing")
        try:
            hvd.allreduce(torch.zeros(2, dtype=torch.float8_e4m3fn))
        except TypeError as exc:
            self.ok("float8_e4m3fn" in str(exc), "an unsupported dtype is refused")
        try:
            hvd.allreduce([1.0, 2.0])  # type: ignore[arg-type]
        except TypeError as exc:
            self.ok("torch.Tensor" in str(exc), "a list is refused")

    def join(self) -> None:
        r, p = self.rank, self.size
        if r == 0:
            last = hvd.join()        # runs out of data first: the others go on without it
        else:
            got = hvd.allreduce(torch.full((3,), float(r)), op=hvd.Sum, name="after.join")
            self.equal(got, torch.full((3,), float(sum(range(1, p)))),
                       "a joined rank adds nothing to the others' sums")
            last = hvd.join()
        self.ok(last == 0 if p == 1 else last > 0, f"join returns the last rank ({last})")
        self.ok(len(set(hvd.allgather_object(last))) == 1, "every rank names the same last")

    def run_all(self) -> int:
        for check in (self.allreduce, self.reducescatter, self.allgather, self.broadcast,
                      self.alltoall, self.asynchronous, self.objects, self.autograd,
                      self.adasum, self.process_sets, self.errors, self.join):
            check()
        return self.count


def run() -> int:
    """Every check, in a job already joined, which it leaves and joins again; the number
    of checks passed."""
    rank, size = hvd.rank(), hvd.size()
    count = Checks().run_all()
    hvd.shutdown()
    hvd.init()
    again = hvd.allreduce(torch.tensor([rank, 1]), op=hvd.Sum)
    assert again.tolist() == [size * (size - 1) // 2, size], again
    return count


def main() -> None:
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    count = run()
    hvd.shutdown()
    print(f"rank {rank} of {size} ok: {count} checks", flush=True)


if __name__ == "__main__":
    main()
