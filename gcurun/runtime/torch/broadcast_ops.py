"""Broadcast on torch tensors, with Horovod's names and arguments; the out-of-place
form is differentiable."""

from __future__ import annotations

from typing import Any

import torch

from gcurun.runtime import Average
from gcurun.runtime.frontend.async_ops import members_of, submit
from gcurun.runtime.frontend.build import broadcast_op
from gcurun.runtime.torch._common import finisher, tensor_name, wants_grad
from gcurun.runtime.torch.allreduce_ops import _allreduce_async
from gcurun.runtime.torch.handles import synchronize
from gcurun.runtime.torch.process_sets import ProcessSet, global_process_set
from gcurun.runtime.torch.tensors import stage


def _broadcast_async(tensor: torch.Tensor, root_rank: int, *, inplace: bool,
                     name: str | None, process_set: ProcessSet | None) -> int:
    """The one start of a torch broadcast; ``root_rank`` is a rank of the job, also on a
    process set (Horovod's)."""
    name = tensor_name("broadcast", name)
    what = "broadcast_async_" if inplace else "broadcast_async"
    members = members_of(process_set)
    staged = stage(tensor, "broadcast")
    writes, finish = finisher(staged, inplace=inplace)
    array = staged.array
    return submit(process_set, what, lambda e: [broadcast_op(
        e, array, root_rank=root_rank, name=name, inplace=writes, members=members)],
        finish=finish, keep=staged)


def broadcast_async(tensor: torch.Tensor, root_rank: int, name: str | None = None,
                    process_set: ProcessSet = global_process_set) -> int:
    """Start copying ``root_rank``'s tensor to every rank, as a new tensor."""
    return _broadcast_async(tensor, root_rank, inplace=False, name=name,
                            process_set=process_set)


def broadcast_async_(tensor: torch.Tensor, root_rank: int, name: str | None = None,
                     process_set: ProcessSet = global_process_set) -> int:
    """Start copying ``root_rank``'s tensor into ``tensor`` on every rank."""
    return _broadcast_async(tensor, root_rank, inplace=True, name=name,
                            process_set=process_set)


class HorovodBroadcast(torch.autograd.Function):
    """Broadcast as an autograd function (Horovod's class and arguments): the root gets
    the average of every rank's gradient, the other ranks zeros."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, root_rank: int, name: str | None,
                process_set: ProcessSet) -> torch.Tensor:
        ctx.root_rank = root_rank
        ctx.process_set = process_set
        return synchronize(_broadcast_async(tensor, root_rank, inplace=False, name=name,
                                        process_set=process_set))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        reduced = synchronize(_allreduce_async(grad.contiguous(), inplace=False, name=None,
                                               op=Average, process_set=ctx.process_set))
        where = ctx.process_set or global_process_set
        if where.rank() != (where.ranks or [0]).index(ctx.root_rank):
            reduced = torch.zeros_like(reduced)
        return reduced, None, None, None


def broadcast(tensor: torch.Tensor, root_rank: int, name: str | None = None,
              process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """``root_rank``'s tensor on every rank, as a new tensor."""
    if wants_grad(tensor):
        return HorovodBroadcast.apply(tensor, root_rank, name, process_set)
    return synchronize(_broadcast_async(tensor, root_rank, inplace=False, name=name,
                                        process_set=process_set))


def broadcast_(tensor: torch.Tensor, root_rank: int, name: str | None = None,
               process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """``root_rank``'s tensor copied into ``tensor`` on every rank; returns ``tensor``."""
    return synchronize(_broadcast_async(tensor, root_rank, inplace=True, name=name,
                                        process_set=process_set))
