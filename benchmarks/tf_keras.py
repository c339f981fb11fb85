"""gcurun's Keras DistributedOptimizer against tf.distribute.MultiWorkerMirroredStrategy
(what a TensorFlow user picks instead): the same Keras model, the same ranks, one run.

    python benchmarks/tf_keras.py                     # starts 2 ranks with gcurun -np 2
    gcurun -np 2 python benchmarks/tf_keras.py
    gcurun --mpi -np 2 python benchmarks/tf_keras.py  # gcurun's mpi backend

Each rank trains three copies of one Keras model (same weights, same synthetic batch),
each with a Keras SGD optimizer in a ``tf.function`` training step: one wrapped in
``gcurun.runtime.tensorflow.keras.DistributedOptimizer``, one built in a
MultiWorkerMirroredStrategy scope and run with ``strategy.run`` (its workers find each
other through a TF_CONFIG the ranks agree on through gcurun's runtime first, as the
strategy must exist before TensorFlow starts), and one alone, without any communication:
the floor. (Keras 3.15's ``model.fit`` fails under a multi-worker strategy, so the steps
are written out, the same way for all three.) They take turns, ``--rounds`` times, in an
order shuffled every round (the same on every rank), so the machine's noise hits all
alike; a turn times ``--steps`` steps, and its step time is the slowest rank's mean.
Rank 0 prints every round and a table of the medians.

Options: --batch-size 64 (per rank)  --hidden 1024  --steps 20  --rounds 5
         --threads 1 (TensorFlow threads per rank)  --np 2 (when starting the ranks)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LAUNCHER_VARIABLES = ("GCURUN_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMIX_RANK")
VARIANTS = ("gcurun", "MultiWorkerMirroredStrategy", "no communication")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-size", type=int, default=64, help="per rank")
    parser.add_argument("--hidden", type=int, default=1024, help="width of the 2 hidden "
                        "layers of the MLP (784 inputs, 10 classes)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--np", type=int, default=2, help="ranks to start (without a "
                        "launcher)")
    return parser.parse_args(argv)


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _cluster(runtime: Any) -> dict[str, Any]:
    """TF_CONFIG for this rank: every rank's host and a free port, in rank order."""
    host = "127.0.0.1" if runtime.local_size() == runtime.size() else socket.gethostname()
    workers = runtime.allgather_object(f"{host}:{_free_port(host)}", name="tf_config")
    return {"cluster": {"worker": workers}, "task": {"type": "worker",
                                                     "index": runtime.rank()}}


def build_mlp(keras: Any, hidden: int) -> Any:
    """The benchmark's Keras MLP: 784 inputs, two ReLU layers of ``hidden``, 10 logits."""
    return keras.Sequential([keras.Input((784,)),
                             keras.layers.Dense(hidden, activation="relu"),
                             keras.layers.Dense(hidden, activation="relu"),
                             keras.layers.Dense(10)])


