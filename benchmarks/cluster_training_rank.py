"""One rank of benchmarks/cluster_training.py: trains copies of one model, the variants
taking turns, and rank 0 writes every round's time (the slowest rank's mean per step) to
``--out``.

    cluster_training.py --rank-of MODEL --variants gcurun-tcp,gcurun-tcp-fp16,ddp,floor --steps 10
        --warmup 2 --rounds 5 --threads 1 [--phases] --out FILE

With ``--phases`` every rank also records, per variant and round, what its timed steps
spent (:class:`Phases`), and rank 0 writes every rank's record beside the times.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import socket
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


# Per-rank batch of each model; the driver reports samples per second from it.
BATCH = {"mlp": 64, "resnet18-narrow": 32, "keras-mlp": 64}


def shuffled(variants: Sequence[str], round_: int) -> list[str]:
    """The order of a round's turns, the same on every rank."""
    order = list(variants)
    random.Random(round_).shuffle(order)
    return order


def bridge_address(peer: str) -> str:
    """This host's address on the route to ``peer`` (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect((peer, 9))
        return str(sock.getsockname()[0])



class Phases:
    """Where a variant's timed steps went, per round, on this rank: the process's CPU
    seconds per step (every thread: the step itself, gcurun's engine, gloo's or
    TensorFlow's collectives) and, for gcurun's variants, the seconds per step its engine
    spent in ring passes, and within them in transfers and in reductions, and the engine
    thread's cycles per step with the CPU seconds they took (benchmarks/engine_phases.py's
    :class:`Clock`).

    :meth:`wrap` records every call of a variant's step; :meth:`timed` wraps a turn's
    timing and keeps the turn's last ``steps`` calls (the timed ones, after warm-up)."""

    COLUMNS = ("cpu", "rings", "transfers", "reductions", "cycles", "cycle_cpu")

    def __init__(self, steps: int, clock: Any = None) -> None:
        if clock is None:
            from benchmarks.engine_phases import Clock

            clock = Clock()
            clock.install()
        self.steps = steps
        self.clock = clock
        self.rounds: dict[str, dict[str, list[float]]] = {}
        self._turn: tuple[str, list[dict[str, float]]] | None = None

    def wrap(self, name: str, run: Callable[[], Any]) -> Callable[[], Any]:
        spent = self.clock.spent

        def recorded() -> Any:
            before, cpu = dict(spent), time.process_time()
            result = run()
            row = {"cpu": time.process_time() - cpu,
                   **{column: spent[column] - before[column] for column in before}}
            if self._turn is None or self._turn[0] != name:
                self._turn = (name, [])
            self._turn[1].append(row)
            return result
        return recorded

    def timed(self, inner: Callable[[Callable[[], Any]], float]
              ) -> Callable[[Callable[[], Any]], float]:
        def timed(run: Callable[[], Any]) -> float:
            seconds = inner(run)
            if self._turn is not None:
                name, rows = self._turn
                rows = rows[-self.steps:]
                record = self.rounds.setdefault(name, {c: [] for c in self.COLUMNS})
                for column in self.COLUMNS:
                    record[column].append(sum(row[column] for row in rows) / len(rows))
                self._turn = None
            return seconds
        return timed


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--variants", required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--warmup", type=int, required=True)
    parser.add_argument("--rounds", type=int, required=True)
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--phases", action="store_true")
    parser.add_argument("--out", type=Path, required=True)
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    variants = args.variants.split(",")
    if args.model == "keras-mlp":
        keras_rank(args, variants)
    else:
        torch_rank(args, variants)
    return 0


def measure(variants: list[str], runs: dict[str, Callable[[], Any]], timed: Callable,
            args: argparse.Namespace) -> dict[str, list[float]]:
    """Every round, each variant's turn in the round's order: ``timed(run)`` seconds."""
    times: dict[str, list[float]] = {v: [] for v in variants}
    for round_ in range(args.rounds):
        for name in shuffled(variants, round_):
            times[name].append(timed(runs[name]))
    return times


def write(args: argparse.Namespace, params: int, backend: str, size: int,
          times: dict[str, list[float]], phases: list[Any] | None) -> None:
    record = {"model": args.model, "params": params, "size": size, "backend": backend,
              "times": times}
    if phases is not None:
        record["phases"] = phases
    args.out.write_text(json.dumps(record) + "\n")


def with_phases(args: argparse.Namespace, runs: dict[str, Callable[[], Any]],
                timed: Callable[[Callable[[], Any]], float]
                ) -> tuple[Phases | None, Callable[[Callable[[], Any]], float]]:
    """With ``--phases``: every step of ``runs`` recorded, and ``timed`` keeping a turn's
    record (after the engine exists, since the clock wraps it)."""
    if not args.phases:
        return None, timed
    phases = Phases(args.steps)
    for name, run in runs.items():
        runs[name] = phases.wrap(name, run)
    return phases, phases.timed(timed)


def gathered(runtime: Any, phases: Phases | None) -> list[Any] | None:
    """Every rank's phase record, in rank order (a collective: every rank calls it)."""
    if phases is None:
        return None
    return list(runtime.allgather_object(phases.rounds, name="bench.phases"))


