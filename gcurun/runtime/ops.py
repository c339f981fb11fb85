"""The collectives of the running job as plain functions (Horovod's names and arguments)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from gcurun.runtime import basics
from gcurun.runtime.api import NotInitializedError, ReduceOp
from gcurun.runtime.basics import communicator

Average = ReduceOp.AVERAGE
Sum = ReduceOp.SUM
Adasum = ReduceOp.ADASUM
Min = ReduceOp.MIN
Max = ReduceOp.MAX
Product = ReduceOp.PRODUCT


def _op(op: Any, average: bool | None) -> Any:
    if op is not None and average is not None:
        raise ValueError("pass either op or the older average flag, not both")
    if average is not None:
        return Average if average else Sum
    return Average if op is None else op


def allreduce(tensor: Any, average: bool | None = None, name: str | None = None,
              op: Any = None, prescale_factor: float = 1.0,
              postscale_factor: float = 1.0) -> np.ndarray:
    """The reduction of ``tensor`` over all ranks (default: the average), a new array of
    the same shape and dtype. ``prescale_factor`` multiplies each input and
    ``postscale_factor`` the result. Every rank must pass the same shape, dtype and op."""
    if op is None or average is not None:
        op = _op(op, average)
    state = basics._state          # read directly: this call is the latency of small tensors
    if state is None:
        raise NotInitializedError("allreduce")
    return state.communicator.allreduce(tensor, op, prescale_factor, postscale_factor, name)


def allreduce_(tensor: Any, average: bool | None = None, name: str | None = None,
               op: Any = None, prescale_factor: float = 1.0,
               postscale_factor: float = 1.0) -> np.ndarray:
    """:func:`allreduce` written into ``tensor`` (a writable array or buffer)."""
    return communicator("allreduce_").allreduce(tensor, _op(op, average), prescale_factor,
                                                postscale_factor, name, inplace=True)


def allgather(tensor: Any, name: str | None = None) -> np.ndarray:
    """Every rank's tensor concatenated along the first dimension, in rank order; the
    first dimension may differ between ranks, the others may not."""
    return communicator("allgather").allgather(tensor, name)


def broadcast(tensor: Any, root_rank: int, name: str | None = None) -> np.ndarray:
    """A new array holding ``root_rank``'s tensor, on every rank."""
    return communicator("broadcast").broadcast(tensor, root_rank, name)


def broadcast_(tensor: Any, root_rank: int, name: str | None = None) -> np.ndarray:
    """:func:`broadcast` written into ``tensor``."""
    return communicator("broadcast_").broadcast(tensor, root_rank, name, inplace=True)


def alltoall(tensor: Any, splits: Sequence[int] | np.ndarray | None = None,
             name: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Rank r sends its rows ``splits[j]`` (consecutive, in rank order) to rank j; returns
    (rows received from every rank in rank order, how many came from each). Without
    splits the first dimension is divided evenly."""
    return communicator("alltoall").alltoall(tensor, splits, name)


def reducescatter(tensor: Any, name: str | None = None, op: Any = Average,
                  prescale_factor: float = 1.0, postscale_factor: float = 1.0) -> np.ndarray:
    """This rank's share of the reduction: the first dimension is split as evenly as
    possible, lower ranks taking one row more."""
    return communicator("reducescatter").reducescatter(tensor, op, prescale_factor,
                                                       postscale_factor, name)


def barrier() -> None:
    """Return once every rank has entered the barrier."""
    communicator("barrier").barrier()


def broadcast_object(obj: Any, root_rank: int = 0, name: str | None = None) -> Any:
    """``root_rank``'s Python object (pickled) on every rank."""
    return communicator("broadcast_object").broadcast_object(obj, root_rank, name)


def allgather_object(obj: Any, name: str | None = None) -> list[Any]:
    """Every rank's Python object (pickled), as a list in rank order."""
    return communicator("allgather_object").allgather_object(obj, name)
