"""The collectives on dense tensors, with Horovod's names, arguments and gradients.

Each runs through :func:`.collective_ops.collective`: at once in eager code, as an
enqueue op and a synchronize op in graphs. Out-of-place collectives are differentiable
(``tf.GradientTape`` and ``tf.gradients``), with Horovod's gradients: an allreduce's
gradient is the same allreduce of the gradient; a gather's, the average of the gathered
gradient, each rank taking back its rows; a broadcast's, the average on the root and
zeros elsewhere; an alltoall's, the alltoall back; a reducescatter's, the gather of the
gradient (times the number of ranks for Sum, as Horovod does).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

import gcurun.runtime as runtime
from gcurun.runtime import ReduceOp
from gcurun.runtime.tensorflow.collective_ops import collective, executing_eagerly
from gcurun.runtime.tensorflow.errors import tf_error
from gcurun.runtime.tensorflow.process_sets import (
    global_process_set,
    set_kwargs,
    set_rank,
    set_size,
)
from gcurun.runtime.tensorflow.tensors import as_tensor, as_tensors

Average = ReduceOp.AVERAGE
Sum = ReduceOp.SUM
Adasum = ReduceOp.ADASUM
Min = ReduceOp.MIN
Max = ReduceOp.MAX
Product = ReduceOp.PRODUCT

Tensors = Sequence[Any]


def _group_names(name: str | None, count: int) -> list[str | None]:
    return [None if name is None else f"{name}.{i}" for i in range(count)]


# -- allreduce ---------------------------------------------------------------------------


def _allreduce(tensor: Any, name: str | None = None, op: Any = Sum,
               prescale_factor: float = 1.0, postscale_factor: float = 1.0,
               process_set: Any = global_process_set,
               ignore_name_scope: bool = False) -> tf.Tensor:
    """The reduction of a dense ``tensor`` over the ranks (default: the sum), a tensor of
    the same shape and dtype; differentiable."""
    return _grouped_allreduce([tensor], name, op, prescale_factor, postscale_factor,
                              process_set)[0]


def _grouped_allreduce(tensors: Tensors, name: str | None = None, op: Any = Sum,
                       prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                       process_set: Any = global_process_set,
                       ignore_name_scope: bool = False) -> list[tf.Tensor]:
    """:func:`_allreduce` of every tensor of a list, as one op (one negotiation, fused)."""
    inputs = as_tensors(tensors, "allreduce")
    if not inputs:
        return []
    kwargs = set_kwargs(process_set)
    scale: dict[str, Any] = {"prescale_factor": prescale_factor,
                             "postscale_factor": postscale_factor, **kwargs}

    def start(arrays: list[np.ndarray], engine_name: str | None) -> int:
        return runtime.grouped_allreduce_async(arrays, name=engine_name, op=op, **scale)

    def now(arrays: list[np.ndarray], engine_name: str | None) -> Any:
        if len(arrays) == 1:
            return [runtime.allreduce(arrays[0], name=engine_name, op=op, **scale)]
        return runtime.grouped_allreduce(arrays, name=engine_name, op=op, **scale)

    @tf.custom_gradient
    def reduce(*xs: tf.Tensor) -> Any:
        outs = collective("Allreduce", xs, start=start, now=now, finish=list,
                          out_dtypes=[x.dtype for x in xs], out_shapes=[x.shape for x in xs],
                          name=name)

        def grad(*dys: tf.Tensor) -> list[tf.Tensor]:
            return _grouped_allreduce(_dense_grads(dys, xs), None, op, prescale_factor,
                                      postscale_factor, process_set)

        return outs, grad

    return list(reduce(*inputs))


def _dense_grads(grads: Sequence[Any], like: Sequence[tf.Tensor]) -> list[tf.Tensor]:
    """Upstream gradients with zeros for outputs that had none."""
    return [tf.zeros_like(x) if g is None else tf.convert_to_tensor(g)
            for g, x in zip(grads, like, strict=True)]


# -- allgather ---------------------------------------------------------------------------


def allgather(tensor: Any, name: str | None = None, process_set: Any = global_process_set,
              ignore_name_scope: bool = False) -> tf.Tensor:
    """Every rank's ``tensor`` concatenated along the first dimension, in rank order;
    the first dimension may differ between ranks. Differentiable."""
    return grouped_allgather([tensor], name, process_set)[0]


def grouped_allgather(tensors: Tensors, name: str | None = None,
                      process_set: Any = global_process_set,
                      ignore_name_scope: bool = False) -> list[tf.Tensor]:
    """:func:`allgather` of every tensor of a list, as one op."""
    inputs = as_tensors(tensors, "allgather")
    if not inputs:
        return []
    for x in inputs:
        if x.shape.rank == 0:
            raise ValueError(f"allgather: {x.name if not executing_eagerly() else 'a'} "
                             "scalar tensor has no first dimension to gather along; "
                             "reshape it to [1]")
    kwargs = set_kwargs(process_set)

    def start(arrays: list[np.ndarray], engine_name: str | None) -> int:
        return runtime.grouped_allgather_async(arrays, name=engine_name, **kwargs)

    def now(arrays: list[np.ndarray], engine_name: str | None) -> Any:
        if len(arrays) == 1:
            return [runtime.allgather(arrays[0], name=engine_name, **kwargs)]
        return runtime.grouped_allgather(arrays, name=engine_name, **kwargs)

    @tf.custom_gradient
    def gather(*xs: tf.Tensor) -> Any:
        shapes = [tf.TensorShape([None]).concatenate(x.shape[1:]) for x in xs]
        outs = collective("Allgather", xs, start=start, now=now, finish=list,
                          out_dtypes=[x.dtype for x in xs], out_shapes=shapes, name=name)

        def grad(*dys: tf.Tensor) -> list[tf.Tensor]:
            return _allgather_grads(_dense_grads(dys, outs), xs, process_set)

        return outs, grad

    return list(gather(*inputs))


def _allgather_grads(grads: list[tf.Tensor], xs: Sequence[tf.Tensor],
                     process_set: Any) -> list[tf.Tensor]:
    """Each rank's rows of the averaged gathered gradients."""
    averaged = _grouped_allreduce(grads, None, Average, 1.0, 1.0, process_set)
    rows = tf.stack([tf.shape(x, out_type=tf.int64)[0] for x in xs])
    every = grouped_allgather([tf.reshape(rows, [1, -1])], None, process_set)[0]
    before = tf.reduce_sum(every[:set_rank(process_set)], axis=0)
    result = []
    for i, (grad, x) in enumerate(zip(averaged, xs, strict=True)):
        rank = tf.rank(grad)
        begin = tf.concat([before[i:i + 1], tf.zeros([rank - 1], tf.int64)], 0)
        size = tf.concat([rows[i:i + 1], -tf.ones([rank - 1], tf.int64)], 0)
        piece = tf.slice(grad, begin, size)
        piece.set_shape(x.shape)
        result.append(piece)
    return result


