"""Where an op on host arrays runs: the job's engine, or one process set's communicator.

:class:`JobTarget` submits to the runtime's background engine (``gcurun.runtime``'s
asynchronous ops); :class:`SetTarget` runs on the communicator of one process set,
synchronously. Both return :class:`Work`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

import gcurun.runtime as runtime
from gcurun.runtime.api import ReduceOp
from gcurun.runtime.torch.handles import EngineWork, Work, run_now


def _names(name: str | None, count: int) -> list[str | None]:
    return [None if name is None else f"{name}.{i}" for i in range(count)]


class JobTarget:
    """Every rank of the job, through the runtime's background engine."""

    engine = True

    def allreduce(self, array: np.ndarray, inplace: bool, op: ReduceOp, pre: float,
                  post: float, name: str | None) -> Work:
        submit = runtime.allreduce_async_ if inplace else runtime.allreduce_async
        return EngineWork(runtime, submit(array, name=name, op=op, prescale_factor=pre,
                                          postscale_factor=post))

    def grouped_allreduce(self, arrays: Sequence[np.ndarray], inplace: bool, op: ReduceOp,
                          pre: float, post: float, name: str | None) -> Work:
        submit = (runtime.grouped_allreduce_async_ if inplace
                  else runtime.grouped_allreduce_async)
        return EngineWork(runtime, submit(list(arrays), name=name, op=op,
                                          prescale_factor=pre, postscale_factor=post))

    def allgather(self, array: np.ndarray, name: str | None) -> Work:
        return EngineWork(runtime, runtime.allgather_async(array, name=name))

    def grouped_allgather(self, arrays: Sequence[np.ndarray], name: str | None) -> Work:
        return EngineWork(runtime, runtime.grouped_allgather_async(list(arrays), name=name))

    def broadcast(self, array: np.ndarray, root: int, inplace: bool,
                  name: str | None) -> Work:
        submit = runtime.broadcast_async_ if inplace else runtime.broadcast_async
        return EngineWork(runtime, submit(array, root, name=name))

    def alltoall(self, array: np.ndarray, splits: np.ndarray | None,
                 name: str | None) -> Work:
        return EngineWork(runtime, runtime.alltoall_async(array, splits, name=name))

    def reducescatter(self, array: np.ndarray, op: ReduceOp, pre: float, post: float,
                      name: str | None) -> Work:
        return EngineWork(runtime, runtime.reducescatter_async(
            array, name=name, op=op, prescale_factor=pre, postscale_factor=post))

    def grouped_reducescatter(self, arrays: Sequence[np.ndarray], op: ReduceOp, pre: float,
                              post: float, name: str | None) -> Work:
        return EngineWork(runtime, runtime.grouped_reducescatter_async(
            list(arrays), name=name, op=op, prescale_factor=pre, postscale_factor=post))

    def barrier(self) -> None:
        runtime.barrier()

    def broadcast_object(self, obj: Any, root: int, name: str | None) -> Any:
        return runtime.broadcast_object(obj, root, name=name)

    def allgather_object(self, obj: Any, name: str | None) -> list[Any]:
        return runtime.allgather_object(obj, name=name)


class SetTarget:
    """The ranks of one process set, on that set's own communicator (synchronous)."""

    engine = False

    def __init__(self, communicator: Any):
        self.comm = communicator

    def allreduce(self, array: np.ndarray, inplace: bool, op: ReduceOp, pre: float,
                  post: float, name: str | None) -> Work:
        return run_now(self.comm.allreduce, array, op, pre, post, name, inplace=inplace)

    def grouped_allreduce(self, arrays: Sequence[np.ndarray], inplace: bool, op: ReduceOp,
                          pre: float, post: float, name: str | None) -> Work:
        return _fused(arrays, inplace, name, lambda a, n: self.comm.allreduce(
            a, op, pre, post, n, inplace=True))

    def allgather(self, array: np.ndarray, name: str | None) -> Work:
        return run_now(self.comm.allgather, array, name)

    def grouped_allgather(self, arrays: Sequence[np.ndarray], name: str | None) -> Work:
        return _each(arrays, name, lambda a, n: self.comm.allgather(a, n))

    def broadcast(self, array: np.ndarray, root: int, inplace: bool,
                  name: str | None) -> Work:
        return run_now(self.comm.broadcast, array, root, name, inplace=inplace)

    def alltoall(self, array: np.ndarray, splits: np.ndarray | None,
                 name: str | None) -> Work:
        return run_now(self.comm.alltoall, array, splits, name)

    def reducescatter(self, array: np.ndarray, op: ReduceOp, pre: float, post: float,
                      name: str | None) -> Work:
        return run_now(self.comm.reducescatter, array, op, pre, post, name)

    def grouped_reducescatter(self, arrays: Sequence[np.ndarray], op: ReduceOp, pre: float,
                              post: float, name: str | None) -> Work:
        return _each(arrays, name, lambda a, n: self.comm.reducescatter(a, op, pre, post, n))

    def barrier(self) -> None:
        self.comm.barrier()

    def broadcast_object(self, obj: Any, root: int, name: str | None) -> Any:
        return self.comm.broadcast_object(obj, root, name)

    def allgather_object(self, obj: Any, name: str | None) -> list[Any]:
        return self.comm.allgather_object(obj, name)


# Arrays up to this size share one allreduce per dtype (a copy in and out costs less than
# another op's latency); larger ones are reduced where they are.
FUSE_BYTES = 1 << 20


def _fused(arrays: Sequence[np.ndarray], inplace: bool, name: str | None,
           reduce_: Any) -> Work:
    """A grouped allreduce as few synchronous ops: small arrays of one dtype are copied
    into one buffer and reduced together; ``reduce_(array, name)`` works in place."""
    arrays = list(arrays)

    def run() -> list[np.ndarray]:
        results: list[np.ndarray] = [a if inplace else a.copy() for a in arrays]
        small: dict[np.dtype, list[int]] = {}
        for i, array in enumerate(results):
            if array.nbytes <= FUSE_BYTES:
                small.setdefault(array.dtype, []).append(i)
            else:
                reduce_(array, None if name is None else f"{name}.{i}")
        for dtype, members in small.items():
            flat = np.concatenate([results[i].reshape(-1) for i in members])
            reduce_(flat, None if name is None else f"{name}.fused.{dtype.name}")
            offset = 0
            for i in members:
                results[i][...] = flat[offset:offset + results[i].size].reshape(
                    results[i].shape)
                offset += results[i].size
        return results

    return run_now(run)


def _each(arrays: Sequence[np.ndarray], name: str | None, call: Any) -> Work:
    """A grouped op as one synchronous op per array (names ``name.0``, ``name.1``, ...)."""
    names = _names(name, len(arrays))

    def run() -> list[Any]:
        return [call(array, sub) for array, sub in zip(arrays, names, strict=True)]

    return run_now(run)