def keras_trainer(tf: Any, loss_fn: Any) -> Any:
    """``trainer(model, optimizer)``: one training step of ``model`` on ``(xs, ys)``
    through a gradient tape (for ``tf.function`` or eager use)."""
    def trainer(model: Any, optimizer: Any) -> Any:
        def step(xs: Any, ys: Any) -> None:
            with tf.GradientTape() as tape:
                loss = loss_fn(ys, model(xs, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return step
    return trainer


def run_rank(args: argparse.Namespace) -> None:
    import gcurun.runtime as runtime

    runtime.init()
    os.environ["TF_CONFIG"] = json.dumps(_cluster(runtime))
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    # Before anything else starts TensorFlow's context.
    strategy = tf.distribute.MultiWorkerMirroredStrategy()

    import keras
    import numpy as np

    import gcurun.runtime.tensorflow.keras as hvd

    hvd.init()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.batch_size, 784)).astype(np.float32)
    y = rng.integers(0, 10, args.batch_size)

    def build() -> Any:
        return build_mlp(keras, args.hidden)

    trainer = keras_trainer(tf, keras.losses.SparseCategoricalCrossentropy(from_logits=True))

    keras.utils.set_random_seed(0)
    alone = build()
    weights = alone.get_weights()
    ours = build()
    ours.set_weights(weights)
    with strategy.scope():
        mirrored = build()
        mirrored.set_weights(weights)
        mirrored_step = trainer(mirrored, keras.optimizers.SGD(0.01, momentum=0.9))
    # The strategy splits a global batch between the workers: give it size x the batch,
    # every worker the whole dataset (each takes its share of each batch).
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = \
        tf.data.experimental.AutoShardPolicy.OFF
    global_batch = tf.data.Dataset.from_tensors(
        (np.tile(x, (hvd.size(), 1)), np.tile(y, hvd.size()))).repeat().with_options(options)
    batches = iter(strategy.experimental_distribute_dataset(global_batch))
    xs, ys = tf.constant(x), tf.constant(y)
    ours_step = tf.function(trainer(ours, hvd.DistributedOptimizer(
        keras.optimizers.SGD(0.01, momentum=0.9))))
    alone_step = tf.function(trainer(alone, keras.optimizers.SGD(0.01, momentum=0.9)))

    @tf.function
    def mirrored_run(batch: Any) -> None:
        strategy.run(mirrored_step, args=batch)

    runs = {"gcurun": lambda: ours_step(xs, ys),
            "MultiWorkerMirroredStrategy": lambda: mirrored_run(next(batches)),
            "no communication": lambda: alone_step(xs, ys)}
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for name in VARIANTS:                          # trace and warm up, untimed
        for _ in range(3):
            runs[name]()
    for round_ in range(args.rounds):
        order = list(VARIANTS)
        random.Random(round_).shuffle(order)
        for name in order:
            times[name].append(_timed(runtime, runs[name], args.steps))
        if hvd.rank() == 0:
            print(f"round {round_}: " + "  ".join(f"{n} {times[n][-1] * 1e3:.1f} ms/step"
                                                  for n in VARIANTS), flush=True)
    if hvd.rank() == 0:
        params = sum(int(np.prod(w.shape)) for w in weights)
        print(report(args, hvd.size(), runtime.backend(), params, times), flush=True)
    hvd.shutdown()


def _timed(runtime: Any, step: Any, steps: int) -> float:
    """Seconds per step of the slowest rank, over ``steps`` steps."""
    import numpy as np

    runtime.barrier()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    mine = (time.perf_counter() - start) / steps
    return float(runtime.allreduce(np.array([mine]), op=runtime.Max, name="bench.time")[0])


def report(args: argparse.Namespace, size: int, backend: str, params: int,
           times: dict[str, list[float]]) -> str:
    median = {name: statistics.median(values) for name, values in times.items()}
    best = {name: min(values) for name, values in times.items()}
    mirrored = median["MultiWorkerMirroredStrategy"]
    floor = median["no communication"]
    lines = [
        f"# Keras MLP 784-{args.hidden}-{args.hidden}-10: {params / 1e6:.2f} M parameters "
        f"({params * 4 / 1e6:.1f} MB of float32 gradients per step), batch "
        f"{args.batch_size} per rank, {size} ranks, {args.threads} TensorFlow thread(s) "
        f"per rank; gcurun backend {backend}",
        f"# {args.rounds} rounds of {args.steps} steps per variant, in a shuffled order; a "
        "round's time is the slowest rank's mean",
        "",
        "| variant | median ms/step | best ms/step | median / MultiWorkerMirroredStrategy "
        "| over the floor (ms) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name in VARIANTS:
        lines.append(f"| {name} | {median[name] * 1e3:.1f} | {best[name] * 1e3:.1f} | "
                     f"{median[name] / mirrored:.2f} | {(median[name] - floor) * 1e3:.1f} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if not any(os.environ.get(name) for name in LAUNCHER_VARIABLES):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        return subprocess.run([sys.executable, "-m", "gcurun", "-np", str(args.np),
                               sys.executable, __file__, *argv], env=env).returncode
    run_rank(args)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
