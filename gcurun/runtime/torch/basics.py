"""init/shutdown and the who-am-I queries of ``gcurun.runtime.torch``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gcurun.runtime as runtime
from gcurun.runtime.torch.process_sets import ProcessSet, add_process_set

rank = runtime.rank
size = runtime.size
local_rank = runtime.local_rank
local_size = runtime.local_size
cross_rank = runtime.cross_rank
cross_size = runtime.cross_size
is_initialized = runtime.is_initialized
is_homogeneous = runtime.is_homogeneous
mpi_threads_supported = runtime.mpi_threads_supported
mpi_built = runtime.mpi_built
mpi_enabled = runtime.mpi_enabled
gloo_built = runtime.gloo_built
gloo_enabled = runtime.gloo_enabled
nccl_built = runtime.nccl_built
start_timeline = runtime.start_timeline
stop_timeline = runtime.stop_timeline


def init(comm: Any = None,
         process_sets: str | Sequence[ProcessSet | Sequence[int]] | None = None) -> None:
    """Join the job (see ``gcurun.runtime.init``; ``comm`` is an mpi4py communicator or a
    list of ranks). ``process_sets`` registers those sets at once, as
    :func:`add_process_set` would; ``"dynamic"`` is accepted (sets can always be added
    later). A second call without ``shutdown()`` does nothing."""
    if runtime.is_initialized():
        return
    runtime.init(comm)
    _register(process_sets)


def _register(sets: str | Sequence[ProcessSet | Sequence[int]] | None) -> None:
    if sets is None or sets == "dynamic":
        return
    if isinstance(sets, str):
        raise ValueError(f"process_sets={sets!r}: pass a list of ProcessSet objects (or "
                         "rank lists), or 'dynamic'")
    for process_set in sets:
        add_process_set(process_set)


def shutdown() -> None:
    """Leave the job: close process sets, forget pending handles, release connections.
    ``init()`` may join again afterwards."""
    runtime.shutdown()


def ddl_built() -> bool:
    return False


def ccl_built() -> bool:
    return False


def cuda_built() -> bool:
    """False: tensors on accelerators are staged through host memory."""
    return False


def rocm_built() -> bool:
    return False
