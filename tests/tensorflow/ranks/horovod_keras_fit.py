"""Horovod's Keras recipe with Horovod's imports (``horovod.keras``, which is Keras 3 through
``tf.keras``, and ``horovod.tensorflow.keras``): run under ``gcurun --horovod-alias``. The
ranks start from different weights; after ``model.fit`` with DistributedOptimizer,
BroadcastGlobalVariablesCallback and MetricAverageCallback every rank holds the same ones.
"""

import horovod.keras as hvd
import horovod.tensorflow.keras as tf_hvd
import keras
import numpy as np

assert hvd is tf_hvd, "horovod.keras and horovod.tensorflow.keras are one binding"
hvd.init()
rank, size = hvd.rank(), hvd.size()
keras.utils.set_random_seed(100 + rank)
model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(12, activation="tanh"),
                          keras.layers.Dense(2)])
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.05 * size)),
              loss="mse")
data = np.random.default_rng(rank)
x, y = data.normal(size=(32, 6)), data.normal(size=(32, 2))
model.fit(x, y, batch_size=8, epochs=1, verbose=0,
          callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                     hvd.callbacks.MetricAverageCallback()])
flat = np.concatenate([w.ravel() for w in model.get_weights()])
every = hvd.allgather(flat[None]).numpy()
assert all(np.array_equal(row, flat) for row in every), f"rank {rank}: the weights differ"
print(f"rank {rank} of {size} ok", flush=True)
