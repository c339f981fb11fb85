"""One body of checks for every collective and dtype, run at any rank count.

Each rank computes every rank's input from (rank, size), so expected values need no
communication. Integer and small-integer float data are compared exactly; random floats
to a tolerance. ``hvd`` is ``gcurun.runtime`` itself (rank processes) or an adapter with
the same functions (thread ranks in unit tests).
"""

from __future__ import annotations

import array
from typing import Any

import numpy as np

from tests.helpers import Tally

DTYPES = [np.dtype(t) for t in (
    np.bool_, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64,
    np.uint64, np.float16, np.float32, np.float64, np.longdouble, np.complex64,
    np.complex128, np.clongdouble)]
ORDERED = [d for d in DTYPES if d.kind != "c"]
NUMERIC = [d for d in DTYPES if d.kind != "b"]
FLOATS = [d for d in DTYPES if d.kind == "f"]


class Checks(Tally):
    def __init__(self, hvd: Any, lengths: tuple[int, ...] = (0, 1, 5, 13, 1001),
                 big: int = 70001):
        super().__init__(hvd.rank(), hvd.size())
        self.hvd = hvd
        self.lengths = lengths
        self.big = big

    # -- data ------------------------------------------------------------------------------

    def values(self, rank: int, n: int, dtype: np.dtype, salt: int = 0) -> np.ndarray:
        """Small integers 1..11 (exact in every dtype, sums of 4 ranks fit int8)."""
        i = np.arange(n)
        if dtype.kind == "b":
            return (i + rank + salt) % 3 == 0
        v = ((i * 7 + rank * 3 + salt) % 11 + 1).astype(dtype)
        if dtype.kind == "c":
            v = v + 1j * ((i + rank) % 5).astype(dtype)
        return v

    def small(self, rank: int, n: int, dtype: np.dtype) -> np.ndarray:
        """1 or 2 (products over 4 ranks stay exact)."""
        i = np.arange(n)
        if dtype.kind == "b":
            return (i + rank) % 4 != 0
        return ((i + rank) % 2 + 1).astype(dtype)

    def equal(self, got: np.ndarray, want: np.ndarray, what: str) -> None:
        self.ok(got.dtype == want.dtype and got.shape == want.shape
                and np.array_equal(got, want),
                f"{what}: got {got.dtype}{got.shape} {got.ravel()[:6]} want "
                f"{want.dtype}{want.shape} {want.ravel()[:6]}")

    # -- reductions ------------------------------------------------------------------------

    def reduced(self, make: Any, n: int, dtype: np.dtype, ufunc: np.ufunc) -> np.ndarray:
        out = make(0, n, dtype)
        for r in range(1, self.size):
            out = ufunc(out, make(r, n, dtype))
        return out

    def allreduce(self) -> None:
        hvd, r = self.hvd, self.rank
        ops = [(hvd.Sum, np.add, self.values, DTYPES), (hvd.Min, np.minimum, self.values, ORDERED),
               (hvd.Max, np.maximum, self.values, ORDERED),
               (hvd.Product, np.multiply, self.small, DTYPES)]
        for op, ufunc, make, dtypes in ops:
            for dtype in dtypes:
                for n in (*self.lengths, self.big):
                    got = hvd.allreduce(make(r, n, dtype), op=op, name=f"ar.{dtype}.{n}")
                    self.equal(got, self.reduced(make, n, dtype, ufunc),
                               f"allreduce {op} {dtype} n={n}")
        for dtype in NUMERIC:
            for n in (7, self.big):
                total = self.reduced(self.values, n, dtype, np.add)
                got = hvd.allreduce(self.values(r, n, dtype), name=f"avg.{dtype}.{n}")
                if dtype.kind in "iu":
                    self.equal(got, total // self.size, f"average {dtype} n={n}")
                else:
                    self.ok(got.dtype == dtype and np.allclose(got, total / self.size,
                                                               rtol=2e-3),
                            f"average {dtype} n={n}")
        for dtype in FLOATS:
            total = self.reduced(self.values, 1001, dtype, np.add)
            got = hvd.allreduce(self.values(r, 1001, dtype), op=hvd.Sum, prescale_factor=0.5,
                                postscale_factor=4.0, name=f"scaled.{dtype}")
            self.equal(got, (total * 2).astype(dtype), f"scaled sum {dtype}")
        rng = [np.random.default_rng(seed).standard_normal(self.big).astype(np.float32)
               for seed in range(self.size)]
        got = hvd.allreduce(rng[r], op=hvd.Sum, name="random")
        self.ok(np.allclose(got, np.sum(rng, axis=0, dtype=np.float64), rtol=1e-4, atol=1e-4),
                "random float32 sum within tolerance")
        self.inplace_and_buffers()

    def inplace_and_buffers(self) -> None:
        hvd, r, p = self.hvd, self.rank, self.size
        for n in (3, self.big):
            x = self.values(r, n, np.dtype(np.int64))
            same = hvd.allreduce_(x, op=hvd.Sum, name=f"inplace.{n}")
            self.ok(same is x, "allreduce_ returns its argument")
            self.equal(x, self.reduced(self.values, n, np.dtype(np.int64), np.add),
                       f"allreduce_ n={n}")
        grid = np.zeros((6, 9), np.float64)
        grid[:, ::2] = self.values(r, 30, np.dtype(np.float64)).reshape(6, 5)
        view = grid[:, ::2]
        hvd.allreduce_(view, op=hvd.Max, name="strided")
        self.equal(grid[:, ::2], self.reduced(self.values, 30, np.dtype(np.float64),
                                              np.maximum).reshape(6, 5), "strided in place")
        self.ok(not grid[:, 1::2].any(), "strided in place leaves the gaps alone")
        raw = bytearray(self.values(r, 17, np.dtype(np.uint8)).tobytes())
        hvd.allreduce_(raw, op=hvd.Max, name="bytearray")
        self.equal(np.frombuffer(raw, np.uint8),
                   self.reduced(self.values, 17, np.dtype(np.uint8), np.maximum), "bytearray")
        doubles = array.array("d", self.values(r, 9, np.dtype(np.float64)).tolist())
        got = hvd.allreduce(memoryview(doubles), op=hvd.Sum, name="array.array")
        self.equal(got, self.reduced(self.values, 9, np.dtype(np.float64), np.add),
                   "array.array through memoryview")
        scalar = hvd.allreduce(np.array(r + 1, np.int32), op=hvd.Sum, name="0-d")
        self.equal(scalar, np.array(p * (p + 1) // 2, np.int32), "0-d allreduce")
        matrix = hvd.allreduce(self.values(r, 60, np.dtype(np.float32)).reshape(3, 4, 5),
                               op=hvd.Sum, name="3-d")
        self.equal(matrix, self.reduced(self.values, 60, np.dtype(np.float32),
                                        np.add).reshape(3, 4, 5), "3-d allreduce")

    def reducescatter(self) -> None:
        hvd, r, p = self.hvd, self.rank, self.size
        def rows_of_three(k: int, n: int, d: np.dtype) -> np.ndarray:
            return self.values(k, n, d).reshape(-1, 3)

        for dtype in DTYPES:
            for rows in (2 * p + 1, 1, 0, 4001):
                got = hvd.reducescatter(rows_of_three(r, rows * 3, dtype), op=hvd.Sum,
                                        name=f"rs.{dtype}.{rows}")
                total = self.reduced(rows_of_three, rows * 3, dtype, np.add)
                base, extra = divmod(rows, p)
                start = r * base + min(r, extra)
                stop = start + base + (1 if r < extra else 0)
                self.equal(got, total[start:stop], f"reducescatter {dtype} rows={rows}")
        got = hvd.reducescatter(self.values(r, 40, np.dtype(np.float64)).reshape(8, 5),
                                name="rs.average")
        total = self.reduced(self.values, 40, np.dtype(np.float64), np.add).reshape(8, 5)
        base, extra = divmod(8, p)
        start = r * base + min(r, extra)
        self.ok(np.allclose(got, total[start:start + len(got)] / p), "reducescatter average")

    # -- data movement ---------------------------------------------------------------------

    def allgather(self) -> None:
        hvd, r, p = self.hvd, self.rank, self.size
        for dtype in DTYPES:
            for width, rows_of in ((3, lambda k: (2 * k) % 3), (1, lambda k: k + 1),
                                   (7, lambda k: 3000 + k)):
                mine = self.values(r, rows_of(r) * width, dtype).reshape(-1, width)
                got = hvd.allgather(mine, name=f"ag.{dtype}.{width}")
                want = np.concatenate([self.values(k, rows_of(k) * width, dtype)
                                       .reshape(-1, width) for k in range(p)])
                self.equal(got, want, f"allgather {dtype} width={width}")
            got = hvd.allgather(self.values(r, 5 + r, dtype), name=f"ag1.{dtype}")
            self.equal(got, np.concatenate([self.values(k, 5 + k, dtype) for k in range(p)]),
                       f"allgather 1-d {dtype}")

    def broadcast(self) -> None:
        hvd, r, p = self.hvd, self.rank, self.size
        for dtype in DTYPES:
            for n in (1, 13, self.big):
                for root in range(p):
                    mine = self.values(r, n, dtype) if r == root else np.zeros(n, dtype)
                    got = hvd.broadcast(mine, root, name=f"bc.{dtype}.{n}.{root}")
                    self.equal(got, self.values(root, n, dtype),
                               f"broadcast {dtype} n={n} root={root}")
        for root in range(p):
            x = self.values(r, 2 * self.big, np.dtype(np.float32)).reshape(2, -1)
            if r != root:
                x[...] = 0
            same = hvd.broadcast_(x, root, name=f"bc_.{root}")
            self.ok(same is x, "broadcast_ returns its argument")
            self.equal(x, self.values(root, 2 * self.big, np.dtype(np.float32)).reshape(2, -1),
                       f"broadcast_ root={root}")

    def alltoall(self) -> None:
        hvd, r, p = self.hvd, self.rank, self.size

        def block(src: int, dst: int, rows: int, dtype: np.dtype) -> np.ndarray:
            return np.full((rows, 2), (src * p + dst) % 7 + 1).astype(dtype)

        for dtype in DTYPES:
            for scale in (1, 700):
                splits = [((r + j) % 3) * scale for j in range(p)]
                mine = np.concatenate([block(r, j, splits[j], dtype) for j in range(p)])
                got, received = hvd.alltoall(mine, splits, name=f"a2a.{dtype}.{scale}")
                want = np.concatenate([block(s, r, ((s + r) % 3) * scale, dtype)
                                       for s in range(p)])
                self.equal(got, want, f"alltoall {dtype} scale={scale}")
                self.equal(np.asarray(received), np.array([((s + r) % 3) * scale
                                                           for s in range(p)], np.int64),
                           "alltoall received splits")
        even = np.arange(2 * p * 3, dtype=np.int32).reshape(2 * p, 3) + 1000 * r
        got, received = hvd.alltoall(even, name="a2a.even")
        want = np.concatenate([np.arange(2 * p * 3, dtype=np.int32).reshape(2 * p, 3)
                               [2 * r:2 * r + 2] + 1000 * s for s in range(p)])
        self.equal(got, want, "alltoall without splits")

    def objects(self) -> None:
        hvd, r, p = self.hvd, self.rank, self.size
        hvd.barrier()
        for root in range(p):
            got = hvd.broadcast_object({"root": root, "pad": "x" * 50 * root} if r == root
                                       else None, root_rank=root, name=f"bo.{root}")
            self.ok(got == {"root": root, "pad": "x" * 50 * root}, f"broadcast_object {root}")
            big = list(range(2000 + root))
            got = hvd.broadcast_object(big if r == root else None, root)
            self.ok(got == big, "broadcast_object, large")
        got = hvd.allgather_object((r, "y" * r))
        self.ok(got == [(k, "y" * k) for k in range(p)], "allgather_object")
        got = hvd.allgather_object(list(range(500 * r)))
        self.ok(got == [list(range(500 * k)) for k in range(p)], "allgather_object, large")
        hvd.barrier()

    # -- errors ----------------------------------------------------------------------------

    def expect(self, error: type, call: Any, *needles: str) -> None:
        try:
            call()
        except error as exc:
            text = str(exc)
            for needle in needles:
                self.ok(needle in text, f"{error.__name__} text lacks {needle!r}: {text}")
            return
        raise AssertionError(f"rank {self.rank}: {error.__name__} was not raised")

    def mismatches(self) -> None:
        hvd, r, p = self.hvd, self.rank, self.size
        self.expect(hvd.ArgumentError, lambda: hvd.alltoall(np.arange(4), [1] * (p + 1),
                                                            name="bad.splits"),
                    "alltoall 'bad.splits'", "splits")
        self.expect(hvd.ArgumentError, lambda: hvd.broadcast(np.arange(3), p, name="bad.root"),
                    "root_rank")
        if p == 1:
            return
        for n in (3, 50000):
            shapes = [(n + (k == 1),) for k in range(p)]
            self.expect(hvd.MismatchError,
                        lambda n=n, shape=shapes[r]: hvd.allreduce(np.ones(shape),
                                                                   name=f"m.shape.{n}"),
                        f"allreduce 'm.shape.{n}'", "the shape",
                        *[f"rank {k}: allreduce 'm.shape.{n}' float64 shape {shapes[k]}"
                          for k in range(p)])
        self.expect(hvd.MismatchError,
                    lambda: hvd.allreduce(np.ones(4, np.float32 if r == 0 else np.float64),
                                          name="m.dtype"),
                    "the dtype", "float32", "float64")
        self.expect(hvd.MismatchError,
                    lambda: hvd.allreduce(np.ones(4), op=hvd.Sum if r == 0 else hvd.Max,
                                          name="m.op"),
                    "the reduce op", "op Sum", "op Max")
        self.expect(hvd.MismatchError,
                    lambda: hvd.allreduce(np.ones(4), name="m.kind") if r == 0 else
                    hvd.allgather(np.ones(4), name="m.kind"),
                    "the collective", "rank 0: allreduce", "rank 1: allgather")
        self.expect(hvd.MismatchError,
                    lambda: hvd.allgather(np.ones((2, 3 + (r == p - 1))), name="m.rows"),
                    "the shape", f"rank {p - 1}: allgather 'm.rows' float64 shape (2, 4)")
        self.expect(hvd.MismatchError,
                    lambda: hvd.broadcast(np.ones(3), r % 2, name="m.root"), "the root rank")
        self.expect(hvd.ArgumentError,
                    lambda: hvd.alltoall(np.ones(3), [3 + (r == 0)] + [0] * (p - 1),
                                         name="bad.one"),
                    "rank 0: splits")
        got = hvd.allreduce(np.arange(3) + r, op=hvd.Sum, name="after.errors")
        self.equal(got, np.arange(3) * p + p * (p - 1) // 2, "allreduce after errors")

    def repeated(self) -> None:
        """Small allreduces called again and again (from the second call on, two ranks
        take a prepared way), names reused with other signatures, and mismatches on
        names that succeeded before: whichever way each rank takes, the results are
        right and every rank raises the same error."""
        hvd, r, p = self.hvd, self.rank, self.size
        f32, f64 = np.dtype(np.float32), np.dtype(np.float64)
        for salt in range(4):
            for op, ufunc in ((hvd.Sum, np.add), (hvd.Min, np.minimum),
                              (hvd.Product, np.multiply)):
                got = hvd.allreduce(self.values(r, 5, f32, salt), op=op, name=f"rep.{op}")
                want = self.reduced(lambda k, n, d, s=salt: self.values(k, n, d, s), 5, f32,
                                    ufunc)
                self.equal(got, want, f"repeated allreduce {op} call {salt}")
            x = self.values(r, 2, f64, salt)
            same = hvd.allreduce_(x, op=hvd.Max, name="rep.inplace")
            self.ok(same is x, "repeated allreduce_ returns its argument")
            self.equal(x, self.reduced(lambda k, n, d, s=salt: self.values(k, n, d, s), 2,
                                       f64, np.maximum), f"repeated allreduce_ call {salt}")
            total = self.reduced(lambda k, n, d, s=salt: self.values(k, n, d, s), 4, f64, np.add)
            got = hvd.allreduce(self.values(r, 4, f64, salt), name="rep.average")
            self.ok(np.allclose(got, total / p), f"repeated average call {salt}")
            got = hvd.allreduce(self.values(r, 4, f64, salt), op=hvd.Sum, name="rep.scaled",
                                postscale_factor=0.5)
            self.equal(got, total * 0.5, f"repeated postscaled sum call {salt}")
            grid = np.zeros((3, 8), np.int32)
            grid[:, ::2] = self.values(r, 12, np.dtype(np.int32), salt).reshape(3, 4)
            hvd.allreduce_(grid[:, ::2], op=hvd.Sum, name="rep.strided")
            self.equal(grid[:, ::2], self.reduced(
                lambda k, n, d, s=salt: self.values(k, n, d, s), 12, np.dtype(np.int32),
                np.add).reshape(3, 4), f"repeated strided in place call {salt}")
            self.ok(not grid[:, 1::2].any(), "repeated strided in place leaves the gaps")
            for shape in ((3,), (2, 2), (3,)):      # one name, signatures taking turns
                n = int(np.prod(shape))
                got = hvd.allreduce(self.values(r, n, f64).reshape(shape), op=hvd.Sum,
                                    name="rep.turns")
                self.equal(got, self.reduced(self.values, n, f64, np.add).reshape(shape),
                           f"name reused with shape {shape}")
        if p == 1:
            return
        name = "rep.Sum"                          # it succeeded above on every rank
        shapes = [(5 + (k == 1),) for k in range(p)]
        self.expect(hvd.MismatchError,
                    lambda: hvd.allreduce(self.values(r, shapes[r][0], f32), op=hvd.Sum,
                                          name=name),
                    "the shape", *[f"rank {k}: allreduce '{name}' float32 shape {shapes[k]}"
                                   for k in range(p)])
        self.expect(hvd.MismatchError,
                    lambda: hvd.allreduce(self.values(r, 5, f32), op=hvd.Sum if r else hvd.Max,
                                          name=name), "the reduce op", "op Sum", "op Max")
        self.expect(hvd.MismatchError,
                    lambda: hvd.allreduce(self.values(r, 5, f32 if r else f64), op=hvd.Sum,
                                          name=name), "the dtype", "float32", "float64")
        got = hvd.allreduce(self.values(r, 5, f32), op=hvd.Sum, name=name)
        self.equal(got, self.reduced(self.values, 5, f32, np.add), "the name after mismatches")

    def repeated_large(self) -> int:
        """Large allreduces called again and again (from the second call on, two ranks
        take a quick way when each half fits in a ring chunk): in place and not, flat and
        shaped, every kind of op (a positional or a keyword out, a final division or a
        scale), a strided tensor on one rank only (it takes the general way, sending the
        same messages), tensors reduced in place again and again, alone or taking turns,
        and a mismatch after success, which every rank reports alike."""
        hvd, r, p = self.hvd, self.rank, self.size
        f64 = np.dtype(np.float64)
        n = 20005       # 156 KiB: the ring; halves large enough for single-copy reads
        for salt in range(3):
            def make(k: int, m: int, d: np.dtype, s: int = salt) -> np.ndarray:
                return self.values(k, m, d, s)

            got = hvd.allreduce(make(r, n, f64), op=hvd.Sum, name="big.sum")
            self.equal(got, self.reduced(make, n, f64, np.add), f"large sum call {salt}")
            x = make(r, n, f64).reshape(5, -1)
            same = hvd.allreduce_(x, op=hvd.Min, name="big.min")
            self.ok(same is x, "repeated large allreduce_ returns its argument")
            self.equal(x, self.reduced(make, n, f64, np.minimum).reshape(5, -1),
                       f"large in-place min call {salt}")
            got = hvd.allreduce(make(r, n, f64), op=hvd.Max, name="big.max")
            self.equal(got, self.reduced(make, n, f64, np.maximum), f"large max call {salt}")
            got = hvd.allreduce(make(r, n, f64).reshape(-1, 5), name="big.average")
            self.ok(got.shape == (n // 5, 5) and np.allclose(
                got, self.reduced(make, n, f64, np.add).reshape(-1, 5) / p),
                f"large average call {salt}")
            got = hvd.allreduce(make(r, n, f64), op=hvd.Sum, name="big.scaled",
                                postscale_factor=0.5)
            self.equal(got, self.reduced(make, n, f64, np.add) * 0.5,
                       f"large postscaled sum call {salt}")
            grid = np.zeros((n, 2), f64)
            grid[:, 0] = make(r, n, f64)
            column = grid[:, 0] if r == 0 else grid[:, 0].copy()
            hvd.allreduce_(column, op=hvd.Sum, name="big.sum")
            self.equal(column, self.reduced(make, n, f64, np.add),
                       f"large sum in place, strided on rank 0, call {salt}")
            self.ok(not grid[:, 1].any(), "a strided large allreduce_ leaves the gaps")
        self.held()
        if p == 1:
            return self.count
        counts = [n + (k == 1) for k in range(p)]
        self.expect(hvd.MismatchError,
                    lambda: hvd.allreduce(self.values(r, counts[r], f64), op=hvd.Sum,
                                          name="big.sum"),
                    "the shape", *[f"rank {k}: allreduce 'big.sum' float64 shape ({counts[k]},)"
                                   for k in range(p)])
        got = hvd.allreduce(self.values(r, n, f64), op=hvd.Sum, name="big.sum")
        self.equal(got, self.reduced(self.values, n, f64, np.add), "large after a mismatch")
        return self.count

    def held(self) -> None:
        """Tensors reduced in place again and again (from the second call in a row with
        one tensor, two ranks keep its exchanges prepared), with each kind of op; two
        taking turns (the held one keeps its exchanges, the other goes the general way);
        another taking the first's place; the first on another name and back. Halves of
        80 KiB and of 40 KiB (on tcp, single-copy reads and the shared-memory rings).
        Each call reduces fresh data."""
        hvd, r, p = self.hvd, self.rank, self.size
        f64 = np.dtype(np.float64)
        first, second, small = np.empty(20005, f64), np.empty(20005, f64), np.empty(10002, f64)
        add, low = (hvd.Sum, np.add), (hvd.Min, np.minimum)
        turns = [(first, "big.held", add)] * 4 + [(second, "big.held.min", low)] * 3 + \
            [(small, "big.held.average", (hvd.Average, np.add))] * 3 + \
            [(first, "big.held", add), (second, "big.held.min", low)] * 2 + \
            [(second, "big.held", add)] * 2 + \
            [(first, "big.sum", add), (first, "big.held", add), (first, "big.held", add)]
        for call, (x, name, (op, ufunc)) in enumerate(turns):
            x[...] = self.values(r, len(x), f64, call)
            same = hvd.allreduce_(x, op=op, name=name)
            self.ok(same is x, "a held allreduce_ returns its argument")
            want = self.reduced(lambda k, m, d, s=call: self.values(k, m, d, s), len(x), f64,
                                ufunc)
            if op == hvd.Average:
                self.ok(np.allclose(x, want / p), f"one tensor averaged again, call {call}")
            else:
                self.equal(x, want, f"one tensor in place again ({name}), call {call}")

    def run_all(self) -> int:
        self.allreduce()
        self.repeated()
        self.repeated_large()
        self.reducescatter()
        self.allgather()
        self.broadcast()
        self.alltoall()
        self.objects()
        self.mismatches()
        return self.count
