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

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from gcurun.runtime.frontend import handles
from gcurun.runtime.frontend.arguments import reduce_op_of
from gcurun.runtime.frontend.build import (
    allgather_op,
    allreduce_op,
    alltoall_op,
    broadcast_op,
    group_names,
    reducescatter_op,
)
from gcurun.runtime.frontend.process_sets import (
    ProcessSet,
    collectives_of,
    engine_of,
    global_process_set,
)

poll = handles.poll
synchronize = handles.synchronize


def submit(process_set: ProcessSet | None, what: str, build: Callable[[Any], list[Any]], *,
           grouped: bool = False, finish: handles.Finish | None = None,
           keep: Any = None) -> int:
    """Submit the ops that ``build(engine)`` makes (on the calling thread, with the
    builders of :mod:`.build`) to the engine of ``process_set`` (None: the job) and
    return their handle (see :mod:`.handles`); ``grouped``: negotiated together, the
    result is the list of results. Every binding's asynchronous op goes this way.
    Raises NotInitializedError before init(), ValueError for a set this rank may not
    use."""
    engine = engine_of(process_set, what)
    return handles.register(engine, engine.submit(build(engine), grouped=grouped),
                            finish=finish, keep=keep)


def allreduce_async(tensor: Any, average: bool | None = None, name: str | None = None,
                    op: Any = None, prescale_factor: float = 1.0,
                    postscale_factor: float = 1.0,
                    process_set: ProcessSet = global_process_set) -> int:
    """Start an allreduce (default: average) of ``tensor``; the result is a new array.
    Raises NotInitializedError before init(), ValueError for a set this rank may not
    use."""
    rop = reduce_op_of(op, average)
    return submit(process_set, "allreduce_async", lambda e: [allreduce_op(
        e, tensor, op=rop, prescale=prescale_factor, postscale=postscale_factor, name=name)])


def allreduce_async_(tensor: Any, average: bool | None = None, name: str | None = None,
                     op: Any = None, prescale_factor: float = 1.0,
                     postscale_factor: float = 1.0,
                     process_set: ProcessSet = global_process_set) -> int:
    """:func:`allreduce_async` writing the result into ``tensor``."""
    rop = reduce_op_of(op, average)
    return submit(process_set, "allreduce_async_", lambda e: [allreduce_op(
        e, tensor, op=rop, prescale=prescale_factor, postscale=postscale_factor, name=name,
        inplace=True)])


def allgather_async(tensor: Any, name: str | None = None,
                    process_set: ProcessSet = global_process_set) -> int:
    """Start an allgather: every rank's tensor concatenated along the first dimension."""
    return submit(process_set, "allgather_async",
                  lambda e: [allgather_op(e, tensor, name=name)])


def broadcast_async(tensor: Any, root_rank: int, name: str | None = None,
                    process_set: ProcessSet = global_process_set) -> int:
    """Start a broadcast of ``root_rank``'s tensor (a rank of the job); the result is a
    new array."""
    members = members_of(process_set)
    return submit(process_set, "broadcast_async", lambda e: [broadcast_op(
        e, tensor, root_rank=root_rank, name=name, members=members)])


def broadcast_async_(tensor: Any, root_rank: int, name: str | None = None,
                     process_set: ProcessSet = global_process_set) -> int:
    """:func:`broadcast_async` writing the result into ``tensor``."""
    members = members_of(process_set)
    return submit(process_set, "broadcast_async_", lambda e: [broadcast_op(
        e, tensor, root_rank=root_rank, name=name, inplace=True, members=members)])


def alltoall_async(tensor: Any, splits: Sequence[int] | np.ndarray | None = None,
                   name: str | None = None,
                   process_set: ProcessSet = global_process_set) -> int:
    """Start an alltoall; synchronize returns (received rows, rows from each rank)."""
    return submit(process_set, "alltoall_async",
                  lambda e: [alltoall_op(e, tensor, splits=splits, name=name)])


def reducescatter_async(tensor: Any, name: str | None = None, op: Any = None,
                        prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                        process_set: ProcessSet = global_process_set) -> int:
    """Start a reducescatter (default: average): this rank's rows of the reduction."""
    rop = reduce_op_of(op, None)
    return submit(process_set, "reducescatter_async", lambda e: [reducescatter_op(
        e, tensor, op=rop, prescale=prescale_factor, postscale=postscale_factor,
        name=name)])


def grouped_allreduce_async(tensors: Sequence[Any], average: bool | None = None,
                            name: str | None = None, op: Any = None,
                            prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                            process_set: ProcessSet = global_process_set) -> int:
    """Start one allreduce per tensor, negotiated and fused together; synchronize returns
    the list of results."""
    return _grouped_allreduce(tensors, reduce_op_of(op, average), name=name,
                              prescale=prescale_factor, postscale=postscale_factor,
                              inplace=False, what="grouped_allreduce_async",
                              process_set=process_set)


def grouped_allreduce_async_(tensors: Sequence[Any], average: bool | None = None,
                             name: str | None = None, op: Any = None,
                             prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                             process_set: ProcessSet = global_process_set) -> int:
    """:func:`grouped_allreduce_async` writing each result into its tensor."""
    return _grouped_allreduce(tensors, reduce_op_of(op, average), name=name,
                              prescale=prescale_factor, postscale=postscale_factor,
                              inplace=True, what="grouped_allreduce_async_",
                              process_set=process_set)


def _grouped_allreduce(tensors: Sequence[Any], rop: Any, *, name: str | None,
                       prescale: float, postscale: float, inplace: bool, what: str,
                       process_set: ProcessSet) -> int:
    def ops(engine: Any) -> list[Any]:
        names = group_names(engine, name, "grouped_allreduce", len(tensors))
        return [allreduce_op(engine, t, op=rop, prescale=prescale, postscale=postscale,
                             name=n, inplace=inplace, auto=name is None)
                for t, n in zip(tensors, names, strict=True)]

    return submit(process_set, what, ops, grouped=True)


def grouped_allgather_async(tensors: Sequence[Any], name: str | None = None,
                            process_set: ProcessSet = global_process_set) -> int:
    """Start one allgather per tensor, negotiated together."""
    def ops(engine: Any) -> list[Any]:
        names = group_names(engine, name, "grouped_allgather", len(tensors))
        return [allgather_op(engine, t, name=n, auto=name is None)
                for t, n in zip(tensors, names, strict=True)]

    return submit(process_set, "grouped_allgather_async", ops, grouped=True)


def grouped_reducescatter_async(tensors: Sequence[Any], name: str | None = None,
                                op: Any = None, prescale_factor: float = 1.0,
                                postscale_factor: float = 1.0,
                                process_set: ProcessSet = global_process_set) -> int:
    """Start one reducescatter per tensor, negotiated together."""
    rop = reduce_op_of(op, None)

    def ops(engine: Any) -> list[Any]:
        names = group_names(engine, name, "grouped_reducescatter", len(tensors))
        return [reducescatter_op(engine, t, op=rop, prescale=prescale_factor,
                                 postscale=postscale_factor, name=n, auto=name is None)
                for t, n in zip(tensors, names, strict=True)]

    return submit(process_set, "grouped_reducescatter_async", ops, grouped=True)


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
    members = members_of(process_set)
    return last if members is None else members[last]


def members_of(process_set: ProcessSet | None) -> list[int] | None:
    """The job's ranks of ``process_set``'s engine (None for the job's own), which
    :func:`.build.broadcast_op` needs to find a root."""
    if process_set is None or process_set is global_process_set:
        return None
    return collectives_of(process_set, "broadcast").members
