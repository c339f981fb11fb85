"""Reducescatter on torch tensors, with Horovod's names, arguments and results; the
synchronous forms are differentiable (Horovod's autograd classes)."""

from __future__ import annotations

from typing import Any

import torch

from gcurun.runtime import Average, Sum
from gcurun.runtime.frontend.async_ops import submit
from gcurun.runtime.frontend.build import group_names, reducescatter_op
from gcurun.runtime.torch._common import Tensors, as_tensors, tensor_name, wants_grad
from gcurun.runtime.torch.compression import Compression, Compressor
from gcurun.runtime.torch.gather_scatter_ops import _allgather_async, grouped_allgather_async
from gcurun.runtime.torch.handles import synchronize
from gcurun.runtime.torch.process_sets import ProcessSet, global_process_set
from gcurun.runtime.torch.tensors import stage, to_tensor


def reducescatter_async(tensor: torch.Tensor, name: str | None = None, op: Any = Average,
                        process_set: ProcessSet = global_process_set,
                        prescale_factor: float = 1.0, postscale_factor: float = 1.0) -> int:
    """Start reducing ``tensor`` over the ranks, each keeping its share of the first
    dimension (split as evenly as possible, lower ranks taking one row more)."""
    staged = stage(tensor, "reducescatter")
    array, name = staged.array, tensor_name("reducescatter", name)
    return submit(process_set, "reducescatter_async", lambda e: [reducescatter_op(
        e, array, op=op, prescale=prescale_factor, postscale=postscale_factor, name=name)],
        finish=lambda result: to_tensor(result, tensor), keep=staged)


def _gradient_scale(op: Any, process_set: ProcessSet, pre: float, post: float) -> float:
    """Horovod's factor on the gathered gradient of a reducescatter: the set's size for
    Sum (1 for the other ops), times the scale factors."""
    size = (process_set or global_process_set).size() or 1
    return (size if op == Sum else 1) * pre * post


class HorovodReducescatter(torch.autograd.Function):
    """Reducescatter as an autograd function (Horovod's class and arguments): the
    gradient is every rank's share gathered, scaled as Horovod scales it (the number of
    ranks for Sum, 1 for Average; times the scale factors)."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, name: str | None, op: Any,
                process_set: ProcessSet, prescale_factor: float,
                postscale_factor: float) -> torch.Tensor:
        ctx.process_set = process_set
        ctx.scale = _gradient_scale(op, process_set, prescale_factor, postscale_factor)
        return synchronize(reducescatter_async(tensor, name, op, process_set,
                                               prescale_factor, postscale_factor))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        gathered = synchronize(_allgather_async(grad.contiguous(), name=None,
                                                process_set=ctx.process_set))
        return gathered * ctx.scale, None, None, None, None, None


def reducescatter(tensor: torch.Tensor, name: str | None = None,
                  compression: type[Compressor] = Compression.none, op: Any = Average,
                  process_set: ProcessSet = global_process_set, prescale_factor: float = 1.0,
                  postscale_factor: float = 1.0) -> torch.Tensor:
    """This rank's share of the reduction of ``tensor`` (see :func:`reducescatter_async`)."""
    compressed, ctx = compression.compress(tensor)
    if wants_grad(compressed):
        result = HorovodReducescatter.apply(compressed, name, op, process_set,
                                            prescale_factor, postscale_factor)
    else:
        result = synchronize(reducescatter_async(compressed, name, op, process_set,
                                                 prescale_factor, postscale_factor))
    return compression.decompress(result, ctx)


def grouped_reducescatter_async(tensors: Tensors, name: str | None = None, op: Any = Average,
                                process_set: ProcessSet = global_process_set,
                                prescale_factor: float = 1.0,
                                postscale_factor: float = 1.0) -> int:
    """Start :func:`reducescatter` of every tensor of a list, as one op."""
    tensors = list(tensors)
    staged = [stage(t, "grouped_reducescatter") for t in tensors]
    arrays, base = [s.array for s in staged], tensor_name("reducescatter", name)

    def ops(engine: Any) -> list[Any]:
        names = group_names(engine, base, "grouped_reducescatter", len(arrays))
        return [reducescatter_op(engine, a, op=op, prescale=prescale_factor,
                                 postscale=postscale_factor, name=n, auto=base is None)
                for a, n in zip(arrays, names, strict=True)]

    return submit(process_set, "grouped_reducescatter_async", ops, grouped=True,
                  finish=lambda results: as_tensors(results, tensors), keep=staged)


class HorovodGroupedReducescatter(torch.autograd.Function):
    """Grouped reducescatter as an autograd function (Horovod's class and arguments):
    each gradient as :class:`HorovodReducescatter`'s, the gathers grouped."""

    @staticmethod
    def forward(ctx: Any, name: str | None, op: Any, process_set: ProcessSet,
                prescale_factor: float, postscale_factor: float,
                *tensors: torch.Tensor) -> tuple[Any, ...]:
        ctx.process_set = process_set
        ctx.scale = _gradient_scale(op, process_set, prescale_factor, postscale_factor)
        return tuple(synchronize(grouped_reducescatter_async(
            tensors, name, op, process_set, prescale_factor, postscale_factor)))

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[Any, ...]:
        gathered = synchronize(grouped_allgather_async([g.contiguous() for g in grads],
                                                       process_set=ctx.process_set))
        return (None, None, None, None, None, *[g * ctx.scale for g in gathered])


def grouped_reducescatter(tensors: Tensors, name: str | None = None,
                          compression: type[Compressor] = Compression.none, op: Any = Average,
                          process_set: ProcessSet = global_process_set,
                          prescale_factor: float = 1.0,
                          postscale_factor: float = 1.0) -> list[torch.Tensor]:
    """:func:`reducescatter` of every tensor of a list, as one op; differentiable."""
    pairs = [compression.compress(t) for t in tensors]
    compressed = [t for t, _ in pairs]
    if wants_grad(*compressed):
        results = list(HorovodGroupedReducescatter.apply(
            name, op, process_set, prescale_factor, postscale_factor, *compressed))
    else:
        results = synchronize(grouped_reducescatter_async(compressed, name, op, process_set,
                                                          prescale_factor, postscale_factor))
    return [compression.decompress(r, ctx) for r, (_, ctx) in zip(results, pairs, strict=True)]
