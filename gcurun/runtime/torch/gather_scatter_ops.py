"""Allgather, alltoall and reducescatter on torch tensors, with Horovod's names,
arguments and results; the synchronous forms are differentiable."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from gcurun.runtime import Average
from gcurun.runtime.torch._common import (
    Tensors,
    as_tensors,
    start_allgather,
    start_allreduce,
    wants_grad,
)
from gcurun.runtime.torch.compression import Compression, Compressor
from gcurun.runtime.torch.handles import register, synchronize
from gcurun.runtime.torch.process_sets import ProcessSet, global_process_set, target
from gcurun.runtime.torch.tensors import stage, to_tensor

# -- allgather ---------------------------------------------------------------------------


def allgather_async(tensor: torch.Tensor, name: str | None = None,
                    process_set: ProcessSet = global_process_set) -> int:
    """Start concatenating every rank's ``tensor`` along the first dimension (which may
    differ between ranks), in rank order."""
    return start_allgather(tensor, name, process_set)


class _Allgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, name: str | None,
                process_set: ProcessSet) -> torch.Tensor:
        ctx.rows = tensor.shape[0]
        ctx.process_set = process_set
        return synchronize(start_allgather(tensor, name, process_set))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        # Horovod's convention: the gathered gradient is averaged over the ranks, then
        # each rank takes back the rows it contributed.
        reduced = synchronize(start_allreduce(grad.contiguous(), False, None, Average, 1.0,
                                              1.0, ctx.process_set))
        rows = synchronize(start_allgather(torch.tensor([ctx.rows], dtype=torch.int64), None,
                                           ctx.process_set))
        where = ctx.process_set or global_process_set
        me = where.rank() or 0
        start = int(rows[:me].sum())
        return reduced.narrow(0, start, ctx.rows), None, None


def allgather(tensor: torch.Tensor, name: str | None = None,
              process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """Every rank's ``tensor`` concatenated along the first dimension, in rank order."""
    if wants_grad(tensor):
        return _Allgather.apply(tensor, name, process_set)
    return synchronize(start_allgather(tensor, name, process_set))


def grouped_allgather_async(tensors: Tensors, name: str | None = None,
                            process_set: ProcessSet = global_process_set) -> int:
    """Start :func:`allgather` of every tensor of a list, as one op."""
    tensors = list(tensors)
    staged = [stage(t, "grouped_allgather") for t in tensors]
    work = target(process_set).grouped_allgather([s.array for s in staged], name)
    return register(work, lambda results: as_tensors(results, tensors), staged)


def grouped_allgather(tensors: Tensors, name: str | None = None,
                      process_set: ProcessSet = global_process_set) -> list[torch.Tensor]:
    """:func:`allgather` of every tensor of a list, as one op."""
    return synchronize(grouped_allgather_async(tensors, name, process_set))


# -- alltoall ----------------------------------------------------------------------------


def _splits_array(splits: Any) -> np.ndarray | None:
    if splits is None:
        return None
    if isinstance(splits, torch.Tensor):
        return splits.detach().cpu().numpy().astype(np.int64).reshape(-1)
    return np.asarray(splits, dtype=np.int64).reshape(-1)


def alltoall_async(tensor: torch.Tensor, splits: Any = None, name: str | None = None,
                   process_set: ProcessSet = global_process_set) -> int:
    """Start sending rows ``splits[j]`` of ``tensor`` (consecutive, in rank order) to rank
    j (without splits: the first dimension divided evenly). :func:`synchronize` returns
    (the rows received from every rank in rank order, how many came from each)."""
    staged = stage(tensor, "alltoall")
    work = target(process_set).alltoall(staged.array, _splits_array(splits), name)

    def finish(result: tuple[np.ndarray, np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
        output, received = result
        return to_tensor(output, tensor), torch.from_numpy(np.asarray(received, np.int32))

    return register(work, finish, staged)


class _Alltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, splits: Any, name: str | None,
                process_set: ProcessSet) -> tuple[torch.Tensor, torch.Tensor]:
        output, received = synchronize(alltoall_async(tensor, splits, name, process_set))
        ctx.received = received
        ctx.process_set = process_set
        ctx.mark_non_differentiable(received)
        return output, received

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor, *unused: Any) -> tuple[Any, ...]:
        back, _ = synchronize(alltoall_async(grad.contiguous(), ctx.received, None,
                                             ctx.process_set))
        return back, None, None, None


def alltoall(tensor: torch.Tensor, splits: Any = None, name: str | None = None,
             process_set: ProcessSet = global_process_set) -> Any:
    """The rows every rank sent to this one, in rank order; with ``splits`` also the
    number of rows received from each rank (Horovod returns both only then)."""
    if wants_grad(tensor):
        output, received = _Alltoall.apply(tensor, splits, name, process_set)
    else:
        output, received = synchronize(alltoall_async(tensor, splits, name, process_set))
    return output if splits is None else (output, received)


# -- reducescatter -----------------------------------------------------------------------


def reducescatter_async(tensor: torch.Tensor, name: str | None = None, op: Any = Average,
                        process_set: ProcessSet = global_process_set,
                        prescale_factor: float = 1.0, postscale_factor: float = 1.0) -> int:
    """Start reducing ``tensor`` over the ranks, each keeping its share of the first
    dimension (split as evenly as possible, lower ranks taking one row more)."""
    staged = stage(tensor, "reducescatter")
    work = target(process_set).reducescatter(staged.array, op, prescale_factor,
                                             postscale_factor, name)
    return register(work, lambda result: to_tensor(result, tensor), staged)


class _Reducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, name: str | None, op: Any,
                process_set: ProcessSet, pre: float, post: float) -> torch.Tensor:
        ctx.args = (op, process_set, pre * post)
        return synchronize(reducescatter_async(tensor, name, op, process_set, pre, post))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        op, process_set, scale = ctx.args
        gathered = synchronize(start_allgather(grad.contiguous(), None, process_set))
        if op == Average:
            scale /= len((process_set or global_process_set).ranks or [0])
        return gathered * scale, None, None, None, None, None


def reducescatter(tensor: torch.Tensor, name: str | None = None,
                  compression: type[Compressor] = Compression.none, op: Any = Average,
                  process_set: ProcessSet = global_process_set, prescale_factor: float = 1.0,
                  postscale_factor: float = 1.0) -> torch.Tensor:
    """This rank's share of the reduction of ``tensor`` (see :func:`reducescatter_async`)."""
    compressed, ctx = compression.compress(tensor)
    if wants_grad(compressed):
        result = _Reducescatter.apply(compressed, name, op, process_set, prescale_factor,
                                      postscale_factor)
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
    work = target(process_set).grouped_reducescatter([s.array for s in staged], op,
                                                     prescale_factor, postscale_factor, name)
    return register(work, lambda results: as_tensors(results, tensors), staged)


def grouped_reducescatter(tensors: Tensors, name: str | None = None,
                          compression: type[Compressor] = Compression.none, op: Any = Average,
                          process_set: ProcessSet = global_process_set,
                          prescale_factor: float = 1.0,
                          postscale_factor: float = 1.0) -> list[torch.Tensor]:
    """:func:`reducescatter` of every tensor of a list, as one op."""
    pairs = [compression.compress(t) for t in tensors]
    results = synchronize(grouped_reducescatter_async([t for t, _ in pairs], name, op,
                                                      process_set, prescale_factor,
                                                      postscale_factor))
    return [compression.decompress(r, ctx) for r, (_, ctx) in zip(results, pairs, strict=True)]
