"""A collective as TensorFlow runs it: a call in eager code, two ops in a graph.

Eager code (TF2 without ``tf.function``) hands the tensors' host arrays straight to the
runtime's synchronous call.

In a graph (TF1 sessions, ``tf.function``, Keras' train function) the collective is two
``tf.numpy_function`` ops: an *enqueue* op that submits the arrays to the runtime's
background engine and returns at once with a key, and a *synchronize* op that waits for
that key and returns the results. TensorFlow runs a graph's ops on a thread pool (as
small as the number of cores) in an order that differs between ranks. Enqueueing never
blocks, and the engine matches ops by name across ranks, so the order does not matter
as long as every rank gets to enqueue every tensor it needs: the waits must not take the
pool's threads. Each synchronize op therefore runs inside a one-element ``tf.data``
dataset (``get_single_element``), whose kernel is asynchronous and runs the function on
tf.data's own unbounded threads; a plain blocking op per tensor deadlocks as soon as
each rank's pool is full of waits for tensors the other rank has not enqueued. A graph
op's collective is named after the enqueue op
(``HorovodAllreduce_<input>``), which is the same on every rank that built the same
graph. The synchronize op's results get the static shapes the caller knows, and pass
through a status check that raises a mismatch as ``FailedPreconditionError``
(:mod:`.errors`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

import gcurun.runtime as runtime
from gcurun.errors import CollectiveError
from gcurun.runtime import MismatchError
from gcurun.runtime.frontend import handles
from gcurun.runtime.tensorflow.errors import OK_STATUS, mismatch_status, status_check, tf_error
from gcurun.runtime.tensorflow.tensors import host_array, narrow, to_tensor, widen

# start(arrays, name) -> a runtime handle, or a list of them (their results come as a
# list); now(arrays, name) -> the runtime's result, synchronously.
Start = Callable[[list[np.ndarray], str | None], "int | list[int]"]
Now = Callable[[list[np.ndarray], str | None], Any]
# The runtime's result -> one array per output.
Finish = Callable[[Any], Sequence[Any]]
Shapes = Sequence[tf.TensorShape | Sequence[int | None] | None]



def executing_eagerly() -> bool:
    return tf.executing_eagerly()


def normalize_name(name: str) -> str:
    """``name`` in the characters TensorFlow allows in op names."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def op_base_name(label: str, first: Any, name: str | None) -> str:
    """The graph op name of a collective: the caller's, or ``Horovod<Label>_<input>``."""
    if name is not None:
        return normalize_name(str(name))
    input_name = getattr(first, "name", None) if first is not None else None
    if not input_name or executing_eagerly():
        return f"Horovod{label}"
    return f"Horovod{label}_{normalize_name(input_name)}"


def collective(label: str, inputs: Sequence[tf.Tensor], *, start: Start, now: Now | None,
               finish: Finish, out_dtypes: Sequence[tf.DType], out_shapes: Shapes,
               name: str | None) -> list[tf.Tensor]:
    """Run one collective over ``inputs`` (dense tensors of supported dtypes) and return
    its outputs as tensors of ``out_dtypes``; eagerly at once, or as graph ops."""
    if executing_eagerly():
        return _eager(inputs, start, now, finish, out_dtypes, name)
    return _graph(label, inputs, start, finish, out_dtypes, out_shapes, name)


def _eager(inputs: Sequence[tf.Tensor], start: Start, now: Now | None, finish: Finish,
           out_dtypes: Sequence[tf.DType], name: str | None) -> list[tf.Tensor]:
    arrays = [host_array(t) for t in inputs]
    try:
        result = now(arrays, name) if now is not None else wait(start(arrays, name))
    except CollectiveError as exc:
        raise tf_error(exc) from exc
    return [to_tensor(out, dtype) for out, dtype in zip(finish(result), out_dtypes,
                                                         strict=True)]


def _graph(label: str, inputs: Sequence[tf.Tensor], start: Start, finish: Finish,
           out_dtypes: Sequence[tf.DType], out_shapes: Shapes,
           name: str | None) -> list[tf.Tensor]:
    base = op_base_name(label, inputs[0] if inputs else None, name)
    if _in_xla():
        raise ValueError(f"{base}: gcurun's collectives are Python ops, which XLA cannot "
                         "compile; turn XLA off where they run: model.compile(..., "
                         "jit_compile=False), tf.function(..., jit_compile=False)")
    engine_name: list[str] = []

    def enqueue(*arrays: np.ndarray) -> np.int64:
        staged = [widen(np.asarray(a)) for a in arrays]
        # The runtime's handle keeps the staged arrays alive until the op completes.
        return np.int64(handles.hold(_one(start(staged, engine_name[0])), staged))

    key = tf.numpy_function(enqueue, list(inputs), tf.int64, stateful=True, name=base)
    engine_name.append(key.op.name)
    dtypes = list(out_dtypes)

    def synchronize(key_value: np.ndarray) -> list[Any]:
        try:
            result = runtime.synchronize(int(key_value))
        except MismatchError as exc:
            empty = [np.zeros(0, d.as_numpy_dtype) for d in dtypes]
            return [*empty, np.bytes_(mismatch_status(exc))]
        outs = [narrow(out, d) for out, d in zip(finish(result), dtypes, strict=True)]
        return [*outs, np.bytes_(OK_STATUS)]

    def synchronize_op(key_tensor: tf.Tensor) -> list[tf.Tensor]:
        return tf.numpy_function(synchronize, [key_tensor], [*dtypes, tf.string],
                                 stateful=True, name=f"{base}_synchronize")

    # The wait runs inside a one-element dataset: its kernel waits on tf.data's own
    # threads, leaving the inter-op pool free for other ranks' order of enqueues.
    with tf.name_scope(f"{base}_synchronize"):
        outputs = list(tf.data.Dataset.from_tensors(key).map(synchronize_op)
                       .get_single_element())
    with tf.control_dependencies([status_check(outputs[-1])]):
        results = [tf.identity(out) for out in outputs[:-1]]
    for result, shape in zip(results, out_shapes, strict=True):
        if shape is not None:
            result.set_shape(shape)
    return results


def wait(work: int | list[int]) -> Any:
    """The result of a runtime handle, or the list of results of several (all are
    waited for before the first error is raised, so that none is left pending)."""
    return runtime.synchronize(_one(work))


def _one(work: int | list[int]) -> int:
    """One handle of the runtime for what ``start`` returned."""
    return work if isinstance(work, int) else handles.combine(work)


def _in_xla() -> bool:
    """Whether the graph being built will be compiled by XLA (``jit_compile=True``)."""
    try:
        from tensorflow.python.ops import control_flow_util
    except ImportError:                  # pragma: no cover - TensorFlow moved it
        return False
    return bool(control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()))
