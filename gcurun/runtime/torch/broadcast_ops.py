"""Broadcast on torch tensors, with Horovod's names and arguments; the out-of-place
form is differentiable."""

from __future__ import annotations

from typing import Any

import torch

from gcurun.runtime import Average
from gcurun.runtime.torch._common import start_allreduce, tensor_name, wants_grad
from gcurun.runtime.torch.handles import register, synchronize
from gcurun.runtime.torch.process_sets import ProcessSet, global_process_set, target
from gcurun.runtime.torch.tensors import stage, to_tensor, write_back


def _broadcast_async(tensor: torch.Tensor, root_rank: int, inplace: bool, name: str | None,
                     process_set: ProcessSet) -> int:
    where = target(process_set)
    root = root_rank            # a rank of the job, also on a process set (Horovod's)
    name = tensor_name("broadcast", name)
    staged = stage(tensor, "broadcast")
    if inplace:
        work = where.broadcast(staged.array, root, True, name)
        return register(work, lambda _: write_back(staged), staged)
    if staged.copied:
        work = where.broadcast(staged.array, root, True, name)
        return register(work, lambda _: to_tensor(staged.array, tensor), staged)
    work = where.broadcast(staged.array, root, False, name)
    return register(work, lambda result: to_tensor(result, tensor), staged)


def broadcast_async(tensor: torch.Tensor, root_rank: int, name: str | None = None,
                    process_set: ProcessSet = global_process_set) -> int:
    """Start copying ``root_rank``'s tensor to every rank, as a new tensor."""
    return _broadcast_async(tensor, root_rank, False, name, process_set)


def broadcast_async_(tensor: torch.Tensor, root_rank: int, name: str | None = None,
                     process_set: ProcessSet = global_process_set) -> int:
    """Start copying ``root_rank``'s tensor into ``tensor`` on every rank."""
    return _broadcast_async(tensor, root_rank, True, name, process_set)


class HorovodBroadcast(torch.autograd.Function):
    """Broadcast as an autograd function (Horovod's class and arguments): the root gets
    the average of every rank's gradient, the other ranks zeros."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, root_rank: int, name: str | None,
                process_set: ProcessSet) -> torch.Tensor:
        ctx.root_rank = root_rank
        ctx.process_set = process_set
        return synchronize(_broadcast_async(tensor, root_rank, False, name, process_set))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        reduced = synchronize(start_allreduce(grad.contiguous(), False, None, Average, 1.0,
                                              1.0, ctx.process_set))
        where = ctx.process_set or global_process_set
        if where.rank() != (where.ranks or [0]).index(ctx.root_rank):
            reduced = torch.zeros_like(reduced)
        return reduced, None, None, None


def broadcast(tensor: torch.Tensor, root_rank: int, name: str | None = None,
              process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """``root_rank``'s tensor on every rank, as a new tensor."""
    if wants_grad(tensor):
        return HorovodBroadcast.apply(tensor, root_rank, name, process_set)
    return synchronize(_broadcast_async(tensor, root_rank, False, name, process_set))


def broadcast_(tensor: torch.Tensor, root_rank: int, name: str | None = None,
               process_set: ProcessSet = global_process_set) -> torch.Tensor:
    """``root_rank``'s tensor copied into ``tensor`` on every rank; returns ``tensor``."""
    return synchronize(_broadcast_async(tensor, root_rank, True, name, process_set))
