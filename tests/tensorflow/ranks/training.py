"""Rank script: TensorFlow training with gcurun.runtime.tensorflow at any rank count,
checked against a 1-rank run on the full batch that every rank computes itself, without
communication: DistributedGradientTape (eager and in ``tf.function``), and the TF1
DistributedOptimizer in a MonitoredTrainingSession with BroadcastGlobalVariablesHook,
with and without local gradient aggregation. Every rank starts from different weights;
the broadcast must make them rank 0's. Prints one summary line per rank."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import gcurun.runtime.tensorflow as hvd  # noqa: E402
from tests.helpers import Tally  # noqa: E402

BATCH = 8            # global batch of one step
STEPS = 4
LR = 0.1


def batch(step: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(100 + step)
    x = rng.normal(size=(BATCH, 5)).astype(np.float32)
    return x, (x @ np.arange(1, 6, dtype=np.float32)[:, None] > 0).astype(np.float32)


def shard(array: np.ndarray) -> np.ndarray:
    per = array.shape[0] // hvd.size()
    return array[hvd.rank() * per:(hvd.rank() + 1) * per]


def initial(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(5, 8)).astype(np.float32), np.zeros(8, np.float32),
            rng.normal(size=(8, 1)).astype(np.float32), np.zeros(1, np.float32)]


def forward(weights: list[Any], x: Any) -> Any:
    hidden = tf.tanh(tf.matmul(x, weights[0]) + weights[1])
    return tf.matmul(hidden, weights[2]) + weights[3]


def loss_of(weights: list[Any], x: Any, y: Any) -> Any:
    return tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=y,
                                                                  logits=forward(weights, x)))


class Checks(Tally):
    def __init__(self) -> None:
        super().__init__(hvd.rank(), hvd.size())

    def reference(self, passes: int = 1) -> list[np.ndarray]:
        """Rank 0's initial weights trained in one process on the full batches."""
        weights = [tf.Variable(w) for w in initial(0)]
        for step in range(STEPS):
            grads = None
            for micro in range(passes):
                x, y = batch(step * passes + micro)
                with tf.GradientTape() as tape:
                    loss = loss_of(weights, x, y)
                step_grads = tape.gradient(loss, weights)
                grads = step_grads if grads is None else [a + b for a, b in
                                                          zip(grads, step_grads, strict=True)]
            for w, g in zip(weights, grads, strict=True):
                w.assign_sub(LR * g / passes)
        return [w.numpy() for w in weights]

    def same_everywhere_and_close(self, got: list[np.ndarray], want: list[np.ndarray],
                                  what: str) -> None:
        flat = np.concatenate([g.ravel() for g in got])
        every = hvd.allgather(tf.constant(flat[None]))
        self.ok(all(np.array_equal(row, flat) for row in every.numpy()),
                f"{what}: every rank holds the same weights")
        self.ok(all(np.allclose(g, w, rtol=1e-5, atol=1e-6) for g, w in
                    zip(got, want, strict=True)), f"{what}: the 1-rank full-batch result")

    # -- TF2 -------------------------------------------------------------------------------

    def tape(self, compiled: bool) -> None:
        weights = [tf.Variable(w) for w in initial(self.rank)]
        hvd.broadcast_variables(weights, root_rank=0)
        self.ok(np.array_equal(weights[0].numpy(), initial(0)[0]),
                "broadcast_variables gives rank 0's values")

        def step(x: tf.Tensor, y: tf.Tensor) -> None:
            with tf.GradientTape() as tape:
                loss = loss_of(weights, x, y)
            tape = hvd.DistributedGradientTape(tape)
            for w, g in zip(weights, tape.gradient(loss, weights), strict=True):
                w.assign_sub(LR * g)

        run = tf.function(step) if compiled else step
        for s in range(STEPS):
            x, y = batch(s)
            run(tf.constant(shard(x)), tf.constant(shard(y)))
        self.same_everywhere_and_close([w.numpy() for w in weights], self.reference(),
                                       f"DistributedGradientTape (tf.function={compiled})")

    # -- TF1 -------------------------------------------------------------------------------

    def monitored_session(self, passes: int) -> None:
        with tf.Graph().as_default():
            weights = [tf.compat.v1.get_variable(f"w{i}", initializer=w)
                       for i, w in enumerate(initial(self.rank))]
            x = tf.compat.v1.placeholder(tf.float32, [None, 5])
            y = tf.compat.v1.placeholder(tf.float32, [None, 1])
            opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(LR),
                                           backward_passes_per_step=passes,
                                           average_aggregated_gradients=True)
            step = tf.compat.v1.train.get_or_create_global_step()
            train = opt.minimize(loss_of(weights, x, y), global_step=step)
            hooks = [hvd.BroadcastGlobalVariablesHook(0)]
            with tf.compat.v1.train.MonitoredTrainingSession(hooks=hooks) as session:
                self.ok(np.array_equal(session.run(weights[0]), initial(0)[0]),
                        "BroadcastGlobalVariablesHook gives rank 0's values")
                for s in range(STEPS * passes):
                    bx, by = batch(s)
                    session.run(train, {x: shard(bx), y: shard(by)})
                got = session.run(weights)
                self.ok(session.run(step) == STEPS * passes,
                        "global_step counts every call, applied or not")
        self.same_everywhere_and_close(got, self.reference(passes),
                                       f"TF1 DistributedOptimizer (passes={passes})")

    def options(self) -> None:
        sgd = tf.compat.v1.train.GradientDescentOptimizer(LR)
        for bad, message in (({"backward_passes_per_step": 0}, "backward_passes_per_step"),
                             ({"op": hvd.Sum, "gradient_predivide_factor": 2.0},
                              "gradient_predivide_factor")):
            try:
                hvd.DistributedOptimizer(sgd, **bad)
            except ValueError as exc:
                self.ok(message in str(exc), f"DistributedOptimizer({bad}): {exc}")
            else:
                self.ok(False, f"DistributedOptimizer({bad}) accepted")


def run() -> int:
    """Every check, in a job already joined; the number of checks passed."""
    checks = Checks()
    checks.tape(compiled=False)
    checks.tape(compiled=True)
    checks.monitored_session(passes=1)
    checks.monitored_session(passes=2)
    checks.options()
    return checks.count


def main() -> None:
    hvd.init()
    count = run()
    print(f"rank {hvd.rank()} of {hvd.size()} ok ({count} checks)", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
