"""Rank script: Keras 3 ``model.fit`` with gcurun.runtime.tensorflow.keras at any rank
count, checked against a 1-rank run on the full batches that every rank computes itself:
DistributedOptimizer with BroadcastGlobalVariablesCallback and MetricAverageCallback,
backward_passes_per_step as Keras' gradient accumulation, the learning-rate warmup,
load_model, SyncBatchNormalization, and XLA (refused without the callback, turned off
with it). Every rank starts from different weights. Prints one summary line per rank.

usage: keras_fit.py DIRECTORY (shared by the ranks, for the saved model)
"""

from __future__ import annotations

import sys
from pathlib import Path

import keras
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import gcurun.runtime.tensorflow.keras as hvd  # noqa: E402
from tests.helpers import Tally  # noqa: E402

BATCH = 16           # global batch of one step
STEPS = 6
LR = 0.05


def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    x = rng.normal(size=(BATCH * STEPS, 6)).astype(np.float32)
    return x, np.tanh(x @ rng.normal(size=(6, 2))).astype(np.float32)


def shard(array: np.ndarray) -> np.ndarray:
    """This rank's rows of each global batch, in order."""
    per = BATCH // hvd.size()
    steps = array.reshape(STEPS, BATCH, *array.shape[1:])
    return steps[:, hvd.rank() * per:(hvd.rank() + 1) * per].reshape(-1, *array.shape[1:])


def model(seed: int, optimizer: keras.optimizers.Optimizer,
          jit_compile: bool = False) -> keras.Model:
    keras.utils.set_random_seed(seed)
    net = keras.Sequential([keras.Input((6,)), keras.layers.Dense(12, activation="tanh"),
                            keras.layers.Dense(2)])
    net.compile(optimizer=optimizer, loss="mse", jit_compile=jit_compile)
    return net


