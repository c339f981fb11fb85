"""Allgather and alltoall on torch tensors, with Horovod's names, arguments and results;
the synchronous forms are differentiable (Horovod's autograd classes)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from gcurun.runtime import Average
from gcurun.runtime.frontend.async_ops import submit
from gcurun.runtime.frontend.build import allgather_op, alltoall_op, group_names
from gcurun.runtime.torch._common import Tensors, as_tensors, tensor_name, wants_grad
from gcurun.runtime.torch.allreduce_ops import _allreduce_async, grouped_allreduce_async
from gcurun.runtime.torch.handles import synchronize
from gcurun.runtime.torch.process_sets import ProcessSet, global_process_set
from gcurun.runtime.torch.tensors import stage, to_tensor

# -- allgather ---------------------------------------------------------------------------


def allgather_async(tensor: torch.Tensor, name: str | None = None,
                    process_set: ProcessSet = global_process_set) -> int:
    """Start concatenating every rank's ``tensor`` along the first dimension (which may
    differ between ranks), in rank order."""
    return _allgather_async(tensor, name=name, process_set=process_set)


def _allgather_async(tensor: torch.Tensor, *, name: str | None,
                     process_set: ProcessSet | None) -> int:
    """The one start of a torch allgather (also of other ops' backward passes)."""
    staged = stage(tensor, "allgather")
    array, name = staged.array, tensor_name("allgather", name)
    return submit(process_set, "allgather_async", lambda e: [allgather_op(e, array, name=name)],
                  finish=lambda result: to_tensor(result, tensor), keep=staged)


def _my_rows(rows: torch.Tensor, process_set: ProcessSet) -> tuple[int, int]:
    """(where this rank's rows start, how many) in a gather whose ranks contributed
    ``rows`` (a column per rank, one row per tensor): for each tensor of the gather."""
    me = (process_set or global_process_set).rank() or 0
    return int(rows[:me].sum()), int(rows[me])


class HorovodAllgather(torch.autograd.Function):
    """Allgather as an autograd function (Horovod's class and arguments): the gathered
    gradient is averaged over the ranks, and each rank takes back its own rows."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, name: str | None,
                process_set: ProcessSet) -> torch.Tensor:
        ctx.rows = tensor.shape[0]
        ctx.process_set = process_set
        return synchronize(_allgather_async(tensor, name=name, process_set=process_set))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        reduced = synchronize(_allreduce_async(grad.contiguous(), inplace=False, name=None,
                                               op=Average, process_set=ctx.process_set))
        rows = synchronize(_allgather_async(torch.tensor([ctx.rows], dtype=torch.int64),
                                            name=None, process_set=ctx.process_set))
        start, count = _my_rows(rows, ctx.process_set)
        return reduced.narrow(0, start, count), None, None


def allgather(tensor: torch.Tensor, name: str | None = None,
              process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """Every rank's ``tensor`` concatenated along the first dimension, in rank order."""
    if wants_grad(tensor):
        return HorovodAllgather.apply(tensor, name, process_set)
    return synchronize(_allgather_async(tensor, name=name, process_set=process_set))


def grouped_allgather_async(tensors: Tensors, name: str | None = None,
                            process_set: ProcessSet = global_process_set) -> int:
    """Start :func:`allgather` of every tensor of a list, as one op."""
    tensors = list(tensors)
    staged = [stage(t, "grouped_allgather") for t in tensors]
    arrays, base = [s.array for s in staged], tensor_name("allgather", name)

    def ops(engine: Any) -> list[Any]:
        names = group_names(engine, base, "grouped_allgather", len(arrays))
        return [allgather_op(engine, a, name=n, auto=base is None)
                for a, n in zip(arrays, names, strict=True)]

    return submit(process_set, "grouped_allgather_async", ops, grouped=True,
                  finish=lambda results: as_tensors(results, tensors), keep=staged)


class HorovodGroupedAllgather(torch.autograd.Function):
    """Grouped allgather as an autograd function (Horovod's class and arguments): each
    gradient as :class:`HorovodAllgather`'s, the reductions grouped."""

    @staticmethod
    def forward(ctx: Any, name: str | None, process_set: ProcessSet,
                *tensors: torch.Tensor) -> tuple[Any, ...]:
        ctx.rows = [t.shape[0] for t in tensors]
        ctx.process_set = process_set
        return tuple(synchronize(grouped_allgather_async(tensors, name, process_set)))

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[Any, ...]:
        reduced = synchronize(grouped_allreduce_async([g.contiguous() for g in grads],
                                                      op=Average,
                                                      process_set=ctx.process_set))
        rows = synchronize(_allgather_async(torch.tensor([ctx.rows], dtype=torch.int64),
                                            name=None, process_set=ctx.process_set))
        mine = [_my_rows(rows[:, i], ctx.process_set) for i in range(len(ctx.rows))]
        return (None, None, *[r.narrow(0, start, count)
                              for r, (start, count) in zip(reduced, mine, strict=True)])


def grouped_allgather(tensors: Tensors, name: str | None = None,
                      process_set: ProcessSet = global_process_set) -> list[torch.Tensor]:
    """:func:`allgather` of every tensor of a list, as one op; differentiable."""
    tensors = list(tensors)
    if wants_grad(*tensors):
        return list(HorovodGroupedAllgather.apply(name, process_set, *tensors))
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
    array, sends, name = staged.array, _splits_array(splits), tensor_name("alltoall", name)

    def finish(result: tuple[np.ndarray, np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
        output, received = result
        return to_tensor(output, tensor), torch.from_numpy(np.asarray(received, np.int32))

    return submit(process_set, "alltoall_async", lambda e: [alltoall_op(
        e, array, splits=sends, name=name)], finish=finish, keep=staged)


class HorovodAlltoall(torch.autograd.Function):
    """Alltoall as an autograd function (Horovod's class and arguments): the received
    rows, and with ``splits`` also how many came from each rank. The gradient goes back
    the way the rows came."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, splits: Any, name: str | None,
                process_set: ProcessSet) -> Any:
        output, received = synchronize(alltoall_async(tensor, splits, name, process_set))
        ctx.received = received
        ctx.process_set = process_set
        if splits is None:
            return output
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
        return HorovodAlltoall.apply(tensor, splits, name, process_set)
    output, received = synchronize(alltoall_async(tensor, splits, name, process_set))
    return output if splits is None else (output, received)
