"""Allreduce on torch tensors, with Horovod's names and arguments: single, in place,
grouped, sparse, on process sets; the out-of-place forms are differentiable."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch

from gcurun.runtime import Adasum, Average, Sum
from gcurun.runtime.torch import adasum
from gcurun.runtime.torch._common import (
    Tensors,
    as_tensors,
    start_allreduce,
    tensor_name,
    wants_grad,
)
from gcurun.runtime.torch.compression import Compression, Compressor
from gcurun.runtime.torch.handles import CallableHandle, Combined, register, synchronize
from gcurun.runtime.torch.process_sets import ProcessSet, global_process_set, target
from gcurun.runtime.torch.tensors import stage, to_tensor, write_back


def reduce_op(op: Any, average: bool | None) -> Any:
    """The op of a call that may use Horovod's deprecated ``average`` flag."""
    if op is not None and average is not None:
        raise ValueError("pass either op or the deprecated average flag, not both")
    if average is not None:
        warnings.warn("average= is deprecated; use op=Average or op=Sum", DeprecationWarning,
                      stacklevel=3)
        return Average if average else Sum
    return Average if op is None else op


def allreduce_async(tensor: torch.Tensor, average: bool | None = None,
                    name: str | None = None, op: Any = None, prescale_factor: float = 1.0,
                    postscale_factor: float = 1.0,
                    process_set: ProcessSet = global_process_set) -> int:
    """Start reducing ``tensor`` over the ranks (default op: Average); the result is a
    new tensor that :func:`synchronize` returns. ``tensor`` must not change until then."""
    return start_allreduce(tensor, False, name, reduce_op(op, average), prescale_factor,
                           postscale_factor, process_set)


def allreduce_async_(tensor: torch.Tensor, average: bool | None = None,
                     name: str | None = None, op: Any = None, prescale_factor: float = 1.0,
                     postscale_factor: float = 1.0,
                     process_set: ProcessSet = global_process_set) -> int:
    """:func:`allreduce_async` whose result is written into ``tensor``."""
    return start_allreduce(tensor, True, name, reduce_op(op, average), prescale_factor,
                           postscale_factor, process_set)


class HorovodAllreduce(torch.autograd.Function):
    """Allreduce as an autograd function (Horovod's class and arguments): the gradient
    is reduced the same way (op and scale factors)."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, average: bool | None, name: str | None,
                op: Any, prescale_factor: float, postscale_factor: float,
                process_set: ProcessSet) -> torch.Tensor:
        op = reduce_op(op, average)
        ctx.args = (op, prescale_factor, postscale_factor, process_set)
        return synchronize(start_allreduce(tensor, False, name, op, prescale_factor,
                                           postscale_factor, process_set))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        op, pre, post, process_set = ctx.args
        reduced = synchronize(start_allreduce(grad.contiguous(), False, None, op, pre, post,
                                              process_set))
        return reduced, None, None, None, None, None, None


def allreduce(tensor: torch.Tensor, average: bool | None = None, name: str | None = None,
              compression: type[Compressor] = Compression.none, op: Any = None,
              prescale_factor: float = 1.0, postscale_factor: float = 1.0,
              process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """The reduction of ``tensor`` over the ranks (default: the average), a new tensor
    of the same shape and dtype. Differentiable: the gradient is reduced the same way."""
    op = reduce_op(op, average)
    compressed, ctx = compression.compress(tensor)
    if wants_grad(compressed):
        result = HorovodAllreduce.apply(compressed, None, name, op, prescale_factor,
                                        postscale_factor, process_set)
    else:
        result = synchronize(start_allreduce(compressed, False, name, op, prescale_factor,
                                             postscale_factor, process_set))
    return compression.decompress(result, ctx)


def allreduce_(tensor: torch.Tensor, average: bool | None = None, name: str | None = None,
               op: Any = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
               process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """:func:`allreduce` written into ``tensor``, which is returned."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor, process_set))


