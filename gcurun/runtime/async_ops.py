"""The asynchronous collectives (Horovod's ``*_async`` functions, ``poll``,
``synchronize``, the grouped forms and ``join``), and the communicator through which the
synchronous ones reach the same engine.

Every function returns at once with an integer handle; ``synchronize(handle)`` waits and
returns the result or raises the op's error (a :class:`CollectiveError`). Names with a
trailing underscore write the result into the given array, which must stay alive and
unmoved until then; the input of the others must stay unchanged until then.

Arguments are checked here, on the calling thread, but a bad argument does not raise
here: it travels with the op, so that every rank raises the same error for it.
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from typing import Any

import numpy as np

from gcurun.runtime import basics
from gcurun.runtime.api import NotInitializedError, ReduceOp
from gcurun.runtime.arguments import dtype_error, reduce_error, reduce_op, rows_error, send_counts
from gcurun.runtime.controller import QuickPlan
from gcurun.runtime.dtypes import as_array, flat_contiguous
from gcurun.runtime.engine import Engine
from gcurun.runtime.requests import Op, OpKind


def _engine(what: str) -> Engine:
    state = basics._state
    if state is None or state.engine is None:
        raise NotInitializedError(what)
    return state.engine


def _op(op: Any, average: bool | None) -> Any:
    if op is not None and average is not None:
        raise ValueError("pass either op or the older average flag, not both")
    if average is not None:
        return ReduceOp.AVERAGE if average else ReduceOp.SUM
    return ReduceOp.AVERAGE if op is None else op


def _name(engine: Engine, name: str | None, kind: OpKind) -> str:
    return engine.auto_name(kind.label) if name is None else str(name)


def _writable(arr: np.ndarray, what: str) -> str | None:
    if arr.flags.writeable:
        return None
    return f"{what} writes its result into the tensor, which is read-only; pass a writable one"


# -- building ops (on the calling thread) -------------------------------------------------


def allreduce_op(engine: Engine, tensor: Any, op: Any, prescale: float, postscale: float,
                 name: str | None, inplace: bool, auto: bool = False) -> Op:
    arr = as_array(tensor)
    rop, error = reduce_op(op)
    error = error or reduce_error(arr, rop, prescale, postscale)
    if inplace:
        error = error or _writable(arr, "allreduce_")
    return Op(OpKind.ALLREDUCE, _name(engine, name, OpKind.ALLREDUCE), arr,
              None if error else flat_contiguous(arr), inplace=inplace, rop=int(rop),
              prescale=prescale, postscale=postscale, error=error,
              auto=auto or name is None)


def reducescatter_op(engine: Engine, tensor: Any, op: Any, prescale: float,
                     postscale: float, name: str | None, auto: bool = False) -> Op:
    arr = as_array(tensor)
    rop, error = reduce_op(op)
    error = error or reduce_error(arr, rop, prescale, postscale) or rows_error(arr)
    return Op(OpKind.REDUCESCATTER, _name(engine, name, OpKind.REDUCESCATTER), arr,
              None if error else flat_contiguous(arr), rop=int(rop), prescale=prescale,
              postscale=postscale, error=error, auto=auto or name is None)


def allgather_op(engine: Engine, tensor: Any, name: str | None, auto: bool = False) -> Op:
    arr = as_array(tensor)
    error = dtype_error(arr) or rows_error(arr)
    return Op(OpKind.ALLGATHER, _name(engine, name, OpKind.ALLGATHER), arr,
              None if error else flat_contiguous(arr), error=error,
              auto=auto or name is None)


def broadcast_op(engine: Engine, tensor: Any, root_rank: Any, name: str | None,
                 inplace: bool) -> Op:
    arr = as_array(tensor)
    good_root = isinstance(root_rank, (int, np.integer)) and 0 <= root_rank < engine.size
    error = dtype_error(arr) or (None if good_root else (
        f"root_rank={root_rank!r} is not a rank of this job; use 0..{engine.size - 1}"))
    if inplace:
        error = error or _writable(arr, "broadcast_")
    root = int(root_rank) if isinstance(root_rank, (int, np.integer)) else -2
    return Op(OpKind.BROADCAST, _name(engine, name, OpKind.BROADCAST), arr,
              None if error else flat_contiguous(arr), inplace=inplace, root=root,
              error=error, auto=name is None)


def alltoall_op(engine: Engine, tensor: Any, splits: Any, name: str | None) -> Op:
    arr = as_array(tensor)
    send_rows, error = send_counts(arr, splits, engine.size)
    error = dtype_error(arr) or rows_error(arr) or error
    return Op(OpKind.ALLTOALL, _name(engine, name, OpKind.ALLTOALL), arr,
              None if error else flat_contiguous(arr),
              splits=tuple(int(n) for n in send_rows), error=error,
              auto=name is None)


def _group(engine: Engine, name: str | None, kind: str, count: int) -> list[str]:
    base = engine.auto_name(kind) if name is None else str(name)
    return [f"{base}.{i}" for i in range(count)]


# -- the public asynchronous functions ----------------------------------------------------


def allreduce_async(tensor: Any, average: bool | None = None, name: str | None = None,
                    op: Any = None, prescale_factor: float = 1.0,
                    postscale_factor: float = 1.0) -> int:
    """Start an allreduce (default: average) of ``tensor``; the result is a new array."""
    engine = _engine("allreduce_async")
    return engine.submit([allreduce_op(engine, tensor, _op(op, average), prescale_factor,
                                       postscale_factor, name, False)])


def allreduce_async_(tensor: Any, average: bool | None = None, name: str | None = None,
                     op: Any = None, prescale_factor: float = 1.0,
                     postscale_factor: float = 1.0) -> int:
    """:func:`allreduce_async` writing the result into ``tensor``."""
    engine = _engine("allreduce_async_")
    return engine.submit([allreduce_op(engine, tensor, _op(op, average), prescale_factor,
                                       postscale_factor, name, True)])


def allgather_async(tensor: Any, name: str | None = None) -> int:
    """Start an allgather: every rank's tensor concatenated along the first dimension."""
    engine = _engine("allgather_async")
    return engine.submit([allgather_op(engine, tensor, name)])


