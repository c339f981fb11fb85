"""Horovod's TF2 custom training loop as its examples write it (tensorflow2_mnist.py,
tensorflow2_synthetic_benchmark.py): gradients through ``hvd.DistributedGradientTape``, and
inside the ``@tf.function`` step, after the first ``apply_gradients``, the model's and the
optimizer's variables broadcast from rank 0 (Keras 3's ``opt.variables`` is a list, where
Keras 2 had a method). Imports ``horovod.tensorflow``: run under ``gcurun --horovod-alias``.

The ranks start from different weights and different data; after two steps every rank
holds the same weights and optimizer state: in float32, then in mixed_float16 with Keras's
LossScaleOptimizer.
"""

import horovod.tensorflow as hvd
import keras
import numpy as np
import tensorflow as tf

hvd.init()
rank, size = hvd.rank(), hvd.size()


def everyone(variables):
    """Every rank's values of ``variables``, one row per rank."""
    flat = tf.concat([tf.reshape(tf.cast(tf.convert_to_tensor(v), tf.float64), [-1])
                      for v in variables], 0)
    return hvd.allgather(flat[tf.newaxis]).numpy()


def check(mixed):
    keras.mixed_precision.set_global_policy("mixed_float16" if mixed else "float32")
    keras.utils.set_random_seed(100 + rank)       # every rank its own initial weights
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(4, dtype="float32")])
    opt = keras.optimizers.SGD(0.05, momentum=0.9)
    if mixed:
        opt = keras.mixed_precision.LossScaleOptimizer(opt)
    data = np.random.default_rng(rank)
    x = tf.constant(data.normal(size=(16, 8)), tf.float32)
    y = tf.constant(data.normal(size=(16, 4)), tf.float32)

    @tf.function
    def training_step(first_batch):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
            scaled = opt.scale_loss(loss) if mixed else loss
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(scaled, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        if first_batch:
            hvd.broadcast_variables(model.variables, root_rank=0)
            hvd.broadcast_variables(opt.variables, root_rank=0)
        return loss

    what = "mixed" if mixed else "float32"
    start = everyone(model.trainable_variables)
    assert all(not np.array_equal(start[0], start[r]) for r in range(1, size)), \
        f"rank {rank}, {what}: the ranks start from the same weights"
    training_step(True)
    training_step(False)
    weights, state = everyone(model.variables), everyone(opt.variables)
    for r in range(1, size):
        assert np.array_equal(weights[0], weights[r]), f"rank {rank}, {what}: rank {r}'s weights"
        assert np.array_equal(state[0], state[r]), f"rank {rank}, {what}: rank {r}'s optimizer"
    print(f"rank {rank} of {size} {what} ok", flush=True)


check(mixed=False)
check(mixed=True)
