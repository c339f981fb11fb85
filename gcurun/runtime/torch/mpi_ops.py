"""The collectives on torch tensors, with Horovod's names, arguments and results, under
Horovod's module name (``horovod.torch.mpi_ops``), with the basics it re-exports
(``from horovod.torch.mpi_ops import rank`` works) and its autograd classes
(``HorovodAllreduce``, ...).

Every ``*_async`` function stages its tensors (:mod:`.tensors`), hands the host arrays to
the runtime (the engine of the job or of a process set) and returns an integer handle for
:func:`poll` and :func:`synchronize`. The synchronous forms synchronize at once; the
out-of-place ones are autograd functions, so gradients flow through them. They live by
kind: :mod:`.allreduce_ops`, :mod:`.gather_scatter_ops` (allgather, alltoall),
:mod:`.reducescatter_ops`, :mod:`.broadcast_ops`, :mod:`.barrier_join`.
"""

from __future__ import annotations

from gcurun.runtime import Adasum, Average, Max, Min, Product, Sum
from gcurun.runtime.torch.allreduce_ops import (
    HorovodAllreduce,
    HorovodGroupedAllreduce,
    allreduce,
    allreduce_,
    allreduce_async,
    allreduce_async_,
    grouped_allreduce,
    grouped_allreduce_,
    grouped_allreduce_async,
    grouped_allreduce_async_,
    sparse_allreduce_async,
)
from gcurun.runtime.torch.barrier_join import barrier, join
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
from gcurun.runtime.torch.broadcast_ops import (
    HorovodBroadcast,
    broadcast,
    broadcast_,
    broadcast_async,
    broadcast_async_,
)
from gcurun.runtime.torch.errors import HorovodInternalError
from gcurun.runtime.torch.gather_scatter_ops import (
    HorovodAllgather,
    HorovodAlltoall,
    HorovodGroupedAllgather,
    allgather,
    allgather_async,
    alltoall,
    alltoall_async,
    grouped_allgather,
    grouped_allgather_async,
)
from gcurun.runtime.torch.handles import poll, synchronize
from gcurun.runtime.torch.process_sets import (
    ProcessSet,
    add_process_set,
    global_process_set,
    remove_process_set,
)
from gcurun.runtime.torch.reducescatter_ops import (
    HorovodGroupedReducescatter,
    HorovodReducescatter,
    grouped_reducescatter,
    grouped_reducescatter_async,
    reducescatter,
    reducescatter_async,
)

__all__ = [
    "Adasum", "Average", "HorovodAllgather", "HorovodAllreduce", "HorovodAlltoall",
    "HorovodBroadcast", "HorovodGroupedAllgather", "HorovodGroupedAllreduce",
    "HorovodGroupedReducescatter", "HorovodInternalError", "HorovodReducescatter", "Max",
    "Min", "ProcessSet", "Product", "Sum", "add_process_set", "allgather", "allgather_async",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_", "alltoall",
    "alltoall_async", "barrier", "broadcast", "broadcast_", "broadcast_async",
    "broadcast_async_", "ccl_built", "cross_rank", "cross_size", "cuda_built", "ddl_built",
    "global_process_set", "gloo_built", "gloo_enabled", "grouped_allgather",
    "grouped_allgather_async", "grouped_allreduce", "grouped_allreduce_",
    "grouped_allreduce_async", "grouped_allreduce_async_", "grouped_reducescatter",
    "grouped_reducescatter_async", "init", "is_homogeneous", "is_initialized", "join",
    "local_rank", "local_size", "mpi_built", "mpi_enabled", "mpi_threads_supported",
    "nccl_built", "poll", "rank", "reducescatter", "reducescatter_async",
    "remove_process_set", "rocm_built", "shutdown", "size", "sparse_allreduce_async",
    "start_timeline", "stop_timeline", "synchronize",
]