def broadcast_async(tensor: Any, root_rank: int, name: str | None = None) -> int:
    """Start a broadcast of ``root_rank``'s tensor; the result is a new array."""
    engine = _engine("broadcast_async")
    return engine.submit([broadcast_op(engine, tensor, root_rank, name, False)])


def broadcast_async_(tensor: Any, root_rank: int, name: str | None = None) -> int:
    """:func:`broadcast_async` writing the result into ``tensor``."""
    engine = _engine("broadcast_async_")
    return engine.submit([broadcast_op(engine, tensor, root_rank, name, True)])


def alltoall_async(tensor: Any, splits: Sequence[int] | np.ndarray | None = None,
                   name: str | None = None) -> int:
    """Start an alltoall; synchronize returns (received rows, rows from each rank)."""
    engine = _engine("alltoall_async")
    return engine.submit([alltoall_op(engine, tensor, splits, name)])


def reducescatter_async(tensor: Any, name: str | None = None, op: Any = None,
                        prescale_factor: float = 1.0, postscale_factor: float = 1.0) -> int:
    """Start a reducescatter (default: average): this rank's rows of the reduction."""
    engine = _engine("reducescatter_async")
    return engine.submit([reducescatter_op(engine, tensor, _op(op, None), prescale_factor,
                                           postscale_factor, name)])


def grouped_allreduce_async(tensors: Sequence[Any], average: bool | None = None,
                            name: str | None = None, op: Any = None,
                            prescale_factor: float = 1.0,
                            postscale_factor: float = 1.0) -> int:
    """Start one allreduce per tensor, negotiated and fused together; synchronize returns
    the list of results."""
    return _grouped_allreduce(tensors, average, name, op, prescale_factor, postscale_factor,
                              False, "grouped_allreduce_async")


def grouped_allreduce_async_(tensors: Sequence[Any], average: bool | None = None,
                             name: str | None = None, op: Any = None,
                             prescale_factor: float = 1.0,
                             postscale_factor: float = 1.0) -> int:
    """:func:`grouped_allreduce_async` writing each result into its tensor."""
    return _grouped_allreduce(tensors, average, name, op, prescale_factor, postscale_factor,
                              True, "grouped_allreduce_async_")


