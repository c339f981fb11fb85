"""``KerasEstimator``: fit a Keras model to a Spark DataFrame on gcurun's ranks;
``KerasModel``: the trained model as a Spark ML Transformer."""

from __future__ import annotations

import base64
from typing import Any

from pyspark import keyword_only
from pyspark.ml.param.shared import Param, Params

from gcurun.spark.common import training
from gcurun.spark.common.backend import Backend
from gcurun.spark.common.estimator import EstimatorBase, ModelBase
from gcurun.spark.common.training import TrainSpec
from gcurun.spark.keras import remote


def _keras() -> Any:
    from gcurun.runtime.tensorflow.keras._which import keras

    return keras


class KerasEstimator(EstimatorBase):
    """Horovod's KerasEstimator. ``model`` is a Keras model with one input per feature
    column (in order) and one output per label column; ``optimizer`` a Keras optimizer
    (or the compiled model's), whose learning rate is multiplied by the number of ranks
    on the ranks, as Horovod does; ``loss``, ``loss_weights`` and ``metrics`` are what
    ``model.compile`` takes; ``callbacks`` run on every rank after gcurun's
    BroadcastGlobalVariablesCallback and MetricAverageCallback. With a ``run_id`` whose
    run has a checkpoint in the store, training resumes after its last finished epoch."""

    run_prefix = "keras"
    custom_objects: Param[Any] = Param(Params._dummy(), "custom_objects", "custom objects")
    backend_env: Param[Any] = Param(Params._dummy(), "backend_env", "environment of the ranks")

    @keyword_only
    def __init__(self, num_proc: int | None = None, model: Any = None,
                 backend: Backend | None = None, store: Any = None,
                 custom_objects: Any = None, optimizer: Any = None, loss: Any = None,
                 loss_weights: Any = None, sample_weight_col: str | None = None,
                 gradient_compression: Any = None, metrics: Any = None,
                 feature_cols: Any = None, label_cols: Any = None, validation: Any = None,
                 callbacks: Any = None, batch_size: int | None = None,
                 val_batch_size: int | None = None, epochs: int | None = None,
                 verbose: int | None = None, random_seed: int | None = None,
                 shuffle_buffer_size: int | None = None, shuffle: bool = True,
                 partitions_per_process: int | None = None, run_id: str | None = None,
                 train_steps_per_epoch: int | None = None,
                 validation_steps_per_epoch: int | None = None, label_shapes: Any = None,
                 backend_env: Any = None, use_gpu: bool = True) -> None:
        super().__init__()
        self._setDefault(custom_objects={}, backend_env={})
        self.setParams(**{k: v for k, v in self._input_kwargs.items() if v is not None})

    def getCustomObjects(self) -> Any:
        return self.getOrDefault(self.custom_objects)

    def setCustomObjects(self, value: Any) -> Any:
        return self._set(custom_objects=value)

    def getBackendEnv(self) -> Any:
        return self.getOrDefault(self.backend_env)

    def setBackendEnv(self, value: Any) -> Any:
        return self._set(backend_env=value)

    def _check_model(self) -> None:
        keras = _keras()
        model = self.getModel()
        if not isinstance(model, keras.Model):
            raise ValueError(f"model is {type(model).__name__}: KerasEstimator trains a "
                             "keras.Model")
        if not self.getLoss():
            raise ValueError("loss must be given (what model.compile takes)")
        if self.getOptimizer() is None and getattr(model, "optimizer", None) is None:
            raise ValueError("give an optimizer, or a model compiled with one")
        if len(model.inputs) != len(self.getFeatureCols()):
            raise ValueError(f"the model has {len(model.inputs)} inputs for "
                             f"{len(self.getFeatureCols())} feature columns; give one "
                             "column per input")

    def _keras_spec(self) -> remote.KerasSpec:
        keras = _keras()
        optimizer = self.getOptimizer() or self.getModel().optimizer
        callbacks = self.getCallbacks() or []
        return remote.KerasSpec(
            model=remote.model_bytes(self.getModel()),
            optimizer=keras.optimizers.serialize(optimizer), loss=self.getLoss(),
            loss_weights=self.getLossWeights(), metrics=self.getMetrics() or None,
            callbacks=tuple(callbacks), custom_objects=dict(self.getCustomObjects() or {}),
            compression=self.getGradientCompression())

    def _fit_on_prepared_data(self, backend: Backend, spec: TrainSpec) -> KerasModel:
        resume = training.load_checkpoint(spec.store, spec.run_id, remote.SUFFIX)
        results = backend.run(remote.train, args=(
            spec, self._keras_spec(), resume.data if resume else None,
            resume.epochs_done if resume else 0, resume.history if resume else {}),
            env=dict(self.getBackendEnv() or {}))
        first = results[0]
        keras = _keras()
        model = keras.models.clone_model(self.getModel())
        model.set_weights(remote.unpack_arrays(first["weights"]))
        return KerasModel(history=first["history"], model=model,
                          feature_columns=list(spec.feature_cols),
                          label_columns=list(spec.label_cols),
                          custom_objects=self.getCustomObjects(), run_id=spec.run_id,
                          _metadata=spec.metadata,
                          rank_digests=[r["digest"] for r in results])


