"""The training script's side of gcurun: ``import gcurun.runtime as hvd``.

Horovod's basics and collectives on numpy arrays (or any object with the buffer protocol)
over the ``mpi``, ``tcp`` or single-process backend, chosen by :func:`init`.

The names below load on first use, so that the launcher can import
``gcurun.rendezvous`` without paying for numpy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gcurun.errors import CollectiveError
    from gcurun.runtime.api import (
        ArgumentError,
        CollectiveTimeout,
        MismatchError,
        NotInitializedError,
        PeerFailureError,
        ReduceOp,
    )
    from gcurun.runtime.async_ops import (
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
    from gcurun.runtime.basics import (
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
    from gcurun.runtime.engine import HandleError
    from gcurun.runtime.ops import (
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

_HOMES = {
    "gcurun.errors": ("CollectiveError",),
    "gcurun.runtime.api": ("ArgumentError", "CollectiveTimeout", "MismatchError",
                           "NotInitializedError", "PeerFailureError", "ReduceOp"),
    "gcurun.runtime.async_ops": ("allgather_async", "allreduce_async", "allreduce_async_",
                                 "alltoall_async", "broadcast_async", "broadcast_async_",
                                 "grouped_allgather", "grouped_allgather_async",
                                 "grouped_allreduce", "grouped_allreduce_",
                                 "grouped_allreduce_async", "grouped_allreduce_async_",
                                 "grouped_reducescatter", "grouped_reducescatter_async",
                                 "join", "poll", "reducescatter_async", "synchronize"),
    "gcurun.runtime.engine": ("HandleError",),
    "gcurun.runtime.basics": ("backend", "cross_rank", "cross_size", "gloo_built",
                              "gloo_enabled", "init", "is_homogeneous", "is_initialized",
                              "local_rank", "local_size", "mpi_built", "mpi_enabled",
                              "mpi_threads_supported", "nccl_built", "rank", "shutdown",
                              "size"),
    "gcurun.runtime.ops": ("Adasum", "Average", "Max", "Min", "Product", "Sum", "allgather",
                           "allgather_object", "allreduce", "allreduce_", "alltoall",
                           "barrier", "broadcast", "broadcast_", "broadcast_object",
                           "reducescatter"),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}

__all__ = [
    "HandleError", "allgather_async", "allreduce_async", "allreduce_async_", "alltoall_async",
    "broadcast_async", "broadcast_async_", "grouped_allgather", "grouped_allgather_async",
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async",
    "grouped_allreduce_async_", "grouped_reducescatter", "grouped_reducescatter_async",
    "join", "poll", "reducescatter_async", "synchronize",
    "Adasum", "ArgumentError", "Average", "CollectiveError", "CollectiveTimeout", "Max",
    "Min", "MismatchError", "NotInitializedError", "PeerFailureError", "Product", "ReduceOp",
    "Sum", "allgather", "allgather_object", "allreduce", "allreduce_", "alltoall", "backend",
    "barrier", "broadcast", "broadcast_", "broadcast_object", "cross_rank", "cross_size",
    "gloo_built", "gloo_enabled", "init", "is_homogeneous", "is_initialized", "local_rank",
    "local_size", "mpi_built", "mpi_enabled", "mpi_threads_supported", "nccl_built", "rank",
    "reducescatter", "shutdown", "size",
]


def __getattr__(name: str) -> Any:
    module = _HOME_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'gcurun.runtime' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value        # later lookups are plain module attributes
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
