"""The Keras Estimator's function on every rank: the model from its ``.keras`` bytes,
compiled with ``gcurun.runtime.tensorflow.keras``'s DistributedOptimizer (the learning
rate times the ranks, as Horovod's Keras Estimator does), trained with ``model.fit`` on
this rank's shard from rank 0's weights (or the run's last checkpoint), a checkpoint per
epoch (rank 0). Returns the history, the trained weights (rank 0) and a digest of this
rank's weights."""

from __future__ import annotations

import dataclasses
import io
import os
import tempfile
from typing import Any

from gcurun.spark.common import training, util
from gcurun.spark.common.training import Checkpoint, TrainSpec

SUFFIX = "npz"


@dataclasses.dataclass(frozen=True)
class KerasSpec:
    """The Keras parts of a run: the model's ``.keras`` bytes (uncompiled), the
    optimizer's config, losses, metrics, callbacks, custom objects."""

    model: bytes
    optimizer: dict[str, Any]
    loss: Any
    loss_weights: Any
    metrics: Any
    callbacks: tuple[Any, ...]
    custom_objects: dict[str, Any]
    compression: Any


def model_bytes(model: Any) -> bytes:
    """The ``.keras`` file of ``model``."""
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "model.keras")
        model.save(path)
        with open(path, "rb") as f:
            return f.read()


def load_model_bytes(keras: Any, data: bytes, custom_objects: dict[str, Any]) -> Any:
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "model.keras")
        with open(path, "wb") as f:
            f.write(data)
        return keras.models.load_model(path, custom_objects=custom_objects or None,
                                       compile=False)


def pack_arrays(arrays: list[Any]) -> bytes:
    import numpy as np

    buffer = io.BytesIO()
    np.savez(buffer, *arrays)
    return buffer.getvalue()


def unpack_arrays(data: bytes) -> list[Any]:
    import numpy as np

    with np.load(io.BytesIO(data)) as archive:
        return [archive[f"arr_{i}"] for i in range(len(archive.files))]


def train(spec: TrainSpec, keras_spec: KerasSpec, resume: bytes | None, resume_epochs: int,
          resume_history: dict[str, list[float]]) -> dict[str, Any]:
    """Train on this rank; see the module's docstring for what it returns."""
    import gcurun.runtime.tensorflow.keras as hvd
    from gcurun.runtime.tensorflow.keras._which import keras

    hvd.init()
    if spec.seed is not None:
        keras.utils.set_random_seed(spec.seed)
    rank, size = hvd.rank(), hvd.size()
    model = load_model_bytes(keras, keras_spec.model, keras_spec.custom_objects)
    optimizer = _scaled_optimizer(keras, keras_spec.optimizer, size)
    kwargs = {"compression": keras_spec.compression} if keras_spec.compression else {}
    model.compile(optimizer=hvd.DistributedOptimizer(optimizer, **kwargs),
                  loss=keras_spec.loss, loss_weights=keras_spec.loss_weights,
                  metrics=keras_spec.metrics)
    if resume is not None:
        _restore(model, unpack_arrays(resume))
    shapes = [[d if d else -1 for d in i.shape] for i in model.inputs]
    shard = util.read_shard(spec.store, spec.train_path, rank, size, spec.columns)
    validation = None
    if spec.val_path:
        val = util.read_shard(spec.store, spec.val_path, rank, size, spec.columns)
        validation = (_features(spec, val, shapes), _labels(spec, val))
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                 hvd.callbacks.MetricAverageCallback(), *keras_spec.callbacks]
    if rank == 0 and spec.store.saving_runs():
        callbacks.append(_checkpointer(keras, spec, resume_history))
    history: dict[str, list[float]] = {k: list(v) for k, v in resume_history.items()}
    if resume_epochs < spec.epochs:
        fitted = model.fit(
            _batches(spec, shard, shapes, rank, size, resume_epochs),
            steps_per_epoch=spec.steps_per_epoch, epochs=spec.epochs,
            initial_epoch=resume_epochs, validation_data=validation,
            validation_batch_size=spec.val_batch_size,
            validation_steps=spec.validation_steps, callbacks=callbacks,
            verbose=spec.verbose if rank == 0 else 0)
        for name, values in fitted.history.items():
            history.setdefault(name, []).extend(float(v) for v in values)
    weights = model.get_weights()
    return {"history": history, "digest": training.digest(weights),
            "weights": pack_arrays(weights) if rank == 0 else None}


def _scaled_optimizer(keras: Any, config: dict[str, Any], size: int) -> Any:
    config = {**config, "config": dict(config.get("config", {}))}
    rate = config["config"].get("learning_rate")
    if isinstance(rate, (int, float)):
        config["config"]["learning_rate"] = rate * size
    return keras.optimizers.deserialize(config)


def _state(model: Any) -> list[Any]:
    return [*model.get_weights(), *[v.numpy() for v in model.optimizer.variables]]


def _restore(model: Any, arrays: list[Any]) -> None:
    count = len(model.get_weights())
    model.set_weights(arrays[:count])
    model.optimizer.build(model.trainable_variables)
    for variable, value in zip(model.optimizer.variables, arrays[count:], strict=False):
        variable.assign(value)


def _checkpointer(keras: Any, spec: TrainSpec, resumed: dict[str, list[float]]) -> Any:
    class Checkpointer(keras.callbacks.Callback):  # type: ignore[misc]
        """After each epoch, rank 0 writes the weights, the optimizer's state and the
        history so far into the store."""

        history: dict[str, list[float]] = {k: list(v) for k, v in resumed.items()}

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            training.append_history(self.history, dict(logs or {}))
            training.save_checkpoint(spec.store, spec.run_id, SUFFIX, Checkpoint(
                pack_arrays(_state(self.model)), epoch + 1, self.history))

    return Checkpointer()


def _features(spec: TrainSpec, data: dict[str, Any], shapes: list[list[int]]) -> Any:
    import numpy as np

    arrays = [np.array(data[c], dtype=np.float32).reshape(shape)
              for c, shape in zip(spec.feature_cols, shapes, strict=False)]
    return tuple(arrays) if len(arrays) > 1 else arrays[0]


def _labels(spec: TrainSpec, data: dict[str, Any]) -> Any:
    import numpy as np

    arrays = [np.array(data[c], dtype=np.int64 if spec.metadata[c].is_integral
                       else np.float32) for c in spec.label_cols]
    return tuple(arrays) if len(arrays) > 1 else arrays[0]


def _batches(spec: TrainSpec, shard: dict[str, Any], shapes: list[list[int]], rank: int,
             size: int, first_epoch: int) -> Any:
    """The batches of every epoch from ``first_epoch`` on, ``steps_per_epoch`` each."""
    for epoch in range(first_epoch, spec.epochs):
        seed = (spec.seed or 0) * 1_000_003 + epoch * size + rank
        for batch in util.epoch_batches(shard, spec.steps_per_epoch, spec.batch_size,
                                        spec.shuffle, seed):
            if spec.sample_weight_col:
                yield (_features(spec, batch, shapes), _labels(spec, batch),
                       batch[spec.sample_weight_col])
            else:
                yield _features(spec, batch, shapes), _labels(spec, batch)