def torch_rank(args: argparse.Namespace, variants: list[str]) -> None:
    import torch
    import torch.distributed as dist

    import gcurun.runtime as runtime
    import gcurun.runtime.torch as hvd
    from benchmarks.torch_ddp import _init_gloo, _timed, sgd_step

    sys.path.insert(0, str(ROOT / "examples"))
    from pytorch_synthetic_benchmark import MODELS, synthetic_batch

    hvd.init()
    torch.set_num_threads(args.threads)
    if "ddp" in variants:
        _init_gloo(hvd, dist)
    torch.manual_seed(0)
    base = MODELS[args.model]()
    data, target = synthetic_batch(args.model, BATCH[args.model], 32)

    def sgd(model: torch.nn.Module) -> torch.optim.Optimizer:
        return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> Callable[[], None]:
        return sgd_step(model, optimizer, data, target)

    runs: dict[str, Callable[[], None]] = {}
    for name in variants:
        model = copy.deepcopy(base)
        if name.startswith("gcurun"):
            # Each variant's ops under names of its own: fp16's differ in dtype.
            compression = hvd.Compression.fp16 if name.endswith("-fp16") else \
                hvd.Compression.none
            opt = hvd.DistributedOptimizer(
                sgd(model), compression=compression,
                named_parameters=[(f"{name}.{n}", p) for n, p in model.named_parameters()])
            hvd.broadcast_parameters(model.state_dict(), root_rank=0)
            runs[name] = step(model, opt)
        elif name == "ddp":
            model = torch.nn.parallel.DistributedDataParallel(model)
            runs[name] = step(model, sgd(model))
        else:
            runs[name] = step(model, sgd(model))
    phases, timed = with_phases(args, runs,
                                lambda run: _timed(hvd, run, args.warmup, args.steps))
    times = measure(variants, runs, timed, args)
    records = gathered(runtime, phases)
    if hvd.rank() == 0:
        write(args, sum(p.numel() for p in base.parameters()), runtime.backend(),
              hvd.size(), times, records)
    if "ddp" in variants:
        dist.destroy_process_group()
    hvd.shutdown()


def mirrored_steps(strategy: Any, step: Any, batches: Any) -> Callable[[], Any]:
    """One step of ``strategy`` on the next of ``batches``."""
    import tensorflow as tf

    @tf.function
    def run(batch: Any) -> None:
        strategy.run(step, args=batch)

    return lambda: run(next(batches))


def keras_rank(args: argparse.Namespace, variants: list[str]) -> None:
    import gcurun.runtime as runtime
    from benchmarks.tf_keras import _free_port, build_mlp, keras_trainer

    runtime.init()
    if "mwms" in variants:
        # Before TensorFlow starts: every worker's bridge address and a free port.
        host = bridge_address(os.environ["MASTER_ADDR"])
        workers = runtime.allgather_object(f"{host}:{_free_port(host)}", name="tf_config")
        os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": workers},
                                              "task": {"type": "worker",
                                                       "index": runtime.rank()}})
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    strategy = tf.distribute.MultiWorkerMirroredStrategy() if "mwms" in variants else None

    import keras
    import numpy as np

    import gcurun.runtime.tensorflow.keras as hvd

    hvd.init()
    batch, hidden = BATCH[args.model], 1024
    rng = np.random.default_rng(0)
    x = rng.normal(size=(batch, 784)).astype(np.float32)
    y = rng.integers(0, 10, batch)
    trainer = keras_trainer(tf, keras.losses.SparseCategoricalCrossentropy(from_logits=True))

    keras.utils.set_random_seed(0)
    first = build_mlp(keras, hidden)
    weights = first.get_weights()
    xs, ys = tf.constant(x), tf.constant(y)
    runs: dict[str, Callable[[], Any]] = {}
    for name in variants:
        if name == "mwms":
            assert strategy is not None
            with strategy.scope():
                mirrored = build_mlp(keras, hidden)
                mirrored.set_weights(weights)
                mirrored_step = trainer(mirrored, keras.optimizers.SGD(0.01, momentum=0.9))
            options = tf.data.Options()
            options.experimental_distribute.auto_shard_policy = \
                tf.data.experimental.AutoShardPolicy.OFF
            dataset = tf.data.Dataset.from_tensors(
                (np.tile(x, (hvd.size(), 1)), np.tile(y, hvd.size()))).repeat() \
                .with_options(options)

            runs[name] = mirrored_steps(strategy, mirrored_step, iter(
                strategy.experimental_distribute_dataset(dataset)))
        else:
            model = build_mlp(keras, hidden)
            model.set_weights(weights)
            optimizer = keras.optimizers.SGD(0.01, momentum=0.9)
            if name.startswith("gcurun"):
                optimizer = hvd.DistributedOptimizer(optimizer)
            runs[name] = (lambda s: lambda: s(xs, ys))(tf.function(trainer(model, optimizer)))

    def timed(run: Callable[[], Any]) -> float:
        for _ in range(args.warmup + 1):     # one more: the first call traces
            run()
        runtime.barrier()
        start = time.perf_counter()
        for _ in range(args.steps):
            run()
        mine = (time.perf_counter() - start) / args.steps
        return float(runtime.allreduce(np.array([mine]), op=runtime.Max,
                                       name="bench.time")[0])

    phases, timed_turn = with_phases(args, runs, timed)
    times = measure(variants, runs, timed_turn, args)
    records = gathered(runtime, phases)
    if hvd.rank() == 0:
        write(args, sum(int(np.prod(w.shape)) for w in weights), runtime.backend(),
              hvd.size(), times, records)
    hvd.shutdown()
