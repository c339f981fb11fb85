"""The synchronous collectives of the running job as plain functions (Horovod's names
and arguments); ``process_set`` runs one among a set's members (default: the whole job).

Each raises NotInitializedError before init(); ValueError for a set this rank may not
use; MismatchError (ranks disagree) or ArgumentError (a rank's arguments are invalid) on
every rank of the op; PeerFailureError or CollectiveTimeout when a peer fails or stalls.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from gcurun.runtime.api import NotInitializedError, ReduceOp
from gcurun.runtime.frontend import state as job
from gcurun.runtime.frontend.arguments import reduce_op_of
from gcurun.runtime.frontend.process_sets import ProcessSet, collectives_of, global_process_set

Average = ReduceOp.AVERAGE
Sum = ReduceOp.SUM
Adasum = ReduceOp.ADASUM
Min = ReduceOp.MIN
Max = ReduceOp.MAX
Product = ReduceOp.PRODUCT


def allreduce(tensor: Any, average: bool | None = None, name: str | None = None,
              op: Any = None, prescale_factor: float = 1.0,
              postscale_factor: float = 1.0,
              process_set: ProcessSet = global_process_set) -> np.ndarray:
    """The reduction of ``tensor`` over all ranks (default: the average), a new array of
    the same shape and dtype. ``prescale_factor`` multiplies each input and
    ``postscale_factor`` the result. Every rank must pass the same shape, dtype and op."""
    if op is None or average is not None:
        op = reduce_op_of(op, average)
    if process_set is global_process_set:
        state = job.current_state()     # the short way: this is a tiny tensor's latency
        if state is None:
            raise NotInitializedError("allreduce")
        collectives = state.communicator
    else:
        collectives = collectives_of(process_set, "allreduce")
    return collectives.allreduce(tensor, op, prescale_factor, postscale_factor, name)


def allreduce_(tensor: Any, average: bool | None = None, name: str | None = None,
               op: Any = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
               process_set: ProcessSet = global_process_set) -> np.ndarray:
    """:func:`allreduce` written into ``tensor`` (a writable array or buffer)."""
    return collectives_of(process_set, "allreduce_").allreduce(
        tensor, reduce_op_of(op, average), prescale_factor, postscale_factor, name,
        inplace=True)


def allgather(tensor: Any, name: str | None = None,
              process_set: ProcessSet = global_process_set) -> np.ndarray:
    """Every rank's tensor concatenated along the first dimension, in rank order; the
    first dimension may differ between ranks, the others may not."""
    return collectives_of(process_set, "allgather").allgather(tensor, name)


def broadcast(tensor: Any, root_rank: int, name: str | None = None,
              process_set: ProcessSet = global_process_set) -> np.ndarray:
    """A new array holding ``root_rank``'s tensor (a rank of the job), on every rank."""
    return collectives_of(process_set, "broadcast").broadcast(tensor, root_rank, name)


def broadcast_(tensor: Any, root_rank: int, name: str | None = None,
               process_set: ProcessSet = global_process_set) -> np.ndarray:
    """:func:`broadcast` written into ``tensor``."""
    return collectives_of(process_set, "broadcast_").broadcast(tensor, root_rank, name,
                                                               inplace=True)


def alltoall(tensor: Any, splits: Sequence[int] | np.ndarray | None = None,
             name: str | None = None,
             process_set: ProcessSet = global_process_set) -> tuple[np.ndarray, np.ndarray]:
    """Rank r sends its rows ``splits[j]`` (consecutive, in rank order) to rank j; returns
    (rows received from every rank in rank order, how many came from each). Without
    splits the first dimension is divided evenly."""
    return collectives_of(process_set, "alltoall").alltoall(tensor, splits, name)


def reducescatter(tensor: Any, name: str | None = None, op: Any = Average,
                  prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                  process_set: ProcessSet = global_process_set) -> np.ndarray:
    """This rank's share of the reduction: the first dimension is split as evenly as
    possible, lower ranks taking one row more."""
    return collectives_of(process_set, "reducescatter").reducescatter(
        tensor, op, prescale_factor, postscale_factor, name)


def barrier(process_set: ProcessSet = global_process_set) -> None:
    """Return once every rank (of the set) has entered the barrier."""
    collectives_of(process_set, "barrier").barrier()


def broadcast_object(obj: Any, root_rank: int = 0, name: str | None = None,
                     process_set: ProcessSet = global_process_set) -> Any:
    """``root_rank``'s Python object (pickled) on every rank."""
    return collectives_of(process_set, "broadcast_object").broadcast_object(obj, root_rank,
                                                                            name)


def allgather_object(obj: Any, name: str | None = None,
                     process_set: ProcessSet = global_process_set) -> list[Any]:
    """Every rank's Python object (pickled), as a list in rank order."""
    return collectives_of(process_set, "allgather_object").allgather_object(obj, name)
