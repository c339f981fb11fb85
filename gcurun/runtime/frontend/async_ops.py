"""The asynchronous collectives (Horovod's ``*_async`` functions, ``poll``,
``synchronize``, the grouped forms and ``join``).

Every function returns at once with an integer handle; ``synchronize(handle)`` waits and
returns the result or raises the op's error (a :class:`CollectiveError`). Names with a
trailing underscore write the result into the given array, which must stay alive and
unmoved until then; the input of the others must stay unchanged until then. Every
function takes ``process_set`` (default: the whole job); a handle belongs to its set.
A bad argument does not raise here: it travels with the op, so that every rank raises
the same :class:`ArgumentError` for it at ``synchronize``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from gcurun.runtime.frontend.build import (
    allgather_op,
    allreduce_op,
    alltoall_op,
    broadcast_op,
    group_names,
    reduce_op_of,
    reducescatter_op,
)
from gcurun.runtime.frontend.process_sets import (
    ProcessSet,
    collectives_of,
    engine_of,
    global_process_set,
)

# Handles of process sets' engines: handle -> the set (the job's engine's are not here).
_owners: dict[int, ProcessSet] = {}
_OFFSET = 1 << 40       # a set's handles are numbered apart from the job's


def _submit(process_set: ProcessSet, what: str, ops: Any, grouped: bool = False) -> int:
    engine = engine_of(process_set, what)
    handle = engine.submit(ops(engine), grouped=grouped)
    if process_set is global_process_set:
        return handle
    handle = (process_set.process_set_id or 0) * _OFFSET + handle
    _owners[handle] = process_set
    return handle


def allreduce_async(tensor: Any, average: bool | None = None, name: str | None = None,
                    op: Any = None, prescale_factor: float = 1.0,
                    postscale_factor: float = 1.0,
                    process_set: ProcessSet = global_process_set) -> int:
    """Start an allreduce (default: average) of ``tensor``; the result is a new array.
    Raises NotInitializedError before init(), ValueError for a set this rank may not
    use."""
    rop = reduce_op_of(op, average)
    return _submit(process_set, "allreduce_async", lambda e: [allreduce_op(
        e, tensor, rop, prescale_factor, postscale_factor, name, False)])


def allreduce_async_(tensor: Any, average: bool | None = None, name: str | None = None,
                     op: Any = None, prescale_factor: float = 1.0,
                     postscale_factor: float = 1.0,
                     process_set: ProcessSet = global_process_set) -> int:
    """:func:`allreduce_async` writing the result into ``tensor``."""
    rop = reduce_op_of(op, average)
    return _submit(process_set, "allreduce_async_", lambda e: [allreduce_op(
        e, tensor, rop, prescale_factor, postscale_factor, name, True)])


def allgather_async(tensor: Any, name: str | None = None,
                    process_set: ProcessSet = global_process_set) -> int:
    """Start an allgather: every rank's tensor concatenated along the first dimension."""
    return _submit(process_set, "allgather_async",
                   lambda e: [allgather_op(e, tensor, name)])


def broadcast_async(tensor: Any, root_rank: int, name: str | None = None,
                    process_set: ProcessSet = global_process_set) -> int:
    """Start a broadcast of ``root_rank``'s tensor (a rank of the job); the result is a
    new array."""
    members = _members(process_set)
    return _submit(process_set, "broadcast_async", lambda e: [broadcast_op(
        e, tensor, root_rank, name, False, members)])


def broadcast_async_(tensor: Any, root_rank: int, name: str | None = None,
                     process_set: ProcessSet = global_process_set) -> int:
    """:func:`broadcast_async` writing the result into ``tensor``."""
    members = _members(process_set)
    return _submit(process_set, "broadcast_async_", lambda e: [broadcast_op(
        e, tensor, root_rank, name, True, members)])


def alltoall_async(tensor: Any, splits: Sequence[int] | np.ndarray | None = None,
                   name: str | None = None,
                   process_set: ProcessSet = global_process_set) -> int:
    """Start an alltoall; synchronize returns (received rows, rows from each rank)."""
    return _submit(process_set, "alltoall_async",
                   lambda e: [alltoall_op(e, tensor, splits, name)])


def reducescatter_async(tensor: Any, name: str | None = None, op: Any = None,
                        prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                        process_set: ProcessSet = global_process_set) -> int:
    """Start a reducescatter (default: average): this rank's rows of the reduction."""
    rop = reduce_op_of(op, None)
    return _submit(process_set, "reducescatter_async", lambda e: [reducescatter_op(
        e, tensor, rop, prescale_factor, postscale_factor, name)])


def grouped_allreduce_async(tensors: Sequence[Any], average: bool | None = None,
                            name: str | None = None, op: Any = None,
                            prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                            process_set: ProcessSet = global_process_set) -> int:
    """Start one allreduce per tensor, negotiated and fused together; synchronize returns
    the list of results."""
    return _grouped_allreduce(tensors, average, name, op, prescale_factor, postscale_factor,
                              False, "grouped_allreduce_async", process_set)


