"""``TorchEstimator``: fit a torch ``nn.Module`` to a Spark DataFrame on gcurun's ranks;
``TorchModel``: the trained module as a Spark ML Transformer."""

from __future__ import annotations

import copy
from typing import Any

from pyspark import keyword_only
from pyspark.ml.param.shared import Param, Params

from gcurun.spark.common import training, util
from gcurun.spark.common.backend import Backend
from gcurun.spark.common.estimator import EstimatorBase, ModelBase
from gcurun.spark.common.training import TrainSpec
from gcurun.spark.torch import remote


class TorchEstimator(EstimatorBase):
    """Horovod's TorchEstimator. ``model`` (an ``nn.Module``) takes one argument per
    feature column, in order, of shape ``(batch, n)`` (``(batch, 1)`` for a number)
    unless ``input_shapes`` gives them (Horovod's ``[-1, ...]``); ``optimizer`` is built on
    ``model.parameters()`` and is wrapped in ``gcurun.runtime.torch.DistributedOptimizer``
    on each rank; ``loss`` is a function (or one per label) of the output and the label;
    ``metrics`` are functions of the same two, averaged over the job every epoch. With a
    ``run_id`` whose run has a checkpoint in the store, training resumes after its last
    finished epoch."""

    run_prefix = "pytorch"
    input_shapes: Param[Any] = Param(Params._dummy(), "input_shapes", "input shapes")
    loss_constructors: Param[Any] = Param(Params._dummy(), "loss_constructors", "loss constructors")
    train_minibatch_fn: Param[Any] = Param(Params._dummy(), "train_minibatch_fn",
                                           "minibatch function")

    @keyword_only
    def __init__(self, num_proc: int | None = None, model: Any = None,
                 backend: Backend | None = None, store: Any = None, optimizer: Any = None,
                 loss: Any = None, loss_constructors: Any = None, metrics: Any = None,
                 loss_weights: Any = None, sample_weight_col: str | None = None,
                 gradient_compression: Any = None, feature_cols: Any = None,
                 input_shapes: Any = None, validation: Any = None, label_cols: Any = None,
                 callbacks: Any = None, batch_size: int | None = None,
                 val_batch_size: int | None = None, epochs: int | None = None,
                 verbose: int = 1, random_seed: int | None = None,
                 shuffle_buffer_size: int | None = None, shuffle: bool = True,
                 partitions_per_process: int | None = None, run_id: str | None = None,
                 train_minibatch_fn: Any = None, train_steps_per_epoch: int | None = None,
                 validation_steps_per_epoch: int | None = None, label_shapes: Any = None,
                 use_gpu: bool = True, backward_passes_per_step: int = 1) -> None:
        super().__init__()
        self._setDefault(input_shapes=None, loss_constructors=None, train_minibatch_fn=None)
        kwargs = {k: v for k, v in self._input_kwargs.items() if v is not None}
        if "loss" in kwargs and "loss_constructors" in kwargs:
            raise ValueError("give loss or loss_constructors, not both")
        if backward_passes_per_step <= 0:
            raise ValueError(f"backward_passes_per_step={backward_passes_per_step}: give 1 "
                             "or more")
        self.setParams(**kwargs)

    def getInputShapes(self) -> Any:
        return self.getOrDefault(self.input_shapes)

    def setInputShapes(self, value: Any) -> Any:
        return self._set(input_shapes=value)

    def getLossConstructors(self) -> Any:
        return self.getOrDefault(self.loss_constructors)

    def setLossConstructors(self, value: Any) -> Any:
        return self._set(loss_constructors=value)

    def getTrainMinibatchFn(self) -> Any:
        return self.getOrDefault(self.train_minibatch_fn)

    def setTrainMinibatchFn(self, value: Any) -> Any:
        return self._set(train_minibatch_fn=value)

    def _check_model(self) -> None:
        import torch

        model, optimizer = self.getModel(), self.getOptimizer()
        if not isinstance(model, torch.nn.Module):
            raise ValueError(f"model is {type(model).__name__}: TorchEstimator trains a "
                             "torch.nn.Module")
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise ValueError("optimizer must be a torch.optim.Optimizer built on "
                             "model.parameters()")
        owned = {id(p) for p in model.parameters()}
        if any(id(p) not in owned for g in optimizer.param_groups for p in g["params"]):
            raise ValueError("the optimizer holds parameters that are not the model's: "
                             "build it on model.parameters()")
        if self.getLoss() is None and self.getLossConstructors() is None:
            raise ValueError("give loss (a function of output and label) or "
                             "loss_constructors")

    def _torch_spec(self) -> remote.TorchSpec:
        labels = len(self.getLabelCols())
        constructors = self.getLossConstructors()
        losses = [c() for c in util.to_list(constructors, labels)] if constructors \
            else util.to_list(self.getLoss(), labels)
        weights = self.getLossWeights() or [1.0 / labels] * labels
        if len(weights) != labels:
            raise ValueError(f"loss_weights has {len(weights)} values for {labels} labels")
        metrics = self.getMetrics() or []
        return remote.TorchSpec(
            losses=tuple(losses), loss_weights=tuple(weights),
            metrics=tuple(metrics if isinstance(metrics, (list, tuple)) else [metrics]),
            input_shapes=tuple(self.getInputShapes()) if self.getInputShapes() else None,
            label_shapes=tuple(self.getLabelShapes()) if self.getLabelShapes() else None,
            compression=self.getGradientCompression(),
            backward_passes_per_step=self.getBackwardPassesPerStep(),
            train_minibatch_fn=self.getTrainMinibatchFn())

    def _fit_on_prepared_data(self, backend: Backend, spec: TrainSpec) -> TorchModel:
        resume = training.load_checkpoint(spec.store, spec.run_id, remote.SUFFIX)
        if resume is not None and spec.verbose:
            import logging

            logging.getLogger("gcurun.spark").info(
                "run %s resumes after epoch %d", spec.run_id, resume.epochs_done)
        results = backend.run(remote.train, args=(
            spec, self._torch_spec(), self.getModel(), self.getOptimizer(),
            resume.data if resume else None, resume.epochs_done if resume else 0,
            resume.history if resume else {}), env={})
        first = results[0]
        model = copy.deepcopy(self.getModel())
        optimizer = copy.deepcopy(self.getOptimizer())
        state = remote.load_state(first["state"])
        model.load_state_dict(state["model"])
        model.eval()
        return TorchModel(history=first["history"], model=model, optimizer=optimizer,
                          feature_columns=list(spec.feature_cols),
                          input_shapes=self.getInputShapes(),
                          label_columns=list(spec.label_cols), run_id=spec.run_id,
                          _metadata=spec.metadata, loss=self.getLoss(),
                          rank_digests=[r["digest"] for r in results])


