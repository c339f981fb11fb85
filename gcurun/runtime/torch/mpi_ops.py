"""The collectives on torch tensors, with Horovod's names, arguments and results, under
Horovod's module name (``horovod.torch.mpi_ops``).

Every ``*_async`` function stages its tensors (:mod:`.tensors`), hands the host arrays to
the runtime (the engine of the job or of a process set) and returns an integer handle for
:func:`poll` and :func:`synchronize`. The synchronous forms synchronize at once; the
out-of-place ones are autograd functions, so gradients flow through them. They live by
kind: :mod:`.allreduce_ops`, :mod:`.gather_scatter_ops` (allgather, alltoall,
reducescatter), :mod:`.broadcast_ops`, :mod:`.barrier_join`.
"""

from __future__ import annotations

from gcurun.runtime import Adasum, Average, Max, Min, Product, Sum
from gcurun.runtime.torch.allreduce_ops import (
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
from gcurun.runtime.torch.broadcast_ops import (
    broadcast,
    broadcast_,
    broadcast_async,
    broadcast_async_,
)
from gcurun.runtime.torch.gather_scatter_ops import (
    allgather,
    allgather_async,
    alltoall,
    alltoall_async,
    grouped_allgather,
    grouped_allgather_async,
    grouped_reducescatter,
    grouped_reducescatter_async,
    reducescatter,
    reducescatter_async,
)
from gcurun.runtime.torch.handles import poll, synchronize

__all__ = [
    "Adasum", "Average", "Max", "Min", "Product", "Sum", "allgather", "allgather_async",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_", "alltoall",
    "alltoall_async", "barrier", "broadcast", "broadcast_", "broadcast_async",
    "broadcast_async_", "grouped_allgather", "grouped_allgather_async", "grouped_allreduce",
    "grouped_allreduce_", "grouped_allreduce_async", "grouped_allreduce_async_",
    "grouped_reducescatter", "grouped_reducescatter_async", "join", "poll", "reducescatter",
    "reducescatter_async", "sparse_allreduce_async", "synchronize",
]