# -- broadcast ---------------------------------------------------------------------------


def broadcast(tensor: Any, root_rank: int, name: str | None = None,
              process_set: Any = global_process_set,
              ignore_name_scope: bool = False) -> tf.Tensor:
    """``root_rank``'s ``tensor`` on every rank (a new tensor). Differentiable."""
    return grouped_broadcast([tensor], root_rank, name, process_set)[0]


def grouped_broadcast(tensors: Tensors, root_rank: int, name: str | None = None,
                      process_set: Any = global_process_set) -> list[tf.Tensor]:
    """:func:`broadcast` of every tensor of a list, in one pair of graph ops."""
    inputs = as_tensors(tensors, "broadcast")
    if not inputs:
        return []
    kwargs = set_kwargs(process_set)

    def start(arrays: list[np.ndarray], engine_name: str | None) -> list[int]:
        return [runtime.broadcast_async(a, root_rank, name=n, **kwargs)
                for a, n in zip(arrays, _group_names(engine_name, len(arrays)), strict=True)]

    now = None
    if len(inputs) == 1:
        def now(arrays: list[np.ndarray], engine_name: str | None) -> Any:
            return [runtime.broadcast(arrays[0], root_rank, name=engine_name, **kwargs)]

    @tf.custom_gradient
    def bcast(*xs: tf.Tensor) -> Any:
        outs = collective("Broadcast", xs, start=start, now=now, finish=list,
                          out_dtypes=[x.dtype for x in xs], out_shapes=[x.shape for x in xs],
                          name=name)

        def grad(*dys: tf.Tensor) -> list[tf.Tensor]:
            reduced = _grouped_allreduce(_dense_grads(dys, xs), None, Average, 1.0, 1.0,
                                         process_set)
            if runtime.rank() == root_rank:
                return reduced
            # Zeros that still wait for the reduction: every rank must run it, and a
            # graph would otherwise drop it (zeros of a known shape need no input).
            with tf.control_dependencies(reduced):
                return [tf.zeros_like(r) for r in reduced]

        return outs, grad

    return list(bcast(*inputs))


