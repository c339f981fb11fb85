"""Rank script: the engine's checks, all in one process launch. Prints one summary line per
rank with the number of checks and the engine's counters.

Ranks submit the same named tensors in different orders, interleaved with other ops and
unnamed synchronous calls; mismatches (fresh and cached), grouped ops, handles, alltoall,
reducescatter, scale factors, zero-size and mixed-dtype tensors, and join."""

from __future__ import annotations

import sys

import numpy as np

import gcurun.runtime as hvd
from gcurun.runtime.frontend import state as basics
from tests.runtime.checks import Checks as BaseChecks

SHAPES = [(0,), (1,), (3, 5), (7,), (257,), (1000,), (64, 64), (70001,), (300, 1000),
          (5,), (0, 4), (2048,), (33,), (400000,)]
DTYPES = [np.float32, np.float64, np.int32, np.int64]


class Checks(BaseChecks):
    """The runtime suite's checks, plus the engine's: handles, orders, mismatches."""

    def raises(self, error: type, handle: int, *needles: str) -> None:
        try:
            hvd.synchronize(handle)
        except error as exc:
            for needle in needles:
                self.ok(needle in str(exc), f"{error.__name__} lacks {needle!r}: {exc}")
            return
        raise AssertionError(f"rank {self.rank}: {error.__name__} was not raised")

    @staticmethod
    def data(rank: int, shape: tuple[int, ...], dtype: type, salt: int) -> np.ndarray:
        n = int(np.prod(shape))
        return ((np.arange(n) * 3 + rank * 7 + salt) % 13 + 1).astype(dtype).reshape(shape)

    def order(self, n: int, step: int) -> list[int]:
        order = list(range(n))
        np.random.default_rng(1000 * step + self.rank).shuffle(order)
        return order

    # -- the same named tensors in different orders ------------------------------------

    def orders(self, steps: int) -> None:
        r, p = self.rank, self.size
        tensors = [(f"t.{i}", shape, DTYPES[i % len(DTYPES)]) for i, shape in enumerate(SHAPES)]
        for step in range(steps):
            handles = {}
            mine = {name: self.data(r, shape, dtype, step) for name, shape, dtype in tensors}
            for k, i in enumerate(self.order(len(tensors), step)):
                name = tensors[i][0]
                if i % 3 == 0:
                    handles[name] = hvd.allreduce_async_(mine[name], name=name, op=hvd.Sum)
                else:
                    handles[name] = hvd.allreduce_async(mine[name], name=name, op=hvd.Sum)
                if k == 4:   # named ops of other kinds in between
                    handles["gather"] = hvd.allgather_async(np.full((r + 1, 2), r), name="g")
                    handles["bcast"] = hvd.broadcast_async_(np.full(3, r, np.int16), p - 1,
                                                            name="b")
            # An unnamed synchronous call while the named ones are pending (every rank
            # makes its unnamed calls in the same order).
            total = hvd.allreduce(np.array([r + step]), op=hvd.Sum)
            self.equal(total, np.array([p * (p - 1) // 2 + p * step]), "unnamed sync")
            names = list(handles)
            for index in self.order(len(names), step + 50):
                name = names[index]
                got = hvd.synchronize(handles[name])
                if name == "gather":
                    want = np.concatenate([np.full((k + 1, 2), k) for k in range(p)])
                    self.equal(got, want, "allgather amid allreduces")
                elif name == "bcast":
                    self.equal(got, np.full(3, p - 1, np.int16), "broadcast_ amid allreduces")
                else:
                    _, shape, dtype = tensors[int(name.split(".")[1])]
                    want = sum(self.data(k, shape, dtype, step) for k in range(p))
                    self.equal(got, np.asarray(want, dtype).reshape(shape), f"{name} step {step}")
                    if int(name.split(".")[1]) % 3 == 0:
                        self.ok(got is mine[name], "allreduce_async_ returns its tensor")

    def steady(self, steps: int) -> None:
        """Named tensors every step, in a different order each step and on each rank."""
        r, p = self.rank, self.size
        xs = [np.full(n, r + 1.0, np.float32) for n in (1, 10, 1000, 100000, 600000)] * 4
        for step in range(steps):
            order = self.order(len(xs), step + 100)
            handles = {i: hvd.allreduce_async(xs[i], name=f"steady.{i}", op=hvd.Sum)
                       for i in order}
            for i in sorted(handles):
                self.equal(hvd.synchronize(handles[i]),
                           np.full(len(xs[i]), p * (p + 1) / 2, np.float32), "steady")

    def scaled(self) -> None:
        r, p = self.rank, self.size
        a = hvd.allreduce_async(np.full(10, r + 1.0), name="s.avg")
        b = hvd.allreduce_async(np.full(10, r + 1.0), name="s.pre", op=hvd.Sum,
                                prescale_factor=2.0)
        c = hvd.allreduce_async(np.full(10, r + 1.0), name="s.post", op=hvd.Sum,
                                postscale_factor=0.5)
        d = hvd.allreduce_async(np.full(10, r + 1, np.int64), name="s.int")
        e = hvd.allreduce_async(np.full(300000, r + 1.0, np.float32), name="s.big.avg")
        total = p * (p + 1) / 2
        self.ok(np.allclose(hvd.synchronize(a), total / p), "average")
        self.ok(np.allclose(hvd.synchronize(b), 2 * total), "prescale")
        self.ok(np.allclose(hvd.synchronize(c), total / 2), "postscale")
        self.equal(hvd.synchronize(d), np.full(10, int(total) // p, np.int64), "int average")
        self.ok(np.allclose(hvd.synchronize(e), total / p), "large average")
        mins = hvd.allreduce_async(np.arange(5) + r, name="s.min", op=hvd.Min)
        maxs = hvd.allreduce_async(np.arange(5) + r, name="s.max", op=hvd.Max)
        self.equal(hvd.synchronize(maxs), np.arange(5) + p - 1, "max beside min")
        self.equal(hvd.synchronize(mins), np.arange(5), "min beside max")

    def grouped(self) -> None:
        r, p = self.rank, self.size
        xs = [np.full(n, r + 1.0) for n in (1, 0, 100, 200000)]
        got = hvd.grouped_allreduce(xs, op=hvd.Sum, name="grp")
        for x, g in zip(xs, got, strict=True):
            self.equal(g, np.full(len(x), p * (p + 1) / 2), "grouped_allreduce")
        handle = hvd.grouped_allreduce_async_(xs, op=hvd.Max)
        same = hvd.synchronize(handle)
        self.ok(all(a is b for a, b in zip(same, xs, strict=True)), "grouped in place")
        gathered = hvd.grouped_allgather([np.full((r + 1,), r), np.full((1, 2), r)])
        self.equal(gathered[0], np.concatenate([np.full(k + 1, k) for k in range(p)]),
                   "grouped_allgather")
        scattered = hvd.grouped_reducescatter([np.ones((2 * p, 3)), np.ones((p,))],
                                              op=hvd.Sum)
        self.equal(scattered[0], np.full((2, 3), float(p)), "grouped_reducescatter")
        self.ok(hvd.grouped_allreduce([]) == [], "empty group")

    def others(self) -> None:
        r, p = self.rank, self.size
        splits = [(r + j) % 3 for j in range(p)]
        rows = np.concatenate([np.full((splits[j], 2), r * 10 + j) for j in range(p)] or
                              [np.zeros((0, 2))]).astype(np.int32)
        got, received = hvd.synchronize(hvd.alltoall_async(rows, splits, name="a2a"))
        want = np.concatenate([np.full(((s + r) % 3, 2), s * 10 + r) for s in range(p)]
                              ).astype(np.int32)
        self.equal(got, want, "alltoall_async")
        self.equal(received, np.array([(s + r) % 3 for s in range(p)], np.int64),
                   "alltoall received splits")
        rs = hvd.synchronize(hvd.reducescatter_async(np.ones((2 * p + 1, 2)) * (r + 1),
                                                     name="rs", op=hvd.Sum))
        self.equal(rs, np.full((3 if r == 0 else 2, 2), p * (p + 1) / 2), "reducescatter")
        out = hvd.synchronize(hvd.broadcast_async(np.arange(4) * r, 0, name="bc0"))
        self.equal(out, np.zeros(4, np.int64), "broadcast_async")

    # -- errors -------------------------------------------------------------------------

    def mismatches(self) -> None:
        r, p = self.rank, self.size
        handle = hvd.broadcast_async(np.ones(3), p, name="mm.root")
        self.raises(hvd.ArgumentError, handle, "root_rank")
        if p == 1:
            return
        odd = r == p - 1
        for step in range(3):   # step 0 negotiates, step 1 uses the cache, step 2 conflicts
            shape = (5,) if step < 2 or not odd else (6,)
            handle = hvd.allreduce_async(np.ones(shape), name="mm.shape")
            if step < 2:
                self.equal(hvd.synchronize(handle), np.ones(5) * 1.0, "before mismatch")
            else:
                self.raises(hvd.MismatchError, handle, "allreduce 'mm.shape'", "the shape",
                            f"rank {p - 1}: allreduce 'mm.shape' float64 shape (6,)")
        handle = hvd.allreduce_async(np.ones(4, np.float32 if odd else np.float64),
                                     name="mm.dtype")
        self.raises(hvd.MismatchError, handle, "the dtype")
        handle = hvd.allreduce_async(np.ones(4), name="mm.scale", op=hvd.Sum,
                                     prescale_factor=2.0 if odd else 1.0)
        self.raises(hvd.MismatchError, handle, "scale factors")
        # The engine carries on, and the mismatched name works again.
        got = hvd.allreduce(np.ones(5), name="mm.shape", op=hvd.Sum)
        self.equal(got, np.full(5, float(p)), "after mismatch")

    def handles(self) -> None:
        """Last: it leaves an op pending (shutdown fails it)."""
        handle = hvd.allreduce_async(np.ones(2), name="h.once")
        self.ok(isinstance(hvd.poll(handle), bool), "poll returns a bool")
        hvd.synchronize(handle)
        for bad in (handle, 10 ** 9):
            try:
                hvd.synchronize(bad)
                raise AssertionError("a spent handle synchronized")
            except hvd.HandleError as exc:
                self.ok("unknown or was synchronized already" in str(exc), str(exc))
        # A name of this rank alone never completes, so the second is surely a duplicate:
        # refused at once, on this rank alone (Horovod's ValueError).
        hvd.allreduce_async(np.ones(2), name=f"h.dup.{self.rank}")
        try:
            hvd.allreduce_async(np.ones(2), name=f"h.dup.{self.rank}")
            raise AssertionError(f"rank {self.rank}: a duplicate name was accepted")
        except hvd.HandleError as exc:
            self.ok(isinstance(exc, ValueError) and "still pending" in str(exc), str(exc))

    def join(self) -> None:
        r, p = self.rank, self.size
        if p == 1:
            self.ok(hvd.join() == 0, "join alone")
            return
        if r == 0:
            last = hvd.join()
        else:
            for k in range(3):
                got = hvd.allreduce(np.full(3, r, np.int64), name=f"j.{k}", op=hvd.Sum)
                self.equal(got, np.full(3, p * (p - 1) // 2, np.int64), "sum after a join")
            low = hvd.allreduce(np.full(2, r + 5.0), name="j.min", op=hvd.Min)
            self.equal(low, np.full(2, 6.0), "min ignores the joined rank")
            # As in Horovod, gathers and broadcasts need every rank: refused on every
            # rank that called them, and the engine goes on.
            for kind, handle in (
                    ("allgather", hvd.allgather_async(np.full((1,), r), name="j.gather")),
                    ("alltoall", hvd.alltoall_async(np.zeros(p), name="j.alltoall")),
                    ("broadcast", hvd.broadcast_async(np.ones(2), 1, name="j.bcast"))):
                self.raises(hvd.ArgumentError, handle, kind, "join()")
            last = hvd.join()
        self.ok(last == p - 1 if p > 1 else last == 0, f"join returned {last}")
        after = hvd.allreduce(np.ones(1), name="after.join", op=hvd.Sum)
        self.equal(after, np.full(1, float(p)), "allreduce after everyone joined")


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    hvd.init()
    checks = Checks(hvd)
    engine = basics._state.engine
    checks.orders(steps)
    checks.steady(1)
    described = engine.controller.described
    checks.steady(steps)
    steady = engine.controller.described - described
    checks.scaled()
    checks.grouped()
    checks.others()
    checks.mismatches()
    checks.join()
    checks.handles()
    stats = engine.executor.stats
    print(f"rank {checks.rank} of {checks.size} ok: {checks.count} checks, "
          f"batches={stats['batches']} fused={stats['fused']} "
          f"steady_uncached={steady} cycles={engine.cycles}", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
