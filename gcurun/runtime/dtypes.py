"""The dtypes collectives accept, how each reduction combines them, and buffer handling."""

from __future__ import annotations

import mmap
from collections.abc import Callable
from typing import Any

import numpy as np

from gcurun.runtime.api import ReduceOp
from gcurun.runtime.halfmath import HALF, HALF_COMBINES, divide_half, multiply_half

# Wire codes of the supported dtypes. The order is part of the protocol between ranks.
DTYPES: tuple[np.dtype, ...] = tuple(np.dtype(t) for t in (
    np.bool_, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64,
    np.uint64, np.float16, np.float32, np.float64, np.longdouble, np.complex64,
    np.complex128, np.clongdouble,
))
DTYPE_CODES: dict[np.dtype, int] = {dt: code for code, dt in enumerate(DTYPES)}
NO_DTYPE = 255

UFUNCS: dict[ReduceOp, np.ufunc] = {
    ReduceOp.AVERAGE: np.add,
    ReduceOp.SUM: np.add,
    ReduceOp.MIN: np.minimum,
    ReduceOp.MAX: np.maximum,
    ReduceOp.PRODUCT: np.multiply,
}

# How a reduction combines two blocks: ``combine(a, b, out=None)``, as a numpy ufunc
# is called (and for most dtypes it is one).
Combine = Callable[..., Any]


def combine(op: ReduceOp, dtype: np.dtype) -> Combine:
    """What combines two blocks of ``dtype`` for ``op``: the ufunc of :data:`UFUNCS`,
    or for float16 its fast twin of :mod:`gcurun.runtime.halfmath` (the same bits)."""
    ufunc = UFUNCS[op]
    if dtype == HALF:
        return HALF_COMBINES.get(ufunc, ufunc)
    return ufunc


def dtype_code(dtype: np.dtype) -> int:
    """The wire code of ``dtype``; raises ValueError naming the supported dtypes."""
    code = DTYPE_CODES.get(dtype)
    if code is None:
        raise ValueError(f"dtype {dtype.str} ({dtype}) is not supported; use a native-endian "
                         "bool, integer, float or complex dtype "
                         f"({', '.join(d.name for d in DTYPES)})")
    return code


def as_array(obj: Any) -> np.ndarray:
    """A numpy view of ``obj`` when it exports a buffer (so in-place ops write through),
    else a new array (lists, Python scalars)."""
    if isinstance(obj, np.ndarray):
        return obj
    try:
        view = memoryview(obj)
    except TypeError:
        return np.asarray(obj)
    return np.asarray(view)


HUGE_PAGE = 2 << 20


def aligned_empty(count: int, dtype: np.dtype | type) -> np.ndarray:
    """An uninitialised array whose memory starts on a 2 MiB boundary and may be backed
    by transparent huge pages: page-table walks (of the reducing CPU, and of a peer's
    single-copy reads) cost far less than on 4 KiB pages. Small arrays come from numpy."""
    dtype = np.dtype(dtype)
    nbytes = count * dtype.itemsize
    if nbytes < HUGE_PAGE // 2:
        return np.empty(count, dtype)
    # Private, not the shared default: shared anonymous memory gets no huge pages.
    region = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        region.madvise(mmap.MADV_HUGEPAGE)
    raw = np.frombuffer(region, np.uint8)
    start = -raw.__array_interface__["data"][0] % HUGE_PAGE
    return raw[start:start + nbytes].view(dtype)


def flat_contiguous(arr: np.ndarray) -> np.ndarray:
    """A 1-D C-contiguous view of ``arr`` (a copy only when ``arr`` is not contiguous)."""
    return np.ascontiguousarray(arr).reshape(-1)


def check_reduce(op: ReduceOp, dtype: np.dtype, scaled: bool) -> None:
    """Raise ValueError when ``op`` or scaling makes no sense for ``dtype``."""
    if op is ReduceOp.ADASUM:
        raise ValueError("op=Adasum is not supported by gcurun; use Average or Sum")
    if dtype.kind == "b" and (op is ReduceOp.AVERAGE or scaled):
        raise ValueError("bool tensors reduce with Sum/Max (logical or) or Product/Min "
                         "(logical and); Average and scale factors need a numeric dtype")
    if dtype.kind == "c" and op in (ReduceOp.MIN, ReduceOp.MAX):
        raise ValueError(f"op={op.title} has no order on complex dtype {dtype}; "
                         "reduce the real and imaginary parts separately")


def scale(arr: np.ndarray, factor: float) -> None:
    """Multiply ``arr`` in place by ``factor`` (see :func:`scale_into`)."""
    if factor != 1.0:
        scale_into(arr, factor, arr)


_HALF_MATH = np.dtype(np.float32)


def scale_into(src: np.ndarray, factor: float, out: np.ndarray) -> None:
    """``out = src * factor``, as Horovod scales on a CPU: float16 computes in float32
    (numpy alone would round the factor to half precision first), integer dtypes in
    float64, truncating toward zero; other dtypes in their own precision."""
    if src.dtype == HALF:
        if multiply_half(src, factor, out):
            return
        np.multiply(src, np.float32(factor), out=out, dtype=_HALF_MATH, casting="unsafe")
    else:
        np.multiply(src, factor, out=out, casting="unsafe")


def average(arr: np.ndarray, size: int, postscale: float) -> None:
    """Turn a sum into an average in place. Integer dtypes divide exactly, rounding
    toward zero as Horovod does (-3 / 2 is -1), then apply ``postscale``. Floating
    dtypes get the correctly rounded quotient, ``sum / size``: what a reference computed
    with a division (a test, ``torch.mean``) gets. Multiplying by ``1 / size`` gives the
    same bits when ``size`` is a power of two, and costs a third of a division, so that
    is what runs then; for other sizes ``x * (1 / 3)`` is one unit in the last place off
    ``x / 3`` for some ``x``. With a ``postscale`` the factor is ``postscale / size``, one
    rounding, as in Horovod."""
    if arr.dtype.kind in "iu":
        if arr.dtype.kind == "i":
            # The remainder taken away first, the division is exact, so floor division
            # gives the quotient rounded toward zero.
            np.subtract(arr, np.fmod(arr, size), out=arr)
        np.floor_divide(arr, size, out=arr)
        scale(arr, postscale)
    elif postscale != 1.0 or size & (size - 1) == 0:
        scale(arr, postscale / size)
    elif arr.dtype != HALF or not divide_half(arr, size):
        np.divide(arr, size, out=arr, casting="unsafe")
