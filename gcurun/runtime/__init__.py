"""The training script's side of gcurun: ``import gcurun.runtime as hvd``.

Horovod's basics and collectives on numpy arrays (or any object with the buffer protocol)
over the ``mpi``, ``tcp`` or single-process backend, chosen by :func:`init`.

Names are loaded on first use: the launcher imports ``gcurun.runtime.rendezvous`` and
must not pay for numpy, and neither should a rank until it calls the runtime.
"""

from __future__ import annotations

import importlib
from typing import Any

# Public name -> the module that defines it.
_EXPORTS = {
    "Adasum": "gcurun.runtime.ops",
    "allgather": "gcurun.runtime.ops",
    "allgather_object": "gcurun.runtime.ops",
    "allreduce": "gcurun.runtime.ops",
    "allreduce_": "gcurun.runtime.ops",
    "alltoall": "gcurun.runtime.ops",
    "ArgumentError": "gcurun.runtime.api",
    "Average": "gcurun.runtime.ops",
    "backend": "gcurun.runtime.basics",
    "barrier": "gcurun.runtime.ops",
    "broadcast": "gcurun.runtime.ops",
    "broadcast_": "gcurun.runtime.ops",
    "broadcast_object": "gcurun.runtime.ops",
    "CollectiveError": "gcurun.errors",
    "CollectiveTimeout": "gcurun.runtime.api",
    "cross_rank": "gcurun.runtime.basics",
    "cross_size": "gcurun.runtime.basics",
    "gloo_built": "gcurun.runtime.basics",
    "gloo_enabled": "gcurun.runtime.basics",
    "init": "gcurun.runtime.basics",
    "is_homogeneous": "gcurun.runtime.basics",
    "is_initialized": "gcurun.runtime.basics",
    "local_rank": "gcurun.runtime.basics",
    "local_size": "gcurun.runtime.basics",
    "Max": "gcurun.runtime.ops",
    "Min": "gcurun.runtime.ops",
    "MismatchError": "gcurun.runtime.api",
    "mpi_built": "gcurun.runtime.basics",
    "mpi_enabled": "gcurun.runtime.basics",
    "mpi_threads_supported": "gcurun.runtime.basics",
    "nccl_built": "gcurun.runtime.basics",
    "NotInitializedError": "gcurun.runtime.api",
    "PeerFailureError": "gcurun.runtime.api",
    "Product": "gcurun.runtime.ops",
    "rank": "gcurun.runtime.basics",
    "ReduceOp": "gcurun.runtime.api",
    "reducescatter": "gcurun.runtime.ops",
    "shutdown": "gcurun.runtime.basics",
    "size": "gcurun.runtime.basics",
    "Sum": "gcurun.runtime.ops",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    try:
        module = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'gcurun.runtime' has no attribute '{name}'") from None
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
