"""The training script's side of gcurun: ``import gcurun.runtime as hvd``.

Horovod's basics and collectives on numpy arrays (or any object with the buffer protocol)
over the ``mpi``, ``tcp`` or single-process backend, chosen by :func:`init`, and process
sets. The names come from :mod:`gcurun.runtime.frontend`; ``gcurun.runtime.torch`` (and
a tensorflow binding) build on them.
"""

from __future__ import annotations

from gcurun.errors import CollectiveError
from gcurun.runtime.api import (
    ArgumentError,
    CollectiveTimeout,
    MismatchError,
    NotInitializedError,
    PeerFailureError,
    ReduceOp,
)
from gcurun.runtime.engine.handles import HandleError
from gcurun.runtime.frontend.async_ops import (
    allgather_async,
    allreduce_async,
    allreduce_async_,
    alltoall_async,
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
    reducescatter_async,
    synchronize,
)
from gcurun.runtime.frontend.process_sets import (
    ProcessSet,
    add_process_set,
    global_process_set,
    process_sets,
    remove_process_set,
)
from gcurun.runtime.frontend.state import (
    backend,
    cross_rank,
    cross_size,
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
    shutdown,
    size,
)
from gcurun.runtime.frontend.sync_ops import (
    Adasum,
    Average,
    Max,
    Min,
    Product,
    Sum,
    allgather,
    allgather_object,
    allreduce,
    allreduce_,
    alltoall,
    barrier,
    broadcast,
    broadcast_,
    broadcast_object,
    reducescatter,
)
from gcurun.runtime.frontend.timelines import start_timeline, stop_timeline

__all__ = [
    "Adasum", "ArgumentError", "Average", "CollectiveError", "CollectiveTimeout",
    "HandleError", "Max", "Min", "MismatchError", "NotInitializedError", "PeerFailureError",
    "ProcessSet", "Product", "ReduceOp", "Sum", "add_process_set", "allgather",
    "allgather_async", "allgather_object", "allreduce", "allreduce_", "allreduce_async",
    "allreduce_async_", "alltoall", "alltoall_async", "backend", "barrier", "broadcast",
    "broadcast_", "broadcast_async", "broadcast_async_", "broadcast_object", "cross_rank",
    "cross_size", "global_process_set", "gloo_built", "gloo_enabled", "grouped_allgather",
    "grouped_allgather_async", "grouped_allreduce", "grouped_allreduce_",
    "grouped_allreduce_async", "grouped_allreduce_async_", "grouped_reducescatter",
    "grouped_reducescatter_async", "init", "is_homogeneous", "is_initialized", "join",
    "local_rank", "local_size", "mpi_built", "mpi_enabled", "mpi_threads_supported",
    "nccl_built", "poll", "process_sets", "rank", "reducescatter", "reducescatter_async",
    "remove_process_set", "shutdown", "size", "start_timeline", "stop_timeline",
    "synchronize",
]
