"""Train a small Keras CNN on the shapes dataset with ``model.fit``, data-parallel.

    gcurun -np 2 python examples/keras_train.py
    gcurun --mpi -np 2 python examples/keras_train.py
    python examples/keras_train.py                          # one process

The script is Horovod's Keras recipe, and its import line is the only thing that
differs from a script written for ``horovod.tensorflow.keras``: initialize, pin the
device by local rank, scale the learning rate by the number of ranks, wrap the optimizer
in DistributedOptimizer, and train with ``model.fit`` and Horovod's callbacks:
BroadcastGlobalVariablesCallback (every rank starts from rank 0's weights and optimizer
state), MetricAverageCallback (epoch metrics of the whole job) and
LearningRateWarmupCallback; rank 0 alone writes checkpoints and prints. Started again
with the same ``--checkpoint-dir``, it resumes from the last checkpoint (``hvd.load_model``).

The data are generated from a seed (28x28 images of a disk, a ring, a square or a cross,
as in ``pytorch_train.py``). ``--batch-size`` is per rank and each global batch is split
between the ranks in rank order, so 2 ranks at 32 train on the same batches as 1 rank at
64 (pass ``--lr`` accordingly: it is multiplied by the number of ranks, and
``--warmup-epochs 0``, since the warmup starts from the rate divided by the ranks).
"""

from __future__ import annotations

import argparse
import os

import keras
import numpy as np
import tensorflow as tf

import gcurun.runtime.tensorflow.keras as hvd

CLASSES = ("disk", "ring", "square", "cross")


def make_shapes(count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``count`` labelled images (NHWC); the same seed always gives the same dataset."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, len(CLASSES), count)
    cy, cx = rng.uniform(9, 19, (2, count, 1, 1))
    radius = rng.uniform(4, 8, (count, 1, 1))
    y, x = np.mgrid[0:28, 0:28].astype(np.float64)
    dy, dx = y[None] - cy, x[None] - cx
    distance = np.sqrt(dy ** 2 + dx ** 2)
    masks = np.stack([
        distance <= radius,
        (distance <= radius) & (distance >= radius - 1.8),
        np.maximum(np.abs(dy), np.abs(dx)) <= radius * 0.8,
        ((np.abs(dx) <= 1.3) | (np.abs(dy) <= 1.3)) & (np.maximum(np.abs(dy), np.abs(dx))
                                                       <= radius),
    ])
    picked = masks[labels, np.arange(count)]
    brightness = rng.uniform(0.6, 1.0, (count, 1, 1))
    images = picked * brightness + rng.normal(0.0, 0.25, picked.shape)
    return images.astype(np.float32)[..., None], labels.astype(np.int64)


class Shard(keras.utils.PyDataset):
    """This rank's part of each global batch: the examples are shuffled once per epoch
    (the same order on every rank), cut into global batches, and each global batch into
    the ranks' batches in rank order."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, batch_size: int, seed: int):
        super().__init__()
        self.images, self.labels = images, labels
        self.batch_size, self.seed, self.epoch = batch_size, seed, 0
        self.order = self._order()

    def _order(self) -> np.ndarray:
        return np.random.default_rng([self.seed, self.epoch]).permutation(len(self.images))

    def __len__(self) -> int:
        return len(self.images) // (self.batch_size * hvd.size())

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        start = (index * hvd.size() + hvd.rank()) * self.batch_size
        rows = self.order[start:start + self.batch_size]
        return self.images[rows], self.labels[rows]

    def on_epoch_end(self) -> None:
        self.epoch += 1
        self.order = self._order()


def build_model(seed: int) -> keras.Model:
    keras.utils.set_random_seed(seed)
    return keras.Sequential([
        keras.Input((28, 28, 1)),
        keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Flatten(),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(len(CLASSES)),
    ])


class LossLog(keras.callbacks.Callback):
    """Prints, on rank 0, the mean training loss of the epoch so far over every rank
    (the mean over the global batches) every ``interval`` steps."""

    def __init__(self, interval: int):
        super().__init__()
        self.interval = interval
        self.epoch = 0

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self.epoch = epoch

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        if batch % self.interval == 0 and logs:
            loss = float(hvd.allreduce(float(logs["loss"]), name="loss_log"))
            if hvd.rank() == 0:
                print(f"epoch {self.epoch} step {batch:4d} loss {loss:.6f}", flush=True)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.01, help="before scaling by ranks")
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--warmup-epochs", type=int, default=1)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--train-size", type=int, default=8192)
    parser.add_argument("--test-size", type=int, default=2048)
    parser.add_argument("--log-interval", type=int, default=32)
    parser.add_argument("--checkpoint-dir", default="",
                        help="rank 0 writes a checkpoint per epoch here; a new run resumes")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    hvd.init()
    # Pin the device to be used to process local rank (one device per process).
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        tf.config.set_visible_devices(gpus[hvd.local_rank()], "GPU")

    images, labels = make_shapes(args.train_size, args.seed)
    test_images, test_labels = make_shapes(args.test_size, args.seed + 1)
    train = Shard(images, labels, args.batch_size, args.seed)

    checkpoint = os.path.join(args.checkpoint_dir, "checkpoint-{epoch}.keras")
    resume_from_epoch = 0
    if args.checkpoint_dir and hvd.rank() == 0:
        for epoch in range(args.epochs, 0, -1):
            if os.path.exists(checkpoint.format(epoch=epoch)):
                resume_from_epoch = epoch
                break
    resume_from_epoch = hvd.broadcast_object(resume_from_epoch, root_rank=0,
                                             name="resume_from_epoch")

    if resume_from_epoch and hvd.rank() == 0:
        # Rank 0 restores the model and its optimizer; the broadcast callback gives every
        # other rank the same weights and optimizer state.
        model = hvd.load_model(checkpoint.format(epoch=resume_from_epoch))
        train.epoch = resume_from_epoch
        train.order = train._order()
    else:
        model = build_model(args.seed)
        # Scale the learning rate by the number of ranks; average the gradients.
        opt = keras.optimizers.SGD(learning_rate=args.lr * hvd.size(),
                                   momentum=args.momentum)
        model.compile(optimizer=hvd.DistributedOptimizer(opt),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
    callbacks = [
        # Every rank starts from rank 0's weights and optimizer state.
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        # The epoch's metrics averaged over the ranks, before any callback reads them.
        hvd.callbacks.MetricAverageCallback(),
        LossLog(args.log_interval),
    ]
    if args.warmup_epochs:
        callbacks.append(hvd.callbacks.LearningRateWarmupCallback(
            initial_lr=args.lr * hvd.size(), warmup_epochs=args.warmup_epochs,
            momentum_correction=False))
    if args.checkpoint_dir and hvd.rank() == 0:
        os.makedirs(args.checkpoint_dir, exist_ok=True)
        callbacks.append(keras.callbacks.ModelCheckpoint(checkpoint))
    model.fit(train, epochs=args.epochs, initial_epoch=resume_from_epoch,
              callbacks=callbacks, verbose=0)

    # Each rank evaluates its half of the test set; the metrics are averaged.
    share = slice(hvd.rank(), None, hvd.size())
    loss, accuracy = model.evaluate(test_images[share], test_labels[share], verbose=0)
    loss = float(hvd.allreduce(loss, name="test_loss"))
    accuracy = float(hvd.allreduce(accuracy, name="test_accuracy"))
    if hvd.rank() == 0:
        print(f"test loss {loss:.4f} accuracy {100 * accuracy:.1f}%", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
