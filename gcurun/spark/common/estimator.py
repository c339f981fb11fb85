"""The Spark ML Estimator and Model that the Keras and torch ones specialise.

``fit(df)`` materialises ``df`` into the store (:func:`~gcurun.spark.common.util.prepare_data`),
runs the framework's training function on every rank through the backend, and wraps what
rank 0 returned in the framework's Model; ``transform(df)`` adds one prediction column per
label (``<label>__output``), computed on the executors by a pandas UDF.
"""

from __future__ import annotations

import time
from typing import Any

from pyspark.ml import Estimator, Model

from gcurun.spark.common import util
from gcurun.spark.common.backend import Backend, SparkBackend
from gcurun.spark.common.params import EstimatorParams, ModelParams
from gcurun.spark.common.serialization import PersistableModel
from gcurun.spark.common.training import TrainSpec


class EstimatorBase(Estimator, EstimatorParams):
    """Subclasses give ``run_prefix``, ``_check_model`` and ``_fit_on_prepared_data``."""

    run_prefix = "run"

    def fit(self, df: Any, params: Any = None) -> Any:
        """Train the model on ``df`` and return the trained Spark ML Model. Raises
        ValueError for missing parameters or columns, and what the ranks raised
        (RankFunctionError) when training failed."""
        return super().fit(df, params)

    def _fit(self, df: Any) -> Any:
        self._check_params()
        backend = self._get_or_create_backend()
        store = self.getStore()
        num_proc = backend.num_processes()
        seed = self.getRandomSeed()
        with util.prepare_data(num_proc, store, df, self.getLabelCols(), self.getFeatureCols(),
                               validation=self.getValidation(),
                               sample_weight_col=self.getSampleWeightCol(),
                               partitions_per_process=self.getPartitionsPerProcess(),
                               seed=seed or 0) as dataset:
            run_id = self.getRunId() or f"{self.run_prefix}_{int(time.time() * 1000)}"
            spec = self._train_spec(dataset, run_id, num_proc)
            return self._fit_on_prepared_data(backend, spec)

    def _check_params(self) -> None:
        missing = [name for name in ("model", "store", "feature_cols", "label_cols")
                   if not self.getOrDefault(getattr(self, name))]
        if missing:
            raise ValueError(f"{type(self).__name__}: {', '.join(missing)} must be given "
                             "before fit()")
        util.check_validation(self.getValidation())
        if self.getBatchSize() < 1 or self.getEpochs() < 0:
            raise ValueError(f"batch_size={self.getBatchSize()}, epochs={self.getEpochs()}: "
                             "give a batch size of at least 1 and epochs of at least 0")
        self._check_model()

    def _get_or_create_backend(self) -> Backend:
        backend = self.getBackend()
        if backend is None:
            return SparkBackend(self.getNumProc(), verbose=self.getVerbose())
        if self.getNumProc() is not None:
            raise ValueError('give at most one of "backend" and "num_proc"')
        return backend  # type: ignore[no-any-return]

    def _train_spec(self, dataset: util.Dataset, run_id: str, num_proc: int) -> TrainSpec:
        batch = self.getBatchSize()
        steps = self.getTrainStepsPerEpoch() or util.batches_per_epoch(
            dataset.train_rows, num_proc, batch)
        buffer = self.getShufflingBufferSize()
        return TrainSpec(
            store=self.getStore(), run_id=run_id, train_path=dataset.train_path,
            val_path=dataset.val_path, train_rows=dataset.train_rows,
            val_rows=dataset.val_rows, metadata=dataset.metadata,
            feature_cols=tuple(self.getFeatureCols()), label_cols=tuple(self.getLabelCols()),
            sample_weight_col=self.getSampleWeightCol(), batch_size=batch,
            val_batch_size=self.getValBatchSize() or batch, epochs=self.getEpochs(),
            steps_per_epoch=steps, validation_steps=self.getValidationStepsPerEpoch(),
            shuffle=self.getShuffle() and buffer != 0, seed=self.getRandomSeed(),
            verbose=self.getVerbose())

    def _has_checkpoint(self, run_id: str) -> bool:
        path = self.getStore().get_checkpoint_path(run_id)
        return path is not None and self.getStore().exists(path)

    def _check_model(self) -> None:
        raise NotImplementedError

    def _fit_on_prepared_data(self, backend: Backend, spec: TrainSpec) -> Any:
        raise NotImplementedError