def grouped_allreduce_async_(tensors: Sequence[Any], average: bool | None = None,
                             name: str | None = None, op: Any = None,
                             prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                             process_set: ProcessSet = global_process_set) -> int:
    """:func:`grouped_allreduce_async` writing each result into its tensor."""
    return _grouped_allreduce(tensors, average, name, op, prescale_factor, postscale_factor,
                              True, "grouped_allreduce_async_", process_set)


def _grouped_allreduce(tensors: Sequence[Any], average: bool | None, name: str | None,
                       op: Any, prescale: float, postscale: float, inplace: bool,
                       what: str, process_set: ProcessSet) -> int:
    rop = reduce_op_of(op, average)

    def ops(engine: Any) -> list[Any]:
        names = group_names(engine, name, "grouped_allreduce", len(tensors))
        return [allreduce_op(engine, t, rop, prescale, postscale, n, inplace, name is None)
                for t, n in zip(tensors, names, strict=True)]

    return _submit(process_set, what, ops, grouped=True)


def grouped_allgather_async(tensors: Sequence[Any], name: str | None = None,
                            process_set: ProcessSet = global_process_set) -> int:
    """Start one allgather per tensor, negotiated together."""
    def ops(engine: Any) -> list[Any]:
        names = group_names(engine, name, "grouped_allgather", len(tensors))
        return [allgather_op(engine, t, n, name is None)
                for t, n in zip(tensors, names, strict=True)]

    return _submit(process_set, "grouped_allgather_async", ops, grouped=True)


def grouped_reducescatter_async(tensors: Sequence[Any], name: str | None = None,
                                op: Any = None, prescale_factor: float = 1.0,
                                postscale_factor: float = 1.0,
                                process_set: ProcessSet = global_process_set) -> int:
    """Start one reducescatter per tensor, negotiated together."""
    rop = reduce_op_of(op, None)

    def ops(engine: Any) -> list[Any]:
        names = group_names(engine, name, "grouped_reducescatter", len(tensors))
        return [reducescatter_op(engine, t, rop, prescale_factor, postscale_factor, n,
                                 name is None) for t, n in zip(tensors, names, strict=True)]

    return _submit(process_set, "grouped_reducescatter_async", ops, grouped=True)


def poll(handle: int) -> bool:
    """Whether the op of ``handle`` is done (never blocks). Raises HandleError for an
    unknown handle."""
    owner = _owners.get(handle)
    if owner is None:
        return engine_of(None, "poll").poll(handle)
    return engine_of(owner, "poll").poll(handle % _OFFSET)


def synchronize(handle: int) -> Any:
    """Wait for ``handle`` and return its result, or raise its op's error. Each handle
    can be synchronized once (else HandleError)."""
    owner = _owners.pop(handle, None)
    if owner is None:
        return engine_of(None, "synchronize").synchronize(handle)
    return engine_of(owner, "synchronize").synchronize(handle % _OFFSET)


def grouped_allreduce(tensors: Sequence[Any], average: bool | None = None,
                      name: str | None = None, op: Any = None, prescale_factor: float = 1.0,
                      postscale_factor: float = 1.0,
                      process_set: ProcessSet = global_process_set) -> list[np.ndarray]:
    """:func:`grouped_allreduce_async`, waited for."""
    return synchronize(grouped_allreduce_async(tensors, average, name, op, prescale_factor,
                                               postscale_factor, process_set))


def grouped_allreduce_(tensors: Sequence[Any], average: bool | None = None,
                       name: str | None = None, op: Any = None, prescale_factor: float = 1.0,
                       postscale_factor: float = 1.0,
                       process_set: ProcessSet = global_process_set) -> list[np.ndarray]:
    """:func:`grouped_allreduce_async_`, waited for."""
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set))


def grouped_allgather(tensors: Sequence[Any], name: str | None = None,
                      process_set: ProcessSet = global_process_set) -> list[np.ndarray]:
    """:func:`grouped_allgather_async`, waited for."""
    return synchronize(grouped_allgather_async(tensors, name, process_set))


def grouped_reducescatter(tensors: Sequence[Any], name: str | None = None, op: Any = None,
                          prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                          process_set: ProcessSet = global_process_set) -> list[np.ndarray]:
    """:func:`grouped_reducescatter_async`, waited for."""
    return synchronize(grouped_reducescatter_async(tensors, name, op, prescale_factor,
                                                   postscale_factor, process_set))


def join(process_set: ProcessSet = global_process_set) -> int:
    """This rank has no more data: until every rank (of the set) has joined, it takes
    part in the others' reductions with neutral data (zeros for sums, the identity for
    min, max and product); gathers and broadcasts fail on every rank that calls them
    meanwhile, as in Horovod. Returns the rank that joined last, a rank of the job also
    on a process set (Horovod's process set records the global rank of its last
    joiner)."""
    engine = engine_of(process_set, "join")
    last = engine.synchronize(engine.submit([engine.join_op()]))
    members = _members(process_set)
    return last if members is None else members[last]


def _members(process_set: ProcessSet) -> list[int] | None:
    if process_set is global_process_set:
        return None
    return collectives_of(process_set, "broadcast").members