def _grouped_allreduce_async(tensors: Tensors, inplace: bool, name: str | None, op: Any,
                             pre: float, post: float,
                             process_set: ProcessSet) -> int:
    tensors = list(tensors)
    where = target(process_set)
    name = tensor_name("allreduce", name)
    if op == Adasum:
        works = [adasum.work(t, inplace, pre, post, where,
                             None if name is None else f"{name}.{i}")
                 for i, t in enumerate(tensors)]
        finishers = [finish for _, finish, _ in works]
        return register(Combined([w for w, _, _ in works]),
                        lambda results: [f(r) for f, r in zip(finishers, results, strict=True)],
                        works)
    staged = [stage(t, "grouped_allreduce") for t in tensors]
    work = where.grouped_allreduce([s.array for s in staged], inplace, op, pre, post, name)
    if inplace:
        return register(work, lambda _: [write_back(s) for s in staged], staged)
    return register(work, lambda results: as_tensors(results, tensors), staged)


def grouped_allreduce_async(tensors: Tensors, average: bool | None = None,
                            name: str | None = None, op: Any = None,
                            prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                            process_set: ProcessSet = global_process_set) -> int:
    """Start reducing a list of tensors as one op; :func:`synchronize` returns the list
    of results."""
    return _grouped_allreduce_async(tensors, False, name, reduce_op(op, average),
                                    prescale_factor, postscale_factor, process_set)


def grouped_allreduce_async_(tensors: Tensors, average: bool | None = None,
                             name: str | None = None, op: Any = None,
                             prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                             process_set: ProcessSet = global_process_set) -> int:
    """:func:`grouped_allreduce_async` with the results written into ``tensors``."""
    return _grouped_allreduce_async(tensors, True, name, reduce_op(op, average),
                                    prescale_factor, postscale_factor, process_set)


class HorovodGroupedAllreduce(torch.autograd.Function):
    """Grouped allreduce as an autograd function (Horovod's class and arguments)."""

    @staticmethod
    def forward(ctx: Any, average: bool | None, name: str | None, op: Any,
                prescale_factor: float, postscale_factor: float, process_set: ProcessSet,
                *tensors: torch.Tensor) -> tuple[Any, ...]:
        op = reduce_op(op, average)
        ctx.args = (op, prescale_factor, postscale_factor, process_set)
        return tuple(synchronize(_grouped_allreduce_async(
            tensors, False, name, op, prescale_factor, postscale_factor, process_set)))

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[Any, ...]:
        op, pre, post, process_set = ctx.args
        reduced = synchronize(_grouped_allreduce_async([g.contiguous() for g in grads], False,
                                                       None, op, pre, post, process_set))
        return (None, None, None, None, None, None, *reduced)


def grouped_allreduce(tensors: Tensors, average: bool | None = None, name: str | None = None,
                      compression: type[Compressor] = Compression.none, op: Any = None,
                      prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                      process_set: ProcessSet = global_process_set) -> list[torch.Tensor]:
    """:func:`allreduce` of every tensor of a list, as one op."""
    op = reduce_op(op, average)
    pairs = [compression.compress(t) for t in tensors]
    compressed = [t for t, _ in pairs]
    if wants_grad(*compressed):
        results = HorovodGroupedAllreduce.apply(None, name, op, prescale_factor,
                                                postscale_factor, process_set, *compressed)
    else:
        results = synchronize(_grouped_allreduce_async(compressed, False, name, op,
                                                       prescale_factor, postscale_factor,
                                                       process_set))
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
    where = target(process_set)
    sparse = tensor.coalesce()
    indices = stage(sparse.indices().t().contiguous(), "sparse allreduce")
    values = stage(sparse.values().contiguous(), "sparse allreduce")
    base = None if name is None else str(name)
    works = [where.allgather(indices.array, tensor_name("allgather", None if base is None
                                                        else base + ".indices")),
             where.allgather(values.array, tensor_name("allgather", None if base is None
                                                       else base + ".values"))]
    members = len(process_set.ranks or []) if process_set is not None else 1
    divisor = members if op == Average else 1

    def finish(results: list[np.ndarray]) -> torch.Tensor:
        gathered_indices = torch.from_numpy(results[0]).t()
        gathered_values = to_tensor(results[1], sparse.values())
        if divisor > 1:
            gathered_values = gathered_values / divisor
        return torch.sparse_coo_tensor(gathered_indices.to(sparse.device), gathered_values,
                                       sparse.shape, check_invariants=False)

    return CallableHandle(register(Combined(works), finish, (indices, values)))
