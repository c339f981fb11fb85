"""SyncBatchNormalization: Keras batch normalization whose batch statistics are those of
the global batch (every rank's examples), as Horovod's layer of that name."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from gcurun.runtime.tensorflow.mpi_ops import Sum, _grouped_allreduce

try:                                          # Keras 3, as tf.keras is on TF 2.16+
    import keras as _keras
    _BatchNormalization: Any = _keras.layers.BatchNormalization
except ImportError:                           # pragma: no cover - depends on the install
    _BatchNormalization = tf.keras.layers.BatchNormalization


class SyncBatchNormalization(_BatchNormalization):  # type: ignore[misc, valid-type]
    """Batch normalization over the global batch: in training each rank's count, sum
    and sum of squares per channel are summed over the ranks (one allreduce per call,
    differentiable), then turned into the mean and variance. Masks are not supported."""

    def _moments(self, inputs: Any, mask: Any) -> tuple[Any, Any]:
        if mask is not None:
            raise NotImplementedError("SyncBatchNormalization does not support masks; "
                                      "use BatchNormalization for masked inputs")
        axes = list(self._reduction_axes)
        x = tf.convert_to_tensor(inputs)
        count = tf.cast(tf.reduce_prod(tf.gather(tf.shape(x), axes)), x.dtype)
        total = tf.reduce_sum(x, axis=axes)
        squares = tf.reduce_sum(tf.square(x), axis=axes)
        count, total, squares = _grouped_allreduce(
            [tf.reshape(count, [1]), total, squares], op=Sum)
        mean = total / count
        variance = tf.maximum(squares / count - tf.square(mean), 0.0)
        return mean, variance
