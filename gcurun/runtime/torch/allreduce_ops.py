"""Allreduce on torch tensors, with Horovod's names and arguments: single, in place,
grouped, sparse, on process sets; the out-of-place forms are differentiable."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from gcurun.runtime import Adasum, Average
from gcurun.runtime.frontend import handles
from gcurun.runtime.frontend.arguments import reduce_op_of
from gcurun.runtime.frontend.async_ops import submit
from gcurun.runtime.frontend.build import allgather_op, allreduce_op, group_names
from gcurun.runtime.torch import adasum
from gcurun.runtime.torch._common import (
    Tensors,
    as_tensors,
    finisher,
    tensor_name,
    wants_grad,
)
from gcurun.runtime.torch.compression import Compression, Compressor
from gcurun.runtime.torch.handles import CallableHandle, synchronize
from gcurun.runtime.torch.process_sets import ProcessSet, global_process_set
from gcurun.runtime.torch.tensors import stage, to_tensor, write_back


def allreduce_async(tensor: torch.Tensor, average: bool | None = None,
                    name: str | None = None, op: Any = None, prescale_factor: float = 1.0,
                    postscale_factor: float = 1.0,
                    process_set: ProcessSet = global_process_set) -> int:
    """Start reducing ``tensor`` over the ranks (default op: Average); the result is a
    new tensor that :func:`synchronize` returns. ``tensor`` must not change until then."""
    return _allreduce_async(tensor, inplace=False, name=name,
                            op=reduce_op_of(op, average, warn=True),
                            prescale=prescale_factor, postscale=postscale_factor,
                            process_set=process_set)


def allreduce_async_(tensor: torch.Tensor, average: bool | None = None,
                     name: str | None = None, op: Any = None, prescale_factor: float = 1.0,
                     postscale_factor: float = 1.0,
                     process_set: ProcessSet = global_process_set) -> int:
    """:func:`allreduce_async` whose result is written into ``tensor``."""
    return _allreduce_async(tensor, inplace=True, name=name,
                            op=reduce_op_of(op, average, warn=True),
                            prescale=prescale_factor, postscale=postscale_factor,
                            process_set=process_set)


def _allreduce_async(tensor: torch.Tensor, *, inplace: bool, name: str | None, op: Any,
                     prescale: float = 1.0, postscale: float = 1.0,
                     process_set: ProcessSet | None = global_process_set) -> int:
    """The one start of a torch allreduce (every form, and the backward passes of the
    other ops): the tensor staged as a host array, the op built by the runtime's one
    builder and submitted to the engine of ``process_set``."""
    name = tensor_name("allreduce", name)
    what = "allreduce_async_" if inplace else "allreduce_async"
    if op == Adasum:
        flat, finish, keep = adasum.prepare(tensor, inplace=inplace, pre=prescale,
                                            post=postscale)
        return submit(process_set, what, _gather(flat, name), finish=finish, keep=keep)
    staged = stage(tensor, "allreduce")
    writes, finish = finisher(staged, inplace=inplace)
    array = staged.array
    return submit(process_set, what, lambda e: [allreduce_op(
        e, array, op=op, prescale=prescale, postscale=postscale, name=name,
        inplace=writes)], finish=finish, keep=staged)


def _gather(array: np.ndarray, name: str | None) -> Callable[[Any], list[Any]]:
    """The build of one allgather of ``array`` (Adasum's, a sparse tensor's parts)."""
    return lambda engine: [allgather_op(engine, array, name=name)]


class HorovodAllreduce(torch.autograd.Function):
    """Allreduce as an autograd function (Horovod's class and arguments): the gradient
    is reduced the same way (op and scale factors)."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, average: bool | None, name: str | None,
                op: Any, prescale_factor: float, postscale_factor: float,
                process_set: ProcessSet) -> torch.Tensor:
        op = reduce_op_of(op, average, warn=True)
        ctx.args = (op, prescale_factor, postscale_factor, process_set)
        return synchronize(_allreduce_async(tensor, inplace=False, name=name, op=op,
                                            prescale=prescale_factor,
                                            postscale=postscale_factor,
                                            process_set=process_set))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        op, pre, post, process_set = ctx.args
        reduced = synchronize(_allreduce_async(grad.contiguous(), inplace=False, name=None,
                                               op=op, prescale=pre, postscale=post,
                                               process_set=process_set))
        return reduced, None, None, None, None, None, None