def broadcast_(variables: Any, root_rank: int, name: str | None = None,
               process_set: Any = global_process_set) -> Any:
    """Copy ``root_rank``'s value into each variable, in place. Eagerly, returns the
    variables; in a graph, the values assigned (running them does the broadcast)."""
    single = not isinstance(variables, (list, tuple))
    variables = [variables] if single else list(variables)
    values = grouped_broadcast([v.read_value() if hasattr(v, "read_value") else v
                                for v in variables], root_rank, name, process_set)
    # (No annotated name here: autograph, converting this inside a tf.function step,
    # warns about one and converts nothing.)
    if executing_eagerly():
        for var, value in zip(variables, values, strict=True):
            var.assign(value)
        results = variables
    else:
        results = [_assign(var, value) for var, value in zip(variables, values, strict=True)]
    return results[0] if single else results


def _assign(var: Any, value: tf.Tensor) -> tf.Tensor:
    """Assign ``value`` to ``var`` in a graph; the value read back, after the assignment.

    A Keras 3 variable is no ``tf.Variable``: its ``value`` is the ``tf.Variable`` that
    holds it (in a ``tf.function`` step too, where Horovod's TF2 loop broadcasts
    ``model.variables`` and ``opt.variables``)."""
    if not isinstance(var, tf.Variable) and isinstance(getattr(var, "value", None),
                                                       tf.Variable):
        var = var.value
    if isinstance(var, tf.Variable) and hasattr(var, "handle"):    # resource variable
        return var.assign(tf.cast(value, var.dtype), read_value=True)
    return tf.compat.v1.assign(var, value)


# -- alltoall ----------------------------------------------------------------------------


def alltoall(tensor: Any, splits: Any = None, name: str | None = None,
             process_set: Any = global_process_set, ignore_name_scope: bool = False) -> Any:
    """Rank r sends its rows ``splits[j]`` (consecutive, in rank order) to rank j;
    without splits the first dimension is divided evenly. Returns the rows received
    from every rank in rank order; with ``splits``, also how many came from each (an
    int32 tensor). Differentiable."""
    x = as_tensor(tensor, "alltoall")
    if x.shape.rank == 0:
        raise ValueError("alltoall: a scalar tensor has no rows to send; reshape it to [1]")
    given = splits is not None
    split_tensor = tf.zeros([0], tf.int32) if splits is None else \
        tf.cast(tf.reshape(tf.convert_to_tensor(splits), [-1]), tf.int32)
    kwargs = set_kwargs(process_set)

    def start(arrays: list[np.ndarray], engine_name: str | None) -> int:
        return runtime.alltoall_async(arrays[0], arrays[1] if given else None,
                                      name=engine_name, **kwargs)

    def now(arrays: list[np.ndarray], engine_name: str | None) -> Any:
        return runtime.alltoall(arrays[0], arrays[1] if given else None, name=engine_name,
                                **kwargs)

    def finish(result: Any) -> list[Any]:
        rows, received = result
        return [rows, np.asarray(received, np.int32)]

    @tf.custom_gradient
    def exchange(x: tf.Tensor, split_tensor: tf.Tensor) -> Any:
        shape = tf.TensorShape([None]).concatenate(x.shape[1:])
        rows, received = collective("Alltoall", [x, split_tensor], start=start, now=now,
                                    finish=finish, out_dtypes=[x.dtype, tf.int32],
                                    out_shapes=[shape, [None]], name=name)

        def grad(dy: Any, _unused: Any = None) -> tuple[Any, None]:
            dy = tf.zeros_like(rows) if dy is None else dy
            back, _ = alltoall(dy, received, None, process_set)
            return back, None

        return (rows, received), grad

    rows, received = exchange(x, split_tensor)
    return (rows, received) if given else rows


