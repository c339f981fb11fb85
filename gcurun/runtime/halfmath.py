"""Fast float16 arithmetic for the runtime's reductions and scaling.

numpy computes float16 one element at a time (each value widened to float32, combined,
rounded back), some 30 ns an element: a 2-rank average of 9.4 M float16 values costs more
than sending them. torch's CPU kernels do the same arithmetic in vector registers, ten to
twenty times faster. When the process has already imported torch (the torch frontend:
``Compression.fp16``), float16 chunks are combined and scaled by torch on zero-copy views
of the same memory; otherwise numpy runs as before (torch is never imported for this:
the numpy and TensorFlow frontends do not pay its start-up).

The bits are numpy's: float32 holds the exact sum, difference and product of two float16
values, and its quotient rounds innocuously (24 >= 2 * 11 + 2 bits), so both libraries
round the same float32 result once; scaling multiplies by the factor as a float32 in
both. Min and max stay with numpy: torch's vector minimum picks the other operand of
equal zeros (-0 against +0) and returns its own NaN bits.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

HALF = np.dtype(np.float16)

# Below this many elements numpy's call costs less than torch's three tensor views.
TORCH_MIN_ELEMENTS = 2048

# The torch function computing each numpy ufunc on float16 (out= accepted), and whether
# it takes the operands swapped: where both are NaN, numpy's add and multiply keep the
# first one's bits, torch's add the first one's and its multiply the second one's.
_TORCH_NAMES: dict[np.ufunc, tuple[str, bool]] = {
    np.add: ("add", False), np.multiply: ("mul", True)}


def _torch() -> Any:
    """torch, when this process has imported it (never imported here)."""
    return sys.modules.get("torch")


def _fits(*arrays: np.ndarray) -> bool:
    """Whether torch may run on ``arrays``: float16 arrays of one shape, large enough,
    writable (torch warns on read-only memory) and without negative strides."""
    first = arrays[0]
    if first.size < TORCH_MIN_ELEMENTS:
        return False
    for arr in arrays:
        if type(arr) is not np.ndarray or arr.dtype != HALF or arr.shape != first.shape \
                or not arr.flags.writeable or min(arr.strides, default=0) < 0:
            return False
    return True


class HalfCombine:
    """A numpy ufunc's call, ``combine(a, b, out=None)``, for float16 arrays: torch's
    kernel when torch is loaded and the arrays suit it, else the ufunc. The results
    are bit for bit the ufunc's."""

    __slots__ = ("name", "swap", "ufunc")

    def __init__(self, ufunc: np.ufunc):
        self.ufunc = ufunc
        self.name, self.swap = _TORCH_NAMES[ufunc]

    def __call__(self, a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None,
                 ) -> np.ndarray:
        torch = _torch()
        if torch is not None and _fits(a, b) and (out is None or _fits(a, out)):
            if out is None:
                out = np.empty_like(a)
            first, second = (b, a) if self.swap else (a, b)
            getattr(torch, self.name)(torch.from_numpy(first), torch.from_numpy(second),
                                      out=torch.from_numpy(out))
            return out
        if out is None:
            return self.ufunc(a, b)
        return self.ufunc(a, b, out=out)

    def __repr__(self) -> str:
        return f"HalfCombine({self.ufunc.__name__})"


HALF_COMBINES: dict[np.ufunc, HalfCombine] = {u: HalfCombine(u) for u in _TORCH_NAMES}


def multiply_half(src: np.ndarray, factor: float, out: np.ndarray) -> bool:
    """``out = src * float32(factor)`` rounded to float16, by torch; False (nothing
    done) when torch is not loaded or the arrays do not suit it."""
    torch = _torch()
    if torch is None or not _fits(src, out):
        return False
    torch.mul(torch.from_numpy(src), float(np.float32(factor)), out=torch.from_numpy(out))
    return True


def divide_half(arr: np.ndarray, size: int) -> bool:
    """``arr /= size`` in place, each quotient rounded once to float16, by torch; False
    (nothing done) when torch is not loaded or the array does not suit it."""
    torch = _torch()
    if torch is None or not _fits(arr) or not -2048 <= size <= 2048:
        return False
    view = torch.from_numpy(arr)
    torch.div(view, size, out=view)
    return True
