"""Ops built from a collective's arguments, on the calling thread.

A bad argument does not raise here: its message travels with the op, so that every rank
of the engine raises the same :class:`ArgumentError` for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from gcurun.runtime.dtypes import as_array, flat_contiguous
from gcurun.runtime.engine.background import Engine
from gcurun.runtime.engine.requests import Op, OpKind
from gcurun.runtime.frontend.arguments import (
    checked_reduce_op,
    dtype_error,
    reduce_error,
    rows_error,
    send_counts,
)


def op_name(engine: Engine, name: str | None, kind: OpKind) -> str:
    return engine.auto_name(kind.label) if name is None else str(name)


def _writable(arr: np.ndarray, what: str) -> str | None:
    if arr.flags.writeable:
        return None
    return f"{what} writes its result into the tensor, which is read-only; pass a writable one"


# -- building ops (on the calling thread) -------------------------------------------------


def allreduce_op(engine: Engine, tensor: Any, *, op: Any, prescale: float = 1.0,
                 postscale: float = 1.0, name: str | None = None, inplace: bool = False,
                 auto: bool = False) -> Op:
    """The op of an allreduce of ``tensor`` (``auto``: ``name`` was made up for a member
    of an unnamed group). The one builder of allreduces: the numpy, torch and TensorFlow
    bindings and the synchronous calls all submit what it returns."""
    arr = as_array(tensor)
    rop, error = checked_reduce_op(op)
    error = error or reduce_error(arr, rop, prescale, postscale)
    if inplace:
        error = error or _writable(arr, "allreduce_")
    return Op(OpKind.ALLREDUCE, op_name(engine, name, OpKind.ALLREDUCE), arr,
              None if error else flat_contiguous(arr), inplace=inplace, rop=int(rop),
              prescale=prescale, postscale=postscale, error=error,
              auto=auto or name is None)


def reducescatter_op(engine: Engine, tensor: Any, *, op: Any, prescale: float = 1.0,
                     postscale: float = 1.0, name: str | None = None,
                     auto: bool = False) -> Op:
    arr = as_array(tensor)
    rop, error = checked_reduce_op(op)
    error = error or reduce_error(arr, rop, prescale, postscale) or rows_error(arr)
    return Op(OpKind.REDUCESCATTER, op_name(engine, name, OpKind.REDUCESCATTER), arr,
              None if error else flat_contiguous(arr), rop=int(rop), prescale=prescale,
              postscale=postscale, error=error, auto=auto or name is None)


def allgather_op(engine: Engine, tensor: Any, *, name: str | None = None,
                 auto: bool = False) -> Op:
    arr = as_array(tensor)
    error = dtype_error(arr) or rows_error(arr)
    return Op(OpKind.ALLGATHER, op_name(engine, name, OpKind.ALLGATHER), arr,
              None if error else flat_contiguous(arr), error=error,
              auto=auto or name is None)


def root_of(engine: Engine, root_rank: Any, members: Sequence[int] | None
            ) -> tuple[int, str | None]:
    """The engine's rank of ``root_rank`` (a rank of the job; ``members``: the job's
    ranks of a process set's engine), or -2 and why it is no root."""
    if not isinstance(root_rank, (int, np.integer)):
        return -2, f"root_rank={root_rank!r} is not a rank; pass an int"
    if members is None:
        if 0 <= root_rank < engine.size:
            return int(root_rank), None
        return -2, f"root_rank={root_rank!r} is not a rank of this job; use 0..{engine.size - 1}"
    if root_rank in members:
        return list(members).index(int(root_rank)), None
    return -2, (f"root_rank={root_rank!r} is not a member of the process set "
                f"{list(members)}; pick the root among its ranks")


def broadcast_op(engine: Engine, tensor: Any, *, root_rank: Any, name: str | None = None,
                 inplace: bool = False, members: Sequence[int] | None = None) -> Op:
    arr = as_array(tensor)
    root, root_error = root_of(engine, root_rank, members)
    error = dtype_error(arr) or root_error
    if inplace:
        error = error or _writable(arr, "broadcast_")
    return Op(OpKind.BROADCAST, op_name(engine, name, OpKind.BROADCAST), arr,
              None if error else flat_contiguous(arr), inplace=inplace, root=root,
              error=error, auto=name is None)


def alltoall_op(engine: Engine, tensor: Any, *, splits: Any = None,
                name: str | None = None) -> Op:
    arr = as_array(tensor)
    send_rows, error = send_counts(arr, splits, engine.size)
    error = dtype_error(arr) or rows_error(arr) or error
    return Op(OpKind.ALLTOALL, op_name(engine, name, OpKind.ALLTOALL), arr,
              None if error else flat_contiguous(arr),
              splits=tuple(int(n) for n in send_rows), error=error,
              auto=name is None)


def group_names(engine: Engine, name: str | None, kind: str, count: int) -> list[str]:
    base = engine.auto_name(kind) if name is None else str(name)
    return [f"{base}.{i}" for i in range(count)]


