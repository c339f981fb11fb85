"""init/shutdown, the who-am-I queries (also as TensorFlow ops) and what is built."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

import gcurun.runtime as runtime
from gcurun.runtime.tensorflow.process_sets import add_process_set, global_process_set

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


def init(comm: Any = None, process_sets: str | Sequence[Any] | None = None) -> None:
    """Join the job (see ``gcurun.runtime.init``; ``comm`` is an mpi4py communicator or
    a list of ranks). ``process_sets`` registers those sets at once, as
    ``add_process_set`` would; ``"dynamic"`` is accepted. A second call without
    ``shutdown()`` does nothing."""
    if runtime.is_initialized():
        return
    runtime.init(comm)
    if process_sets is None or process_sets == "dynamic":
        return
    if isinstance(process_sets, str):
        raise ValueError(f"process_sets={process_sets!r}: pass a list of ProcessSet objects "
                         "(or rank lists), or 'dynamic'")
    sets: Sequence[Any] = process_sets
    for process_set in sets:
        add_process_set(process_set)


def shutdown() -> None:
    """Leave the job and release connections; ``init()`` may join again afterwards."""
    runtime.shutdown()


def _query_op(query: Any, name: str) -> tf.Tensor:
    """A scalar int32 op holding ``query()``: eagerly the value, in a graph an op that
    asks when it runs (so a graph may be built before ``init``)."""
    if tf.executing_eagerly():
        return tf.constant(query(), tf.int32)
    value = tf.numpy_function(lambda: np.int32(query()), [], tf.int32, stateful=False,
                              name=name)
    value.set_shape([])
    return value


def rank_op(name: str | None = None) -> tf.Tensor:
    """This process's rank, as a tensor."""
    return _query_op(runtime.rank, name or "HorovodRank")


def local_rank_op(name: str | None = None) -> tf.Tensor:
    return _query_op(runtime.local_rank, name or "HorovodLocalRank")


def size_op(process_set_id: int = 0, name: str | None = None) -> tf.Tensor:
    """The number of ranks of the job (or of the process set of that id), as a tensor."""
    return _query_op(lambda: _set_of(process_set_id).size() if process_set_id else
                     runtime.size(), name or "HorovodSize")


def local_size_op(name: str | None = None) -> tf.Tensor:
    return _query_op(runtime.local_size, name or "HorovodLocalSize")


def process_set_included_op(process_set_id: int = 0, name: str | None = None) -> tf.Tensor:
    """1 when this rank belongs to the process set of that id (0: every rank), else 0."""
    def included() -> int:
        if process_set_id == global_process_set.process_set_id:
            return 1
        return int(bool(_set_of(process_set_id).included()))

    return _query_op(included, name or "HorovodProcessSetIncluded")


def _set_of(process_set_id: int) -> Any:
    """The registered process set of that id."""
    found = [s for s in runtime.process_sets() if s.process_set_id == process_set_id]
    if not found:
        raise ValueError(f"process_set_id={process_set_id} is not a registered process set; "
                         "register it with add_process_set() on every rank first")
    return found[0]


def ddl_built() -> bool:
    return False


def ccl_built() -> bool:
    return False


def cuda_built() -> bool:
    """False: tensors on accelerators are staged through host memory."""
    return False


def rocm_built() -> bool:
    return False