class KerasModel(ModelBase):
    """A trained Keras model as a Transformer (Horovod's KerasModel): ``getModel()`` is
    the model, ``getHistory()`` the metrics by epoch, ``getRankDigests()`` the SHA-256
    of the weights each rank ended training with."""

    custom_objects: Param[Any] = Param(Params._dummy(), "custom_objects", "custom objects")

    @keyword_only
    def __init__(self, history: Any = None, model: Any = None, feature_columns: Any = None,
                 label_columns: Any = None, custom_objects: Any = None,
                 run_id: str | None = None, _metadata: Any = None,
                 rank_digests: Any = None) -> None:
        super().__init__()
        if label_columns:
            self.setOutputCols([f"{c}__output" for c in label_columns])
        self._setDefault(custom_objects={})
        self.setParams(**self._input_kwargs)

    def getCustomObjects(self) -> Any:
        return self.getOrDefault(self.custom_objects)

    def _encode_param(self, name: str, value: Any) -> dict[str, Any]:
        if name == "model" and value is not None:   # its .keras file, not a pickle
            return {"keras": base64.b64encode(remote.model_bytes(value)).decode("ascii")}
        return super()._encode_param(name, value)

    def _decode_param(self, name: str, item: dict[str, Any],
                      decoded: dict[str, Any]) -> Any:
        if "keras" in item:
            custom_objects = decoded.get("custom_objects", self.getCustomObjects())
            return remote.load_model_bytes(_keras(), base64.b64decode(item["keras"]),
                                           dict(custom_objects or {}))
        return super()._decode_param(name, item, decoded)

    def _output_shapes(self) -> list[tuple[int, ...]]:
        return [tuple(d or 1 for d in o.shape[1:]) for o in self.getModel().outputs]

    def _predict_fn_factory(self) -> Any:
        data = remote.model_bytes(self.getModel())
        custom_objects = dict(self.getCustomObjects() or {})
        shapes = [[d if d else -1 for d in i.shape] for i in self.getModel().inputs]

        def factory() -> Any:
            keras = _keras()
            model = remote.load_model_bytes(keras, data, custom_objects)

            def predict(arrays: list[Any]) -> list[Any]:
                inputs = [a.reshape(s) for a, s in zip(arrays, shapes, strict=False)]
                outputs = model.predict_on_batch(inputs if len(inputs) > 1 else inputs[0])
                if not isinstance(outputs, (list, tuple)):
                    outputs = [outputs]
                return [getattr(o, "numpy", lambda o=o: o)() for o in outputs]
            return predict
        return factory
