"""Where an op on host arrays runs: the engine of the job or of one process set, through
``gcurun.runtime``'s asynchronous ops. Every method returns :class:`Work`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

import gcurun.runtime as runtime
from gcurun.runtime.api import ReduceOp
from gcurun.runtime.torch.handles import EngineWork, Work


class EngineTarget:
    """The ranks of one process set (the global one: every rank of the job)."""

    def __init__(self, process_set: Any):
        self.ps = process_set

    def allreduce(self, array: np.ndarray, inplace: bool, op: ReduceOp, pre: float,
                  post: float, name: str | None) -> Work:
        submit = runtime.allreduce_async_ if inplace else runtime.allreduce_async
        return EngineWork(runtime, submit(array, name=name, op=op, prescale_factor=pre,
                                          postscale_factor=post, process_set=self.ps))

    def grouped_allreduce(self, arrays: Sequence[np.ndarray], inplace: bool, op: ReduceOp,
                          pre: float, post: float, name: str | None) -> Work:
        submit = (runtime.grouped_allreduce_async_ if inplace
                  else runtime.grouped_allreduce_async)
        return EngineWork(runtime, submit(list(arrays), name=name, op=op,
                                          prescale_factor=pre, postscale_factor=post,
                                          process_set=self.ps))

    def allgather(self, array: np.ndarray, name: str | None) -> Work:
        return EngineWork(runtime, runtime.allgather_async(array, name=name,
                                                          process_set=self.ps))

    def grouped_allgather(self, arrays: Sequence[np.ndarray], name: str | None) -> Work:
        return EngineWork(runtime, runtime.grouped_allgather_async(
            list(arrays), name=name, process_set=self.ps))

    def broadcast(self, array: np.ndarray, root: int, inplace: bool,
                  name: str | None) -> Work:
        submit = runtime.broadcast_async_ if inplace else runtime.broadcast_async
        return EngineWork(runtime, submit(array, root, name=name, process_set=self.ps))

    def alltoall(self, array: np.ndarray, splits: np.ndarray | None,
                 name: str | None) -> Work:
        return EngineWork(runtime, runtime.alltoall_async(array, splits, name=name,
                                                         process_set=self.ps))

    def reducescatter(self, array: np.ndarray, op: ReduceOp, pre: float, post: float,
                      name: str | None) -> Work:
        return EngineWork(runtime, runtime.reducescatter_async(
            array, name=name, op=op, prescale_factor=pre, postscale_factor=post,
            process_set=self.ps))

    def grouped_reducescatter(self, arrays: Sequence[np.ndarray], op: ReduceOp, pre: float,
                              post: float, name: str | None) -> Work:
        return EngineWork(runtime, runtime.grouped_reducescatter_async(
            list(arrays), name=name, op=op, prescale_factor=pre, postscale_factor=post,
            process_set=self.ps))

    def barrier(self) -> None:
        runtime.barrier(process_set=self.ps)

    def broadcast_object(self, obj: Any, root: int, name: str | None) -> Any:
        return runtime.broadcast_object(obj, root, name=name, process_set=self.ps)

    def allgather_object(self, obj: Any, name: str | None) -> list[Any]:
        return runtime.allgather_object(obj, name=name, process_set=self.ps)