class TorchModel(ModelBase):
    """A trained torch module as a Transformer (Horovod's TorchModel): ``getModel()`` is
    the module, ``getHistory()`` the metrics by epoch, ``getRankDigests()`` the SHA-256
    of the weights each rank ended training with."""

    optimizer: Param[Any] = Param(Params._dummy(), "optimizer", "optimizer")
    input_shapes: Param[Any] = Param(Params._dummy(), "input_shapes", "input shapes")
    loss: Param[Any] = Param(Params._dummy(), "loss", "loss")

    @keyword_only
    def __init__(self, history: Any = None, model: Any = None, feature_columns: Any = None,
                 input_shapes: Any = None, label_columns: Any = None, optimizer: Any = None,
                 run_id: str | None = None, _metadata: Any = None, loss: Any = None,
                 rank_digests: Any = None) -> None:
        super().__init__()
        if label_columns:
            self.setOutputCols([f"{c}__output" for c in label_columns])
        self._setDefault(optimizer=None, input_shapes=None, loss=None)
        self.setParams(**self._input_kwargs)

    def getOptimizer(self) -> Any:
        return self.getOrDefault(self.optimizer)

    def getInputShapes(self) -> Any:
        return self.getOrDefault(self.input_shapes)

    def getLoss(self) -> Any:
        return self.getOrDefault(self.loss)

    def _example_inputs(self, rows: int) -> list[Any]:
        import torch

        metadata = self._get_metadata()
        shapes = self.getInputShapes() or [None] * len(self.getFeatureColumns())
        inputs = []
        for name, shape in zip(self.getFeatureColumns(), shapes, strict=False):
            value = torch.zeros(rows * metadata[name].size)
            inputs.append(value.reshape(shape) if shape else value.reshape(rows, -1))
        return inputs

    def _output_shapes(self) -> list[tuple[int, ...]]:
        import torch

        with torch.no_grad():
            outputs = self.getModel()(*self._example_inputs(1))
        if not isinstance(outputs, (list, tuple)):
            outputs = [outputs]
        return [tuple(o.shape[1:]) for o in outputs]

    def _predict_fn_factory(self) -> Any:
        model = copy.deepcopy(self.getModel())
        shapes = self.getInputShapes()

        def factory() -> Any:
            import torch

            torch.set_num_threads(1)    # one core per Spark task, as Spark counts them
            model.eval()

            def predict(arrays: list[Any]) -> list[Any]:
                inputs = []
                for i, array in enumerate(arrays):
                    value = torch.from_numpy(array)
                    inputs.append(value.reshape(shapes[i]) if shapes
                                  else value.reshape(len(value), -1))
                with torch.no_grad():
                    outputs = model(*inputs)
                if not isinstance(outputs, (list, tuple)):
                    outputs = [outputs]
                return [o.numpy() for o in outputs]
            return predict
        return factory
