"""allreduce and grouped_allreduce as Horovod's TensorFlow API has them: dense tensors
and ``tf.IndexedSlices``, with compression.

An IndexedSlices (the gradient of an embedding lookup, say) is not reduced densely: its
values and indices are gathered from every rank, which represents the sum (duplicate
indices add up when the slices are applied); Average divides the gathered values by the
number of ranks (true division: integer values become float64, as in Horovod). Only Sum
and Average make sense for such a gather, and no scaling.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from gcurun.runtime.frontend.arguments import reduce_op_of
from gcurun.runtime.tensorflow.compression import Compression, Compressor
from gcurun.runtime.tensorflow.mpi_ops import (
    Adasum,
    Average,
    Sum,
    _grouped_allreduce,
    grouped_allgather,
)
from gcurun.runtime.tensorflow.process_sets import global_process_set, set_size


def allreduce(tensor: Any, average: bool | None = None, device_dense: str = "",
              device_sparse: str = "", compression: type[Compressor] = Compression.none,
              op: Any = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
              name: str | None = None, process_set: Any = global_process_set,
              ignore_name_scope: bool = False) -> Any:
    """The reduction of ``tensor`` (a tensor, variable or IndexedSlices) over the ranks,
    by default the average; the same shape and dtype. ``compression`` shrinks what is
    sent; ``prescale_factor`` multiplies each input, ``postscale_factor`` the result.

    Raises NotImplementedError for IndexedSlices with an op other than Sum or Average,
    or with scale factors."""
    return grouped_allreduce([tensor], average, device_dense, device_sparse, compression,
                             op, prescale_factor, postscale_factor, process_set,
                             ignore_name_scope, name=name)[0]


def grouped_allreduce(tensors: Sequence[Any], average: bool | None = None,
                      device_dense: str = "", device_sparse: str = "",
                      compression: type[Compressor] = Compression.none, op: Any = None,
                      prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                      process_set: Any = global_process_set, ignore_name_scope: bool = False,
                      name: str | None = None) -> list[Any]:
    """:func:`allreduce` of every tensor of a list: the dense ones as one op (one
    negotiation, fused), the IndexedSlices gathered together."""
    op = reduce_op_of(op, average, warn=True)
    tensors = list(tensors)
    sparse = [i for i, t in enumerate(tensors) if isinstance(t, tf.IndexedSlices)]
    dense = [i for i, t in enumerate(tensors) if not isinstance(t, tf.IndexedSlices)]
    if sparse:
        _check_sparse(op, prescale_factor, postscale_factor)
    results: list[Any] = [None] * len(tensors)
    if dense:
        with tf.device(device_dense):
            pairs = [compression.compress(tf.convert_to_tensor(tensors[i])) for i in dense]
            reduced = _grouped_allreduce([t for t, _ in pairs], name, op, prescale_factor,
                                         postscale_factor, process_set)
        for i, value, (_, ctx) in zip(dense, reduced, pairs, strict=True):
            results[i] = compression.decompress(value, ctx)
    if sparse:
        with tf.device(device_sparse):
            gathered = _gather_slices([tensors[i] for i in sparse], op, process_set,
                                      None if name is None else f"{name}.sparse")
        for i, value in zip(sparse, gathered, strict=True):
            results[i] = value
    return results


def _check_sparse(op: Any, prescale: float, postscale: float) -> None:
    if op == Adasum:
        raise NotImplementedError("op=Adasum cannot reduce tf.IndexedSlices; pass "
                                  "sparse_as_dense=True to reduce them densely")
    if op not in (Sum, Average):
        raise NotImplementedError(f"op={op!r} cannot reduce tf.IndexedSlices, which are "
                                  "gathered (Sum or Average); convert them with "
                                  "tf.convert_to_tensor first")
    if prescale != 1.0 or postscale != 1.0:
        raise NotImplementedError("prescale_factor and postscale_factor do not apply to "
                                  "tf.IndexedSlices; scale the values yourself")


def _gather_slices(slices: list[tf.IndexedSlices], op: Any, process_set: Any,
                   name: str | None) -> list[tf.IndexedSlices]:
    """Every rank's values and indices of each IndexedSlices, in one gather."""
    pieces = [piece for s in slices for piece in (s.values, s.indices)]
    gathered = grouped_allgather(pieces, name, process_set)
    results = []
    for i, s in enumerate(slices):
        values, indices = gathered[2 * i], gathered[2 * i + 1]
        if op == Average:
            # True division, as Horovod: integer values come back as float64.
            values = values / tf.cast(set_size(process_set), values.dtype)
        results.append(tf.IndexedSlices(values, indices, dense_shape=s.dense_shape))
    return results