# -- reducescatter -----------------------------------------------------------------------


def reducescatter(tensor: Any, name: str | None = None, op: Any = Average,
                  process_set: Any = global_process_set, prescale_factor: float = 1.0,
                  postscale_factor: float = 1.0, ignore_name_scope: bool = False) -> tf.Tensor:
    """This rank's share of the reduction of ``tensor`` (default: the average): the
    first dimension split as evenly as possible, lower ranks taking one row more."""
    return grouped_reducescatter([tensor], name, op, process_set, prescale_factor,
                                 postscale_factor)[0]


def grouped_reducescatter(tensors: Tensors, name: str | None = None, op: Any = Average,
                          process_set: Any = global_process_set,
                          prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                          ignore_name_scope: bool = False) -> list[tf.Tensor]:
    """:func:`reducescatter` of every tensor of a list, as one op."""
    inputs = as_tensors(tensors, "reducescatter")
    if not inputs:
        return []
    kwargs = set_kwargs(process_set)
    scale: dict[str, Any] = {"prescale_factor": prescale_factor,
                             "postscale_factor": postscale_factor, **kwargs}

    def start(arrays: list[np.ndarray], engine_name: str | None) -> int:
        return runtime.grouped_reducescatter_async(arrays, name=engine_name, op=op, **scale)

    def now(arrays: list[np.ndarray], engine_name: str | None) -> Any:
        if len(arrays) == 1:
            return [runtime.reducescatter(arrays[0], name=engine_name, op=op, **scale)]
        return runtime.grouped_reducescatter(arrays, name=engine_name, op=op, **scale)

    @tf.custom_gradient
    def scatter(*xs: tf.Tensor) -> Any:
        shapes = [_share_shape(x.shape, process_set) for x in xs]
        outs = collective("Reducescatter", xs, start=start, now=now, finish=list,
                          out_dtypes=[x.dtype for x in xs], out_shapes=shapes, name=name)

        def grad(*dys: tf.Tensor) -> list[tf.Tensor]:
            gathered = grouped_allgather(_dense_grads(dys, outs), None, process_set)
            factor = prescale_factor * postscale_factor
            if op == Sum:
                factor *= set_size(process_set)
            return [g if factor == 1.0 else g * tf.cast(factor, g.dtype) for g in gathered]

        return outs, grad

    return list(scatter(*inputs))


def _share_shape(shape: tf.TensorShape, process_set: Any) -> tf.TensorShape | None:
    """The static shape of this rank's share of a tensor of ``shape``."""
    if shape.rank is None or shape.rank == 0:
        return None
    rows = shape[0]
    if rows is None or not runtime.is_initialized():
        return tf.TensorShape([None]).concatenate(shape[1:])
    size, rank = set_size(process_set), set_rank(process_set)
    return tf.TensorShape([rows // size + (1 if rank < rows % size else 0)]).concatenate(
        shape[1:])


# -- barrier and join --------------------------------------------------------------------


def barrier(process_set: Any = global_process_set, name: str | None = None) -> Any:
    """Wait until every rank (of ``process_set``) has entered the barrier. Eagerly this
    returns once they have; in a graph it returns the op that does so."""
    kwargs = set_kwargs(process_set)
    if executing_eagerly():
        _run_blocking(lambda: runtime.barrier(**kwargs))
        return None

    def wait() -> np.int32:
        runtime.barrier(**kwargs)
        return np.int32(0)

    return tf.numpy_function(wait, [], tf.int32, stateful=True, name=name or "HorovodBarrier")


def join(name: str | None = None) -> tf.Tensor:
    """This rank has no more data: until every rank has joined it takes part in the
    others' collectives with neutral data. Returns (a tensor of) the rank that joined
    last."""
    if executing_eagerly():
        return tf.constant(_run_blocking(runtime.join), tf.int32)

    def wait() -> np.int32:
        return np.int32(runtime.join())

    result = tf.numpy_function(wait, [], tf.int32, stateful=True, name=name or "HorovodJoin")
    result.set_shape([])
    return result


def _run_blocking(fn: Any) -> Any:
    try:
        return fn()
    except runtime.CollectiveError as exc:
        raise tf_error(exc) from exc