class ModelBase(Model, ModelParams, PersistableModel):
    """A trained model as a Spark ML Transformer, saved with
    ``model.write().overwrite().save(path)`` and loaded with ``<Class>.load(path)``
    (:mod:`~gcurun.spark.common.serialization`). Subclasses give ``_predict_fn`` (a
    function of a list of feature arrays to a list of output arrays, built on an
    executor) and ``_output_shapes``."""

    def transform(self, df: Any, params: Any = None) -> Any:
        """``df`` with one prediction column per label, ``<label>__output`` unless
        ``setOutputCols`` named them: a number for a one-value output (rounded to an
        integer for an integral label), an array of doubles otherwise."""
        return super().transform(df, params)

    def _transform(self, df: Any) -> Any:
        from pyspark.ml.functions import vector_to_array
        from pyspark.sql import functions as F
        from pyspark.sql import types as T

        metadata = self._get_metadata()
        features = list(self.getFeatureColumns())
        labels = list(self.getLabelColumns())
        outputs = list(self.getOutputCols())
        shapes = self._output_shapes()
        fields, integral = [], []
        for name, label, shape in zip(outputs, labels, shapes, strict=False):
            info = metadata[label]
            scalar = _numel(shape) == 1
            integral.append(scalar and info.is_integral)
            kind = (T.LongType() if info.is_integral else T.DoubleType()) if scalar \
                else T.ArrayType(T.DoubleType())
            fields.append(T.StructField(name, kind))
        schema = T.StructType(fields)
        predict_udf = _prediction_udf(self._predict_fn_factory(), features, outputs,
                                      integral, schema)
        inputs = [vector_to_array(F.col(c)) if metadata[c].is_vector else F.col(c)
                  for c in features]
        packed = f"__{'_'.join(outputs)}__predictions"
        result = df.withColumn(packed, predict_udf(*inputs))
        return result.select(*[F.col(f"`{c}`") for c in df.columns],
                             *[F.col(packed)[c].alias(c) for c in outputs])

    def _predict_fn_factory(self) -> Any:
        raise NotImplementedError

    def _output_shapes(self) -> list[tuple[int, ...]]:
        raise NotImplementedError


def _numel(shape: tuple[int, ...]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count


def _prediction_udf(factory: Any, features: list[str], outputs: list[str],
                    integral: list[bool], schema: Any) -> Any:
    """A pandas UDF of the feature columns that builds the model once per partition
    (``factory()``) and returns a struct of the output columns."""
    from collections.abc import Iterator

    import pandas as pd
    from pyspark.sql.functions import pandas_udf

    def predict(batches):  # type: ignore[no-untyped-def]
        import numpy as np

        predict_fn = factory()
        for batch in batches:
            if isinstance(batch, pd.Series):    # one feature column: no tuple
                batch = (batch,)
            arrays = [_column_array(series) for series in batch]
            predictions = predict_fn(arrays)
            frame = {}
            for name, values, is_int in zip(outputs, predictions, integral, strict=False):
                values = np.asarray(values, dtype=np.float64).reshape(len(batch[0]), -1)
                if values.shape[1] == 1:
                    column = values[:, 0]
                    frame[name] = np.rint(column).astype(np.int64) if is_int else column
                else:
                    frame[name] = list(values)
            yield pd.DataFrame(frame)

    # Real types, not this module's postponed strings: Spark reads the kind of UDF
    # (an iterator of batches) from them.
    batch_type: Any = pd.Series if len(features) == 1 else tuple[pd.Series, ...]
    predict.__annotations__ = {"batches": Iterator[batch_type],
                               "return": Iterator[pd.DataFrame]}
    return pandas_udf(predict, returnType=schema)  # type: ignore[call-overload]


def _column_array(series: Any) -> Any:
    import numpy as np

    if len(series) and isinstance(series.iloc[0], (list, tuple, np.ndarray)):
        return np.stack([np.asarray(v, dtype=np.float32) for v in series])
    return series.to_numpy(dtype=np.float32)