def allreduce(tensor: torch.Tensor, average: bool | None = None, name: str | None = None,
              compression: type[Compressor] = Compression.none, op: Any = None,
              prescale_factor: float = 1.0, postscale_factor: float = 1.0,
              process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """The reduction of ``tensor`` over the ranks (default: the average), a new tensor
    of the same shape and dtype. Differentiable: the gradient is reduced the same way."""
    op = reduce_op_of(op, average, warn=True)
    compressed, ctx = compression.compress(tensor)
    if wants_grad(compressed):
        result = HorovodAllreduce.apply(compressed, None, name, op, prescale_factor,
                                        postscale_factor, process_set)
    else:
        result = synchronize(_allreduce_async(compressed, inplace=False, name=name, op=op,
                                              prescale=prescale_factor,
                                              postscale=postscale_factor,
                                              process_set=process_set))
    return compression.decompress(result, ctx)


def allreduce_(tensor: torch.Tensor, average: bool | None = None, name: str | None = None,
               op: Any = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
               process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """:func:`allreduce` written into ``tensor``, which is returned."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor, process_set))


def _grouped_allreduce_async(tensors: Tensors, *, inplace: bool, name: str | None, op: Any,
                             prescale: float = 1.0, postscale: float = 1.0,
                             process_set: ProcessSet | None = global_process_set) -> int:
    """The one start of a torch grouped allreduce: one op per tensor, negotiated and
    fused together (Adasum: one gather per tensor, completing as one handle)."""
    tensors = list(tensors)
    name = tensor_name("allreduce", name)
    what = "grouped_allreduce_async_" if inplace else "grouped_allreduce_async"
    if op == Adasum:
        prepared = [adasum.prepare(t, inplace=inplace, pre=prescale, post=postscale)
                    for t in tensors]
        parts = [submit(process_set, what, _gather(flat, None if name is None
                                                   else f"{name}.{i}"))
                 for i, (flat, _, _) in enumerate(prepared)]
        finishers = [finish for _, finish, _ in prepared]
        return handles.combine(
            parts, finish=lambda results: [f(r) for f, r in zip(finishers, results,
                                                                strict=True)],
            keep=prepared)
    staged = [stage(t, "grouped_allreduce") for t in tensors]
    arrays = [s.array for s in staged]

    def ops(engine: Any) -> list[Any]:
        names = group_names(engine, name, "grouped_allreduce", len(arrays))
        return [allreduce_op(engine, a, op=op, prescale=prescale, postscale=postscale,
                             name=n, inplace=inplace, auto=name is None)
                for a, n in zip(arrays, names, strict=True)]

    if inplace:
        finish: Any = lambda _: [write_back(s) for s in staged]  # noqa: E731
    else:
        finish = lambda results: as_tensors(results, tensors)  # noqa: E731
    return submit(process_set, what, ops, grouped=True, finish=finish, keep=staged)


def grouped_allreduce_async(tensors: Tensors, average: bool | None = None,
                            name: str | None = None, op: Any = None,
                            prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                            process_set: ProcessSet = global_process_set) -> int:
    """Start reducing a list of tensors as one op; :func:`synchronize` returns the list
    of results."""
    return _grouped_allreduce_async(tensors, inplace=False, name=name,
                                    op=reduce_op_of(op, average, warn=True),
                                    prescale=prescale_factor, postscale=postscale_factor,
                                    process_set=process_set)


def grouped_allreduce_async_(tensors: Tensors, average: bool | None = None,
                             name: str | None = None, op: Any = None,
                             prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                             process_set: ProcessSet = global_process_set) -> int:
    """:func:`grouped_allreduce_async` with the results written into ``tensors``."""
    return _grouped_allreduce_async(tensors, inplace=True, name=name,
                                    op=reduce_op_of(op, average, warn=True),
                                    prescale=prescale_factor, postscale=postscale_factor,
                                    process_set=process_set)


class HorovodGroupedAllreduce(torch.autograd.Function):
    """Grouped allreduce as an autograd function (Horovod's class and arguments)."""

    @staticmethod
    def forward(ctx: Any, average: bool | None, name: str | None, op: Any,
                prescale_factor: float, postscale_factor: float, process_set: ProcessSet,
                *tensors: torch.Tensor) -> tuple[Any, ...]:
        op = reduce_op_of(op, average, warn=True)
        ctx.args = (op, prescale_factor, postscale_factor, process_set)
        return tuple(synchronize(_grouped_allreduce_async(
            tensors, inplace=False, name=name, op=op, prescale=prescale_factor,
            postscale=postscale_factor, process_set=process_set)))

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[Any, ...]:
        op, pre, post, process_set = ctx.args
        reduced = synchronize(_grouped_allreduce_async(
            [g.contiguous() for g in grads], inplace=False, name=None, op=op, prescale=pre,
            postscale=post, process_set=process_set))
        return (None, None, None, None, None, None, *reduced)


def grouped_allreduce(tensors: Tensors, average: bool | None = None, name: str | None = None,
                      compression: type[Compressor] = Compression.none, op: Any = None,
                      prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                      process_set: ProcessSet = global_process_set) -> list[torch.Tensor]:
    """:func:`allreduce` of every tensor of a list, as one op."""
    op = reduce_op_of(op, average, warn=True)
    pairs = [compression.compress(t) for t in tensors]
    compressed = [t for t, _ in pairs]
    if wants_grad(*compressed):
        results = HorovodGroupedAllreduce.apply(None, name, op, prescale_factor,
                                                postscale_factor, process_set, *compressed)
    else:
        results = synchronize(_grouped_allreduce_async(
            compressed, inplace=False, name=name, op=op, prescale=prescale_factor,
            postscale=postscale_factor, process_set=process_set))
    return [compression.decompress(r, ctx) for r, (_, ctx) in zip(results, pairs, strict=True)]


def grouped_allreduce_(tensors: Tensors, average: bool | None = None,
                       name: str | None = None, op: Any = None, prescale_factor: float = 1.0,
                       postscale_factor: float = 1.0,
                       process_set: ProcessSet = global_process_set) -> list[torch.Tensor]:
    """:func:`grouped_allreduce` written into ``tensors``."""
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set))


def sparse_allreduce_async(tensor: torch.Tensor, name: str | None, op: Any,
                           process_set: ProcessSet = global_process_set) -> CallableHandle:
    """Start combining a sparse COO tensor over the ranks by gathering every rank's
    indices and values (Sum, or Average: values divided by the number of ranks). The
    handle is also callable, as Horovod's is: ``handle()`` and ``synchronize(handle)``
    both return the (uncoalesced) sparse result."""
    sparse = tensor.coalesce()
    indices = stage(sparse.indices().t().contiguous(), "sparse allreduce")
    values = stage(sparse.values().contiguous(), "sparse allreduce")
    base = None if name is None else str(name)
    parts = [submit(process_set, "allgather_async", _gather(staged.array, tensor_name(
                 "allgather", None if base is None else f"{base}.{part}")))
             for staged, part in ((indices, "indices"), (values, "values"))]
    members = len(process_set.ranks or []) if process_set is not None else 1
    divisor = members if op == Average else 1

    def finish(results: list[np.ndarray]) -> torch.Tensor:
        gathered_indices = torch.from_numpy(results[0]).t()
        gathered_values = to_tensor(results[1], sparse.values())
        if divisor > 1:
            gathered_values = gathered_values / divisor
        return torch.sparse_coo_tensor(gathered_indices.to(sparse.device), gathered_values,
                                       sparse.shape, check_invariants=False)

    return CallableHandle(handles.combine(parts, finish=finish, keep=(indices, values)))
