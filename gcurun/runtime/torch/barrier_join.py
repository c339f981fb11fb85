"""Barrier and join on the torch side: the ops that wait for every rank."""

from __future__ import annotations

import gcurun.runtime as runtime
from gcurun.runtime.torch.process_sets import ProcessSet, global_process_set, member_set


def barrier(process_set: ProcessSet = global_process_set) -> None:
    """Return once every rank (of ``process_set``) has called barrier."""
    runtime.barrier(process_set=member_set(process_set, "barrier"))


def join(device: int = -1) -> int:
    """This rank has run out of data: until every rank has joined, it takes part in the
    others' reductions with neutral data (zeros for sums), so they can finish their
    epochs; allgather, alltoall and broadcast fail meanwhile, as in Horovod. Returns the
    rank that joined last. ``device`` is accepted for Horovod's signature; the neutral
    data lives in host memory."""
    return int(runtime.join())
