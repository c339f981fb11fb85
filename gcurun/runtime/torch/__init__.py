"""Horovod's PyTorch API on gcurun's runtime: ``import gcurun.runtime.torch as hvd``.

A script written for ``horovod.torch`` runs with this import as its only change: init,
the rank queries, the timeline calls, the collectives on tensors (synchronous,
asynchronous with handles, in place, grouped, on process sets), DistributedOptimizer,
broadcast_parameters, broadcast_optimizer_state, Compression, SyncBatchNorm.
"""

from __future__ import annotations

try:
    import torch as _torch  # noqa: F401
except ImportError as _missing:          # pragma: no cover - depends on the install
    raise ImportError("gcurun.runtime.torch needs PyTorch; install it with "
                      "`pip install torch` (or gcurun[torch])") from _missing

from gcurun.runtime.api import (
    ArgumentError,
    CollectiveTimeout,
    MismatchError,
    NotInitializedError,
    PeerFailureError,
)
from gcurun.runtime.elastic import HostsUpdatedInterrupt
from gcurun.runtime.torch import elastic  # hvd.elastic
from gcurun.runtime.torch.basics import (
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
    start_timeline,
    stop_timeline,
)
from gcurun.runtime.torch.compression import Compression
from gcurun.runtime.torch.errors import HorovodInternalError
from gcurun.runtime.torch.functions import (
    allgather_object,
    broadcast_object,
    broadcast_optimizer_state,
    broadcast_parameters,
)
from gcurun.runtime.torch.mpi_ops import (
    Adasum,
    Average,
    Max,
    Min,
    Product,
    Sum,
    allgather,
    allgather_async,
    allreduce,
    allreduce_,
    allreduce_async,
    allreduce_async_,
    alltoall,
    alltoall_async,
    barrier,
    broadcast,
    broadcast_,
    broadcast_async,
    broadcast_async_,
    grouped_allgather,
    grouped_allgather_async,
    grouped_allreduce,
    grouped_allreduce_,
    grouped_allreduce_async,
    grouped_allreduce_async_,
    grouped_reducescatter,
    grouped_reducescatter_async,
    join,
    poll,
    reducescatter,
    reducescatter_async,
    sparse_allreduce_async,
    synchronize,
)
from gcurun.runtime.torch.optimizer import DistributedOptimizer
from gcurun.runtime.torch.process_sets import (
    ProcessSet,
    add_process_set,
    global_process_set,
    remove_process_set,
)
from gcurun.runtime.torch.sync_batch_norm import SyncBatchNorm

__all__ = [
    "HostsUpdatedInterrupt", "elastic",
    "Adasum", "ArgumentError", "Average", "CollectiveTimeout", "Compression",
    "DistributedOptimizer", "HorovodInternalError", "Max", "Min", "MismatchError",
    "NotInitializedError", "PeerFailureError", "ProcessSet", "Product", "Sum", "SyncBatchNorm",
    "add_process_set", "allgather", "allgather_async", "allgather_object", "allreduce",
    "allreduce_", "allreduce_async", "allreduce_async_", "alltoall", "alltoall_async",
    "barrier", "broadcast", "broadcast_", "broadcast_async", "broadcast_async_",
    "broadcast_object", "broadcast_optimizer_state", "broadcast_parameters", "ccl_built",
    "cross_rank", "cross_size", "cuda_built", "ddl_built", "gloo_built", "gloo_enabled",
    "global_process_set", "grouped_allgather", "grouped_allgather_async",
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async",
    "grouped_allreduce_async_", "grouped_reducescatter", "grouped_reducescatter_async",
    "init", "is_homogeneous", "join", "is_initialized", "local_rank", "local_size", "mpi_built",
    "mpi_enabled", "mpi_threads_supported", "nccl_built", "poll", "rank",
    "reducescatter", "reducescatter_async", "remove_process_set", "rocm_built", "shutdown",
    "size", "sparse_allreduce_async", "start_timeline", "stop_timeline", "synchronize",
]
