"""The Spark ML Params of the Estimators and their Models, with Horovod's names,
defaults and ``get``/``set`` methods."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark import keyword_only
from pyspark.ml.param.shared import HasOutputCols, Param, Params, TypeConverters


def _param(name: str, doc: str, converter: Any = None) -> Param:
    if converter is None:
        return Param(Params._dummy(), name, doc)
    return Param(Params._dummy(), name, doc, typeConverter=converter)


def _accessors(cls: type, names: dict[str, str]) -> None:
    """Horovod's ``setName``/``getName`` methods for each param (name -> CamelCase)."""
    for name, camel in names.items():
        def getter(self: Any, _name: str = name) -> Any:
            return self.getOrDefault(getattr(self, _name))

        def setter(self: Any, value: Any, _name: str = name) -> Any:
            return self._set(**{_name: value})

        getter.__doc__ = f"The value of ``{name}``."
        setter.__doc__ = f"Set ``{name}``; returns self."
        if not hasattr(cls, f"get{camel}"):
            setattr(cls, f"get{camel}", getter)
        if not hasattr(cls, f"set{camel}"):
            setattr(cls, f"set{camel}", setter)


class EstimatorParams(Params):
    """What every Estimator takes (Horovod's ``EstimatorParams``)."""

    if TYPE_CHECKING:   # the get/set methods _accessors adds, and keyword_only's record
        _input_kwargs: dict[str, Any]

        def __getattr__(self, name: str) -> Any: ...


    num_proc = _param("num_proc", "number of processes")
    model = _param("model", "model")
    backend = _param("backend", "backend that runs the ranks")
    store = _param("store", "store")
    optimizer = _param("optimizer", "optimizer")
    loss = _param("loss", "loss")
    loss_weights = _param("loss_weights", "loss weights", TypeConverters.toListFloat)
    metrics = _param("metrics", "metrics")
    sample_weight_col = _param("sample_weight_col", "sample weight column",
                               TypeConverters.toString)
    gradient_compression = _param("gradient_compression", "gradient compression")
    feature_cols = _param("feature_cols", "feature column names", TypeConverters.toListString)
    label_cols = _param("label_cols", "label column names", TypeConverters.toListString)
    validation = _param("validation", "validation fraction or column name")
    callbacks = _param("callbacks", "callbacks")
    batch_size = _param("batch_size", "batch size", TypeConverters.toInt)
    val_batch_size = _param("val_batch_size", "validation batch size", TypeConverters.toInt)
    epochs = _param("epochs", "epochs", TypeConverters.toInt)
    train_steps_per_epoch = _param("train_steps_per_epoch", "training steps per epoch",
                                   TypeConverters.toInt)
    validation_steps_per_epoch = _param("validation_steps_per_epoch",
                                        "validation steps per epoch", TypeConverters.toInt)
    verbose = _param("verbose", "verbosity", TypeConverters.toInt)
    random_seed = _param("random_seed", "random seed", TypeConverters.toInt)
    shuffle_buffer_size = _param("shuffle_buffer_size", "(deprecated) 0 turns shuffling off",
                                 TypeConverters.toInt)
    shuffle = _param("shuffle", "shuffle the training rows", TypeConverters.toBoolean)
    partitions_per_process = _param("partitions_per_process",
                                    "Parquet files per process", TypeConverters.toInt)
    run_id = _param("run_id", "run id; an existing run resumes from its last checkpoint",
                    TypeConverters.toString)
    label_shapes = _param("label_shapes", "label shapes")
    backward_passes_per_step = _param("backward_passes_per_step",
                                      "backward passes per allreduce", TypeConverters.toInt)
    use_gpu = _param("use_gpu", "use the accelerator", TypeConverters.toBoolean)

    def __init__(self) -> None:
        super().__init__()
        self._setDefault(num_proc=None, model=None, backend=None, store=None, optimizer=None,
                         loss=None, loss_weights=None, metrics=[], sample_weight_col=None,
                         gradient_compression=None, feature_cols=None, label_cols=None,
                         validation=None, callbacks=[], batch_size=32, val_batch_size=None,
                         epochs=1, train_steps_per_epoch=None,
                         validation_steps_per_epoch=None, verbose=1, random_seed=None,
                         shuffle_buffer_size=None, shuffle=True, partitions_per_process=10,
                         run_id=None, label_shapes=None, backward_passes_per_step=1,
                         use_gpu=True)

    @keyword_only
    def setParams(self, **kwargs: Any) -> Any:
        return self._set(**kwargs)

    def getShufflingBufferSize(self) -> Any:
        return self.getOrDefault(self.shuffle_buffer_size)

    def setShufflingBufferSize(self, value: Any) -> Any:
        return self._set(shuffle_buffer_size=value)


_accessors(EstimatorParams, {
    "num_proc": "NumProc", "model": "Model", "backend": "Backend", "store": "Store",
    "optimizer": "Optimizer", "loss": "Loss", "loss_weights": "LossWeights",
    "metrics": "Metrics", "sample_weight_col": "SampleWeightCol",
    "gradient_compression": "GradientCompression", "feature_cols": "FeatureCols",
    "label_cols": "LabelCols", "validation": "Validation", "callbacks": "Callbacks",
    "batch_size": "BatchSize", "val_batch_size": "ValBatchSize", "epochs": "Epochs",
    "train_steps_per_epoch": "TrainStepsPerEpoch",
    "validation_steps_per_epoch": "ValidationStepsPerEpoch", "verbose": "Verbose",
    "random_seed": "RandomSeed", "shuffle": "Shuffle",
    "partitions_per_process": "PartitionsPerProcess", "run_id": "RunId",
    "label_shapes": "LabelShapes", "backward_passes_per_step": "BackwardPassesPerStep",
    "use_gpu": "UseGpu"})


class ModelParams(HasOutputCols):
    """What every trained Model holds (Horovod's ``ModelParams``), and the SHA-256 of
    the weights each rank ended with, in rank order."""

    if TYPE_CHECKING:   # the get/set methods _accessors adds, and keyword_only's record
        _input_kwargs: dict[str, Any]

        def __getattr__(self, name: str) -> Any: ...


    history = _param("history", "metrics by epoch")
    model = _param("model", "model")
    feature_columns = _param("feature_columns", "feature columns")
    label_columns = _param("label_columns", "label columns")
    run_id = _param("run_id", "run id", TypeConverters.toString)
    rank_digests = _param("rank_digests", "SHA-256 of each rank's final weights")
    _metadata = _param("_metadata", "the training data's column metadata")

    def __init__(self) -> None:
        super().__init__()
        self._setDefault(history=None, model=None, feature_columns=None,
                         label_columns=None, run_id=None, rank_digests=None, _metadata=None)

    @keyword_only
    def setParams(self, **kwargs: Any) -> Any:
        return self._set(**kwargs)

    def _get_metadata(self) -> Any:
        return self.getOrDefault(self._metadata)

    def setOutputCols(self, value: list[str]) -> Any:
        """Name the prediction columns (one per label); returns self."""
        return self._set(outputCols=value)


_accessors(ModelParams, {
    "history": "History", "model": "Model", "feature_columns": "FeatureColumns",
    "label_columns": "LabelColumns", "run_id": "RunId", "rank_digests": "RankDigests"})
