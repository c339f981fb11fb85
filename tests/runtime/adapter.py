"""``gcurun.runtime``'s function API over one engine's synchronous collectives, for
thread ranks."""

from __future__ import annotations

from typing import Any

import gcurun.runtime as hvd
from gcurun.runtime.frontend.collectives import Collectives


class EngineAPI:
    Sum, Min, Max, Product, Average = hvd.Sum, hvd.Min, hvd.Max, hvd.Product, hvd.Average
    ArgumentError, MismatchError = hvd.ArgumentError, hvd.MismatchError

    def __init__(self, comm: Collectives):
        self.comm = comm

    def rank(self) -> int:
        return self.comm.rank

    def size(self) -> int:
        return self.comm.size

    def allreduce(self, x: Any, op: Any = hvd.Average, name: str | None = None,
                  prescale_factor: float = 1.0, postscale_factor: float = 1.0) -> Any:
        return self.comm.allreduce(x, op, prescale_factor, postscale_factor, name)

    def allreduce_(self, x: Any, op: Any = hvd.Average, name: str | None = None) -> Any:
        return self.comm.allreduce(x, op, 1.0, 1.0, name, inplace=True)

    def reducescatter(self, x: Any, op: Any = hvd.Average, name: str | None = None) -> Any:
        return self.comm.reducescatter(x, op, 1.0, 1.0, name)

    def allgather(self, x: Any, name: str | None = None) -> Any:
        return self.comm.allgather(x, name)

    def broadcast(self, x: Any, root_rank: int, name: str | None = None) -> Any:
        return self.comm.broadcast(x, root_rank, name)

    def broadcast_(self, x: Any, root_rank: int, name: str | None = None) -> Any:
        return self.comm.broadcast(x, root_rank, name, inplace=True)

    def alltoall(self, x: Any, splits: Any = None, name: str | None = None) -> Any:
        return self.comm.alltoall(x, splits, name)

    def barrier(self) -> None:
        self.comm.barrier()

    def broadcast_object(self, obj: Any, root_rank: int = 0, name: str | None = None) -> Any:
        return self.comm.broadcast_object(obj, root_rank, name)

    def allgather_object(self, obj: Any, name: str | None = None) -> Any:
        return self.comm.allgather_object(obj, name)
