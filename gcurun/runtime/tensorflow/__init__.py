"""Horovod's TensorFlow API on gcurun's runtime: ``import gcurun.runtime.tensorflow as hvd``.

A script written for ``horovod.tensorflow`` runs with this import as its only change:
TF1 graphs (DistributedOptimizer, BroadcastGlobalVariablesHook,
broadcast_global_variables), TF2 eager code and ``tf.function`` (DistributedGradientTape,
broadcast_variables), the collectives on tensors with their gradients, Compression,
SyncBatchNormalization and elastic state. Keras is ``gcurun.runtime.tensorflow.keras``.
"""

from __future__ import annotations

try:
    import tensorflow as _tf  # noqa: F401
except ImportError as _missing:          # pragma: no cover - depends on the install
    raise ImportError("gcurun.runtime.tensorflow needs TensorFlow; install it with "
                      "`pip install tensorflow-cpu` (or gcurun[tensorflow])") from _missing

from gcurun.runtime import (
    ArgumentError,
    CollectiveTimeout,
    MismatchError,
    NotInitializedError,
    PeerFailureError,
    start_timeline,
    stop_timeline,
)
from gcurun.runtime.tensorflow import elastic, util
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
    local_rank_op,
    local_size,
    local_size_op,
    mpi_built,
    mpi_enabled,
    mpi_threads_supported,
    nccl_built,
    process_set_included_op,
    rank,
    rank_op,
    rocm_built,
    shutdown,
    size,
    size_op,
)
from gcurun.runtime.tensorflow.compression import Compression
from gcurun.runtime.tensorflow.functions import (
    allgather_object,
    broadcast_global_variables,
    broadcast_object,
    broadcast_object_fn,
    broadcast_variables,
)
from gcurun.runtime.tensorflow.gradient_tape import (
    DistributedGradientTape,
    PartialDistributedGradientTape,
)
from gcurun.runtime.tensorflow.mpi_ops import (
    Adasum,
    Average,
    Max,
    Min,
    Product,
    Sum,
    _allreduce,
    _grouped_allreduce,
    allgather,
    alltoall,
    barrier,
    broadcast,
    broadcast_,
    grouped_allgather,
    grouped_reducescatter,
    join,
    reducescatter,
)
from gcurun.runtime.tensorflow.optimizer import BroadcastGlobalVariablesHook, DistributedOptimizer
from gcurun.runtime.tensorflow.process_sets import (
    ProcessSet,
    add_process_set,
    global_process_set,
    remove_process_set,
)
from gcurun.runtime.tensorflow.reduce import allreduce, grouped_allreduce
from gcurun.runtime.tensorflow.sync_batch_norm import SyncBatchNormalization
from gcurun.runtime.tensorflow.util import _executing_eagerly

__all__ = [
    "Adasum", "ArgumentError", "Average", "BroadcastGlobalVariablesHook", "CollectiveTimeout",
    "Compression", "DistributedGradientTape", "DistributedOptimizer", "Max", "Min",
    "MismatchError", "NotInitializedError", "PartialDistributedGradientTape",
    "PeerFailureError", "ProcessSet", "Product", "Sum", "SyncBatchNormalization",
    "_allreduce", "_executing_eagerly", "_grouped_allreduce", "add_process_set",
    "allgather", "allgather_object", "allreduce", "alltoall", "barrier", "broadcast",
    "broadcast_", "broadcast_global_variables", "broadcast_object", "broadcast_object_fn",
    "broadcast_variables", "ccl_built", "cross_rank", "cross_size", "cuda_built",
    "ddl_built", "elastic", "gloo_built", "gloo_enabled", "global_process_set",
    "grouped_allgather", "grouped_allreduce", "grouped_reducescatter", "init",
    "is_homogeneous", "is_initialized", "join", "local_rank", "local_rank_op", "local_size",
    "local_size_op", "mpi_built", "mpi_enabled", "mpi_threads_supported", "nccl_built",
    "process_set_included_op", "rank", "rank_op", "reducescatter", "remove_process_set",
    "rocm_built", "shutdown", "size", "size_op", "start_timeline", "stop_timeline", "util",
]