def _grouped_allreduce(tensors: Sequence[Any], average: bool | None, name: str | None,
                       op: Any, prescale: float, postscale: float, inplace: bool,
                       what: str) -> int:
    engine = _engine(what)
    reduce_op = _op(op, average)
    names = _group(engine, name, "grouped_allreduce", len(tensors))
    return engine.submit([allreduce_op(engine, t, reduce_op, prescale, postscale, n, inplace,
                                       name is None)
                          for t, n in zip(tensors, names, strict=True)], grouped=True)


def grouped_allgather_async(tensors: Sequence[Any], name: str | None = None) -> int:
    engine = _engine("grouped_allgather_async")
    names = _group(engine, name, "grouped_allgather", len(tensors))
    return engine.submit([allgather_op(engine, t, n, name is None)
                          for t, n in zip(tensors, names, strict=True)], grouped=True)


def grouped_reducescatter_async(tensors: Sequence[Any], name: str | None = None,
                                op: Any = None, prescale_factor: float = 1.0,
                                postscale_factor: float = 1.0) -> int:
    engine = _engine("grouped_reducescatter_async")
    names = _group(engine, name, "grouped_reducescatter", len(tensors))
    reduce_op = _op(op, None)
    return engine.submit([reducescatter_op(engine, t, reduce_op, prescale_factor,
                                           postscale_factor, n, name is None)
                          for t, n in zip(tensors, names, strict=True)], grouped=True)


def poll(handle: int) -> bool:
    """Whether the op of ``handle`` is done (never blocks)."""
    return _engine("poll").poll(handle)


def synchronize(handle: int) -> Any:
    """Wait for ``handle`` and return its result, or raise its op's error. Each handle
    can be synchronized once."""
    return _engine("synchronize").synchronize(handle)


# -- synchronous forms --------------------------------------------------------------------


def grouped_allreduce(tensors: Sequence[Any], average: bool | None = None,
                      name: str | None = None, op: Any = None, prescale_factor: float = 1.0,
                      postscale_factor: float = 1.0) -> list[np.ndarray]:
    return synchronize(grouped_allreduce_async(tensors, average, name, op, prescale_factor,
                                               postscale_factor))


def grouped_allreduce_(tensors: Sequence[Any], average: bool | None = None,
                       name: str | None = None, op: Any = None, prescale_factor: float = 1.0,
                       postscale_factor: float = 1.0) -> list[np.ndarray]:
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor))


def grouped_allgather(tensors: Sequence[Any], name: str | None = None) -> list[np.ndarray]:
    return synchronize(grouped_allgather_async(tensors, name))


def grouped_reducescatter(tensors: Sequence[Any], name: str | None = None, op: Any = None,
                          prescale_factor: float = 1.0,
                          postscale_factor: float = 1.0) -> list[np.ndarray]:
    return synchronize(grouped_reducescatter_async(tensors, name, op, prescale_factor,
                                                   postscale_factor))


def join() -> int:
    """This rank has no more data: until every rank has joined, it takes part in the
    others' collectives with neutral data (zeros for sums, the identity for min, max and
    product, no rows for gathers). Returns the rank that joined last."""
    engine = _engine("join")
    return engine.synchronize(engine.submit([engine.join_op()]))


