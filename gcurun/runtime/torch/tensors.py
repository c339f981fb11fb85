"""Torch tensors as the numpy arrays the runtime moves.

A contiguous CPU tensor of a dtype numpy knows is handed over as ``tensor.numpy()``, which
shares its memory: no copy in either direction. Anything else (another device, a
non-contiguous layout, bfloat16, which numpy lacks) is staged through a contiguous host
copy; an in-place op writes the result back into the caller's tensor.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

# Dtypes whose CPU tensors numpy can view without a copy.
SHARED_DTYPES = frozenset({
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
    torch.uint16, torch.uint32, torch.uint64, torch.float16, torch.float32, torch.float64,
    torch.complex64, torch.complex128,
})
# Dtypes numpy lacks, moved as a wider one it has (exact: every value converts back).
WIDENED = {torch.bfloat16: torch.float32}


class Staged(NamedTuple):
    """A tensor and the host array the runtime reads (and, in place, writes)."""

    tensor: torch.Tensor        # the caller's tensor
    host: torch.Tensor          # contiguous CPU tensor of a numpy dtype; may be ``tensor``
    array: np.ndarray           # ``host.numpy()``: the same memory as ``host``
    copied: bool                # ``host`` is a copy, so in-place results are written back


def stage(tensor: torch.Tensor, what: str) -> Staged:
    """The host array of ``tensor`` (see the module docstring).

    Raises TypeError for what is not a dense tensor of a supported dtype.
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{what}: expected a torch.Tensor, got {type(tensor).__name__}; "
                        "wrap the value with torch.tensor(...)")
    data = tensor.detach()
    if data.layout is not torch.strided:
        raise TypeError(f"{what}: a {data.layout} tensor cannot be reduced densely; convert "
                        "it with .to_dense() (DistributedOptimizer handles sparse gradients)")
    if (data.device.type == "cpu" and data.dtype in SHARED_DTYPES and data.is_contiguous()
            and not data.is_conj() and not data.is_neg()):
        return Staged(tensor, data, data.numpy(), False)
    wide = WIDENED.get(data.dtype, data.dtype)
    if wide not in SHARED_DTYPES:
        names = ", ".join(sorted(str(d).removeprefix("torch.") for d in
                                 SHARED_DTYPES | set(WIDENED)))
        raise TypeError(f"{what}: dtype {data.dtype} is not supported; use one of {names}")
    # Every branch that gets here copies: a device move, a dtype change, a layout change
    # or the resolution of a lazy conjugate/negation.
    host = data.to(device="cpu", dtype=wide).resolve_conj().resolve_neg().contiguous()
    return Staged(tensor, host, host.numpy(), True)


def to_tensor(array: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    """A tensor of ``like``'s dtype and device holding ``array`` (no copy when ``like``
    is a CPU tensor numpy shares memory with)."""
    result = torch.from_numpy(np.asarray(array))
    if result.dtype != like.dtype or like.device.type != "cpu":
        result = result.to(device=like.device, dtype=like.dtype)
    return result


def write_back(staged: Staged) -> torch.Tensor:
    """Finish an in-place op: copy a staged result into the caller's tensor."""
    if staged.copied:
        with torch.no_grad():
            staged.tensor.copy_(staged.host)
    return staged.tensor
