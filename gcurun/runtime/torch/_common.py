"""What the torch ops modules share: starting an allreduce or an allgather (the
backward passes of other ops use them), and the autograd and result helpers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from gcurun.runtime import Adasum
from gcurun.runtime.torch import adasum
from gcurun.runtime.torch.handles import register
from gcurun.runtime.torch.process_sets import ProcessSet, target
from gcurun.runtime.torch.tensors import stage, to_tensor, write_back

Tensors = Sequence[torch.Tensor]


def tensor_name(kind: str, name: str | None) -> str | None:
    """The engine's name of a tensor the caller named: Horovod's torch binding names it
    after the op (``allreduce.grad.w``), which timelines and duplicate checks show.
    Unnamed ops get the engine's own names (``allreduce.unnamed.3``)."""
    return None if name is None else f"{kind}.{name}"


def wants_grad(*tensors: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and any(getattr(t, "requires_grad", False) for t in tensors)


def as_tensors(results: Sequence[np.ndarray], like: Tensors) -> list[torch.Tensor]:
    return [to_tensor(result, t) for result, t in zip(results, like, strict=True)]


# -- starting the ops that other ops' backward passes use --------------------------------


def start_allreduce(tensor: torch.Tensor, inplace: bool, name: str | None, op: Any,
                    pre: float, post: float, process_set: ProcessSet) -> int:
    where = target(process_set)
    name = tensor_name("allreduce", name)
    if op == Adasum:
        return adasum.allreduce_async(tensor, inplace, name, pre, post, where)
    staged = stage(tensor, "allreduce")
    if inplace:
        work = where.allreduce(staged.array, True, op, pre, post, name)
        return register(work, lambda _: write_back(staged), staged)
    if staged.copied:         # the host copy is private: reduce it in place
        work = where.allreduce(staged.array, True, op, pre, post, name)
        return register(work, lambda _: to_tensor(staged.array, tensor), staged)
    work = where.allreduce(staged.array, False, op, pre, post, name)
    return register(work, lambda result: to_tensor(result, tensor), staged)


def start_allgather(tensor: torch.Tensor, name: str | None,
                    process_set: ProcessSet) -> int:
    staged = stage(tensor, "allgather")
    work = target(process_set).allgather(staged.array, tensor_name("allgather", name))
    return register(work, lambda result: to_tensor(result, tensor), staged)