class EngineCommunicator:
    """The communicator the synchronous functions of :mod:`gcurun.runtime.ops` see:
    every call is an op of the engine, submitted and synchronized."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self.rank, self.size = engine.rank, engine.size
        # By name, how a quick cycle runs the allreduce of the name's latest signature;
        # by signature, every plan made (None: arguments the usual path reports).
        self._quick: dict[str, QuickPlan] = {}
        self._plans: dict[tuple, QuickPlan | None] = {}

    def _run(self, op: Op) -> Any:
        return self.engine.run_now(op)

    def allreduce(self, tensor: Any, op: Any = ReduceOp.AVERAGE, prescale_factor: float = 1.0,
                  postscale_factor: float = 1.0, name: str | None = None,
                  inplace: bool = False) -> np.ndarray:
        engine = self.engine
        auto = name is None
        if auto:
            name = engine.auto_name("allreduce")
        # The repeated call, checked by identity (hashing a dtype costs a microsecond).
        plan = self._quick.get(name)        # type: ignore[arg-type]
        if plan is None or type(tensor) is not np.ndarray or tensor.dtype is not plan.dtype \
                or tensor.shape != plan.shape or op is not plan.op or \
                prescale_factor != 1.0 or postscale_factor != plan.postscale:
            plan = self._plan(tensor, op, str(name), prescale_factor, postscale_factor)
        if plan is not None and (tensor.flags.c_contiguous if plan.mine is None else True) \
                and (not inplace or tensor.flags.writeable):
            result = engine.allreduce_now(plan, tensor, inplace)
            if result is not None:
                return result
        return self._run(allreduce_op(engine, tensor, op, prescale_factor, postscale_factor,
                                      name, inplace, auto))

    def _plan(self, tensor: Any, op: Any, name: str, prescale: float,
              postscale: float) -> QuickPlan | None:
        """The quick plan of this call's signature (made once), or None when the call
        must take the usual path."""
        if type(tensor) is not np.ndarray or prescale != 1.0:
            return None
        key = (tensor.dtype, tensor.shape, op, name, postscale)
        try:
            plan = self._plans[key]
        except KeyError:
            rop, error = reduce_op(op)
            plan = None
            if not (error or reduce_error(tensor, rop, 1.0, postscale)):
                plan = self.engine.controller.plan_quick(name, tensor, op, rop, postscale)
            if len(self._plans) >= 4096:
                self._plans.clear()
                self._quick.clear()
            self._plans[key] = plan
        if plan is not None:
            self._quick[name] = plan        # the name's latest signature takes over
        return plan

    def reducescatter(self, tensor: Any, op: Any = ReduceOp.AVERAGE,
                      prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                      name: str | None = None) -> np.ndarray:
        return self._run(reducescatter_op(self.engine, tensor, op, prescale_factor,
                                          postscale_factor, name))

    def allgather(self, tensor: Any, name: str | None = None) -> np.ndarray:
        return self._run(allgather_op(self.engine, tensor, name))

    def broadcast(self, tensor: Any, root_rank: int, name: str | None = None,
                  inplace: bool = False) -> np.ndarray:
        return self._run(broadcast_op(self.engine, tensor, root_rank, name, inplace))

    def alltoall(self, tensor: Any, splits: Sequence[int] | np.ndarray | None = None,
                 name: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        return self._run(alltoall_op(self.engine, tensor, splits, name))

    def barrier(self) -> None:
        self._run(Op(OpKind.BARRIER, self.engine.auto_name(OpKind.BARRIER.label),
                     auto=True))

    def broadcast_object(self, obj: Any, root_rank: int = 0, name: str | None = None) -> Any:
        """``root_rank``'s object, pickled: a broadcast of its size, then of its bytes."""
        base = _name(self.engine, name, OpKind.BROADCAST_OBJECT)
        is_root = root_rank == self.rank
        payload = pickle.dumps(obj) if is_root else b""
        length = self.broadcast(np.array([len(payload)], np.int64), root_rank,
                                f"{base}.size")
        data = np.frombuffer(payload, np.uint8) if is_root else \
            np.empty(int(length[0]), np.uint8)
        received = self.broadcast(data, root_rank, f"{base}.data")
        return obj if is_root else pickle.loads(received.data)

    def allgather_object(self, obj: Any, name: str | None = None) -> list[Any]:
        """Every rank's object, pickled: an allgather of sizes, then of the bytes."""
        base = _name(self.engine, name, OpKind.ALLGATHER_OBJECT)
        payload = np.frombuffer(pickle.dumps(obj), np.uint8)
        lengths = self.allgather(np.array([len(payload)], np.int64), f"{base}.size")
        everything = self.allgather(payload, f"{base}.data")
        pieces, offset = [], 0
        for length in lengths.tolist():
            pieces.append(pickle.loads(everything[offset:offset + length].data))
            offset += length
        return pieces
