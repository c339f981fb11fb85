"""Horovod's Keras API on gcurun's runtime: ``import gcurun.runtime.tensorflow.keras as hvd``.

For the Keras that ``tf.keras`` is: Keras 3 (TensorFlow 2.16+), or Keras 2 (tf-keras, with
``TF_USE_LEGACY_KERAS=1``): DistributedOptimizer (``model.fit`` trains identically on
every rank), the callbacks (``hvd.callbacks.*``), load_model, and the collectives on
values.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from gcurun.runtime import (
    ArgumentError,
    CollectiveTimeout,
    MismatchError,
    NotInitializedError,
    PeerFailureError,
)
from gcurun.runtime.tensorflow import mpi_ops as _ops
from gcurun.runtime.tensorflow.basics import (
    ccl_built,
    cross_rank,
    cross_size,
    cuda_built,
    ddl_built,
    gloo_built,
    gloo_enabled,
    init,
    is_homogeneous,
    is_initialized,
    local_rank,
    local_size,
    mpi_built,
    mpi_enabled,
    mpi_threads_supported,
    nccl_built,
    rank,
    rocm_built,
    shutdown,
    size,
)
from gcurun.runtime.tensorflow.compression import Compression
from gcurun.runtime.tensorflow.functions import allgather_object, broadcast_object
from gcurun.runtime.tensorflow.functions import broadcast_global_variables as _bcast_globals
from gcurun.runtime.tensorflow.keras import callbacks, elastic
from gcurun.runtime.tensorflow.keras._which import keras as _keras
from gcurun.runtime.tensorflow.keras.optimizer import (
    DistributedOptimizer,
    keras_optimizer_class,
)
from gcurun.runtime.tensorflow.mpi_ops import Adasum, Average, Max, Min, Product, Sum
from gcurun.runtime.tensorflow.process_sets import (
    ProcessSet,
    add_process_set,
    global_process_set,
    remove_process_set,
)
from gcurun.runtime.tensorflow.reduce import allreduce as _allreduce
from gcurun.runtime.tensorflow.sync_batch_norm import SyncBatchNormalization


def allreduce(value: Any, name: str | None = None, average: bool | None = None,
              prescale_factor: float = 1.0, postscale_factor: float = 1.0, op: Any = None,
              compression: Any = Compression.none,
              process_set: Any = global_process_set) -> tf.Tensor:
    """The reduction of a tensor-like ``value`` over the ranks (default: the average)."""
    return _allreduce(tf.convert_to_tensor(value), average=average, compression=compression,
                      op=op, prescale_factor=prescale_factor,
                      postscale_factor=postscale_factor, name=name, process_set=process_set)


def allgather(value: Any, name: str | None = None,
              process_set: Any = global_process_set) -> tf.Tensor:
    """Every rank's ``value`` concatenated along the first dimension."""
    return _ops.allgather(tf.convert_to_tensor(value), name, process_set)


def broadcast(value: Any, root_rank: int, name: str | None = None,
              process_set: Any = global_process_set) -> tf.Tensor:
    """``root_rank``'s ``value`` on every rank."""
    return _ops.broadcast(tf.convert_to_tensor(value), root_rank, name, process_set)


def reducescatter(value: Any, name: str | None = None, op: Any = Average,
                  process_set: Any = global_process_set) -> tf.Tensor:
    """This rank's share of the reduction of ``value`` over the ranks."""
    return _ops.reducescatter(tf.convert_to_tensor(value), name, op, process_set)


def broadcast_global_variables(root_rank: int) -> Any:
    """TF1 graphs only (see ``gcurun.runtime.tensorflow.broadcast_global_variables``);
    with Keras 3 use ``callbacks.BroadcastGlobalVariablesCallback``."""
    return _bcast_globals(root_rank)


def load_model(filepath: Any, custom_optimizers: Any = None, custom_objects: Any = None,
               compression: Any = Compression.none, legacy_opts: bool = False,
               **kwargs: Any) -> Any:
    """``keras.models.load_model`` whose optimizer (with its restored state) comes back
    wrapped in DistributedOptimizer. ``custom_optimizers`` (classes) and
    ``custom_objects`` are handed to Keras for deserializing."""
    objects = dict(custom_objects or {})
    for cls in custom_optimizers or []:
        objects.setdefault(cls.__name__, cls)
    model = _keras.models.load_model(filepath, custom_objects=objects or None, **kwargs)
    if getattr(model, "optimizer", None) is not None:
        model.optimizer = DistributedOptimizer(model.optimizer, compression=compression)
    return model


__all__ = [
    "Adasum", "ArgumentError", "Average", "CollectiveTimeout", "Compression",
    "DistributedOptimizer", "Max", "Min", "MismatchError", "NotInitializedError",
    "PeerFailureError", "ProcessSet", "Product", "Sum", "SyncBatchNormalization",
    "add_process_set", "allgather", "allgather_object", "allreduce", "broadcast",
    "broadcast_global_variables", "broadcast_object", "callbacks", "ccl_built",
    "cross_rank", "cross_size", "cuda_built", "ddl_built", "elastic", "gloo_built",
    "gloo_enabled", "global_process_set", "init", "is_homogeneous", "is_initialized",
    "keras_optimizer_class", "load_model", "local_rank", "local_size", "mpi_built",
    "mpi_enabled", "mpi_threads_supported", "nccl_built", "rank", "reducescatter",
    "remove_process_set", "rocm_built", "shutdown", "size",
]
