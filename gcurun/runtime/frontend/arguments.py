"""What is wrong with a rank's arguments to a collective, as a message (or None).

A rank does not raise on its own bad arguments: the message rides in its negotiation
header, so that every rank stops the call together (see :mod:`gcurun.runtime.engine.negotiation`).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from gcurun.runtime.api import ReduceOp
from gcurun.runtime.dtypes import check_reduce, dtype_code


def dtype_error(arr: np.ndarray) -> str | None:
    """Whether collectives can move ``arr``'s dtype."""
    try:
        dtype_code(arr.dtype)
    except ValueError as exc:
        return str(exc)
    return None


def reduce_op_of(op: Any, average: bool | None, *, warn: bool = False) -> Any:
    """The op of a call that may pass Horovod's deprecated ``average`` flag instead
    (default: Average); ``warn``: a DeprecationWarning for the flag, as the torch and
    TensorFlow bindings give. Raises ValueError when both are passed."""
    if op is not None and average is not None:
        raise ValueError("pass either op or the deprecated average flag, not both")
    if average is not None:
        if warn:
            warnings.warn("average= is deprecated; use op=Average or op=Sum",
                          DeprecationWarning, stacklevel=3)
        return ReduceOp.AVERAGE if average else ReduceOp.SUM
    return ReduceOp.AVERAGE if op is None else op


def checked_reduce_op(op: Any) -> tuple[ReduceOp, str | None]:
    """``op`` as a ReduceOp (Sum stands in for an invalid one, with the message)."""
    if type(op) is ReduceOp:        # the usual case, without an enum lookup
        return op, None
    try:
        return ReduceOp(op), None
    except ValueError:
        return ReduceOp.SUM, (f"op={op!r} is not a reduce op; use Average, Sum, Min, Max or "
                              "Product")


_REDUCE_ERRORS: dict[tuple[np.dtype, ReduceOp, bool], str | None] = {}


def reduce_error(arr: np.ndarray, op: ReduceOp, prescale: float,
                 postscale: float) -> str | None:
    """Whether ``op`` and the scale factors suit ``arr``'s dtype (cached per dtype)."""
    key = (arr.dtype, op, prescale != 1.0 or postscale != 1.0)
    try:
        return _REDUCE_ERRORS[key]
    except KeyError:
        pass
    try:
        dtype_code(arr.dtype)
        check_reduce(op, arr.dtype, key[2])
        error = None
    except ValueError as exc:
        error = str(exc)
    if len(_REDUCE_ERRORS) < 1024:
        _REDUCE_ERRORS[key] = error
    return error


def rows_error(arr: np.ndarray) -> str | None:
    """Whether ``arr`` has rows (a first dimension) to gather, scatter or exchange."""
    if arr.ndim == 0:
        return "a 0-d tensor has no first dimension; reshape it to (1,)"
    return None


def send_counts(arr: np.ndarray, splits: Any, size: int) -> tuple[np.ndarray, str | None]:
    """This rank's send counts per destination, or an error message."""
    rows = arr.shape[0] if arr.ndim else 0
    if splits is None:
        if rows % size:
            return np.zeros(size, np.int64), (
                f"without splits the first dimension ({rows}) must divide evenly among "
                f"{size} ranks; pass splits=[rows for rank 0, rank 1, ...]")
        return np.full(size, rows // size, np.int64), None
    counts = np.asarray(splits).reshape(-1)
    if counts.dtype.kind not in "iu" or len(counts) != size or (counts < 0).any() \
            or int(counts.sum()) != rows:
        return np.zeros(size, np.int64), (
            f"splits={counts.tolist()} must be {size} non-negative integers (one per rank) "
            f"summing to the first dimension ({rows})")
    return counts.astype(np.int64), None