class Checks(Tally):
    def __init__(self, directory: Path):
        super().__init__(hvd.rank(), hvd.size())
        self.directory = directory
        self.x, self.y = data()

    def reference(self, passes: int) -> tuple[keras.Model, list[float]]:
        """Rank 0's initial model trained in one process on the full batches."""
        opt = keras.optimizers.SGD(LR, momentum=0.5,
                                   gradient_accumulation_steps=passes if passes > 1 else None)
        net = model(0, opt)
        history = net.fit(self.x, self.y, batch_size=BATCH // passes, shuffle=False,
                          verbose=0)
        return net, history.history["loss"]

    def same(self, net: keras.Model, want: keras.Model, what: str) -> None:
        flat = np.concatenate([w.ravel() for w in net.get_weights()])
        every = hvd.allgather(flat[None]).numpy()
        self.ok(all(np.array_equal(row, flat) for row in every),
                f"{what}: every rank holds the same weights")
        self.ok(all(np.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in
                    zip(net.get_weights(), want.get_weights(), strict=True)),
                f"{what}: the 1-rank full-batch weights")

    def fit(self, passes: int) -> keras.Model:
        opt = hvd.DistributedOptimizer(keras.optimizers.SGD(LR, momentum=0.5),
                                       backward_passes_per_step=passes,
                                       average_aggregated_gradients=True)
        net = model(self.rank, opt)
        history = net.fit(shard(self.x), shard(self.y), batch_size=BATCH // self.size // passes,
                          shuffle=False, verbose=0,
                          callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                                     hvd.callbacks.MetricAverageCallback()])
        want, losses = self.reference(passes)
        self.same(net, want, f"model.fit (backward_passes_per_step={passes})")
        self.ok(np.allclose(history.history["loss"], losses, rtol=1e-4),
                f"MetricAverageCallback: the job's loss {history.history['loss']} {losses}")
        return net

    def warmup(self) -> None:
        opt = hvd.DistributedOptimizer(keras.optimizers.SGD(LR * self.size))
        net = model(self.rank, opt)
        rates: list[float] = []
        record = keras.callbacks.LambdaCallback(on_train_batch_begin=lambda batch, logs: (
            rates.append(float(net.optimizer.learning_rate.numpy()))))
        history = net.fit(shard(self.x), shard(self.y), batch_size=BATCH // self.size,
                          shuffle=False, verbose=0, callbacks=[
                              hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                              hvd.callbacks.LearningRateWarmupCallback(
                                  initial_lr=LR * self.size, warmup_epochs=1,
                                  momentum_correction=False),
                              record])
        self.ok(rates == sorted(rates) and np.isclose(rates[0], LR * (1 + (self.size - 1)
                                                                      / STEPS)),
                f"warmup rises from the rate over the ranks: {rates}")
        self.ok(np.isclose(history.history["learning_rate"][-1], LR * self.size),
                "warmup ends at the full rate")

    def load(self, net: keras.Model) -> None:
        path = self.directory / "model.keras"
        if self.rank == 0:
            net.save(path)
        hvd.broadcast_object(None, name="saved")
        loaded = hvd.load_model(path)
        self.ok(type(loaded.optimizer).__mro__[1].__name__ == "_DistributedOptimizer",
                f"load_model wraps the optimizer: {type(loaded.optimizer).__mro__}")
        self.ok(int(loaded.optimizer.iterations.numpy()) == STEPS,
                "load_model keeps the optimizer's state")
        loaded.fit(shard(self.x), shard(self.y), batch_size=BATCH // self.size, epochs=1,
                   shuffle=False, verbose=0)
        self.same(loaded, loaded, "a loaded model trains")

    def sync_batch_norm(self) -> None:
        """Each rank normalizes its rows with the statistics of every rank's rows: the
        same outputs and moving statistics as one BatchNormalization over them all."""
        rows = np.random.default_rng(3).normal(2.0, 3.0, size=(4 * self.size, 5))
        full = keras.layers.BatchNormalization(momentum=0.5)
        want = full(rows.astype(np.float32), training=True).numpy()
        sync = hvd.SyncBatchNormalization(momentum=0.5)
        mine = slice(4 * self.rank, 4 * (self.rank + 1))
        got = sync(rows[mine].astype(np.float32), training=True).numpy()
        self.ok(np.allclose(got, want[mine], atol=1e-4), "SyncBatchNormalization outputs")
        self.ok(np.allclose(sync.moving_mean.numpy(), full.moving_mean.numpy(), atol=1e-5)
                and np.allclose(sync.moving_variance.numpy(), full.moving_variance.numpy(),
                                rtol=1e-4), "SyncBatchNormalization moving statistics")

    def xla(self) -> None:
        x, y = shard(self.x), shard(self.y)
        refused = model(self.rank, hvd.DistributedOptimizer(keras.optimizers.SGD(LR)),
                        jit_compile=True)
        try:
            refused.fit(x, y, batch_size=4, verbose=0)
        except ValueError as exc:
            self.ok("jit_compile=False" in str(exc), f"XLA is refused clearly: {exc}")
        else:
            # One rank reduces nothing, so no Python op stands in XLA's way.
            self.ok(self.size == 1, "jit_compile=True trained with Python collectives")
        turned_off = model(self.rank, hvd.DistributedOptimizer(keras.optimizers.SGD(LR)),
                           jit_compile=True)
        turned_off.fit(x, y, batch_size=4, verbose=0,
                       callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
        self.ok(not turned_off.jit_compile, "the broadcast callback turns jit_compile off")


def run(directory: Path) -> int:
    """Every check, in a job already joined; the number of checks passed."""
    checks = Checks(directory)
    net = checks.fit(passes=1)
    checks.fit(passes=2)
    checks.warmup()
    checks.load(net)
    checks.sync_batch_norm()
    checks.xla()
    return checks.count


def main() -> None:
    hvd.init()
    count = run(Path(sys.argv[1]))
    print(f"rank {hvd.rank()} of {hvd.size()} ok ({count} checks)", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
