"""Rank script: the collectives of gcurun.runtime.tensorflow on tensors, at any rank
count, in the three ways TensorFlow runs them: eagerly, in ``tf.function`` and in a TF1
graph session (where many collectives in one run exercise the enqueue/synchronize
split). Each rank computes every rank's input from (rank, size), so expected values need
no communication. Prints one summary line per rank."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import gcurun.runtime.tensorflow as hvd  # noqa: E402
from tests.helpers import Tally  # noqa: E402

DTYPES = [tf.float32, tf.float64, tf.float16, tf.bfloat16, tf.int64, tf.int32, tf.int8,
          tf.uint8]


def values(rank: int, shape: tuple[int, ...], dtype: tf.DType) -> np.ndarray:
    """Small integers 1..11: exact in every dtype, sums of a few ranks too."""
    n = int(np.prod(shape)) if shape else 1
    i = np.arange(n)
    return ((i * 7 + rank * 3) % 11 + 1).astype(np.float64).reshape(shape).astype(
        dtype.as_numpy_dtype)


class Checks(Tally):
    def __init__(self) -> None:
        super().__init__(hvd.rank(), hvd.size())

    def equal(self, got: Any, want: np.ndarray, what: str) -> None:
        array = np.asarray(got.numpy() if hasattr(got, "numpy") else got)
        self.ok(array.dtype == want.dtype and array.shape == want.shape
                and np.array_equal(array.astype(np.float64), want.astype(np.float64)),
                f"{what}: got {array!r} want {want!r}")

    def total(self, shape: tuple[int, ...], dtype: tf.DType) -> np.ndarray:
        return sum(values(k, shape, tf.float64) for k in range(self.size)).astype(
            dtype.as_numpy_dtype)

    def rows(self, count: int) -> tuple[int, int]:
        """This rank's rows of a reducescatter of ``count`` rows."""
        base, extra = divmod(count, self.size)
        start = self.rank * base + min(self.rank, extra)
        return start, start + base + (1 if self.rank < extra else 0)

    # -- eager -----------------------------------------------------------------------------

    def eager(self) -> None:
        r, p = self.rank, self.size
        for dtype in DTYPES:
            for shape in ((), (0,), (5,), (3, 4)):
                x = tf.constant(values(r, shape, dtype))
                self.equal(hvd.allreduce(x, op=hvd.Sum), self.total(shape, dtype),
                           f"allreduce Sum {dtype.name} {shape}")
        x = tf.constant(values(r, (4, 5), tf.float32))
        self.ok(np.allclose(hvd.allreduce(x).numpy(), self.total((4, 5), tf.float32) / p),
                "allreduce averages by default")
        for op, fold in ((hvd.Min, np.minimum), (hvd.Max, np.maximum)):
            want = values(0, (9,), tf.int32)
            for k in range(1, p):
                want = fold(want, values(k, (9,), tf.int32))
            self.equal(hvd.allreduce(tf.constant(values(r, (9,), tf.int32)), op=op), want,
                       f"allreduce op {op}")
        got = hvd.allreduce(x, op=hvd.Sum, prescale_factor=0.5, postscale_factor=4.0)
        self.ok(np.allclose(got.numpy(), self.total((4, 5), tf.float32) * 2), "scale factors")
        fp16 = hvd.allreduce(x / 8, op=hvd.Sum, compression=hvd.Compression.fp16)
        self.ok(fp16.dtype == tf.float32 and np.allclose(
            fp16.numpy(), self.total((4, 5), tf.float32) / 8, rtol=1e-3), "fp16 compression")
        grouped = hvd.grouped_allreduce([x, tf.constant(values(r, (3,), tf.int64))],
                                        op=hvd.Sum)
        self.equal(grouped[1], self.total((3,), tf.int64), "grouped_allreduce")
        self.eager_movement()
        self.eager_objects()

    def eager_movement(self) -> None:
        r, p = self.rank, self.size
        for dtype in (tf.float32, tf.int64, tf.bfloat16, tf.bool, tf.uint16):
            mine = tf.constant(values(r, (r + 1, 3), dtype))
            want = np.concatenate([values(k, (k + 1, 3), dtype) for k in range(p)])
            self.equal(hvd.allgather(mine), want, f"ragged allgather {dtype.name}")
        got = hvd.grouped_allgather([tf.constant(values(r, (2,), tf.int32)),
                                     tf.constant(values(r, (1, 4), tf.float64))])
        self.equal(got[1], np.concatenate([values(k, (1, 4), tf.float64) for k in range(p)]),
                   "grouped_allgather")
        for root in range(p):
            self.equal(hvd.broadcast(tf.constant(values(r, (4, 4), tf.float32)), root),
                       values(root, (4, 4), tf.float32), f"broadcast root={root}")
        var = tf.Variable(values(r, (3,), tf.float32))
        self.ok(hvd.broadcast_([var], p - 1)[0] is var, "broadcast_ returns the variables")
        self.equal(var, values(p - 1, (3,), tf.float32), "broadcast_ assigns in place")
        splits = [(r + j) % 3 for j in range(p)]
        mine = tf.constant(np.concatenate(
            [np.full((splits[j], 2), float(r * p + j), np.float32) for j in range(p)]))
        collected, received = hvd.alltoall(mine, splits=splits)
        want = np.concatenate([np.full(((s + r) % 3, 2), float(s * p + r), np.float32)
                               for s in range(p)])
        self.equal(collected, want, "alltoall with splits")
        self.equal(received, np.array([(s + r) % 3 for s in range(p)], np.int32),
                   "alltoall received splits")
        rows = 2 * p + 1
        start, stop = self.rows(rows)
        got = hvd.reducescatter(tf.constant(values(r, (rows, 3), tf.float32)), op=hvd.Sum)
        self.equal(got, self.total((rows, 3), tf.float32)[start:stop], "reducescatter")
        slices = tf.IndexedSlices(tf.constant(values(r, (2, 3), tf.float32)),
                                  tf.constant([r, r + 1]), tf.constant([p + 1, 3]))
        dense = tf.convert_to_tensor(hvd.allreduce(slices, op=hvd.Sum))
        want = np.zeros((p + 1, 3), np.float32)
        for k in range(p):
            want[k:k + 2] += values(k, (2, 3), tf.float32)
        self.equal(dense, want, "IndexedSlices allreduce gathers")

    def eager_objects(self) -> None:
        r, p = self.rank, self.size
        self.ok(hvd.broadcast_object({"from": r}, root_rank=p - 1) == {"from": p - 1},
                "broadcast_object")
        self.ok(hvd.allgather_object(("rank", r)) == [("rank", k) for k in range(p)],
                "allgather_object")
        hvd.barrier()
        self.ok(int(hvd.rank_op()) == r and int(hvd.size_op()) == p, "rank_op and size_op")

    def gradients(self) -> None:
        r, p = self.rank, self.size
        v = tf.Variable(values(r, (4,), tf.float32))
        with tf.GradientTape(persistent=True) as tape:
            summed = hvd.allreduce(v * 2.0, op=hvd.Sum)
            gathered = hvd.allgather(v)
            broadcast = hvd.broadcast(v, 0)
        self.equal(tape.gradient(summed, v), np.full(4, 2.0 * p, np.float32),
                   "allreduce gradient")
        self.equal(tape.gradient(gathered, v), np.ones(4, np.float32),
                   "allgather gradient (the average of the gathered gradients)")
        self.equal(tape.gradient(broadcast, v), np.full(4, 1.0 if r == 0 else 0.0, np.float32),
                   "broadcast gradient")

    # -- graphs ----------------------------------------------------------------------------

    def function(self) -> None:
        r, p = self.rank, self.size

        @tf.function
        def step(x: tf.Tensor, ragged: tf.Tensor) -> Any:
            return (hvd.allreduce(x, op=hvd.Sum), hvd.allgather(ragged),
                    hvd.broadcast(x, p - 1), hvd.grouped_allreduce([x, x * 2], op=hvd.Sum))

        for attempt in range(2):          # the second call reuses the traced graph
            x = tf.constant(values(r, (3, 2), tf.float32))
            summed, gathered, root, grouped = step(x, tf.constant(values(r, (r + 1,),
                                                                         tf.int64)))
            self.equal(summed, self.total((3, 2), tf.float32), f"tf.function allreduce {attempt}")
            self.equal(gathered, np.concatenate([values(k, (k + 1,), tf.int64)
                                                 for k in range(p)]), "tf.function allgather")
            self.equal(root, values(p - 1, (3, 2), tf.float32), "tf.function broadcast")
            self.equal(grouped[1], self.total((3, 2), tf.float32) * 2,
                       "tf.function grouped_allreduce")
        self.ok(summed.shape == (3, 2), "static shape of a graph allreduce")

        @tf.function
        def mismatched(t: tf.Tensor) -> tf.Tensor:
            return hvd.allreduce(t)

        if p > 1:
            self.raises(tf.errors.FailedPreconditionError,
                        lambda: mismatched(tf.ones([r + 1])), "tf.function mismatch")

    def graph(self) -> None:
        """A TF1 session running many collectives in one step: the thread pool runs them
        in a different order on each rank."""
        r, p = self.rank, self.size
        with tf.Graph().as_default():
            inputs = [tf.constant(values(r, (k + 1, 5), tf.float32)) for k in range(24)]
            summed = [hvd.allreduce(t, op=hvd.Sum) for t in inputs]
            gathered = [hvd.allgather(t) for t in inputs[:8]]
            v = tf.compat.v1.Variable(values(r, (6,), tf.float32), use_resource=False)
            assign = hvd.broadcast_global_variables(0)
            wrong = hvd.allreduce(tf.ones([r + 2]))
            config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=1)
            with tf.compat.v1.Session(config=config) as session:
                for attempt in range(3):
                    out = session.run(summed + gathered)
                    self.ok(all(np.array_equal(out[k], self.total((k + 1, 5), tf.float32))
                                for k in range(24)), f"24 allreduces in one run ({attempt})")
                    self.ok(all(out[24 + k].shape == ((k + 1) * p, 5) for k in range(8)),
                            "8 allgathers in the same run")
                session.run(v.initializer)
                session.run(assign)
                self.equal(session.run(v), values(0, (6,), tf.float32),
                           "broadcast_global_variables (RefVariable)")
                if p > 1:
                    self.raises(tf.errors.FailedPreconditionError,
                                lambda: session.run(wrong), "graph mismatch")

    def errors(self) -> None:
        r, p = self.rank, self.size
        self.raises(RuntimeError, lambda: hvd.broadcast_global_variables(0),
                    "broadcast_global_variables refuses eager code")
        self.raises(NotImplementedError, lambda: hvd.allreduce(
            tf.IndexedSlices(tf.ones([1, 3]), tf.constant([0])), op=hvd.Max),
            "IndexedSlices with op=Max")
        self.raises(TypeError, lambda: hvd.allreduce(tf.constant(["a"])), "string tensors")
        if p == 1:
            return
        self.raises(tf.errors.FailedPreconditionError,
                    lambda: hvd.allreduce(tf.ones([r + 2])), "eager shape mismatch")
        caught = self.raises(hvd.MismatchError, lambda: hvd.allgather(
            tf.ones([2, r + 2])), "allgather mismatch is the runtime's MismatchError")
        self.ok("rank" in str(caught), f"the message names the ranks: {caught}")
        self.raises(tf.errors.InvalidArgumentError,
                    lambda: hvd.alltoall(tf.ones([p + 1])), "uneven alltoall")

    def raises(self, kind: type[BaseException], fn: Callable[[], Any], what: str) -> Any:
        try:
            fn()
        except kind as exc:
            self.ok(True, what)
            return exc
        except Exception as exc:         # noqa: BLE001 - reported as the failed check
            self.ok(False, f"{what}: raised {type(exc).__name__}: {exc}")
        else:
            self.ok(False, f"{what}: raised nothing")
        return None


def run() -> int:
    """Every check, in a job already joined; the number of checks passed."""
    checks = Checks()
    checks.eager()
    checks.gradients()
    checks.function()
    checks.graph()
    checks.errors()
    return checks.count


def main() -> None:
    hvd.init()
    count = run()
    print(f"rank {hvd.rank()} of {hvd.size()} ok ({count} checks)", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
