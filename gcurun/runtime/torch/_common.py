"""What the torch ops modules share: engine names, the autograd test and the helpers
that turn the runtime's numpy results into torch tensors."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from gcurun.runtime.torch.tensors import Staged, to_tensor, write_back

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


def finisher(staged: Staged, *, inplace: bool) -> tuple[bool, Callable[[Any], torch.Tensor]]:
    """Whether the engine may write into ``staged``'s host array, and how its result
    becomes the torch result: written back into the caller's tensor (``inplace``), or a
    new tensor (a private host copy is reduced in place, saving the engine a buffer)."""
    if inplace:
        return True, lambda _: write_back(staged)
    if staged.copied:
        return True, lambda _: to_tensor(staged.array, staged.tensor)
    return False, lambda result: to_tensor(result, staged.tensor)
