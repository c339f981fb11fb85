"""Train a small CNN on the shapes dataset with TensorFlow v1 graphs, data-parallel.

    gcurun -np 2 python examples/tensorflow_v1_train.py
    gcurun --mpi -np 2 --bind-to numa bash examples/tensorflow_v1_run.sh
    python examples/tensorflow_v1_train.py                  # one process

The script is Horovod's TensorFlow v1 recipe (``tf.compat.v1``), and its import line is
the only thing that differs from a script written for ``horovod.tensorflow``: initialize,
pin the device by local rank in the session config, scale the learning rate by the number
of ranks, wrap the optimizer in DistributedOptimizer, broadcast the variables from rank 0
with BroadcastGlobalVariablesHook when the MonitoredTrainingSession starts, write
checkpoints on rank 0 only. Started again with the same ``--checkpoint-dir``, it resumes:
rank 0 restores the last checkpoint and the hook gives every rank its variables.

The data are generated from a seed (28x28 images of a disk, a ring, a square or a cross,
as in ``pytorch_train.py``). ``--batch-size`` is per rank and each global batch is split
between the ranks in rank order, so 2 ranks at 32 train on the same batches as 1 rank at
64 (pass ``--lr`` accordingly: it is multiplied by the number of ranks).
"""

from __future__ import annotations

import argparse

import numpy as np
import tensorflow as tf

import gcurun.runtime.tensorflow as hvd

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


def model(images: tf.Tensor, seed: int) -> tf.Tensor:
    """Logits of a two-layer CNN written with plain v1 variables."""
    init = tf.compat.v1.glorot_uniform_initializer(seed=seed)

    def conv(x: tf.Tensor, name: str, channels: int) -> tf.Tensor:
        kernel = tf.compat.v1.get_variable(f"{name}/kernel", [3, 3, x.shape[-1], channels],
                                           initializer=init)
        bias = tf.compat.v1.get_variable(f"{name}/bias", [channels],
                                         initializer=tf.compat.v1.zeros_initializer())
        x = tf.nn.relu(tf.nn.conv2d(x, kernel, 1, "SAME") + bias)
        return tf.nn.max_pool2d(x, 2, 2, "VALID")

    def dense(x: tf.Tensor, name: str, units: int) -> tf.Tensor:
        kernel = tf.compat.v1.get_variable(f"{name}/kernel", [x.shape[-1], units],
                                           initializer=init)
        bias = tf.compat.v1.get_variable(f"{name}/bias", [units],
                                         initializer=tf.compat.v1.zeros_initializer())
        return tf.matmul(x, kernel) + bias

    x = conv(conv(images, "conv1", 16), "conv2", 32)
    x = tf.nn.relu(dense(tf.reshape(x, [-1, 7 * 7 * 32]), "fc1", 64))
    return dense(x, "fc2", len(CLASSES))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--steps", type=int, default=256, help="global steps in all")
    parser.add_argument("--lr", type=float, default=0.02, help="before scaling by ranks")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--train-size", type=int, default=8192)
    parser.add_argument("--log-interval", type=int, default=16)
    parser.add_argument("--checkpoint-dir", default="",
                        help="rank 0 writes checkpoints here; a new run resumes from them")
    parser.add_argument("--checkpoint-steps", type=int, default=64)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    tf.compat.v1.disable_eager_execution()
    hvd.init()

    # Pin the device to be used to process local rank (one device per process).
    config = tf.compat.v1.ConfigProto()
    config.gpu_options.visible_device_list = str(hvd.local_rank())

    images, labels = make_shapes(args.train_size, args.seed)
    batch = tf.compat.v1.placeholder(tf.float32, [None, 28, 28, 1], name="images")
    target = tf.compat.v1.placeholder(tf.int64, [None], name="labels")
    logits = model(batch, args.seed)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=target, logits=logits))
    # The mean over the ranks: the loss of the global batch.
    global_loss = hvd.allreduce(loss, name="global_loss")

    # Scale the learning rate by the number of ranks, and average the gradients.
    opt = tf.compat.v1.train.AdagradOptimizer(args.lr * hvd.size())
    opt = hvd.DistributedOptimizer(opt)
    global_step = tf.compat.v1.train.get_or_create_global_step()
    train_op = opt.minimize(loss, global_step=global_step)

    # Broadcast the variables from rank 0 when the session starts (after initializing
    # them, or restoring them on rank 0), then stop after the last step.
    hooks = [hvd.BroadcastGlobalVariablesHook(0),
             tf.compat.v1.train.StopAtStepHook(last_step=args.steps)]
    # Save checkpoints only on rank 0, so that the others cannot corrupt them.
    checkpoint_dir = args.checkpoint_dir if hvd.rank() == 0 and args.checkpoint_dir else None

    global_batch = args.batch_size * hvd.size()
    per_epoch = len(images) // global_batch
    with tf.compat.v1.train.MonitoredTrainingSession(
            checkpoint_dir=checkpoint_dir, config=config, hooks=hooks,
            save_checkpoint_steps=args.checkpoint_steps if checkpoint_dir else None,
            save_checkpoint_secs=None, save_summaries_steps=None, save_summaries_secs=None,
            log_step_count_steps=None) as mon_sess:
        step = mon_sess.run(global_step)
        if hvd.rank() == 0 and step:
            print(f"resumed at step {step}", flush=True)
        while not mon_sess.should_stop():
            # This rank's part of global batch `step`: rows in rank order.
            start = (step % per_epoch) * global_batch + hvd.rank() * args.batch_size
            feed = {batch: images[start:start + args.batch_size],
                    target: labels[start:start + args.batch_size]}
            if step % args.log_interval == 0:
                _, value = mon_sess.run([train_op, global_loss], feed_dict=feed)
                if hvd.rank() == 0:
                    print(f"step {step:4d} loss {value:.6f}", flush=True)
            else:
                mon_sess.run(train_op, feed_dict=feed)
            step += 1
    hvd.shutdown()


if __name__ == "__main__":
    main()
