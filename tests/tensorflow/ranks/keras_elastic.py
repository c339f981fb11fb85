"""A Keras elastic training script for the tests: a small Dense model fitted on fixed
data under ``hvd.elastic.run`` with Horovod's elastic callbacks; the worker named by
``--kill WORKER:EPOCH:BATCH`` SIGKILLs itself there. Every rank prints one JSON line at
the end: its rank, the size, the epochs done and a hash of the weights.

Arguments: EPOCHS STEPS_PER_EPOCH [--kill WORKER:EPOCH:BATCH]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal

import numpy as np
import tensorflow as tf

import gcurun.runtime.tensorflow.keras as hvd

parser = argparse.ArgumentParser()
parser.add_argument("epochs", type=int)
parser.add_argument("steps", type=int)
parser.add_argument("--kill", default="")
args = parser.parse_args()

hvd.init()
worker = int(os.environ["GCURUN_ELASTIC_WORKER"])
tf.keras.utils.set_random_seed(worker)      # different weights until the first sync
x = np.random.default_rng(0).normal(size=(256, 8)).astype("float32")
y = x.sum(axis=1, keepdims=True)
model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(16, "relu"),
                             tf.keras.layers.Dense(1)])
model.compile(optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.01)),
              loss="mse")
state = hvd.elastic.KerasState(model, batch=0, epoch=0)


class Kill(tf.keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if args.kill:
            who, epoch, at = (int(v) for v in args.kill.split(":"))
            if (who, epoch, at) == (worker, state.epoch, batch):
                os.kill(os.getpid(), signal.SIGKILL)


@hvd.elastic.run
def train(state):
    model.fit(x, y, batch_size=16, steps_per_epoch=args.steps,
              epochs=args.epochs - state.epoch, verbose=0,
              callbacks=[hvd.elastic.UpdateBatchStateCallback(state),
                         hvd.elastic.UpdateEpochStateCallback(state),
                         hvd.elastic.CommitStateCallback(state), Kill()])


train(state)
digest = hashlib.sha256(b"".join(np.ascontiguousarray(w).tobytes()
                                 for w in model.get_weights())).hexdigest()[:16]
print(json.dumps({"done": True, "rank": hvd.rank(), "size": hvd.size(),
                  "epoch": state.epoch, "hash": digest}), flush=True)
